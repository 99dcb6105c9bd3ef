"""The exact weights on demand: the forward's lse, then each tile's weights recomputed from it
(as the backward does), so the memory is the result plus a tile."""

from __future__ import annotations

import numpy as np

from .. import operands
from ..problem import Problem
from ..tiles import blocks, current
from .common import (
    allowed_t,
    in_compute,
    plan_tiles,
    run_items,
    step_for,
    tile_scores,
    with_quiet_problem,
)
from .forward import forward
from .small import as_planes, small_chunks, small_scores


# --------------------------------------------------------------------------------------------
# Weights on demand
# --------------------------------------------------------------------------------------------
@with_quiet_problem
def weights(p: Problem) -> np.ndarray:
    """The exact weights ``(*batch, Hq, Nq, Nk)`` for the (possibly row-subset) problem.

    First the forward's lse for these rows, then each tile's weights recomputed from it with
    the step's ``probabilities`` — as the backward does — and each row divided by its sum, so
    the memory is the result plus a tile. Empty tiles are never computed. Weights below the
    dtype's smallest normal number (1.2e-38 in float32) — and, on the tiled path, below 2^-63
    (5.4e-20; 2^-511 in float64: see :mod:`.step`) — are returned as 0.
    """
    result = np.zeros((*p.batch_shape, p.hq, p.nq, p.nk), dtype=p.dtype)
    if p.empty:
        return result
    _, lse = forward(p, with_output=False)
    cfg = current()
    _, step = step_for(p, cfg)
    c = p.compute
    flat, lse_flat = p.flat(result), p.flat(lse[..., None])[..., 0]  # (B, Hq, Nq, Nk), (B, Hq, Nq)

    if p.nq * p.nk <= cfg.small:  # all heads at once, as the small forward
        def small(_: int, rows: slice) -> None:
            s, allowed = small_scores(p, rows)  # (b, Hkv, G, Nk, Nq)
            step.probabilities(as_planes(s, p.nq), as_planes(allowed, p.nq),
                               lse_flat[rows].reshape(-1, p.nq))
            flat[rows] = np.swapaxes(s, -1, -2).reshape(-1, p.hq, p.nq, p.nk)

        run_items(p, cfg, small, small_chunks(p))
    else:
        planner = plan_tiles(p, cfg, cfg.tile_k, cfg.key_tile(False))
        q, k = p.flat(p.q), in_compute(p, p.k)
        use = cfg.resolved_gemm()
        items = [(b, h, q0, q1) for q0, q1 in blocks(p.nq, cfg.tile_q)
                 for b in range(p.batch_size) for h in range(p.hq)]

        def worker(_: int, item) -> None:
            b, h, q0, q1 = item
            q_scaled = operands.scaled_rows(q[b, h, q0:q1], p.scale, c)  # (tq, Dk)
            k_bh = k[b, h // p.group].astype(c, copy=False)
            for r0, r1, k0, k1, kind, block in planner.tiles(b, h, q0, q1):
                qi, kj = p.q_pos[q0 + r0: q0 + r1], p.k_pos[k0:k1]
                s = tile_scores(p, q_scaled[r0:r1], k_bh[k0:k1], b, h, qi, kj,
                                 use=use)  # (tk, tr)
                step.probabilities(s[None], allowed_t(kind, block),
                                   lse_flat[None, b, h, q0 + r0: q0 + r1], products=True)
                flat[b, h, q0 + r0: q0 + r1, k0:k1] = s.T

        run_items(p, cfg, worker, items, tiled=True)
    # exp(s − lse) sums to 1 up to the exponential's rounding (≈ |s − lse|·eps): divide by the
    # actual sum so that every row sums to 1 to the dtype's precision.
    total = flat.sum(axis=-1, dtype=c, keepdims=True)
    np.divide(flat, total, out=flat, where=total != 0)
    # Weights below the result dtype's normal range (float16's, say) flush to 0 as well.
    np.copyto(result, 0, where=result < np.finfo(p.dtype).tiny)
    return result
