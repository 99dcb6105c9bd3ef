"""Problems whose score matrix per head fits in one tile: every (batch element, head) plane at
once, forward and backward — each query's softmax is its own, so heads and batch elements are
just more planes. Operands of any layout: ``np.matmul`` reads them (:mod:`..operands`)."""

from __future__ import annotations

import numpy as np

from .. import step as steps
from ..problem import Problem
from .common import (
    apply_score_mod,
    apply_softcap,
    dropout_scales,
    finish,
    planes_dot,
    run_items,
    softcap_grad,
    store_rounded,
    zeros_or,
)


def _small_kept(p: Problem, rows: slice, shape) -> np.ndarray | None:
    """Dropout's scales for the small path's transposed scores ``(b, Hkv, G, Nk, Nq)``."""
    if not p.dropout:
        return None
    b = np.arange(p.batch_size)[rows][:, None]
    kept = dropout_scales(p, b, np.arange(p.hq)[None, :], p.q_pos, p.k_pos,
                          p.compute)  # (b, Hq, Nk, Nq)
    return kept.reshape(shape)



def small_chunks(p: Problem) -> list[slice]:
    """Slices of the flat batch so one chunk's scores stay about a tile's worth per core."""
    per_elem = p.hq * p.nq * p.nk
    size = max(1, (1 << 22) // max(per_elem, 1))
    return [slice(i, min(i + size, p.batch_size)) for i in range(0, p.batch_size, size)]



def small_scores(p: Problem, rows: slice, *, keep_tanh=False):
    """All heads at once, transposed: scores ``(b, Hkv, G, Nk, Nq)`` and the allowed pairs in
    the same layout (or None), for the batch elements ``rows``."""
    c = p.compute
    g = (p.hkv, p.group)
    q = p.flat(p.q)[rows].reshape(-1, *g, p.nq, p.dk)  # (b, Hkv, G, Nq, Dk)
    k = p.flat(p.k)[rows][:, :, None]  # (b, Hkv, 1, Nk, Dk)
    s = k.astype(c, copy=False) @ np.swapaxes(q.astype(c, copy=False) * c.type(p.scale), -1, -2)
    # Broadcasting matmuls may return a strided result; the step works on a view of it.
    s = np.ascontiguousarray(s)  # (b, Hkv, G, Nk, Nq)
    t = apply_softcap(p, s)
    shape = (p.batch_size, p.hq, p.nq, p.nk)
    if p.bias is not None:
        bias = p.bias.dense(p.q_pos, p.k_pos).reshape(shape)[rows]
        s += np.swapaxes(bias.reshape(*s.shape[:3], p.nq, p.nk), -1, -2)
    if p.score_mod is not None:  # per (batch element, head) plane, as the tiled path's tiles
        planes = s.reshape(-1, p.hq, p.nk, p.nq)
        first = np.arange(p.batch_size)[rows][0] if planes.shape[0] else 0
        for i in range(planes.shape[0]):
            for h in range(p.hq):
                planes[i, h] = apply_score_mod(p, planes[i, h].T, first + i, h,
                                               p.q_pos[:, None], p.k_pos[None, :]).T
    allowed = None
    if p.mask is not None:
        dense = p.mask.dense(p.q_pos, p.k_pos)  # (*batch or 1s, Hq or 1, Nq, Nk)
        dense = np.broadcast_to(dense.reshape(-1, *dense.shape[-3:]), shape)[rows]
        allowed = np.ascontiguousarray(np.swapaxes(dense, -1, -2)).reshape(s.shape)
    return (s, allowed, t) if keep_tanh else (s, allowed)



# The small path's compiled step runs on one row of every plane's queries side by side below
# this many queries per plane (see side_by_side; steps.per_query says which steps may). From
# 32 queries on, a plane's row is whole 16-wide vectors and the wide row, read twice from
# beyond the cache, loses: python benchmarks/step_parts.py times 21 queries at 0.52–0.54× the
# time of plane by plane on MiniLM's planes and 0.82–0.90× on 4096 keys, 32 queries at 1.26–1.30×.
SIDE_BY_SIDE_BELOW = 32



def side_by_side(x: np.ndarray | None, nq: int) -> np.ndarray | None:
    """``(b, Hkv, G, Nk, Nq)`` → ``(1, Nk, b·Hq·Nq)``, a copy: every plane's queries side by
    side in one row of the step. The step is element-wise per query (each query's max and sum
    run down its own keys in the same order), so the bits are those of plane by plane; but a
    short row is mostly a vector loop's scalar remainder, and a long one is not: on MiniLM's
    768 planes of 21 × 21 scores the compiled step with both copies takes 0.52–0.54× the time
    of plane by plane (``python benchmarks/step_parts.py``, four runs)."""
    if x is None:
        return None
    planes = x.reshape(-1, x.shape[-2], nq)  # (P, Nk, Nq)
    return np.ascontiguousarray(planes.transpose(1, 0, 2)).reshape(1, x.shape[-2], -1)



def back_to_planes(wide: np.ndarray, x: np.ndarray, nq: int) -> None:
    """Undo :func:`side_by_side` into ``x`` (C-contiguous ``(b, Hkv, G, Nk, Nq)``)."""
    nk = x.shape[-2]
    x.reshape(-1, nk, nq)[...] = wide.reshape(nk, -1, nq).transpose(1, 0, 2)



def as_planes(x: np.ndarray | None, last: int) -> np.ndarray | None:
    """``(b, Hkv, G, A, B)`` → ``(b·Hq, A, B)``: one plane per (batch element, head), a view."""
    return None if x is None else x.reshape(-1, x.shape[-2], last)



def forward_small(p, cfg, step, out, lse) -> None:
    """Problems whose score matrix per head fits in one tile: one tile step over every
    (batch element, head) plane at once — each query's softmax is its own, so heads and batch
    elements are just more planes."""
    c = p.compute
    lse_flat = lse.reshape(p.batch_size, p.hq, p.nq)
    out_g = None if out is None else out.reshape(p.batch_size, p.hkv, p.group, p.nq, p.dv)
    v = None if out is None else p.flat(p.v)[:, :, None]  # (B, Hkv, 1, Nk, Dv)
    short_rows = p.nq < SIDE_BY_SIDE_BELOW and steps.per_query(step)

    def worker(_: int, rows: slice) -> None:
        s, allowed = small_scores(p, rows)  # (b, Hkv, G, Nk, Nq)
        n = s.shape[0]
        m = np.full((n * p.hq, p.nq), -np.inf, dtype=c)
        row_sum = np.zeros((n * p.hq, p.nq), dtype=c)
        if short_rows:  # short rows: every plane's queries in one row
            wide = side_by_side(s, p.nq)  # (1, Nk, b·Hq·Nq)
            step.online_softmax(wide, side_by_side(allowed, p.nq), m.reshape(1, -1),
                                row_sum.reshape(1, -1), None)
            back_to_planes(wide, s, p.nq)
        else:
            step.online_softmax(as_planes(s, p.nq), as_planes(allowed, p.nq), m, row_sum, None)
        lse_flat[rows] = finish(m, row_sum, None).reshape(n, p.hq, p.nq)
        if out_g is None:
            return
        v_rows = v[rows].astype(c, copy=False)  # (b, Hkv, 1, Nk, Dv)
        kept = _small_kept(p, rows, s.shape)
        if kept is not None:
            s *= kept
        weights = np.swapaxes(s, -1, -2)  # P (b, Hkv, G, Nq, Nk)
        dst = out_g[rows]  # (b, Hkv, G, Nq, Dv), a view of the output
        if dst.dtype == c and (p.checked_finite or np.isfinite(v_rows).all()):
            # P·V straight into the output, divided there: no temporary and no copy
            np.matmul(weights, v_rows, out=dst)
            finish(m, row_sum, dst.reshape(n * p.hq, p.nq, p.dv))
            return
        acc = planes_dot(p, weights, v_rows)  # (b, Hkv, G, Nq, Dv)
        acc = np.ascontiguousarray(acc).reshape(n * p.hq, p.nq, p.dv)
        finish(m, row_sum, acc)
        store_rounded(p, dst, acc.reshape(n, p.hkv, p.group, p.nq, p.dv))

    run_items(p, cfg, worker, small_chunks(p))



def backward_small(p, cfg, step, delta, lse_f, dout_f, dbias=None, sums=None, into=None):
    """The backward with all heads at once, for problems whose score matrix per head fits in
    one tile (as :func:`forward_small`): the same step on every row of every head."""
    c = p.compute
    scale = c.type(p.scale)
    g = (p.batch_size, p.hkv, p.group)
    dq = np.zeros((*g, p.nq, p.dk), dtype=c)
    dk, dv = zeros_or(into, p)  # added into: a chunk of batch rows owns its rows of dK, dV
    q_g = p.flat(p.q).reshape(*g, p.nq, p.dk)
    k_g, v_g = p.flat(p.k)[:, :, None], p.flat(p.v)[:, :, None]  # (B, Hkv, 1, Nk, D)
    do_g = dout_f.reshape(*g, p.nq, p.dv)
    delta_flat = delta.reshape(p.batch_size, p.hq, p.nq)
    lse_flat = lse_f.reshape(p.batch_size, p.hq, p.nq)

    def worker(_: int, rows: slice) -> None:
        with np.errstate(over="ignore", invalid="ignore"):  # as in backward_tiled
            _backward_rows(rows)

    def _backward_rows(rows: slice) -> None:
        s, allowed, t = small_scores(p, rows, keep_tanh=True)  # Sᵀ (b, Hkv, G, Nk, Nq)
        step.probabilities(as_planes(s, p.nq), as_planes(allowed, p.nq),
                           lse_flat[rows].reshape(-1, p.nq))  # Pᵀ, recomputed
        n = s.shape[0]
        if sums is not None:
            sums[0, rows] = s.sum(axis=-2).reshape(n, p.hq, p.nq)
        do = do_g[rows].astype(c, copy=False)  # (b, Hkv, G, Nq, Dv)
        kept = _small_kept(p, rows, s.shape)
        dv[rows] += ((s if kept is None else s * kept) @ do).sum(axis=2)  # Σ over the group
        dp = np.ascontiguousarray(v_g[rows].astype(c, copy=False) @ np.swapaxes(do, -1, -2))
        if kept is not None:
            dp *= kept
        # dPᵀ (b, Hkv, G, Nk, Nq), contiguous so that the step's view of it is not a copy
        step.softmax_grad(as_planes(dp, p.nq), as_planes(s, p.nq),
                          delta_flat[rows].reshape(-1, p.nq))
        if sums is not None:
            sums[1, rows] = dp.sum(axis=-2).reshape(n, p.hq, p.nq)
        if dbias is not None:
            dbias[rows] = np.swapaxes(dp, -1, -2).reshape(-1, p.hq, p.nq, p.nk)
        softcap_grad(dp, t)
        ds = np.swapaxes(dp, -1, -2)  # dS (b, Hkv, G, Nq, Nk)
        k_rows = k_g[rows].astype(c, copy=False)  # (b, Hkv, 1, Nk, Dk)
        dq[rows] = planes_dot(p, ds, k_rows) * scale  # dS K
        # dSᵀ (Q · scale), as the tiled path: the forward's in-range q·scale
        dk[rows] += (dp @ (q_g[rows].astype(c) * scale)).sum(axis=2)

    run_items(p, cfg, worker, small_chunks(p), passes=2.5)
    return dq.reshape(p.batch_size, p.hq, p.nq, p.dk), dk, dv
