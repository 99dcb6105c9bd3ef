"""Per-sequence masks: padding and packed documents (they depend on the batch element)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .base import (
    EMPTY,
    FULL,
    PARTIAL,
    BoundMask,
    Layout,
    Mask,
    batch_broadcast,
    int_array,
    kind_of,
    span,
)


@dataclass(frozen=True, repr=False, eq=False)
class Padding(Mask):
    """Keys at index ≥ key_lengths[b] (and queries ≥ query_lengths[b]) are denied."""

    key_lengths: np.ndarray
    query_lengths: np.ndarray | None

    def _hint(self):
        shapes = [self.key_lengths.shape]
        if self.query_lengths is not None:
            shapes.append(self.query_lengths.shape)
        return np.broadcast_shapes(*shapes), 1

    def bind(self, layout: Layout) -> BoundMask:
        batch = layout.batch_shape
        batch_broadcast(self.key_lengths.shape, batch, "padding key_lengths")
        klen = np.broadcast_to(self.key_lengths, batch).reshape(-1)  # (B,)
        qlen = None
        if self.query_lengths is not None:
            batch_broadcast(self.query_lengths.shape, batch, "padding query_lengths")
            qlen = np.broadcast_to(self.query_lengths, batch).reshape(-1)
        return _BoundPadding(layout, klen, qlen)

    def __repr__(self):
        return "padding(...)"


@dataclass(frozen=True, eq=False)
class _BoundPadding(BoundMask):
    layout: Layout
    klen: np.ndarray  # (B,) flat over the batch dims
    qlen: np.ndarray | None
    batch_dependent = True
    cheap = True

    def block(self, qi, kj, b, h):
        ok = kj[None, :] < self.klen[b]  # (1, tk)
        if self.qlen is not None:
            ok = ok & (qi[:, None] < self.qlen[b])  # (tq, tk)
        return ok

    def classify(self, qi, kj, b, h):
        klo, khi = span(kj)
        klen = int(self.klen[b])
        kind = FULL if khi < klen else (EMPTY if klo >= klen else PARTIAL)
        if self.qlen is not None and kind != EMPTY:
            qlo, qhi = span(qi)
            qlen = int(self.qlen[b])
            kind = min(kind, FULL if qhi < qlen else (EMPTY if qlo >= qlen else PARTIAL))
        return kind


def padding(key_lengths, query_lengths=None) -> Mask:
    """Deny padded positions: key j is real iff j < key_lengths[b] (per batch element b).

    ``key_lengths`` (and ``query_lengths``) are ints shaped like the batch dims of q/k/v, or
    broadcasting to them. Padded query rows (i ≥ query_lengths[b]) see no key and return zeros.
    """
    klen = int_array(key_lengths, "key_lengths", "padding")
    qlen = None if query_lengths is None else int_array(query_lengths, "query_lengths", "padding")
    for name, arr in (("key_lengths", klen), ("query_lengths", qlen)):
        if arr is not None and arr.size and (arr < 0).any():
            raise ValueError(f"padding: {name} must be ≥ 0, got {arr.min()}")
    return Padding(klen, qlen)


@dataclass(frozen=True, repr=False, eq=False)
class Documents(Mask):
    """Packed sequences: query i sees key j iff q_ids[..., i] == k_ids[..., j]."""

    q_ids: np.ndarray
    k_ids: np.ndarray | None

    def _hint(self):
        k_ids = self.q_ids if self.k_ids is None else self.k_ids
        return np.broadcast_shapes(self.q_ids.shape[:-1], k_ids.shape[:-1]), 1

    def bind(self, layout: Layout) -> BoundMask:
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
            batch_broadcast(arr.shape[:-1], layout.batch_shape, f"documents {name}")
        nb = layout.batch_size  # explicit: reshape(-1, 0) cannot infer it for empty sequences
        qid = np.broadcast_to(self.q_ids, (*layout.batch_shape, layout.nq)).reshape(nb, layout.nq)
        kid = np.broadcast_to(k_ids, (*layout.batch_shape, layout.nk)).reshape(nb, layout.nk)
        # Packed documents come in order: then a tile's ids range from its first row's to its
        # last's, read in O(1) instead of a min and max over the tile (~40 µs per tile).
        return _BoundDocuments(layout, qid, kid, _ordered(qid), _ordered(kid))

    def __repr__(self):
        return "documents(...)"


@dataclass(frozen=True, eq=False)
class _BoundDocuments(BoundMask):
    layout: Layout
    qid: np.ndarray  # (B, Nq)
    kid: np.ndarray  # (B, Nk)
    q_ordered: np.ndarray  # (B,) bool: the ids of sequence b never decrease
    k_ordered: np.ndarray  # (B,)
    batch_dependent = True
    cheap = True  # min/max of the ids decide most tiles

    def block(self, qi, kj, b, h):
        return self.qid[b][qi][:, None] == self.kid[b][kj][None, :]  # (tq, tk)

    def tile(self, qi, kj, b, h):
        # (index arrays are strictly increasing: over ordered ids their ends are min and max)
        qlo, qhi = _id_span(self.qid[b], qi, self.q_ordered[b])
        klo, khi = _id_span(self.kid[b], kj, self.k_ordered[b])
        if qhi < klo or qlo > khi:
            return EMPTY, None
        if qlo == qhi == klo == khi:
            return FULL, None
        return kind_of(self.block(qi, kj, b, h))


def _ordered(ids: np.ndarray) -> np.ndarray:
    """``(B, N)`` ids → ``(B,)`` bool: whether each sequence's ids never decrease."""
    return (np.diff(ids, axis=-1) >= 0).all(axis=-1)


def _id_span(ids: np.ndarray, idx: np.ndarray, ordered: bool) -> tuple[int, int]:
    """(min, max) of ``ids[idx]`` for a strictly increasing, non-empty ``idx``."""
    if ordered:
        return ids[idx[0]], ids[idx[-1]]
    picked = ids[idx]
    return picked.min(), picked.max()


def documents(q_ids, k_ids=None) -> Mask:
    """Packed sequences: query i sees key j iff they carry the same document id.

    ``q_ids`` has shape ``(..., Nq)`` (leading dims like the batch dims, or broadcasting to
    them); ``k_ids`` ``(..., Nk)`` defaults to ``q_ids`` for self-attention. Ids need not be
    sorted, but sorted ids (documents packed one after another) let whole tiles be skipped.
    Combine with ``causal()`` for packed causal language modelling.
    """
    q = int_array(q_ids, "q_ids", "documents")
    k = None if k_ids is None else int_array(k_ids, "k_ids", "documents")
    for name, arr in (("q_ids", q), ("k_ids", k)):
        if arr is not None and arr.ndim < 1:
            raise ValueError(f"documents: {name} must have shape (..., N), got a scalar")
    return Documents(q, k)
