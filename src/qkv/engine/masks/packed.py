"""Packed documents, each causal from its own bottom-right corner.

    packed_causal(q_lengths, k_lengths=None, *, before=None)

A packed sequence holds documents one after another: document d owns queries
``q_start[d] … q_start[d] + q_lengths[d] − 1`` and keys
``k_start[d] … k_start[d] + k_lengths[d] − 1``.
Query i of document d, at local index ``a = i − q_start[d]``, stands at local key position

    p = a + k_lengths[d] − q_lengths[d]          (bottom-right: the last query sees the last key)

and may attend the keys of its own document at local positions ``max(0, p − before) … p``.

That is xformers' ``BlockDiagonalCausalFromBottomRightMask`` (with ``before = window_size − 1``,
its ``BlockDiagonalCausalLocalAttentionFromBottomRightMask``) and flash-attn's varlen
``causal=True`` (``window_size=(before, 0)``). ``documents(ids) & causal()`` is not this: it aligns
the causal rule at the packed totals, so a document whose query and key lengths differ is cut at
the wrong diagonal.

Each query's allowed keys are one interval ``[lo[i], hi[i]]`` of packed key positions (empty when
``hi < lo``), computed once at binding — O(Nq), never O(Nq·Nk) — so a tile is classified from the
intervals of its rows against its key range.
"""

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
    check_bound,
    int_array,
    span,
)


@dataclass(frozen=True, repr=False, eq=False)
class PackedCausal(Mask):
    """Documents packed one after another, each causal from its own bottom-right corner."""

    q_lengths: np.ndarray  # (..., D)
    k_lengths: np.ndarray  # (..., D)
    before: int | None

    def _hint(self):
        return np.broadcast_shapes(self.q_lengths.shape[:-1], self.k_lengths.shape[:-1]), 1

    def bind(self, layout: Layout) -> BoundMask:
        batch = layout.batch_shape
        qlen, klen = self.q_lengths, self.k_lengths
        for name, arr, n, what in (("q_lengths", qlen, layout.nq, "queries"),
                                   ("k_lengths", klen, layout.nk, "keys")):
            batch_broadcast(arr.shape[:-1], batch, f"packed_causal {name}")
            totals = arr.sum(axis=-1)
            if (totals != n).any():
                bad = int(totals.flat[np.flatnonzero(totals != n)[0]])
                raise ValueError(
                    f"mask: packed_causal {name} sum to {bad} but there are {n} {what}: "
                    f"the documents must cover the packed sequence exactly (add the padding "
                    f"as a document of its own, or pass lengths that sum to {n})"
                )
        lead = tuple(np.broadcast_shapes(qlen.shape[:-1], klen.shape[:-1]))
        depends = bool(lead) and any(s > 1 for s in lead)
        shape = (*batch, qlen.shape[-1]) if depends else (qlen.shape[-1],)
        qlen = np.broadcast_to(qlen, shape).reshape(-1, qlen.shape[-1])  # (B or 1, D)
        klen = np.broadcast_to(klen, shape).reshape(-1, klen.shape[-1])
        rows = [_intervals(q, k, self.before) for q, k in zip(qlen, klen, strict=True)]
        lo = np.stack([r[0] for r in rows])  # (B or 1, Nq)
        hi = np.stack([r[1] for r in rows])
        return _BoundPackedCausal(layout, lo, hi, depends)

    def __repr__(self):
        docs = self.q_lengths.shape[-1]
        extra = "" if self.before is None else f", before={self.before}"
        return f"packed_causal({docs} documents{extra})"


def _intervals(qlen: np.ndarray, klen: np.ndarray, before: int | None):
    """Each query's allowed keys ``[lo, hi]`` (packed key positions) for one packing: ``(Nq,)``."""
    doc = np.repeat(np.arange(len(qlen)), qlen)  # (Nq,) the document of each query
    q_start = np.cumsum(qlen) - qlen
    k_start = np.cumsum(klen) - klen
    local = np.arange(len(doc)) - q_start[doc]  # (Nq,) index within its document
    pos = local + klen[doc] - qlen[doc]  # bottom-right: local key position of the query
    hi = np.minimum(pos, klen[doc] - 1)
    lo = np.zeros_like(pos) if before is None else np.maximum(pos - before, 0)
    return k_start[doc] + lo, k_start[doc] + hi  # hi < lo: the query sees no key


@dataclass(frozen=True, eq=False)
class _BoundPackedCausal(BoundMask):
    layout: Layout
    lo: np.ndarray  # (B or 1, Nq)
    hi: np.ndarray  # (B or 1, Nq)
    batch_dependent: bool
    cheap = True  # O(tq) per tile: the rows' intervals against the key range

    def _rows(self, qi, b):
        b = b if self.batch_dependent else 0
        return self.lo[b][qi], self.hi[b][qi]

    def block(self, qi, kj, b, h):
        lo, hi = self._rows(qi, b)
        return (kj[None, :] >= lo[:, None]) & (kj[None, :] <= hi[:, None])  # (tq, tk)

    def classify(self, qi, kj, b, h):
        lo, hi = self._rows(qi, b)
        klo, khi = span(kj)
        # Exact for contiguous key ranges and safe for gapped ones (a range covered or missed
        # whole is covered or missed by any subset; the kernel reads gapped PARTIAL tiles off
        # the block).
        if not ((lo <= khi) & (hi >= klo) & (lo <= hi)).any():
            return EMPTY
        if ((lo <= klo) & (hi >= khi)).all():
            return FULL
        return PARTIAL


def packed_causal(q_lengths, k_lengths=None, *, before: int | None = None) -> Mask:
    """Packed documents, each causal from its own bottom-right corner (module doc).

    ``q_lengths`` ``(..., D)``: the number of queries of each of D documents, packed in order;
    leading dims like the batch dims of q/k/v, or broadcasting to them. They must sum to Nq.
    ``k_lengths`` ``(..., D)``: the keys of each document (default: ``q_lengths``), summing to
    Nk. ``before``: a causal sliding window within each document — query position p sees keys
    ``p − before … p`` (xformers' ``window_size`` is ``before + 1``; flash-attn's
    ``window_size=(before, 0)``); None is unbounded.
    """
    q = int_array(q_lengths, "q_lengths", "packed_causal")
    k = q if k_lengths is None else int_array(k_lengths, "k_lengths", "packed_causal")
    for name, arr in (("q_lengths", q), ("k_lengths", k)):
        if arr.ndim < 1:
            raise ValueError(f"packed_causal: {name} must have shape (..., documents), "
                             "got a scalar")
        if arr.size and (arr < 0).any():
            raise ValueError(f"packed_causal: {name} must be ≥ 0, got {arr.min()}")
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(
            f"packed_causal: q_lengths has {q.shape[-1]} documents but k_lengths has "
            f"{k.shape[-1]}: give each document its query and its key length (0 for none)"
        )
    before = check_bound(before, "before", "packed_causal", allow_none=True)
    return PackedCausal(q, k, before)
