"""Position masks: a rule on (query position, key position), aligned bottom-right.

    causal()                  key j ≤ position(i)
    window(before, after=0)   position(i) − before ≤ j ≤ position(i) + after
    prefix(n)                 j < n, or the causal rule

Query i stands at position ``i + (Nk − Nq)``, so when Nq != Nk the last query sees the last key —
what decoding with a KV cache needs. In a padded batch each sequence can be aligned by its own
real lengths (flash-attn's varlen / ragged ``cache_seqlens``, xformers' "from bottom right"
masks): with ``key_lengths`` (and ``query_lengths``), shaped like the batch dims, query i of
sequence b stands at ``i + key_lengths[b] − query_lengths[b]`` (query_lengths default to Nq).
Combine with ``padding(key_lengths)`` to also deny the padded keys.

A tile is classified from the range of key offsets ``d = j − position(i)`` it spans, without
looking at its pairs.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .base import (
    EMPTY,
    FULL,
    PARTIAL,
    BoundMask,
    Layout,
    Mask,
    batch_broadcast,
    check_bound,
    check_lengths,
    int_array,
    is_range,
    span,
)


@dataclass(frozen=True, repr=False, eq=False)
class _Aligned(Mask):
    """A position rule with optional per-sequence alignment (lengths shaped like the batch)."""

    key_lengths: np.ndarray | None
    query_lengths: np.ndarray | None

    def _hint(self):
        shapes = [a.shape for a in (self.key_lengths, self.query_lengths) if a is not None]
        return (np.broadcast_shapes(*shapes) if shapes else ()), 1

    def _offsets(self, layout: Layout) -> np.ndarray | None:
        """Per flat batch element, position(i) − i; None when the alignment is global."""
        if self.key_lengths is None and self.query_lengths is None:
            return None
        batch = layout.batch_shape
        parts = {}
        for name, arr, default in (("key_lengths", self.key_lengths, layout.nk),
                                   ("query_lengths", self.query_lengths, layout.nq)):
            if arr is None:
                parts[name] = np.full(batch, default, dtype=np.int64)
                continue
            batch_broadcast(arr.shape, batch, f"{self._name()} {name}")
            check_lengths(arr, default, f"{self._name()} {name}")
            parts[name] = np.broadcast_to(arr, batch)
        return (parts["key_lengths"] - parts["query_lengths"]).reshape(-1)

    def _name(self) -> str:
        return type(self).__name__.lower()


def _aligned_repr(mask: _Aligned, core: str) -> str:
    if mask.key_lengths is None and mask.query_lengths is None:
        return core
    return core[:-1] + (", " if core[-2] != "(" else "") + "per-sequence lengths)"


@dataclass(frozen=True, repr=False, eq=False)
class Window(_Aligned):
    """Key j allowed iff position(i) − before ≤ j ≤ position(i) + after (None: unbounded)."""

    before: int | None = None
    after: int | None = 0
    name: str = "window"

    def bind(self, layout: Layout) -> BoundMask:
        return _BoundWindow(layout, self._offsets(layout), self.before, self.after)

    def __repr__(self):
        core = "causal()" if self.name == "causal" else \
            f"window({self.before}, after={self.after})"
        return _aligned_repr(self, core)


class _BoundPositional(BoundMask):
    """Shared by the position rules: the query positions of a tile, globally or per sequence."""

    layout: Layout
    offsets: np.ndarray | None
    cheap = True

    def __post_init__(self):
        object.__setattr__(self, "batch_dependent", self.offsets is not None)

    def offset(self, b: int) -> int:
        return self.layout.offset if self.offsets is None else int(self.offsets[b])

    def full_block(self, qi, kj, b, h, transposed: bool = False) -> np.ndarray:
        # A position rule's block over contiguous ranges depends only on the offset between
        # them (and the tile's size): the causal diagonal's few shapes recur for every head and
        # query tile, so each is built once per call and shared (read-only). Built in the layout
        # asked for rather than transposed after.
        if not (is_range(qi) and is_range(kj)):
            block = self.block(qi, kj, b, h, transposed)
            return np.broadcast_to(block, (len(kj), len(qi)) if transposed else
                                   (len(qi), len(kj)))
        key = (int(kj[0]) - int(qi[0]) - self.offset(b), len(qi), len(kj), transposed,
               self._key_extra(kj, b))
        block = self._blocks.get(key)
        if block is None:
            block = np.ascontiguousarray(self.block(qi, kj, b, h, transposed))
            block.flags.writeable = False
            self._blocks[key] = block
        return block

    def _key_extra(self, kj, b):
        return None

    @staticmethod
    def _grid(qi, kj, offset: int, transposed: bool):
        """Query positions and key positions as broadcastable columns/rows (int32 if they fit:
        half the bytes, twice the SIMD lanes of int64)."""
        qpos, kpos = qi + offset, kj
        if max(abs(int(qpos.min(initial=0))), abs(int(qpos.max(initial=0))),
               int(kpos.max(initial=0))) < 2**30:
            qpos, kpos = qpos.astype(np.int32), kpos.astype(np.int32)
        return (qpos[None, :], kpos[:, None]) if transposed else (qpos[:, None], kpos[None, :])


@dataclass(frozen=True, eq=False)
class _BoundWindow(_BoundPositional):
    layout: Layout
    offsets: np.ndarray | None
    before: int | None
    after: int | None
    _blocks: dict = field(default_factory=dict, repr=False)

    def block(self, qi, kj, b, h, transposed=False):
        qpos, kpos = self._grid(qi, kj, self.offset(b), transposed)  # (tq, 1), (1, tk) or T
        # Compare against shifted query positions rather than forming the (tq, tk) matrix of
        # offsets: one bool pass per bound instead of an int64 matrix and two passes. Bounds
        # past the int32 range cannot cut anything the grid holds: treated as unbounded.
        # Only an int32 grid (every position below 2**30) lets that shortcut hold: on an int64
        # grid every bound is compared (positions and bounds < 2**62: no wrap).
        small = kpos.dtype == np.int32
        ok = None
        if self.after is not None and (self.after < 2**30 or not small):
            ok = kpos <= qpos + self.after
        if self.before is not None and (self.before < 2**30 or not small):
            lower = kpos >= qpos - self.before
            ok = lower if ok is None else np.logical_and(ok, lower, out=ok)
        if ok is None:
            ok = np.ones(np.broadcast_shapes(qpos.shape, kpos.shape), dtype=bool)
        return ok

    def classify(self, qi, kj, b, h):
        dmin, dmax = _offsets(qi, kj, self.offset(b))
        lo = -np.inf if self.before is None else -self.before
        hi = np.inf if self.after is None else self.after
        if dmax < lo or dmin > hi:
            return EMPTY
        if dmin >= lo and dmax <= hi:
            return FULL
        return PARTIAL


@dataclass(frozen=True, repr=False, eq=False)
class Prefix(_Aligned):
    """Prefix-LM: every query sees keys 0..n−1 (n per sequence, or one n), then the causal rule."""

    n: np.ndarray | int = 0

    def _hint(self):
        batch, heads = super()._hint()
        if isinstance(self.n, np.ndarray):
            batch = np.broadcast_shapes(batch, self.n.shape)
        return batch, heads

    def bind(self, layout: Layout) -> BoundMask:
        n = self.n
        if isinstance(n, np.ndarray):
            batch_broadcast(n.shape, layout.batch_shape, "prefix n")
            n = np.broadcast_to(n, layout.batch_shape).reshape(-1)
        return _BoundPrefix(layout, self._offsets(layout), n)

    def __repr__(self):
        shown = "per-sequence n" if isinstance(self.n, np.ndarray) else str(self.n)
        return _aligned_repr(self, f"prefix({shown})")


@dataclass(frozen=True, eq=False)
class _BoundPrefix(_BoundPositional):
    layout: Layout
    offsets: np.ndarray | None
    n: np.ndarray | int
    _blocks: dict = field(default_factory=dict, repr=False)

    def __post_init__(self):
        object.__setattr__(self, "batch_dependent",
                           self.offsets is not None or isinstance(self.n, np.ndarray))

    def _key_extra(self, kj, b):
        return self._n(b) - int(kj[0])  # where the prefix ends within the tile

    def _n(self, b: int) -> int:
        return int(self.n[b]) if isinstance(self.n, np.ndarray) else self.n

    def block(self, qi, kj, b, h, transposed=False):
        qpos, kpos = self._grid(qi, kj, self.offset(b), transposed)
        return (kpos < self._n(b)) | (kpos <= qpos)

    def classify(self, qi, kj, b, h):
        dmin, dmax = _offsets(qi, kj, self.offset(b))
        klo, khi = span(kj)
        n = self._n(b)
        if khi < n or dmax <= 0:
            return FULL
        if klo >= n and dmin > 0:
            return EMPTY
        return PARTIAL


def _offsets(qi, kj, offset: int) -> tuple[int, int]:
    """The range [dmin, dmax] of key offsets j − position(i) over a tile."""
    qlo, qhi = span(qi)
    klo, khi = span(kj)
    return klo - (qhi + offset), khi - (qlo + offset)


def _lengths(key_lengths, query_lengths, fn: str):
    arrays = []
    for name, x in (("key_lengths", key_lengths), ("query_lengths", query_lengths)):
        arr = None if x is None else int_array(x, name, fn)
        if arr is not None and arr.size and (arr < 0).any():
            raise ValueError(f"{fn}: {name} must be ≥ 0, got {arr.min()}")
        arrays.append(arr)
    return arrays


def causal(*, key_lengths=None, query_lengths=None) -> Mask:
    """Query position i sees keys 0..i (bottom-right aligned when Nq != Nk; per sequence with
    ``key_lengths``/``query_lengths``, see the module doc)."""
    return Window(*_lengths(key_lengths, query_lengths, "causal"), None, 0, "causal")


def window(before: int | None, after: int | None = 0, *, key_lengths=None,
           query_lengths=None) -> Mask:
    """Sliding window: query position i sees keys i − before … i + after (inclusive).

    ``window(w - 1)`` is the causal sliding window of w keys used by local-attention models;
    ``window(w, w)`` is a symmetric band. ``None`` means unbounded on that side:
    ``window(None, 0)`` is ``causal()``, ``window(0, None)`` sees the query's own position and
    everything after it. ``key_lengths``/``query_lengths`` align each sequence by its own real
    lengths (module doc).
    """
    return Window(*_lengths(key_lengths, query_lengths, "window"),
                  check_bound(before, "before", "window", allow_none=True),
                  check_bound(after, "after", "window", allow_none=True))


def prefix(n, *, key_lengths=None, query_lengths=None) -> Mask:
    """Prefix-LM: every query sees the first ``n`` keys; beyond them, the causal rule.

    ``n`` is one int or ints shaped like the batch dims (a prefix per sequence).
    """
    if isinstance(n, int | np.integer) and not isinstance(n, bool):
        n = check_bound(n, "n", "prefix")
    else:
        n = int_array(n, "n", "prefix")
        if n.size and (n < 0).any():
            raise ValueError(f"prefix: n must be ≥ 0, got {n.min()}")
    return Prefix(*_lengths(key_lengths, query_lengths, "prefix"), n)
