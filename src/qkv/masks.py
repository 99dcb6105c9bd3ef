"""Named attention masks. **True always means "may attend".**

A mask answers one question for every (query i, key j) pair: may query i look at key j?
Masks are described by name, never by a raw boolean array of unknown polarity:

    causal()                  key j ≤ query position i
    window(before, after=0)   i − before ≤ j ≤ i + after
    prefix(n)                 the first n keys, plus the causal rule (prefix-LM)
    padding(key_lengths, query_lengths=None)
                              keys (and queries) past each sequence's real length are denied
    documents(q_ids, k_ids=None)
                              packed sequences: query i sees key j iff they share a document id
    allow(array) / deny(array)
                              an explicit bool array; allow: True = may attend,
                              deny: True = masked out (torch.nn.MultiheadAttention's polarity)
    predicate(fn)             fn(q_idx, k_idx) -> bool, vectorised over index grids

and they compose: ``causal() & window(128)``, ``documents(ids) | prefix(4)``, ``~causal()``.

**Alignment.** Position masks (causal, window, prefix) align bottom-right when Nq != Nk:
query i stands at position i + (Nk − Nq), so the last query sees the last key. That is what
decoding with a KV cache needs: one new query (Nq = 1) against Nk cached keys sees all of them
under ``causal()``. With Nq > Nk the first Nq − Nk queries see no key and return zeros.

**Tiles.** The kernel never builds the Nq × Nk matrix. Before it touches a tile of queries × keys
it asks the mask to classify the tile as EMPTY (skipped entirely), FULL (computed with no mask
arithmetic) or PARTIAL (the mask's bool block for that tile is applied). Position, padding and
document masks classify a tile from its index ranges alone, so causal attention does about half
the work and a window of w does O(N·w). Tiles are given as arrays of *global* positions, which
need not be contiguous, so the same masks serve a sequence sharded across processes.
"""

from __future__ import annotations

import copy
import operator
from collections.abc import Callable
from dataclasses import dataclass
from functools import reduce

import numpy as np

__all__ = [
    "EMPTY",
    "FULL",
    "PARTIAL",
    "Layout",
    "Mask",
    "allow",
    "causal",
    "deny",
    "documents",
    "padding",
    "predicate",
    "prefix",
    "window",
]

# Tile kinds, ordered so that min/max compose them: an AND of tiles is as empty as its emptiest.
EMPTY, PARTIAL, FULL = 0, 1, 2


@dataclass(frozen=True)
class Layout:
    """The problem a mask is bound to: batch dims, query heads and the *global* sequence lengths."""

    batch_shape: tuple[int, ...]
    heads: int
    nq: int
    nk: int


class Mask:
    """Base class: which (query, key) pairs may attend. Subclasses implement ``allowed``.

    A mask is first *bound* to a :class:`Layout` (which validates its arrays against the problem's
    shapes); the bound mask then answers per tile:

    - ``allowed(qi, kj, where)``: bool array for queries ``qi (tq,)`` × keys ``kj (tk,)``.
      With ``where=(b, h)`` (a batch multi-index and a query head) the result broadcasts to
      ``(tq, tk)``; with ``where=None`` it broadcasts to ``(*batch, heads, tq, tk)``.
    - ``tile(qi, kj, where)``: ``(kind, block)`` with kind EMPTY, FULL or PARTIAL and ``block``
      the ``(tq, tk)`` bool array for PARTIAL tiles only (None otherwise).
    """

    layout: Layout | None = None
    # True when ``tile`` answers from index ranges alone (no per-pair work), so the kernel may
    # re-ask for sub-tiles of a partial tile cheaply.
    cheap_tiles = False

    # -- composition ------------------------------------------------------------------------
    def __and__(self, other: Mask) -> Mask:
        return _All(_flatten(_All, self, _as_mask(other, "&")))

    def __or__(self, other: Mask) -> Mask:
        return _Any(_flatten(_Any, self, _as_mask(other, "|")))

    def __invert__(self) -> Mask:
        return _Not(self)

    __rand__ = __and__
    __ror__ = __or__

    # -- binding ----------------------------------------------------------------------------
    def bind(self, layout: Layout) -> Mask:
        """A copy of this mask checked against and specialised to ``layout``."""
        bound = copy.copy(self)
        bound.layout = layout
        bound._bind(layout)
        return bound

    def _bind(self, layout: Layout) -> None:
        """Validate arrays against the layout and precompute per-problem state (override)."""

    def _hint(self) -> tuple[tuple[int, ...], int]:
        """(batch shape, heads) this mask's own arrays imply; used by ``to_dense``."""
        return (), 1

    def to_dense(self, nq: int, nk: int) -> np.ndarray:
        """The bool matrix (True = may attend) for ``nq`` queries and ``nk`` keys.

        Position masks give shape ``(nq, nk)``; masks holding per-sequence arrays (padding,
        documents, allow/deny) keep their leading dims, e.g. ``(B, 1, nq, nk)``, so the result
        broadcasts against scores of shape ``(B, H, nq, nk)``.
        """
        nq, nk = _check_length(nq, "nq"), _check_length(nk, "nk")
        batch, heads = self._hint()
        bound = self.bind(Layout(batch, heads, nq, nk))
        dense = np.array(bound.allowed(np.arange(nq), np.arange(nk), None), dtype=bool)
        if not batch and heads == 1:  # nothing per sequence or per head: a plain matrix
            dense = dense.reshape(dense.shape[-2:])
        return dense

    # -- per tile ---------------------------------------------------------------------------
    def allowed(self, qi: np.ndarray, kj: np.ndarray, where) -> np.ndarray:
        raise NotImplementedError

    def classify(self, qi: np.ndarray, kj: np.ndarray, where) -> int | None:
        """Cheap classification from index ranges; None means "look at the block"."""
        return None

    def tile(self, qi: np.ndarray, kj: np.ndarray, where) -> tuple[int, np.ndarray | None]:
        kind = self.classify(qi, kj, where)
        if kind is not None and kind != PARTIAL:
            return kind, None
        block = np.broadcast_to(self.allowed(qi, kj, where), (len(qi), len(kj)))
        # No cheap answer, or positions with gaps (a zigzag shard spans two chunks), where index
        # ranges overestimate what the tile may hold: read the kind off the block.
        if kind is None or not (_is_range(qi) and _is_range(kj)):
            if block.all():
                return FULL, None
            if not block.any():
                return EMPTY, None
        return PARTIAL, block

    def __repr__(self) -> str:
        return f"{type(self).__name__.lower()}()"


def _as_mask(other, op: str) -> Mask:
    if isinstance(other, Mask):
        return other
    raise TypeError(
        f"mask: cannot combine a mask with {type(other).__name__} using '{op}'; "
        "wrap a bool array as qkv.allow(array) (True = may attend) or qkv.deny(array) "
        "(True = masked out)"
    )


def _flatten(kind: type, *masks: Mask) -> list[Mask]:
    parts: list[Mask] = []
    for m in masks:
        parts.extend(m.parts if isinstance(m, kind) else [m])
    return parts


def broadcasts_to(shape: tuple[int, ...], target: tuple[int, ...]) -> bool:
    """Whether an array of ``shape`` broadcasts to exactly ``target`` (without growing it)."""
    try:
        return np.broadcast_shapes(shape, target) == tuple(target)
    except ValueError:
        return False


def _check_length(n, name: str) -> int:
    if isinstance(n, bool) or not isinstance(n, int | np.integer) or n < 0:
        raise ValueError(f"{name} must be a non-negative int, got {n!r}")
    return int(n)


def _span(idx: np.ndarray) -> tuple[int, int]:
    """(min, max) of a non-empty index array; tiles are mostly sorted, so look at the ends first."""
    lo, hi = int(idx[0]), int(idx[-1])
    if hi - lo + 1 == len(idx):  # contiguous run: the common case
        return lo, hi
    return int(idx.min()), int(idx.max())


def _is_range(idx: np.ndarray) -> bool:
    return len(idx) > 0 and int(idx[-1]) - int(idx[0]) + 1 == len(idx)


# --------------------------------------------------------------------------------------------
# Composition
# --------------------------------------------------------------------------------------------
class _Combined(Mask):
    parts: list[Mask]

    def __init__(self, parts: list[Mask]):
        self.parts = parts
        self.cheap_tiles = all(p.cheap_tiles for p in parts)

    def bind(self, layout: Layout) -> Mask:
        bound = copy.copy(self)
        bound.layout = layout
        bound.parts = [p.bind(layout) for p in self.parts]
        return bound

    def _hint(self):
        hints = [p._hint() for p in self.parts]
        return np.broadcast_shapes(*(b for b, _ in hints)), max(h for _, h in hints)


class _All(_Combined):
    """Pairs allowed by every part (``a & b``)."""

    def allowed(self, qi, kj, where):
        return reduce(operator.and_, (p.allowed(qi, kj, where) for p in self.parts))

    def tile(self, qi, kj, where):
        blocks = []
        for part in self.parts:  # stop at the first empty part: the rest need not be looked at
            kind, block = part.tile(qi, kj, where)
            if kind == EMPTY:
                return EMPTY, None
            if kind == PARTIAL:
                blocks.append(block)
        if not blocks:
            return FULL, None
        block = reduce(operator.and_, blocks) if len(blocks) > 1 else blocks[0]
        return (PARTIAL, block) if len(blocks) == 1 or block.any() else (EMPTY, None)

    def __repr__(self):
        return " & ".join(_wrap(p, _Any) for p in self.parts)


class _Any(_Combined):
    """Pairs allowed by at least one part (``a | b``)."""

    def allowed(self, qi, kj, where):
        return reduce(operator.or_, (p.allowed(qi, kj, where) for p in self.parts))

    def tile(self, qi, kj, where):
        blocks = []
        for part in self.parts:
            kind, block = part.tile(qi, kj, where)
            if kind == FULL:
                return FULL, None
            if kind == PARTIAL:
                blocks.append(block)
        if not blocks:
            return EMPTY, None
        block = reduce(operator.or_, blocks) if len(blocks) > 1 else blocks[0]
        return (PARTIAL, block) if len(blocks) == 1 or not block.all() else (FULL, None)

    def __repr__(self):
        return " | ".join(_wrap(p, _All) for p in self.parts)


class _Not(Mask):
    """Pairs the inner mask denies (``~a``)."""

    def __init__(self, inner: Mask):
        self.inner = inner
        self.cheap_tiles = inner.cheap_tiles

    def bind(self, layout):
        bound = copy.copy(self)
        bound.layout = layout
        bound.inner = self.inner.bind(layout)
        return bound

    def _hint(self):
        return self.inner._hint()

    def allowed(self, qi, kj, where):
        return ~np.asarray(self.inner.allowed(qi, kj, where))

    def tile(self, qi, kj, where):
        kind, block = self.inner.tile(qi, kj, where)
        if kind == PARTIAL:
            return PARTIAL, ~block
        return (EMPTY if kind == FULL else FULL), None

    def __repr__(self):
        return f"~{_wrap(self.inner, _Combined)}"


def _wrap(mask: Mask, kind: type) -> str:
    return f"({mask!r})" if isinstance(mask, kind) else repr(mask)


# --------------------------------------------------------------------------------------------
# Position masks: a rule on (query position, key position), aligned bottom-right
# --------------------------------------------------------------------------------------------
class _Positional(Mask):
    """Base for masks that depend only on positions. Query i stands at i + (Nk − Nq)."""

    offset = 0
    cheap_tiles = True

    def _bind(self, layout):
        self.offset = layout.nk - layout.nq

    def allowed(self, qi, kj, where):
        qpos = (qi + self.offset)[:, None]  # (tq, 1)
        return self._rule(qpos, kj[None, :])  # (tq, tk): no batch or head dependence

    def classify(self, qi, kj, where):
        qlo, qhi = _span(qi)
        klo, khi = _span(kj)
        # key offsets d = j − position(i) over the tile lie within [dmin, dmax]
        dmin, dmax = klo - (qhi + self.offset), khi - (qlo + self.offset)
        return self._classify_offsets(dmin, dmax, klo, khi)

    def _rule(self, qpos, kpos):
        raise NotImplementedError

    def _classify_offsets(self, dmin, dmax, klo, khi) -> int:
        raise NotImplementedError


class _Window(_Positional):
    """Key j allowed iff position(i) − before ≤ j ≤ position(i) + after (None: unbounded)."""

    def __init__(self, before: int | None, after: int | None, name: str):
        self.before, self.after, self.name = before, after, name

    def _rule(self, qpos, kpos):
        # Compare against shifted query positions (tq, 1) rather than forming the (tq, tk)
        # matrix of offsets: one bool pass per bound instead of an int64 matrix and two passes.
        ok = None
        if self.after is not None:
            ok = kpos <= qpos + self.after
        if self.before is not None:
            lower = kpos >= qpos - self.before
            ok = lower if ok is None else np.logical_and(ok, lower, out=ok)
        if ok is None:
            ok = np.ones(np.broadcast_shapes(qpos.shape, kpos.shape), dtype=bool)
        return ok

    def _classify_offsets(self, dmin, dmax, klo, khi):
        lo = -np.inf if self.before is None else -self.before
        hi = np.inf if self.after is None else self.after
        if dmax < lo or dmin > hi:
            return EMPTY
        if dmin >= lo and dmax <= hi:
            return FULL
        return PARTIAL

    def __repr__(self):
        if self.name == "causal":
            return "causal()"
        return f"window({self.before}, after={self.after})"


class _Prefix(_Positional):
    """Prefix-LM: every query sees keys 0..n−1, and the causal rule applies to the rest."""

    def __init__(self, n: int):
        self.n = n

    def _rule(self, qpos, kpos):
        return (kpos < self.n) | (kpos <= qpos)

    def _classify_offsets(self, dmin, dmax, klo, khi):
        if khi < self.n or dmax <= 0:
            return FULL
        if klo >= self.n and dmin > 0:
            return EMPTY
        return PARTIAL

    def __repr__(self):
        return f"prefix({self.n})"


def _nonneg_int(x, name: str, fn: str) -> int:
    if isinstance(x, bool) or not isinstance(x, int | np.integer) or x < 0:
        raise ValueError(f"{fn}: {name} must be a non-negative int, got {x!r}")
    return int(x)


def causal() -> Mask:
    """Query position i sees keys 0..i (bottom-right aligned when Nq != Nk)."""
    return _Window(None, 0, "causal")


def window(before: int, after: int = 0) -> Mask:
    """Sliding window: query position i sees keys i − before … i + after (inclusive).

    ``window(w - 1)`` is the causal sliding window of w keys used by local-attention models;
    ``window(w, w)`` is a symmetric band.
    """
    return _Window(_nonneg_int(before, "before", "window"), _nonneg_int(after, "after", "window"),
                   "window")


def prefix(n: int) -> Mask:
    """Prefix-LM: every query sees the first ``n`` keys; beyond them, the causal rule."""
    return _Prefix(_nonneg_int(n, "n", "prefix"))


# --------------------------------------------------------------------------------------------
# Per-sequence masks: padding and packed documents
# --------------------------------------------------------------------------------------------
def _int_array(x, name: str, fn: str) -> np.ndarray:
    arr = np.asarray(x)
    if arr.dtype == bool or not np.issubdtype(arr.dtype, np.integer):
        raise TypeError(f"{fn}: {name} must hold integers, got dtype {arr.dtype}")
    return arr


def _batch_broadcast(arr: np.ndarray, lead: tuple[int, ...], batch: tuple[int, ...],
                     what: str) -> None:
    if not broadcasts_to(lead, batch):
        raise ValueError(
            f"mask: {what} has leading shape {lead} but the batch dims of q/k/v are {batch}: "
            "it must be shaped like the batch dims or broadcast to them"
        )


class _Padding(Mask):
    """Keys at index ≥ key_lengths[b] (and queries ≥ query_lengths[b]) are denied."""

    cheap_tiles = True

    def __init__(self, key_lengths, query_lengths):
        self.key_lengths = _int_array(key_lengths, "key_lengths", "padding")
        self.query_lengths = (None if query_lengths is None
                              else _int_array(query_lengths, "query_lengths", "padding"))
        for name, arr in (("key_lengths", self.key_lengths), ("query_lengths", self.query_lengths)):
            if arr is not None and (arr < 0).any():
                raise ValueError(f"padding: {name} must be ≥ 0, got {arr.min()}")

    def _hint(self):
        shapes = [self.key_lengths.shape]
        if self.query_lengths is not None:
            shapes.append(self.query_lengths.shape)
        return np.broadcast_shapes(*shapes), 1

    def _bind(self, layout):
        batch = layout.batch_shape
        _batch_broadcast(self.key_lengths, self.key_lengths.shape, batch, "padding key_lengths")
        self.klen = np.broadcast_to(self.key_lengths, batch)
        self.qlen = None
        if self.query_lengths is not None:
            _batch_broadcast(self.query_lengths, self.query_lengths.shape, batch,
                             "padding query_lengths")
            self.qlen = np.broadcast_to(self.query_lengths, batch)

    def allowed(self, qi, kj, where):
        if where is not None:
            b = where[0]
            ok = kj[None, :] < self.klen[b]  # (1, tk)
            if self.qlen is not None:
                ok = ok & (qi[:, None] < self.qlen[b])  # (tq, tk)
            return ok
        ok = kj < self.klen[..., None, None, None]  # (*batch, 1, 1, tk)
        if self.qlen is not None:
            ok = ok & (qi[:, None] < self.qlen[..., None, None, None])  # (*batch, 1, tq, tk)
        return ok

    def classify(self, qi, kj, where):
        b = where[0]
        klo, khi = _span(kj)
        klen = int(self.klen[b])
        kind = FULL if khi < klen else (EMPTY if klo >= klen else PARTIAL)
        if self.qlen is not None and kind != EMPTY:
            qlo, qhi = _span(qi)
            qlen = int(self.qlen[b])
            qkind = FULL if qhi < qlen else (EMPTY if qlo >= qlen else PARTIAL)
            kind = min(kind, qkind)
        return kind

    def __repr__(self):
        return "padding(...)"


def padding(key_lengths, query_lengths=None) -> Mask:
    """Deny padded positions: key j is real iff j < key_lengths[b] (per batch element b).

    ``key_lengths`` (and ``query_lengths``) are ints shaped like the batch dims of q/k/v, or
    broadcasting to them. Padded query rows (i ≥ query_lengths[b]) see no key and return zeros.
    """
    return _Padding(key_lengths, query_lengths)


class _Documents(Mask):
    """Packed sequences: query i sees key j iff q_ids[..., i] == k_ids[..., j]."""

    cheap_tiles = True  # min/max of the ids decide most tiles

    def __init__(self, q_ids, k_ids):
        self.q_ids = _int_array(q_ids, "q_ids", "documents")
        self.k_ids = None if k_ids is None else _int_array(k_ids, "k_ids", "documents")
        for name, arr in (("q_ids", self.q_ids), ("k_ids", self.k_ids)):
            if arr is not None and arr.ndim < 1:
                raise ValueError(f"documents: {name} must have shape (..., N), got a scalar")

    def _hint(self):
        k_ids = self.q_ids if self.k_ids is None else self.k_ids
        return np.broadcast_shapes(self.q_ids.shape[:-1], k_ids.shape[:-1]), 1

    def _bind(self, layout):
        k_ids = self.q_ids if self.k_ids is None else self.k_ids
        if self.k_ids is None and layout.nq != layout.nk:
            raise ValueError(
                f"mask: documents(q_ids) has no k_ids, but Nq={layout.nq} != Nk={layout.nk}: "
                "pass k_ids for the keys when queries and keys differ"
            )
        for name, arr, n in (("q_ids", self.q_ids, layout.nq), ("k_ids", k_ids, layout.nk)):
            if arr.shape[-1] != n:
                raise ValueError(
                    f"mask: documents {name} has shape {arr.shape} but there are {n} "
                    f"{'queries' if name == 'q_ids' else 'keys'}: its last dim must be {n}"
                )
            _batch_broadcast(arr, arr.shape[:-1], layout.batch_shape, f"documents {name}")
        self.qid = np.broadcast_to(self.q_ids, (*layout.batch_shape, layout.nq))
        self.kid = np.broadcast_to(k_ids, (*layout.batch_shape, layout.nk))

    def _ids(self, qi, kj, where):
        return self.qid[where[0]][qi], self.kid[where[0]][kj]

    def allowed(self, qi, kj, where):
        if where is not None:
            qa, ka = self._ids(qi, kj, where)
            return qa[:, None] == ka[None, :]  # (tq, tk)
        qa = self.qid[..., None, qi, None]  # (*batch, 1, tq, 1)
        ka = self.kid[..., None, None, kj]  # (*batch, 1, 1, tk)
        return qa == ka

    def tile(self, qi, kj, where):
        qa, ka = self._ids(qi, kj, where)
        qlo, qhi, klo, khi = qa.min(), qa.max(), ka.min(), ka.max()
        if qhi < klo or qlo > khi:
            return EMPTY, None
        if qlo == qhi == klo == khi:
            return FULL, None
        block = qa[:, None] == ka[None, :]
        if block.all():
            return FULL, None
        return (PARTIAL, block) if block.any() else (EMPTY, None)

    def __repr__(self):
        return "documents(...)"


def documents(q_ids, k_ids=None) -> Mask:
    """Packed sequences: query i sees key j iff they carry the same document id.

    ``q_ids`` has shape ``(..., Nq)`` (leading dims like the batch dims, or broadcasting to
    them); ``k_ids`` ``(..., Nk)`` defaults to ``q_ids`` for self-attention. Ids need not be
    sorted, but sorted ids (documents packed one after another) let whole tiles be skipped.
    Combine with ``causal()`` for packed causal language modelling.
    """
    return _Documents(q_ids, k_ids)


# --------------------------------------------------------------------------------------------
# Explicit arrays and predicates
# --------------------------------------------------------------------------------------------
class _Explicit(Mask):
    """A user's bool array broadcastable to (..., Hq, Nq, Nk); ``deny`` flips its polarity."""

    def __init__(self, array, deny: bool):
        fn = "deny" if deny else "allow"
        arr = np.asarray(array)
        if arr.dtype != bool:
            raise TypeError(
                f"{fn}() needs a bool array, got dtype {arr.dtype}; for additive float masks "
                "(0 / -inf) pass them as bias= instead"
            )
        if arr.ndim < 2:
            raise ValueError(f"{fn}() needs an array of shape (..., Nq, Nk), got shape {arr.shape}")
        self.array, self.deny = arr, deny

    def _hint(self):
        lead = self.array.shape[:-2]
        return (lead[:-1], lead[-1]) if lead else ((), 1)

    def _bind(self, layout):
        full = (*layout.batch_shape, layout.heads, layout.nq, layout.nk)
        if not broadcasts_to(self.array.shape, full):
            raise ValueError(
                f"mask: {'deny' if self.deny else 'allow'}() array has shape {self.array.shape} "
                f"but scores have shape {full} (..., Hq, Nq, Nk): it must broadcast to them"
            )
        self.view = np.broadcast_to(self.array, full)  # no copy

    def allowed(self, qi, kj, where):
        if where is not None:
            b, h = where
            plane = self.view[b][h]  # (Nq, Nk)
            rows = plane[qi[0]: qi[-1] + 1] if _is_range(qi) else plane[qi]
            block = rows[:, kj[0]: kj[-1] + 1] if _is_range(kj) else rows[:, kj]
        else:
            block = self.view[..., qi[:, None], kj[None, :]] if len(qi) and len(kj) else \
                self.view[..., :0, :0]
        return ~block if self.deny else block

    def __repr__(self):
        return f"{'deny' if self.deny else 'allow'}(array of shape {self.array.shape})"


def allow(array) -> Mask:
    """An explicit bool array where **True means may attend** (broadcast to (..., Hq, Nq, Nk))."""
    return _Explicit(array, deny=False)


def deny(array) -> Mask:
    """An explicit bool array where **True means masked out**, as in
    ``torch.nn.MultiheadAttention``'s ``attn_mask``/``key_padding_mask`` (the opposite of
    ``torch.nn.functional.scaled_dot_product_attention``'s bool ``attn_mask``)."""
    return _Explicit(array, deny=True)


class _Predicate(Mask):
    def __init__(self, fn: Callable):
        if not callable(fn):
            raise TypeError(
                f"predicate() needs a callable fn(q_idx, k_idx), got {type(fn).__name__}"
            )
        self.fn = fn

    def allowed(self, qi, kj, where):
        result = np.asarray(self.fn(qi[:, None], kj[None, :]))
        if result.dtype != bool:
            raise TypeError(
                f"predicate: fn(q_idx, k_idx) must return bools, got dtype {result.dtype}"
            )
        try:
            np.broadcast_shapes(result.shape, (len(qi), len(kj)))
        except ValueError:
            raise ValueError(
                f"predicate: fn(q_idx, k_idx) returned shape {result.shape}, which does not "
                f"broadcast to the grid ({len(qi)}, {len(kj)}); write it elementwise on the "
                "index arrays q_idx (tq, 1) and k_idx (1, tk)"
            ) from None
        return result

    def __repr__(self):
        return f"predicate({getattr(self.fn, '__name__', 'fn')})"


def predicate(fn: Callable) -> Mask:
    """A mask from a rule ``fn(q_idx, k_idx) -> bool array``, vectorised over index grids.

    ``q_idx`` has shape ``(tq, 1)`` and ``k_idx`` ``(1, tk)`` (raw indices 0..Nq−1, 0..Nk−1);
    the kernel calls it once per tile, so a custom mask costs O(tile²) memory, never O(Nq·Nk).
    Example: ``predicate(lambda i, j: (i - j) % 2 == 0)``.
    """
    return _Predicate(fn)
