"""The mask protocol: a rule, bound to a problem, answers per tile.

A :class:`Mask` is an immutable *rule* — which (query, key) pairs may attend, **True = may
attend** — that knows nothing of shapes. Binding it to a :class:`Layout` (batch dims, query heads,
the global sequence lengths) checks its arrays against the problem and gives an immutable
:class:`BoundMask` with one question per tile:

    bound.tile(qi, kj, b, h) -> (kind, block)

for global query positions ``qi (tq,)``, key positions ``kj (tk,)``, flat batch index ``b`` and
query head ``h``. ``kind`` is EMPTY (skip the tile), FULL (no mask arithmetic) or PARTIAL, and
``block`` is a callable giving the ``(tq, tk)`` bool array for PARTIAL tiles only (None
otherwise) — lazy, so that a composition that turns out EMPTY never builds it; ``block(True)``
gives it transposed, ``(tk, tq)`` and contiguous, as the kernel's tiles are laid out (position
masks build that layout directly instead of transposing). Like
FlexAttention's ``B=None, H=None``, a bound mask declares ``batch_dependent`` and
``head_dependent``; the kernel classifies tiles once for all batch elements and heads a mask
does not depend on.

Subclasses implement ``block(qi, kj, b, h)`` — the rule on one tile — and, when they can answer
from index ranges alone (``cheap``), ``classify``. The dense form is derived here, once.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

# Tile kinds, ordered so that min/max compose them: an AND of tiles is as empty as its emptiest.
EMPTY, PARTIAL, FULL = 0, 1, 2
KIND_NAMES = {EMPTY: "empty", PARTIAL: "partial", FULL: "full"}

# Position arithmetic is int64; window bounds and lengths stay far enough from 2**63 that
# `position + bound` cannot wrap.
MAX_BOUND = 2**62
# Compositions nest at most this deep (deeper ones are refused, not a RecursionError).
MAX_DEPTH = 64

Block = Callable[..., np.ndarray]  # block(transposed=False) -> (tq, tk), or (tk, tq) if True


@dataclass(frozen=True)
class Layout:
    """The problem a mask is bound to: batch dims, query heads and the *global* sequence lengths."""

    batch_shape: tuple[int, ...]
    heads: int
    nq: int
    nk: int

    @property
    def batch_size(self) -> int:
        return math.prod(self.batch_shape)

    @property
    def offset(self) -> int:
        """Bottom-right alignment: query i stands at position i + (Nk − Nq)."""
        return self.nk - self.nq


class BoundMask:
    """A mask bound to a :class:`Layout`: immutable, answers per tile (see the module doc)."""

    batch_dependent = False
    head_dependent = False
    # True when ``classify`` answers from index ranges alone, so re-asking for sub-tiles of a
    # partial tile is cheap (the kernel splits partial tiles only for such masks).
    cheap = False

    def block(self, qi: np.ndarray, kj: np.ndarray, b: int, h: int) -> np.ndarray:
        """The rule on one tile: a bool array broadcastable to ``(len(qi), len(kj))``."""
        raise NotImplementedError

    def classify(self, qi: np.ndarray, kj: np.ndarray, b: int, h: int) -> int | None:
        """EMPTY / FULL / PARTIAL from index ranges alone, or None: "look at the block"."""
        return None

    def tile(self, qi: np.ndarray, kj: np.ndarray, b: int, h: int) -> tuple[int, Block | None]:
        kind = self.classify(qi, kj, b, h)
        if kind is not None and kind != PARTIAL:
            return kind, None
        if kind == PARTIAL and is_range(qi) and is_range(kj):
            return PARTIAL, lambda transposed=False: self.full_block(qi, kj, b, h, transposed)
        # No cheap answer, or positions with gaps (a zigzag shard spans two chunks), where index
        # ranges overestimate what the tile may hold: read the kind off the block.
        return kind_of(self.full_block(qi, kj, b, h))

    def full_block(self, qi, kj, b, h, transposed: bool = False) -> np.ndarray:
        block = np.broadcast_to(self.block(qi, kj, b, h), (len(qi), len(kj)))
        return np.ascontiguousarray(block.T) if transposed else block

    def dense(self, qi: np.ndarray, kj: np.ndarray) -> np.ndarray:
        """The rule on every batch element and head it depends on: a bool array of shape
        ``(*batch or 1s, heads or 1, tq, tk)`` — written once, from :meth:`block`."""
        layout = self.layout
        nb = layout.batch_size if self.batch_dependent else 1
        nh = layout.heads if self.head_dependent else 1
        out = np.empty((nb, nh, len(qi), len(kj)), dtype=bool)
        for b in range(nb):
            for h in range(nh):
                out[b, h] = self.block(qi, kj, b, h)
        lead = layout.batch_shape if self.batch_dependent else (1,) * len(layout.batch_shape)
        return out.reshape(*lead, nh, len(qi), len(kj))

    layout: Layout


def kind_of(block: np.ndarray) -> tuple[int, Block | None]:
    """Classify a tile by looking at its block."""
    if block.all():
        return FULL, None
    if not block.any():
        return EMPTY, None
    return PARTIAL, lambda transposed=False: np.ascontiguousarray(block.T) if transposed \
        else block


class Mask:
    """A rule: which (query, key) pairs may attend (True = may attend). Immutable.

    Compose with ``&`` (both allow), ``|`` (either allows) and ``~`` (the opposite). Bind to a
    problem with :meth:`bind`; see the module doc for the protocol.
    """

    depth = 1

    def bind(self, layout: Layout) -> BoundMask:
        raise NotImplementedError

    def _hint(self) -> tuple[tuple[int, ...], int]:
        """(batch shape, heads) this mask's own arrays imply; used by ``to_dense``."""
        return (), 1

    def to_dense(self, nq: int, nk: int) -> np.ndarray:
        """The bool matrix (True = may attend) for ``nq`` queries and ``nk`` keys.

        Position masks give shape ``(nq, nk)``; masks holding per-sequence arrays (padding,
        documents, allow/deny) keep their leading dims, e.g. ``(B, 1, nq, nk)``, so the result
        broadcasts against scores of shape ``(B, H, nq, nk)``.
        """
        nq, nk = check_length(nq, "nq"), check_length(nk, "nk")
        batch, heads = self._hint()
        bound = self.bind(Layout(batch, heads, nq, nk))
        dense = bound.dense(np.arange(nq), np.arange(nk))
        if (not batch and heads == 1) or not (bound.batch_dependent or bound.head_dependent):
            return dense.reshape(nq, nk)  # nothing per sequence or per head: a plain matrix
        if not bound.head_dependent and heads > 1:
            dense = np.broadcast_to(dense, (*dense.shape[:-3], heads, nq, nk))
        return np.ascontiguousarray(dense)

    # -- composition ------------------------------------------------------------------------
    def __and__(self, other: Mask) -> Mask:
        from .combine import All

        return All.of(self, as_mask(other, "&"))

    def __or__(self, other: Mask) -> Mask:
        from .combine import Any

        return Any.of(self, as_mask(other, "|"))

    def __invert__(self) -> Mask:
        from .combine import Not

        return Not.of(self)

    __rand__ = __and__
    __ror__ = __or__

    def __repr__(self) -> str:
        return f"{type(self).__name__.lower()}()"


def as_mask(other, op: str) -> Mask:
    if isinstance(other, Mask):
        return other
    raise TypeError(
        f"mask: cannot combine a mask with {type(other).__name__} using '{op}'; "
        "wrap a bool array as qkv.allow(array) (True = may attend) or qkv.deny(array) "
        "(True = masked out)"
    )


# --------------------------------------------------------------------------------------------
# Small shared checks
# --------------------------------------------------------------------------------------------
def broadcasts_to(shape: tuple[int, ...], target: tuple[int, ...]) -> bool:
    """Whether an array of ``shape`` broadcasts to exactly ``target`` (without growing it)."""
    try:
        return np.broadcast_shapes(shape, target) == tuple(target)
    except ValueError:
        return False


def check_length(n, name: str) -> int:
    if isinstance(n, bool) or not isinstance(n, int | np.integer) or n < 0:
        raise ValueError(f"{name} must be a non-negative int, got {n!r}")
    return int(n)


def check_bound(x, name: str, fn: str, *, allow_none: bool = False) -> int | None:
    """A non-negative int below MAX_BOUND (or None, "unbounded", where allowed)."""
    if x is None and allow_none:
        return None
    unbounded = " (or None for unbounded)" if allow_none else ""
    if isinstance(x, bool) or not isinstance(x, int | np.integer) or x < 0:
        raise ValueError(f"{fn}: {name} must be a non-negative int{unbounded}, got {x!r}")
    if x >= MAX_BOUND:
        raise ValueError(
            f"{fn}: {name}={x} is too large (positions are int64; the limit is 2**62){unbounded}"
        )
    return int(x)


def int_array(x, name: str, fn: str) -> np.ndarray:
    """An integer array; ragged lists, floats, bools and strings are refused by name."""
    try:
        arr = np.asarray(x)
    except ValueError:
        raise ValueError(
            f"{fn}: {name} is ragged (rows of different lengths); pass a rectangular array of "
            "ints, padded to one length"
        ) from None
    if arr.dtype == object:
        raise ValueError(
            f"{fn}: {name} is ragged or holds non-numbers; pass a rectangular array of ints"
        )
    if arr.dtype == bool or not np.issubdtype(arr.dtype, np.integer):
        raise TypeError(f"{fn}: {name} must hold integers, got dtype {arr.dtype}")
    if arr.size and (np.abs(arr.astype(np.float64)) >= MAX_BOUND).any():
        raise ValueError(f"{fn}: {name} holds values beyond ±2**62")
    return arr.astype(np.int64, copy=False)


def batch_broadcast(lead: tuple[int, ...], batch: tuple[int, ...], what: str) -> None:
    if not broadcasts_to(lead, batch):
        raise ValueError(
            f"mask: {what} has leading shape {lead} but the batch dims of q/k/v are {batch}: "
            "it must be shaped like the batch dims or broadcast to them"
        )


def check_lengths(arr: np.ndarray, n: int, what: str) -> None:
    """Per-sequence lengths must fit the array they describe: a length past it would place
    positions beyond the sequence (and a window bound past 2**30 would read as unbounded)."""
    if arr.size and int(arr.max()) > n:
        raise ValueError(f"mask: {what} holds {int(arr.max())} but there are only {n} "
                         f"{'keys' if 'key' in what else 'queries'}: lengths must be ≤ {n}")


# Index arrays reaching a mask or a bias (a tile's global positions) are strictly increasing —
# ranges, or ranges with gaps (a zigzag shard's two chunks; the sorted rows of
# attention_weights(rows=...)): :meth:`Problem.rows` keeps it so. Then the ends say everything:
# an increasing array whose ends are n − 1 apart is a range, and its ends are its min and max.
def span(idx: np.ndarray) -> tuple[int, int]:
    """(min, max) of a non-empty, strictly increasing index array: its ends."""
    return int(idx[0]), int(idx[-1])


def is_range(idx: np.ndarray) -> bool:
    """Whether a strictly increasing index array is contiguous (see above)."""
    return len(idx) > 0 and int(idx[-1]) - int(idx[0]) + 1 == len(idx)
