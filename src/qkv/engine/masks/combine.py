"""Composition: ``a & b`` (both allow), ``a | b`` (either allows), ``~a`` (the opposite).

Tiles compose by kind before any block is built: an AND is EMPTY as soon as one part is, FULL
when every part is; an OR the other way round. Only PARTIAL parts contribute blocks, combined
lazily — and when two or more are combined the result is looked at, since two partial halves can
make an empty or full tile.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass
from functools import reduce

import numpy as np

from .base import EMPTY, FULL, MAX_DEPTH, PARTIAL, BoundMask, Layout, Mask, kind_of


def _check_depth(depth: int) -> int:
    if depth > MAX_DEPTH:
        raise ValueError(
            f"mask: this composition nests {depth} levels deep (at most {MAX_DEPTH}); build it "
            "flat — a & b & c rather than nested parentheses — or as one qkv.predicate(fn)"
        )
    return depth


@dataclass(frozen=True, repr=False, eq=False)
class _Combined(Mask):
    parts: tuple[Mask, ...]

    @classmethod
    def of(cls, *masks: Mask) -> Mask:
        parts: list[Mask] = []
        for m in masks:  # a & (b & c) is a & b & c: keep compositions flat
            parts.extend(m.parts if isinstance(m, cls) else [m])
        combined = cls(tuple(parts))
        object.__setattr__(combined, "depth", _check_depth(1 + max(p.depth for p in parts)))
        return combined

    def _hint(self):
        hints = [p._hint() for p in self.parts]
        return np.broadcast_shapes(*(b for b, _ in hints)), max(h for _, h in hints)

    def bind(self, layout: Layout) -> BoundMask:
        return _BoundCombined(layout, tuple(p.bind(layout) for p in self.parts),
                              isinstance(self, All))


class All(_Combined):
    """Pairs allowed by every part (``a & b``)."""

    def __repr__(self):
        return " & ".join(_wrap(p, Any) for p in self.parts)


class Any(_Combined):
    """Pairs allowed by at least one part (``a | b``)."""

    def __repr__(self):
        return " | ".join(_wrap(p, All) for p in self.parts)


@dataclass(frozen=True, eq=False)
class _BoundCombined(BoundMask):
    layout: Layout
    parts: tuple[BoundMask, ...]
    is_and: bool

    def __post_init__(self):
        object.__setattr__(self, "batch_dependent", any(p.batch_dependent for p in self.parts))
        object.__setattr__(self, "head_dependent", any(p.head_dependent for p in self.parts))
        object.__setattr__(self, "cheap", all(p.cheap for p in self.parts))

    def block(self, qi, kj, b, h):
        op = operator.and_ if self.is_and else operator.or_
        return reduce(op, (p.block(qi, kj, b, h) for p in self.parts))

    def tile(self, qi, kj, b, h):
        # AND: EMPTY decides, FULL is neutral. OR: FULL decides, EMPTY is neutral.
        decisive, neutral = (EMPTY, FULL) if self.is_and else (FULL, EMPTY)
        blocks = []
        for part in self.parts:  # stop at the first decisive part: the rest need not be looked at
            kind, block = part.tile(qi, kj, b, h)
            if kind == decisive:
                return decisive, None
            if kind == PARTIAL:
                blocks.append(block)
        if not blocks:
            return neutral, None
        if len(blocks) == 1:
            return PARTIAL, blocks[0]
        op = np.logical_and if self.is_and else np.logical_or
        return kind_of(reduce(op, (blk() for blk in blocks)))  # looked at: may be empty/full


@dataclass(frozen=True, repr=False, eq=False)
class Not(Mask):
    """Pairs the inner mask denies (``~a``)."""

    inner: Mask

    @classmethod
    def of(cls, inner: Mask) -> Mask:
        if isinstance(inner, Not):  # ~~a is a
            return inner.inner
        negated = cls(inner)
        object.__setattr__(negated, "depth", _check_depth(inner.depth + 1))
        return negated

    def _hint(self):
        return self.inner._hint()

    def bind(self, layout):
        return _BoundNot(layout, self.inner.bind(layout))

    def __repr__(self):
        return f"~{_wrap(self.inner, _Combined)}"


@dataclass(frozen=True, eq=False)
class _BoundNot(BoundMask):
    layout: Layout
    inner: BoundMask

    def __post_init__(self):
        for name in ("batch_dependent", "head_dependent", "cheap"):
            object.__setattr__(self, name, getattr(self.inner, name))

    def block(self, qi, kj, b, h):
        return ~np.asarray(self.inner.block(qi, kj, b, h))

    def tile(self, qi, kj, b, h):
        kind, block = self.inner.tile(qi, kj, b, h)
        if kind == PARTIAL:
            return PARTIAL, lambda transposed=False: ~block(transposed)
        return (EMPTY if kind == FULL else FULL), None


def _wrap(mask: Mask, kind: type) -> str:
    return f"({mask!r})" if isinstance(mask, kind) else repr(mask)
