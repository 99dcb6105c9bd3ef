"""The tiled forward (FlashAttention-2, Algorithm 1): each query block's key tiles visited in
order with the online softmax, from Python or in one compiled call (:mod:`.fused`); the
output's overflow fix; and a paged cache's sequences in one pool (:func:`forward_pages`)."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from .. import operands, threads
from ..masks import EMPTY
from ..problem import Problem
from ..scratch import Scratch
from ..tiles import blocks, current
from .common import (
    BLAS_HOLD_MIN,
    allowed_t,
    bad_rows,
    dot_t,
    dropout_scales,
    finish_into,
    in_compute,
    plan_tiles,
    run_items,
    step_for,
    tile_scores,
    with_quiet_problem,
)
from .decode import decode_group, decode_worker
from .fused import fused_loop
from .small import forward_small

# Extra columns of a query block's accumulator rows: one cache line of float32 (see forward)
ACC_PAD = 16


def has_work(p: Problem) -> bool:
    """Is any tile of this problem not EMPTY? (Ring attention skips kv shards that are all
    masked for its queries.) Stops at the first tile found."""
    if p.empty:
        return False
    if p.mask is None:
        return True
    cfg = current()
    nb = p.batch_size if p.mask.batch_dependent else 1
    nh = p.hq if p.mask.head_dependent else 1
    for b in range(nb):
        for h in range(nh):
            for q0, q1 in blocks(p.nq, cfg.tile_q):
                qi = p.q_pos[q0:q1]
                for k0, k1 in blocks(p.nk, cfg.tile_k):
                    if p.mask.tile(qi, p.k_pos[k0:k1], b, h)[0] != EMPTY:
                        return True
    return False



# --------------------------------------------------------------------------------------------
# Forward
# --------------------------------------------------------------------------------------------
@with_quiet_problem
def forward(p: Problem, *, with_output: bool = True) -> tuple[np.ndarray | None, np.ndarray]:
    """``(out, lse)`` for a validated problem: out ``(*batch, Hq, Nq, Dv)`` in the input dtype
    (None when ``with_output`` is False: only lse is wanted), lse ``(*batch, Hq, Nq)`` in the
    compute dtype (natural log).

    The output is a blend of v's rows, but the kernels divide by the weights' total last: with
    overflow-sized values (:attr:`Problem.sums_may_overflow`) Σ p·v can pass the dtype's range
    while the answer is finite. Such an output is checked, and one that overflowed is computed
    again with v scaled down (:func:`_forward_values_scaled`)."""
    out, lse = _forward(p, with_output)
    if out is not None and p.sums_may_overflow and not np.isfinite(out).all():
        out = _forward_values_scaled(p)
    return out, lse



def _forward_values_scaled(p: Problem) -> np.ndarray:
    """The output of a problem whose Σ p·v overflowed: the same problem with v times 2^-e
    (exact: a power of two), the least that brings :attr:`Problem.value_reach` inside a quarter
    of the dtype, and the output times 2^e. Rows non-finite for the caller's own inf or NaN
    (check_finite=False) stay so. Entries of v below 2^e times the dtype's smallest normal
    number lose bits in the scaled copy: only next to values ~2^e times too large to sum."""
    top = float(np.finfo(p.compute).max)
    # in logarithms: the reach itself may be past float64 (float64 values near its top)
    e = max(1, math.ceil(math.log2(p.v_max) + math.log2(p.nk) - math.log2(1.0 - p.dropout)
                         - math.log2(top / 4)))
    shrink, grow = p.dtype.type(2.0 ** -e), p.dtype.type(2.0 ** e)
    scaled, _ = _forward(replace(p, v=p.v * shrink, v_max=p.v_max * 2.0 ** -e), True)
    with np.errstate(over="ignore", invalid="ignore"):
        out = scaled * grow
    if (np.isfinite(scaled) & ~np.isfinite(out)).any():  # a blend rounded past the top
        raise ValueError(
            f"the output overflows {p.compute}: a blend of v's rows (max|v| "
            f"{p.v_max:.3g}) rounded past {top:.3g}, the "
            f"largest {p.compute}; leave v some headroom below it (the output is linear in v: "
            f"attention(q, k, v / c) * c), or compute in float64")
    return out



def _forward(p: Problem, with_output: bool) -> tuple[np.ndarray | None, np.ndarray]:
    out = np.zeros(p.out_shape(p.dv), dtype=p.dtype) if with_output else None
    lse = np.full(p.out_shape(1)[:-1], -np.inf, dtype=p.compute)
    if p.empty:
        return out, lse  # no keys at all: every row is all-masked
    cfg = current()
    backend, step = step_for(p, cfg)
    if p.pages is not None:
        raise ValueError("a paged problem runs through forward_pages (one call per cache)")
    if p.nq * p.nk <= cfg.small:
        forward_small(p, cfg, step, out, lse)
        path = "small"
    else:
        _forward_tiled(p, cfg, step, out, lse)
        path = "tiled"
    if cfg.stats is not None:
        cfg.stats.add_path(f"{path} {backend}")
    return out, lse



def _forward_tiled(p, cfg, step, out, lse) -> None:
    with Scratch() as scratch:
        items, worker = forward_tiled_work(p, cfg, step, out, lse, scratch)
        run_items(p, cfg, worker, items, tiled=True)



def _head_rows(p: Problem, which: str):
    """``(b, hk) → rows(k0, k1)``: keys 0…Nk of one kv head in the compute dtype, tile by tile
    — slices of the contiguous k or v, or tiles gathered through a paged cache's block table
    (``p.pages``), so the tile loop never needs the whole head in one array."""
    c = p.compute
    if p.pages is not None:
        def paged(_b: int, hk: int):
            return lambda k0, k1: p.pages.rows(which, hk, k0, k1).astype(c, copy=False)
        return paged
    x = in_compute(p, p.k if which == "k" else p.v)

    def contiguous(b: int, hk: int):
        x_bh = x[b, hk]  # (Nk, D)
        return lambda k0, k1: x_bh[k0:k1]
    return contiguous



def forward_tiled_work(p, cfg, step, out, lse, scratch):
    """The tiled forward's work items (b, h, q0, q1) and the worker that computes one."""
    # A stacked decode step's tiles are one query row: a partial tile costs it little, so it
    # takes the unmasked key tile (1024), half the tiles and gathers of the masked one.
    planner = plan_tiles(p, cfg, cfg.key_tile(p.mask is not None and not decode_group(p)),
                    cfg.key_tile(False))
    # One work item per (batch element, query head, query tile); later query tiles first, as
    # under a causal mask they see the most keys and the pool should start on them.
    items = [(b, h, q0, q1) for q0, q1 in reversed(blocks(p.nq, cfg.tile_q))
             for b in range(p.batch_size) for h in range(p.hq)]
    out_flat = None if out is None else p.flat(out)
    lse_flat = p.flat(lse[..., None])[..., 0]  # (B, Hq, Nq)
    q = p.flat(p.q)
    c = p.compute
    use = cfg.resolved_gemm()
    fused = fused_loop(p, step, use, out is not None, stats=cfg.stats) if cfg.fused else None
    if fused is not None and cfg.stats is not None:
        cfg.stats.add_path("tiled fused")
    keys = None if fused else _head_rows(p, "k")
    values = None if out is None or fused else _head_rows(p, "v")

    def worker(worker_id: int, item) -> None:
        b, h, q0, q1 = item
        hk = h // p.group
        q_scaled = operands.scaled_rows(q[b, h, q0:q1], p.scale, c)  # (tq, Dk), C order
        tq = q1 - q0
        m = np.full(tq, -np.inf, dtype=c)  # running max
        row_sum = np.zeros(tq, dtype=c)  # running sum ℓ of exp(s − m)
        # accᵀ (Dv, tq) in rows padded by one cache line: rows a power-of-two apart (tq = 512:
        # 2 KiB) put a column's elements in the same few cache sets, and the transposed read
        # of the store below thrashed them (68 µs for 64 × 512, 12 µs padded)
        acc_rows = None if out is None else np.zeros((p.dv, tq + ACC_PAD), dtype=c)
        acc_t = None if acc_rows is None else acc_rows[:, :tq]  # (Dv, tq)
        if fused is not None:  # the loop of the else branch, compiled whole (step/fused.py)
            run, heads, sgemm = fused
            tiles, partial_blocks = planner.table(b, h, [(q0, q1)])
            k_head, v_head = heads(b, hk)
            size = int(((tiles[:, 1] - tiles[:, 0]) * (tiles[:, 3] - tiles[:, 2])).max(initial=1))
            run(q_scaled, k_head, v_head, tiles, partial_blocks, m, row_sum, acc_rows,
                scratch.tile(worker_id, 1, size, c)[0], True, sgemm)
        else:
            k_rows = keys(b, hk)
            v_rows = None if values is None else values(b, hk)
            for r0, r1, k0, k1, kind, block in planner.tiles(b, h, q0, q1):
                qi, kj = p.q_pos[q0 + r0: q0 + r1], p.k_pos[k0:k1]
                s = tile_scores(p, q_scaled[r0:r1], k_rows(k0, k1), b, h, qi, kj, use=use,
                                 out=scratch.tile(worker_id, k1 - k0, r1 - r0, c))  # (tk, tr)
                step.online_softmax(s[None], allowed_t(kind, block), m[None, r0:r1],
                                    row_sum[None, r0:r1],
                                    None if acc_t is None else acc_t[None, :, r0:r1],
                                    products=True)
                if acc_t is not None:  # accᵀ += Vᵀ Pᵀ: (Dv, tk) @ (tk, tr)
                    kept = dropout_scales(p, b, h, qi, kj, c)
                    if kept is not None:  # dropout after the softmax's sums: ℓ is undropped
                        s *= kept
                    v_tile = v_rows(k0, k1)
                    dot_t(v_tile, s, bad_rows(p, v_tile), acc_t[:, r0:r1], use)
        acc = None if acc_t is None else acc_t.T  # (tq, Dv)
        lse_flat[b, h, q0:q1] = finish_into(p, m, row_sum, acc,
                                             None if acc is None else out_flat[b, h, q0:q1])

    if decode_group(p):
        return [(b, hk) for b in range(p.batch_size) for hk in range(p.hkv)], decode_worker(
            p, planner, step, q, keys, values, out_flat, lse_flat, scratch)
    return items, worker



def forward_pages(problems: list[Problem]) -> list[tuple[np.ndarray, np.ndarray]]:
    """``[(out, lse), ...]`` of the sequences of a paged cache, one problem each (own keys, own
    causal alignment; ``p.pages`` set), in one pool of workers: the tiled forward always — a
    decode step walks its key tiles through the block table, never gathering the cache."""
    cfg = current()
    scratch = Scratch()
    results, items, workers = [], [], []
    for p in problems:
        if p.pages is None:
            raise ValueError("forward_pages needs problems of a paged cache (p.pages set)")
        out = np.zeros(p.out_shape(p.dv), dtype=p.dtype)
        lse = np.full(p.out_shape(1)[:-1], -np.inf, dtype=p.compute)
        results.append((out, lse))
        if p.empty:
            continue  # a sequence with no cached keys: every row is all-masked
        backend, step = step_for(p, cfg)
        its, worker = forward_tiled_work(p, cfg, step, out, lse, scratch)
        items += [(p.nk, len(workers), it) for it in its]
        workers.append((p, worker))
        if cfg.stats is not None:
            cfg.stats.add_path(f"paged {backend}")
    items.sort(key=lambda item: -item[0])  # the longest sequences first: the costliest items
    work = sum(p.hq * p.nq * p.nk * (p.dk + p.dv) for p, _ in workers)

    def run(worker_id: int, item) -> None:
        p, worker = workers[item[1]]
        with p.quiet():
            worker(worker_id, item[2])

    with scratch:
        threads.run(run, items, cfg.num_workers(work), hold_blas=work > BLAS_HOLD_MIN,
                    pin=cfg.pin)
    for b, (p, (out, _)) in enumerate(zip(problems, results, strict=True)):
        # the cache is read in place, so no scaled copy of v (see forward): refused instead
        if p.sums_may_overflow and not np.isfinite(out).all():
            raise ValueError(
                f"sequence {b}'s output overflows {p.compute}: the kernel sums up to "
                f"{p.nk} cached rows of v (max|v| {p.v_max:.3g}) before dividing "
                "by the weights' total; scale the cached values down (the output is linear in "
                "v: attention(q, k, v / c) * c)")
    return results
