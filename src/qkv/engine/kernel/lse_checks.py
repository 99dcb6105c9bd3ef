"""Does an lse belong to the backward's q, k, mask and bias? The weights recomputed from it must
sum to 1 in every row, up to what rounding can make; rows whose lse cannot place them (huge
scores) are re-centred on their own largest score; the rest is refused by name."""

from __future__ import annotations

import itertools
import math

import numpy as np

from .. import operands
from ..problem import Problem, finite_max_abs
from ..tiles import KernelConfig, blocks
from .common import allowed_t, in_compute, plan_tiles, tile_scores
from .small import small_chunks, small_scores


def _lse_rounding(p: Problem, lse: np.ndarray) -> np.ndarray:
    """How far (in log space, per row) rounding alone can put a recomputed row's weights' sum
    from 1, for the compute dtype's eps: a sum of Nk exponentials is rounded to ~(Nk + 8)·eps;
    the lse itself to eps·|lse|; scores |s| ≤ s_bound to (Dk + 8)·eps·s_bound by a GEMM of
    another shape (the forward's tiles may differ from these)."""
    eps = float(np.finfo(p.compute).eps)
    finite = np.where(np.isfinite(lse), lse, 0)
    return (16 * eps * (1 + np.abs(finite) + np.log(p.nk + 1))
            + (p.dk + 8) * eps * (1 + _score_bound(p)))



def _log_sums(lse: np.ndarray, psum: np.ndarray) -> np.ndarray:
    """log ΣP per row (0 where the lse is −inf: no key); ΣP of 0 gives −inf, ∞ gives ∞."""
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        return np.where(np.isfinite(lse), np.log(psum), 0.0)



def rows_lost(p: Problem, lse: np.ndarray, psum: np.ndarray) -> np.ndarray | None:
    """Rows (``(B, Hq, Nq)`` bool, or None) whose recomputed weights left the exponential's
    useful range — ΣP off 1 by more than half of it, 0 or ∞ included — where the rounding of
    these scores and this lse could have put them there: the lse cannot place such a row's
    weights (at |scores| ~ 1e10 in float32 one rounding of the lse is ~1e3), so the backward
    re-centres it on its own scores. Where rounding could not, :func:`rows_off` refuses."""
    half = -0.5 * math.log(float(np.finfo(p.compute).tiny))  # ~44 in float32, ~354 in float64
    lost = (np.abs(_log_sums(lse, psum)) > half) & (_lse_rounding(p, lse) > half)
    return lost if lost.any() else None



def check_own_lse(p: Problem, given: np.ndarray, own: np.ndarray, rows: np.ndarray) -> None:
    """The lse passed in against this backward's own for ``rows``: they may differ by what
    rounding can make, not more (else the lse belongs to other inputs)."""
    bound = _lse_rounding(p, given)
    with np.errstate(invalid="ignore"):  # −inf − (−inf): a row with no key on both sides
        far = rows & ~(np.abs(given - own) <= bound) & ~(given == own)
    far &= ~np.isnan(own)  # the caller's NaN score (check_finite=False) stays the caller's
    if far.any():
        at = tuple(int(i) for i in np.argwhere(far)[0])
        raise ValueError(
            f"lse does not belong to these q, k, mask and bias: row {at[2]} (flat batch {at[0]}, "
            f"head {at[1]}) has lse {float(given[at]):.6g} but these scores give "
            f"{float(own[at]):.6g}, past the {float(bound[at]):.3g} rounding could make; pass "
            "the lse that attention(..., return_lse=True) returned for the same q, k, mask, "
            "bias, scale and softcap")



def own_row_max(p: Problem, cfg: KernelConfig, path: str) -> np.ndarray:
    """Each row's largest allowed score ``(B, Hq, Nq)`` as this backward computes it — the
    same tiles through the same calls, so the very numbers its passes recompute (−inf where
    nothing is allowed). For rows whose lse cannot place their weights (:func:`rows_lost`)."""
    c = p.compute
    top = np.full((p.batch_size, p.hq, p.nq), -np.inf, dtype=c)
    if path == "small":
        for rows in small_chunks(p):
            s, allowed = small_scores(p, rows)  # (b, Hkv, G, Nk, Nq)
            m = s.max(axis=-2, initial=-np.inf, where=True if allowed is None else allowed)
            top[rows] = m.reshape(-1, p.hq, p.nq)
        return top
    scale = c.type(p.scale)
    q, k = p.flat(p.q), in_compute(p, p.k)
    use = cfg.resolved_gemm()
    planner = plan_tiles(p, cfg, cfg.tile_k, cfg.tile_k, align=cfg.tile_k)
    for b, hk in np.ndindex(p.batch_size, p.hkv):
        k_bh = k[b, hk].astype(c, copy=False)
        for (k0, k1), h, (q0, q1) in itertools.product(
                blocks(p.nk, cfg.tile_k), range(hk * p.group, (hk + 1) * p.group),
                blocks(p.nq, cfg.tile_q)):
            q_scaled = operands.scaled_rows(q[b, h, q0:q1], scale, c)  # (tq, Dk), as the backward's
            for r0, r1, t0, t1, kind, block in planner.tiles(b, h, q0, q1, (k0, k1)):
                s = tile_scores(p, q_scaled[r0:r1], k_bh[t0:t1], b, h,
                                 p.q_pos[q0 + r0: q0 + r1], p.k_pos[t0:t1],
                                 use=use)  # Sᵀ (tk, tr)
                allowed = allowed_t(kind, block)
                m = s.max(axis=0, initial=-np.inf, where=True if allowed is None else allowed[0])
                np.maximum(top[b, h, q0 + r0: q0 + r1], m, out=top[b, h, q0 + r0: q0 + r1])
    return top



def rows_off(p: Problem, lse: np.ndarray, psum: np.ndarray) -> np.ndarray | None:
    """The rows whose recomputed weights sum off 1 by more than the sum's own rounding
    (``(B, Hq, Nq)`` bool), or None if there are none; a ValueError where they are off by more
    than any rounding of these scores and this lse could make them (:func:`_lse_rounding`).
    """
    eps = float(np.finfo(p.compute).eps)
    log_sum = _log_sums(lse, psum)
    dev = np.abs(log_sum)
    off = dev > 4 * (p.nk + 8) * eps  # False for NaN (the caller's NaN, check_finite=False)
    if not off.any():
        return None
    bound = _lse_rounding(p, lse)
    far = dev > bound
    if far.any():
        at = tuple(int(i) for i in np.argwhere(far)[0])
        total = float(psum[at])
        raise ValueError(
            f"lse does not belong to these q, k, mask and bias: the weights recomputed from it "
            f"sum to {total:.6g} instead of 1 in row {at[2]} (flat batch {at[0]}, head {at[1]}) "
            f"— off by a factor e^{float(log_sum[at]):.3g}, past the {bound[at]:.3g} rounding "
            "could make; pass the lse that attention(..., return_lse=True) returned for the "
            "same q, k, mask, bias, scale and softcap")
    return off



def _score_bound(p: Problem) -> float:
    """An upper bound on |scaled scores + bias| over the problem (finite entries)."""
    s = p.dk * abs(p.scale) * finite_max_abs(p.q) * finite_max_abs(p.k)
    if p.softcap is not None:
        s = min(s, p.softcap)
    return s + (p.bias.magnitude() if p.bias is not None else 0.0)
