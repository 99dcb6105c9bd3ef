"""FlashAttention-2's backward: for each key tile, the weights recomputed from ``lse`` for every
query tile that reads it, from Python or in one compiled call per query head (:mod:`.fused`);
dQ accumulated per worker (or, deterministic, in a second pass that owns its rows)."""

from __future__ import annotations

import numpy as np

from .. import gemm, operands
from .. import step as steps
from ..problem import Problem
from ..scratch import Scratch
from ..tiles import blocks, current
from .common import (
    allowed_t,
    bad_rows,
    dot,
    dropout_scales,
    in_compute,
    plan_tiles,
    run_items,
    softcap_grad,
    step_for,
    tile_scores,
    with_quiet_problem,
    zeros_or,
)
from .fused import fused_loop
from .lse_checks import check_own_lse, own_row_max, rows_lost, rows_off
from .small import backward_small


# --------------------------------------------------------------------------------------------
# Backward
# --------------------------------------------------------------------------------------------
@with_quiet_problem
def backward(p: Problem, out: np.ndarray, lse: np.ndarray, dout: np.ndarray,
             dlse: np.ndarray | None = None, *, deterministic: bool = False,
             dbias: np.ndarray | None = None, whole: bool = False,
             into: tuple[np.ndarray, np.ndarray] | None = None):
    """Gradients ``(dq, dk, dv)`` as ``(B, H, N, D)`` arrays in the compute dtype (flat batch).

    FlashAttention-2's backward: for each key tile (a work item), walk every query tile of every
    query head that reads this kv head, recompute the weights from ``lse``, and accumulate

        dV_j += Pᵀ dO_i,   dS = P ∘ (dO_i V_jᵀ − Δ_i),   dK_j += dSᵀ Q_i · scale,
        dQ_i += dS K_j · scale,   with Δ_i = rowsum(dO_i ∘ O_i).

    dK and dV of a key tile belong to one work item; dQ gets contributions from every key tile,
    so each worker thread accumulates dQ privately and the copies are summed at the end — in an
    order that depends on which thread took which tile. ``deterministic=True`` instead computes
    dQ in a second pass that owns its query rows and visits key tiles in order: bitwise the same
    on every run and thread count, for about 60% more backward time.

    ``dlse`` (``(B, Hq, Nq)``, or None) is ∂loss/∂lse for losses that use the lse too. Since
    ∂lse_i/∂S_ij = P_ij, it enters as dS = P ∘ (dP − Δ + dlse): Δ is replaced by Δ − dlse.

    ``dbias``, a zeroed ``(B, Hq, Nq, Nk)`` array in the compute dtype (or None), receives dS —
    the gradient of an additive bias — tile by tile (empty tiles leave their zeros).

    ``into=(dk, dv)``, arrays ``(B, Hkv, Nk, Dk)`` and ``(B, Hkv, Nk, Dv)`` in the compute dtype
    (C-contiguous, writeable), *adds* this problem's dK and dV to them in place (and returns
    them as dk, dv): the sum over several calls — query blocks, or a ring's query shards against
    one kv shard — without a full-size temporary per call. The sum is the same as adding the
    returned arrays (each key tile's gradient is added into its rows once).

    With ``whole`` (these are all the keys the lse was taken over: ``attention_backward``; not
    a ring's kv shard, whose weights sum to its share) the weights recomputed from ``lse`` must
    sum to 1 in every row: each pass also sums P and dS per row. A row far off (past any
    rounding of these scores and this lse) means the lse does not belong to these q, k, mask
    and bias: refused. A row off by more than the sum's own
    rounding but within that bound (huge scores: the forward's tiles rounded them otherwise, or
    the lse itself cannot hold them to better than eps·|lse|) is normalised — P' = P / ΣP, by
    running the pass again with dO / ΣP and Δ' / ΣP, Δ' from these very P — so that every tile
    configuration gives the gradient of its own scores.
    """
    if p.pages is not None:
        raise ValueError("the backward reads k and v whole: paged caches are for inference; "
                         "train with contiguous k, v")
    c = p.compute
    dq_shape = (p.batch_size, p.hq, p.nq, p.dk)
    if into is not None:
        _check_into(p, into)
    if p.empty:
        dk, dv = into if into is not None else (np.zeros((p.batch_size, p.hkv, p.nk, p.dk), c),
                                                np.zeros((p.batch_size, p.hkv, p.nk, p.dv), c))
        return np.zeros(dq_shape, dtype=c), dk, dv
    cfg = current()
    backend, step = step_for(p, cfg)
    dout_f = dout.reshape(p.batch_size, p.hq, p.nq, p.dv)
    out_f = out.reshape(p.batch_size, p.hq, p.nq, p.dv)
    # Δ_i = rowsum(dO ∘ O) = Σ_j P_ij (dO_i · v_j), the softmax-Jacobian term.
    delta = np.einsum("bhnd,bhnd->bhn", dout_f.astype(c), out_f.astype(c))  # (B, Hq, Nq)
    if dlse is not None:
        delta -= dlse.reshape(delta.shape).astype(c)
    lse_f = lse.reshape(p.batch_size, p.hq, p.nq).astype(c)
    path = "small" if p.nq * p.nk <= cfg.small else "tiled"
    # A renormalised re-run (``whole``, below) recomputes dK and dV from scratch: it cannot add
    # into the caller's arrays twice, so with ``whole`` they receive the final result at the end.
    direct = into if into is not None and not whole else None

    def run(delta_used, dout_used, lse_used):
        sums = np.zeros((2, p.batch_size, p.hq, p.nq), dtype=c)  # Σ_j P, Σ_j dS per row
        if dbias is not None:
            dbias[...] = 0
        if path == "small":
            grads = backward_small(p, cfg, step, delta_used, lse_used, dout_used, dbias, sums,
                                    direct)
        else:
            grads = backward_tiled(p, cfg, step, delta_used, lse_used, dout_used,
                                    deterministic, dbias, sums, direct)
        return grads, sums

    grads, (psum, dsum) = run(delta, dout_f, lse_f)
    lost = rows_lost(p, lse_f, psum) if whole else None
    if lost is not None:
        # Scores so large that the lse's own rounding (or the forward's tiles rounding them
        # otherwise) is past the exponential's range: exp(s − lse) under- or overflowed. Shift
        # those rows by their largest score as this backward computes it — bitwise its own, so
        # the weights are ≤ 1 with a 1 among them — and normalise below (P / ΣP).
        own = own_row_max(p, cfg, path)
        shifted = np.where(lost, own, lse_f)
        grads, (psum, dsum) = run(delta, dout_f, shifted)
        with np.errstate(divide="ignore"):  # ΣP = 0: nothing allowed after all, own lse −inf
            check_own_lse(p, lse_f, shifted + np.log(np.where(lost, psum, 1)), lost)
        lse_f = shifted
        if cfg.stats is not None:
            cfg.stats.add_path("backward shifted")
    off = rows_off(p, lse_f, psum) if whole else None  # (B, Hq, Nq) bool, or None
    if off is not None:
        # P' = P / r (r = ΣP): dS' = P'(dP − Δ') = P (dP / r − Δ' / r) and dV = Pᵀ (dO / r),
        # with Δ' = Σ_j P'_ij dP_ij − dlse_i = (Σ dS + (Δ − dlse) ΣP) / r − dlse.
        r = np.where(off, psum, 1)
        dlse_f = 0 if dlse is None else dlse.reshape(delta.shape).astype(c)
        fixed = (dsum + delta * psum) / r - dlse_f
        delta = np.where(off, fixed / r, delta)
        grads, _ = run(delta, dout_f.astype(c) / r[..., None], lse_f)
        if cfg.stats is not None:
            cfg.stats.add_path("backward renormalised")
    if cfg.stats is not None:
        cfg.stats.add_path(f"{path} backward {backend}")
    if into is not None and direct is None:
        into[0] += grads[1]
        into[1] += grads[2]
        grads = (grads[0], *into)
    return grads



def _check_into(p: Problem, into) -> None:
    """``into=(dk, dv)``: two writeable C-contiguous arrays of the gradients' shapes and dtype."""
    expect = ((p.batch_size, p.hkv, p.nk, p.dk), (p.batch_size, p.hkv, p.nk, p.dv))
    if not isinstance(into, tuple) or len(into) != 2:
        raise TypeError(f"into must be a tuple (dk, dv) of arrays to add into, got "
                        f"{type(into).__name__}")
    for name, arr, shape in zip(("dk", "dv"), into, expect, strict=True):
        if not isinstance(arr, np.ndarray):
            raise TypeError(f"into's {name} must be a NumPy array, got {type(arr).__name__}")
        if arr.shape != shape or arr.dtype != p.compute:
            raise ValueError(f"into's {name} has shape {arr.shape} and dtype {arr.dtype}; this "
                             f"problem's {name} is {shape} in {np.dtype(p.compute)} (flat batch, "
                             "kv heads, keys, features): allocate it so")
        if not (arr.flags.c_contiguous and arr.flags.writeable):
            raise ValueError(f"into's {name} must be C-contiguous and writeable: pass "
                             f"np.ascontiguousarray({name}) (a copy) or a fresh np.zeros")









def backward_tiled(p, cfg, step, delta, lse_f, dout_f, deterministic=False, dbias=None,
                    sums=None, into=None):
    c = p.compute
    scale = c.type(p.scale)
    dk, dv = zeros_or(into, p)  # added into tile by tile: one work item owns a key tile
    dq_parts: dict[int, np.ndarray] = {}
    sum_parts: dict[int, np.ndarray] = {}  # per worker: Σ_j P, Σ_j dS per row (see backward)
    q, k, v = p.flat(p.q), in_compute(p, p.k), in_compute(p, p.v)
    q_blocks = blocks(p.nq, cfg.tile_q)
    use = cfg.resolved_gemm()
    # Merged tiles stay within one work item's keys.
    planner = plan_tiles(p, cfg, cfg.tile_k, cfg.tile_k, align=cfg.tile_k)
    items = [(b, hk, k0, k1) for b in range(p.batch_size) for hk in range(p.hkv)
             for k0, k1 in blocks(p.nk, cfg.tile_k)]
    # the loop below compiled whole (step/fused.py), where the problem's tiles are only GEMMs
    # and steps and no dS is kept (dbias): one call per query head of a work item
    fused = (fused_loop(p, step, use, True, "backward", cfg.stats) if cfg.fused and dbias is None
             else None)
    if fused is not None and cfg.stats is not None:
        cfg.stats.add_path("tiled fused backward")

    scratch = Scratch()

    def worker(worker_id: int, item) -> None:
        # A stale, huge value in a masked slot may overflow dP = dO Vᵀ there; the step zeroes
        # dS wherever P is 0, so that inf never reaches a gradient: no warning for it.
        with np.errstate(over="ignore", invalid="ignore"):
            if worker_id not in dq_parts:
                dq_parts[worker_id] = np.zeros((p.batch_size, p.hq, p.nq, p.dk), dtype=c)
                sum_parts[worker_id] = np.zeros((2, p.batch_size, p.hq, p.nq), dtype=c)
            (_fused_item if fused is not None else _backward_item)(worker_id, item)

    def _fused_item(worker_id: int, item) -> None:
        run, heads, sgemm = fused
        b, hk, k0, k1 = item
        dq, row_sums = dq_parts[worker_id], sum_parts[worker_id]
        k_head, v_head = heads(b, hk)
        for h in range(hk * p.group, (hk + 1) * p.group):
            tiles, partial_blocks = planner.table(b, h, q_blocks, (k0, k1))
            if not len(tiles):
                continue
            q_scaled = operands.scaled_rows(q[b, h], scale, c)  # (Nq, Dk): the loop's C-order rows
            do_head = np.ascontiguousarray(dout_f[b, h], dtype=c)  # (Nq, Dv)
            buf = scratch.tile(worker_id, 1, steps.backward_scratch(tiles), c)[0]
            run(q_scaled, k_head, v_head, do_head, np.ascontiguousarray(lse_f[b, h]),
                np.ascontiguousarray(delta[b, h]), tiles, partial_blocks, dk[b, hk], dv[b, hk],
                dq[b, h], row_sums[0, b, h], row_sums[1, b, h], buf, scale, not deterministic,
                sgemm)

    def _backward_item(worker_id: int, item) -> None:
        b, hk, k0, k1 = item
        dq, row_sums = dq_parts[worker_id], sum_parts[worker_id]
        dk_acc, dv_acc = dk[b, hk], dv[b, hk]
        k_bh = k[b, hk].astype(c, copy=False)
        v_bh = v[b, hk].astype(c, copy=False)
        bad_k = bad_rows(p, k_bh)
        for h in range(hk * p.group, (hk + 1) * p.group):
            for q0, q1 in q_blocks:
                q_scaled = None
                for r0, r1, t0, t1, kind, block in planner.tiles(b, h, q0, q1, (k0, k1)):
                    if q_scaled is None:
                        q_scaled = operands.scaled_rows(q[b, h, q0:q1], scale, c)  # (tq, Dk)
                        do_tile = dout_f[b, h, q0:q1].astype(c)  # (tq, Dv)
                    rows = slice(r0, r1)
                    qi, kj = p.q_pos[q0 + r0: q0 + r1], p.k_pos[t0:t1]
                    s, t = tile_scores(p, q_scaled[rows], k_bh[t0:t1], b, h, qi, kj,
                                        keep_tanh=True, use=use,
                                        out=scratch.tile(worker_id, t1 - t0, r1 - r0, c))
                    step.probabilities(s[None], allowed_t(kind, block),
                                       lse_f[None, b, h, q0 + r0: q0 + r1],
                                       products=True)  # Pᵀ, recomputed
                    row_sums[0, b, h, q0 + r0: q0 + r1] += s.sum(axis=0)
                    kept = dropout_scales(p, b, h, qi, kj, c)  # dropout: Z / (1 − rate), or None
                    gemm.matmul(s if kept is None else s * kept, do_tile[rows], dv_acc[t0:t1],
                                accumulate=True, use=use)  # dV += Pᵀ dO
                    dp = gemm.matmul(v_bh[t0:t1], do_tile[rows].T, use=use)  # dPᵀ (tk, tr)
                    if kept is not None:
                        dp *= kept
                    step.softmax_grad(dp[None], s[None], delta[None, b, h, q0 + r0: q0 + r1])
                    row_sums[1, b, h, q0 + r0: q0 + r1] += dp.sum(axis=0)
                    if dbias is not None:  # dS itself: a work item owns its key columns
                        dbias[b, h, q0 + r0: q0 + r1, t0:t1] += dp.T
                    softcap_grad(dp, t)
                    # dSᵀ (Q · scale): the forward's own q·scale, which is in range — Q alone
                    # times dS may overflow where the product with scale would not.
                    gemm.matmul(dp, q_scaled[rows], dk_acc[t0:t1], accumulate=True,
                                use=use)  # (tk, Dk)
                    if not deterministic:  # dQ_i (tr, Dk) += (dS K_j) · scale, one GEMM
                        dot(dp.T, k_bh[t0:t1], None if bad_k is None else bad_k[t0:t1],
                             dq[b, h, q0 + r0: q0 + r1], use=use, alpha=scale)

    with scratch:
        run_items(p, cfg, worker, items, passes=2.5, tiled=True)
    if sums is not None and sum_parts:
        # ΣP ≥ 0 adds up safely; ΣdS of a foreign lse may be +inf in one worker's rows and −inf
        # in another's: NaN there, quietly — the lse check refuses those rows from ΣP alone
        with np.errstate(invalid="ignore", over="ignore"):
            sums += sum(sum_parts.values())
    if not deterministic:
        with np.errstate(invalid="ignore", over="ignore"):  # as ΣdS above: a foreign lse's
            # ±inf parts are refused after this by the lse check; a finite problem's inf is
            # refused by attention_backward's overflow check — never a warning from here
            dq = (sum(dq_parts.values()) if dq_parts
                  else np.zeros((p.batch_size, p.hq, p.nq, p.dk), c))
        return dq, dk, dv

    dq = np.zeros((p.batch_size, p.hq, p.nq, p.dk), dtype=c)
    dq_items = [(b, h, q0, q1) for q0, q1 in reversed(q_blocks)
                for b in range(p.batch_size) for h in range(p.hq)]

    def dq_worker(_: int, item) -> None:
        with np.errstate(over="ignore", invalid="ignore"):  # as above
            b, h, q0, q1 = item
            hk = h // p.group
            k_bh, v_bh = k[b, hk].astype(c, copy=False), v[b, hk].astype(c, copy=False)
            bad_k = bad_rows(p, k_bh)
            q_scaled = operands.scaled_rows(q[b, h, q0:q1], scale, c)  # (tq, Dk)
            do_tile = dout_f[b, h, q0:q1].astype(c)
            for r0, r1, t0, t1, kind, block in planner.tiles(b, h, q0, q1):  # key tiles in order
                qi, kj = p.q_pos[q0 + r0: q0 + r1], p.k_pos[t0:t1]
                s, t = tile_scores(p, q_scaled[r0:r1], k_bh[t0:t1], b, h, qi, kj,
                                    keep_tanh=True, use=use)
                step.probabilities(s[None], allowed_t(kind, block),
                                   lse_f[None, b, h, q0 + r0: q0 + r1], products=True)
                dp = gemm.matmul(v_bh[t0:t1], do_tile[r0:r1].T, use=use)
                kept = dropout_scales(p, b, h, qi, kj, c)
                if kept is not None:
                    dp *= kept
                step.softmax_grad(dp[None], s[None], delta[None, b, h, q0 + r0: q0 + r1])
                softcap_grad(dp, t)
                dot(dp.T, k_bh[t0:t1], None if bad_k is None else bad_k[t0:t1],
                     dq[b, h, q0 + r0: q0 + r1], use=use, alpha=scale)

    run_items(p, cfg, dq_worker, dq_items, passes=1.5, tiled=True)
    return dq, dk, dv
