"""The tiled kernels: FlashAttention-2's forward and backward, the weights on demand.

Forward (FlashAttention-2, Algorithm 1), for each query tile Q_i of one (batch, head)::

    m = −∞, ℓ = 0, accᵀ = 0                                  (per query)
    for each key tile K_j, V_j the mask does not classify EMPTY:
        Sᵀ  = K_j Q_iᵀ · scale (+ bias)                       the tile's scores   (tk, tq)
        m, ℓ, accᵀ, Pᵀ = online_softmax(Sᵀ, allowed, m, ℓ, accᵀ)  step: P = exp(S − m_new)
        accᵀ += V_jᵀ Pᵀ                                       (Dv, tq), i.e. acc += P V_j
    out = (accᵀ / ℓ)ᵀ,   lse = m + log ℓ                      (ℓ = 0: no key → 0, −∞)

so no Nq × Nk array ever exists. Tiles are stored transposed, keys × queries, and so is the
accumulator (see :mod:`.step` for why). The element-wise half of each tile is the *tile step*
(:mod:`.step`, NumPy or compiled); the GEMMs stay with the BLAS. The same step serves the
backward (weights recomputed from lse), ``attention_weights``, small problems (all heads at
once, as one batch of rows) and ring attention (which calls :func:`forward` per kv shard).

Tiles are planned before they are touched (:class:`.tiles.TilePlan`): the bound mask classifies
each as EMPTY (skipped), FULL (no mask arithmetic) or PARTIAL (its block applied), once per batch
element and head only if the mask depends on them; partial tiles split where that skips work,
and runs of FULL tiles merge into wider ones.
"""

from __future__ import annotations

import functools
import itertools
import math
from dataclasses import replace

import numpy as np

from . import dropout as dropout_rule
from . import gemm, threads
from . import step as steps
from .masks import EMPTY, PARTIAL
from .problem import Problem, check_narrowing, output_fix
from .scratch import Scratch
from .tiles import KernelConfig, TilePlan, blocks, current

__all__ = ["backward", "forward", "forward_pages", "has_work", "weights"]

# Below this much work (multiply-adds) a call is too small for holding the BLAS to one thread to
# pay for itself (~30 µs, see threads.run); its GEMMs are too small for BLAS threads anyway.
BLAS_HOLD_MIN = 1 << 20
# Extra columns of a query block's accumulator rows: one cache line of float32 (see forward)
ACC_PAD = 16


def _plan(p: Problem, cfg: KernelConfig, tile_k: int, merge_k: int,
          align: int | None = None) -> TilePlan:
    """The plan of this problem's tiles: cells of ``tile_k`` keys, FULL runs merged up to
    ``merge_k`` keys, never across a multiple of ``align`` (see :class:`.tiles.TilePlan`)."""
    return TilePlan(p.mask, p.q_pos, p.k_pos, cfg, tile_k, merge_k, align)


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


def _step_for(p: Problem, cfg: KernelConfig):
    """The tile step for this problem: float64 always runs the NumPy step."""
    backend = "numpy" if p.compute == np.float64 else cfg.resolved_backend()
    return backend, steps.get(backend)


def _kept(p: Problem, b, h, qi, kj, dtype) -> np.ndarray | None:
    """Dropout's Z / (1 − rate) for a tile, transposed ``(..., tk, tq)``; None without dropout."""
    if not p.dropout:
        return None
    return dropout_rule.scales(p.dropout, p.dropout_seed, p.layout, b, h, qi, kj).astype(dtype)


def _small_kept(p: Problem, rows: slice, shape) -> np.ndarray | None:
    """Dropout's scales for the small path's transposed scores ``(b, Hkv, G, Nk, Nq)``."""
    if not p.dropout:
        return None
    b = np.arange(p.batch_size)[rows][:, None]
    kept = _kept(p, b, np.arange(p.hq)[None, :], p.q_pos, p.k_pos, p.compute)  # (b, Hq, Nk, Nq)
    return kept.reshape(shape)


def _softcap(p: Problem, s: np.ndarray) -> np.ndarray | None:
    """s ← c · tanh(s / c) in place (with a softcap); returns tanh(s / c), which the backward's
    chain rule needs (d/dx c·tanh(x/c) = 1 − tanh²), or None without a softcap."""
    if p.softcap is None:
        return None
    c = s.dtype.type(p.softcap)
    s /= c
    np.tanh(s, out=s)
    t = s.copy()
    s *= c
    return t


def _tile_scores(p: Problem, q_scaled, k, b, h, qi, kj, *, keep_tanh=False, out=None,
                 use="numpy"):
    """Sᵀ = k (q · scale)ᵀ (softcapped, + bias): one tile's scores in natural units, transposed
    ``(tk, tq)`` (into ``out`` if given; the GEMM by ``use``, see :mod:`.gemm`) — with
    ``keep_tanh``, ``(Sᵀ, tanh)`` for the softcap's derivative."""
    s = gemm.matmul(k, q_scaled.T, out=out, use=use)
    t = _softcap(p, s)
    if p.bias is not None:
        s += np.asarray(p.bias.tile(qi, kj, b, h)).T
    if p.score_mod is not None:
        s = apply_score_mod(p, s.T, b, h, qi[:, None], kj[None, :]).T
    return (s, t) if keep_tanh else s


def apply_score_mod(p: Problem, scores: np.ndarray, b, h, q_idx, k_idx,
                    dtype=None) -> np.ndarray:
    """FlexAttention's ``score_mod`` on a block of scores ``(tq, tk)`` (or batched planes), as a
    new C-ordered array in the compute dtype — checked, since it is the caller's code."""
    modified = np.asarray(p.score_mod(scores.copy(), b, h, q_idx, k_idx))
    if modified.shape != scores.shape or modified.dtype.kind != "f":
        raise ValueError(
            f"score_mod must return float scores of the shape it was given {scores.shape}, got "
            f"{modified.dtype} {modified.shape}")
    bad = np.isnan(modified) | (modified == np.inf)
    if bad.any() and (bad & ~np.isnan(scores) & (scores != np.inf)).any():
        # (a NaN it was given — the caller's, in a masked slot, with check_finite=False — may
        # come back NaN: the mask keeps it out; a NaN it made is the modifier's mistake)
        raise ValueError("score_mod returned NaN or +inf; return finite scores (−inf to exclude "
                         "a pair, though a mask lets the kernel skip whole tiles)")
    return np.ascontiguousarray(modified, dtype=dtype or p.compute)


def _allowed_t(kind: int, block) -> np.ndarray | None:
    """A PARTIAL tile's block ``(tq, tk)`` as the step wants it: ``(1, tk, tq)``, contiguous."""
    return None if kind != PARTIAL else block(True)[None]


def _bad_rows(p: Problem, x: np.ndarray) -> np.ndarray | None:
    """Rows of k or v holding NaN/inf, when the caller skipped the finiteness check; else None.

    Such rows may sit in masked slots (a KV cache's unused, uninitialised tail): their weights
    are exactly 0, but a GEMM would still compute 0 · NaN = NaN. :func:`_dot` keeps them out.
    """
    if p.checked_finite:
        return None
    bad = ~np.isfinite(x).all(axis=-1)
    return bad if bad.any() else None


def _dot(weights: np.ndarray, x: np.ndarray, bad: np.ndarray | None,
         into: np.ndarray | None = None, use: str = "numpy", alpha: float = 1.0) -> np.ndarray:
    """``alpha · weights @ x`` (R, T) @ (T, D) — added to ``into`` (R, D) if given — where rows
    of x flagged ``bad`` (non-finite) reach only the output rows that give them a non-zero
    weight: as the formula says, not as 0 · NaN. The GEMM by ``use`` (see :mod:`.gemm`)."""
    clean = x if bad is None or not bad.any() else np.where(bad[:, None], 0, x)
    # the same GEMM call whether or not x had bad rows: the other rows get the same bits
    if into is None:
        into = gemm.matmul(weights, clean, alpha=alpha, use=use)
    else:
        gemm.matmul(weights, clean, into, accumulate=True, alpha=alpha, use=use)
    if clean is not x:
        uses_bad = (weights[:, bad] != 0).any(axis=1)
        if uses_bad.any():  # those rows are non-finite: their rounding does not matter
            into[uses_bad] += (weights[np.ix_(uses_bad, bad)] @ x[bad]) * into.dtype.type(alpha)
    return into


def _dot_t(x: np.ndarray, weights_t: np.ndarray, bad: np.ndarray | None, into_t: np.ndarray,
           use: str) -> None:
    """``into_t += xᵀ @ weights_t``: (D, R) += (D, T) @ (T, R), i.e. :func:`_dot` transposed,
    from a tile stored keys × queries — the orientation MKL multiplies fastest. Rows of x
    flagged ``bad`` reach only the queries that weight them, as in :func:`_dot`."""
    if bad is None or not bad.any():
        gemm.matmul(x.T, weights_t, into_t, accumulate=True, use=use)
    else:
        into_t += _dot(weights_t.T, x, bad).T


def _planes_dot(p: Problem, weights: np.ndarray, x: np.ndarray) -> np.ndarray:
    """The small path's batched ``weights @ x``: ``(b, Hkv, G, Nq, Nk) @ (b, Hkv, 1, Nk, D)``.
    Non-finite rows of x (only possible with check_finite=False) go plane by plane through
    :func:`_dot`, so they reach only the outputs that weight them."""
    if p.checked_finite or np.isfinite(x).all():
        return weights @ x
    xb = np.broadcast_to(x, (*weights.shape[:3], *x.shape[-2:]))
    n = int(np.prod(weights.shape[:3]))  # not -1: D may be 0
    planes = [_dot(w, xi, _bad_rows(p, xi)) for w, xi in
              zip(weights.reshape(n, *weights.shape[-2:]), xb.reshape(n, *x.shape[-2:]),
                  strict=True)]
    return np.stack(planes).reshape(*weights.shape[:-1], x.shape[-1])


def _in_compute(p: Problem, x: np.ndarray) -> np.ndarray:
    """k or v as ``(B, H, N, D)`` in the compute dtype: float16 is converted once per call (not
    once per tile — a query tile per head would otherwise convert the whole head again)."""
    flat = p.flat(x)
    return flat if flat.dtype == p.compute else flat.astype(p.compute)


def _quietly(fn):
    """Run an entry point of this module under ``p.quiet()`` (NumPy's error state is per
    thread, so :func:`_run` sets it in the workers too)."""
    @functools.wraps(fn)
    def wrapper(p: Problem, *args, **kwargs):
        with p.quiet():
            return fn(p, *args, **kwargs)
    return wrapper


def _run(p: Problem, cfg: KernelConfig, worker, items, passes: float = 1.0,
         tiled: bool = False) -> None:
    """Run the work items on the pool, sized by the problem's work (multiply-adds × passes).
    ``tiled``: the items' GEMMs go through :mod:`.gemm` — on MKL they never touch NumPy's
    BLAS, so it is not held to one thread (that costs ~30–80 µs a call: threadpoolctl)."""
    work = passes * p.batch_size * p.hq * p.nq * p.nk * (p.dk + p.dv)

    def quiet_worker(worker_id: int, item) -> None:
        with p.quiet():
            worker(worker_id, item)

    hold = work > BLAS_HOLD_MIN and not (tiled and cfg.resolved_gemm() == "mkl")
    threads.run(quiet_worker, items, cfg.num_workers(work), hold_blas=hold, pin=cfg.pin)


# --------------------------------------------------------------------------------------------
# Forward
# --------------------------------------------------------------------------------------------
@_quietly
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
    backend, step = _step_for(p, cfg)
    if p.pages is not None:
        raise ValueError("a paged problem runs through forward_pages (one call per cache)")
    if p.nq * p.nk <= cfg.small:
        _forward_small(p, cfg, step, out, lse)
        path = "small"
    else:
        _forward_tiled(p, cfg, step, out, lse)
        path = "tiled"
    if cfg.stats is not None:
        cfg.stats.add_path(f"{path} {backend}")
    return out, lse


def _forward_tiled(p, cfg, step, out, lse) -> None:
    with Scratch() as scratch:
        items, worker = _forward_tiled_work(p, cfg, step, out, lse, scratch)
        _run(p, cfg, worker, items, tiled=True)


def _head_rows(p: Problem, which: str):
    """``(b, hk) → rows(k0, k1)``: keys 0…Nk of one kv head in the compute dtype, tile by tile
    — slices of the contiguous k or v, or tiles gathered through a paged cache's block table
    (``p.pages``), so the tile loop never needs the whole head in one array."""
    c = p.compute
    if p.pages is not None:
        def paged(_b: int, hk: int):
            return lambda k0, k1: p.pages.rows(which, hk, k0, k1).astype(c, copy=False)
        return paged
    x = _in_compute(p, p.k if which == "k" else p.v)

    def contiguous(b: int, hk: int):
        x_bh = x[b, hk]  # (Nk, D)
        return lambda k0, k1: x_bh[k0:k1]
    return contiguous


def _forward_tiled_work(p, cfg, step, out, lse, scratch):
    """The tiled forward's work items (b, h, q0, q1) and the worker that computes one."""
    # A stacked decode step's tiles are one query row: a partial tile costs it little, so it
    # takes the unmasked key tile (1024), half the tiles and gathers of the masked one.
    planner = _plan(p, cfg, cfg.key_tile(p.mask is not None and not _decode_group(p)),
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
    fused = _fused_loop(p, step, use, out is not None) if cfg.fused else None
    if fused is not None and cfg.stats is not None:
        cfg.stats.add_path("tiled fused")
    keys = None if fused else _head_rows(p, "k")
    values = None if out is None or fused else _head_rows(p, "v")

    def worker(worker_id: int, item) -> None:
        b, h, q0, q1 = item
        hk = h // p.group
        q_scaled = np.multiply(q[b, h, q0:q1], c.type(p.scale), dtype=c)  # (tq, Dk)
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
                s = _tile_scores(p, q_scaled[r0:r1], k_rows(k0, k1), b, h, qi, kj, use=use,
                                 out=scratch.tile(worker_id, k1 - k0, r1 - r0, c))  # (tk, tr)
                step.online_softmax(s[None], _allowed_t(kind, block), m[None, r0:r1],
                                    row_sum[None, r0:r1],
                                    None if acc_t is None else acc_t[None, :, r0:r1],
                                    products=True)
                if acc_t is not None:  # accᵀ += Vᵀ Pᵀ: (Dv, tk) @ (tk, tr)
                    kept = _kept(p, b, h, qi, kj, c)
                    if kept is not None:  # dropout after the softmax's sums: ℓ is undropped
                        s *= kept
                    v_tile = v_rows(k0, k1)
                    _dot_t(v_tile, s, _bad_rows(p, v_tile), acc_t[:, r0:r1], use)
        acc = None if acc_t is None else acc_t.T  # (tq, Dv)
        lse_flat[b, h, q0:q1] = _finish_into(p, m, row_sum, acc,
                                             None if acc is None else out_flat[b, h, q0:q1])

    if _decode_group(p):
        return [(b, hk) for b in range(p.batch_size) for hk in range(p.hkv)], _decode_worker(
            p, planner, step, q, keys, values, out_flat, lse_flat, scratch)
    return items, worker


def _fused_loop(p: Problem, step, use: str, with_values: bool, direction: str = "forward"):
    """``(run, heads, sgemm)`` for the compiled loop over a query block's tiles
    (:mod:`.step.fused`: the Python loop of :func:`_forward_tiled_work` — or with
    ``direction="backward"`` of :func:`_backward_tiled`'s work item — GEMMs and steps in one
    call without the GIL), when this problem's tiles are only GEMMs and steps: the compiled
    step, a BLAS whose ILP64 ``cblas_sgemm`` :func:`.gemm.address` finds (MKL's or NumPy's
    OpenBLAS), float32 arithmetic, scores as the GEMM makes them (no bias, softcap or
    score_mod), no dropout, k and v checked finite (no row to keep out of a GEMM), whole heads
    with rows of unit stride (no paged cache). Else None, and the Python loop runs.
    ``heads(b, hk)`` gives a kv head's ``(k, v)`` rows (v may be k when only lse is wanted)."""
    run = steps.fused_loop(step, direction)
    if (run is None or p.compute != np.float32 or p.bias is not None
            or p.softcap is not None or p.score_mod is not None or p.dropout
            or not p.checked_finite or p.pages is not None or _decode_group(p)
            or 0 in (p.dk, p.dv)):
        return None
    sgemm = gemm.address(np.float32, use)
    k_all = _in_compute(p, p.k)
    v_all = _in_compute(p, p.v) if with_values else k_all
    if sgemm is None or not all(_gemm_rows(x) for x in (k_all, v_all)):
        return None
    k_all, v_all = _read_only(k_all), _read_only(v_all)  # as the loop takes them
    return run, lambda b, hk: (k_all[b, hk], v_all[b, hk]), sgemm


def _read_only(x: np.ndarray) -> np.ndarray:
    view = x.view()
    view.flags.writeable = False
    return view


def _gemm_rows(x: np.ndarray) -> bool:
    """Are x's rows (last axis) what a BLAS call can be handed as a pointer and a row stride:
    unit stride along them, and rows that neither overlap nor run backwards (a length-1 axis
    may have any stride: NumPy leaves it 0 in a broadcast view)?"""
    row = x.strides[-2] if x.ndim > 1 else 0
    return ((x.strides[-1] == x.itemsize or x.shape[-1] <= 1) and x.flags.aligned
            and row % x.itemsize == 0
            and (row >= x.shape[-1] * x.itemsize or x.shape[-2] <= 1))


def _decode_group(p: Problem) -> bool:
    """Does a paged decode step (one query per head) stack the query heads of each kv head
    into one tile? Then each key tile is gathered once per kv head, not once per query head,
    and its scores are one (tk, G) product. Only for rules that treat the heads alike."""
    return (p.pages is not None and p.nq == 1 and p.group > 1 and p.bias is None
            and p.score_mod is None and not p.dropout
            and (p.mask is None or not p.mask.head_dependent))


def _decode_worker(p, planner, step, q, keys, values, out_flat, lse_flat, scratch):
    """The worker of a stacked decode step: item (b, hk) computes query heads
    hk·G … hk·G + G − 1 of its one query together, as the G columns of every tile."""
    c, g = p.compute, p.group

    def worker(worker_id: int, item) -> None:
        b, hk = item
        heads = slice(hk * g, (hk + 1) * g)
        q_scaled = q[b, heads, 0].astype(c) * c.type(p.scale)  # (G, Dk)
        k_rows = keys(b, hk)
        v_rows = None if values is None else values(b, hk)
        m = np.full(g, -np.inf, dtype=c)
        row_sum = np.zeros(g, dtype=c)
        acc_t = None if values is None else np.zeros((p.dv, g), dtype=c)  # accᵀ (Dv, G)
        for _, _, k0, k1, kind, block in planner.tiles(b, hk * g, 0, 1):
            kj = p.k_pos[k0:k1]
            s = _tile_scores(p, q_scaled, k_rows(k0, k1), b, hk * g, p.q_pos, kj,
                             out=scratch.tile(worker_id, k1 - k0, g, c))  # (tk, G)
            allowed = None if kind != PARTIAL else np.ascontiguousarray(
                np.broadcast_to(block(True), (k1 - k0, g)))[None]  # the one query's, G times
            step.online_softmax(s[None], allowed, m[None], row_sum[None],
                                None if acc_t is None else acc_t[None], products=True)
            if acc_t is not None:
                v_tile = v_rows(k0, k1)
                _dot_t(v_tile, s, _bad_rows(p, v_tile), acc_t, "numpy")  # (Dv, tk) @ (tk, G)
        acc = None if acc_t is None else acc_t.T  # (G, Dv)
        lse_flat[b, heads, 0] = _finish_into(p, m, row_sum, acc,
                                             None if acc is None else out_flat[b, heads, 0])

    return worker


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
        backend, step = _step_for(p, cfg)
        its, worker = _forward_tiled_work(p, cfg, step, out, lse, scratch)
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


def _store(p: Problem, dst: np.ndarray, src: np.ndarray) -> None:
    """``dst[...] = src``, rounding the compute dtype to the output's (float32 → float16). A
    finite value past float16's range is refused by name (:func:`check_narrowing`), never a
    warning from inside a worker thread nor a silent inf."""
    with np.errstate(over="ignore"):
        dst[...] = src
    check_narrowing(src, dst, "the output", output_fix(p))


def _finish_into(p: Problem, m: np.ndarray, row_sum: np.ndarray, acc: np.ndarray | None,
                 dst: np.ndarray | None) -> np.ndarray:
    """:func:`_finish` with acc / ℓ stored into ``dst`` (the output's rows); lse. Where dst
    has acc's dtype the quotients are written straight into it: one pass over the block
    instead of a division and a copy; else :func:`_store` rounds them to dst's dtype."""
    if acc is None or dst.dtype == acc.dtype:
        return _finish(m, row_sum, acc, out=dst)
    lse = _finish(m, row_sum, acc)
    _store(p, dst, acc)
    return lse


def _finish(m: np.ndarray, row_sum: np.ndarray, acc: np.ndarray | None,
            out: np.ndarray | None = None) -> np.ndarray:
    """acc / ℓ into ``out`` (default: acc, in place) and lse = m + log ℓ; rows with ℓ = 0 had
    no key: 0 and −inf. ``m`` and ``row_sum`` have one entry per query, ``acc`` and ``out``
    one row per query."""
    out = acc if out is None else out
    has_keys = row_sum != 0  # NaN (the caller's NaN score, check_finite=False) stays NaN
    if has_keys.all():  # every row saw a key (no mask, say): no where= passes, no fix-up
        lse = np.log(row_sum)
        lse += m
        if acc is not None:
            np.divide(acc, row_sum[..., None], out=out)
        return lse
    lse = np.full_like(m, -np.inf)
    np.add(m, np.log(row_sum, where=has_keys, out=np.zeros_like(row_sum)), out=lse,
           where=has_keys)
    if acc is not None:
        np.divide(acc, row_sum[..., None], out=out, where=has_keys[..., None])
        out[~has_keys] = 0
    return lse


def _small_chunks(p: Problem) -> list[slice]:
    """Slices of the flat batch so one chunk's scores stay about a tile's worth per core."""
    per_elem = p.hq * p.nq * p.nk
    size = max(1, (1 << 22) // max(per_elem, 1))
    return [slice(i, min(i + size, p.batch_size)) for i in range(0, p.batch_size, size)]


def _small_scores(p: Problem, rows: slice, *, keep_tanh=False):
    """All heads at once, transposed: scores ``(b, Hkv, G, Nk, Nq)`` and the allowed pairs in
    the same layout (or None), for the batch elements ``rows``."""
    c = p.compute
    g = (p.hkv, p.group)
    q = p.flat(p.q)[rows].reshape(-1, *g, p.nq, p.dk)  # (b, Hkv, G, Nq, Dk)
    k = p.flat(p.k)[rows][:, :, None]  # (b, Hkv, 1, Nk, Dk)
    s = k.astype(c, copy=False) @ np.swapaxes(q.astype(c, copy=False) * c.type(p.scale), -1, -2)
    # Broadcasting matmuls may return a strided result; the step works on a view of it.
    s = np.ascontiguousarray(s)  # (b, Hkv, G, Nk, Nq)
    t = _softcap(p, s)
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
# this many queries per plane (see _side_by_side; steps.per_query says which steps may). From
# 32 queries on, a plane's row is whole 16-wide vectors and the wide row, read twice from
# beyond the cache, loses: python benchmarks/step_parts.py times 21 queries at 0.52–0.54× the
# time of plane by plane on MiniLM's planes and 0.82–0.90× on 4096 keys, 32 queries at 1.26–1.30×.
SIDE_BY_SIDE_BELOW = 32


def _side_by_side(x: np.ndarray | None, nq: int) -> np.ndarray | None:
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


def _back_to_planes(wide: np.ndarray, x: np.ndarray, nq: int) -> None:
    """Undo :func:`_side_by_side` into ``x`` (C-contiguous ``(b, Hkv, G, Nk, Nq)``)."""
    nk = x.shape[-2]
    x.reshape(-1, nk, nq)[...] = wide.reshape(nk, -1, nq).transpose(1, 0, 2)


def _planes(x: np.ndarray | None, last: int) -> np.ndarray | None:
    """``(b, Hkv, G, A, B)`` → ``(b·Hq, A, B)``: one plane per (batch element, head), a view."""
    return None if x is None else x.reshape(-1, x.shape[-2], last)


def _forward_small(p, cfg, step, out, lse) -> None:
    """Problems whose score matrix per head fits in one tile: one tile step over every
    (batch element, head) plane at once — each query's softmax is its own, so heads and batch
    elements are just more planes."""
    c = p.compute
    lse_flat = lse.reshape(p.batch_size, p.hq, p.nq)
    out_g = None if out is None else out.reshape(p.batch_size, p.hkv, p.group, p.nq, p.dv)
    v = None if out is None else p.flat(p.v)[:, :, None]  # (B, Hkv, 1, Nk, Dv)
    side_by_side = p.nq < SIDE_BY_SIDE_BELOW and steps.per_query(step)

    def worker(_: int, rows: slice) -> None:
        s, allowed = _small_scores(p, rows)  # (b, Hkv, G, Nk, Nq)
        n = s.shape[0]
        m = np.full((n * p.hq, p.nq), -np.inf, dtype=c)
        row_sum = np.zeros((n * p.hq, p.nq), dtype=c)
        if side_by_side:  # short rows: every plane's queries in one row
            wide = _side_by_side(s, p.nq)  # (1, Nk, b·Hq·Nq)
            step.online_softmax(wide, _side_by_side(allowed, p.nq), m.reshape(1, -1),
                                row_sum.reshape(1, -1), None)
            _back_to_planes(wide, s, p.nq)
        else:
            step.online_softmax(_planes(s, p.nq), _planes(allowed, p.nq), m, row_sum, None)
        lse_flat[rows] = _finish(m, row_sum, None).reshape(n, p.hq, p.nq)
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
            _finish(m, row_sum, dst.reshape(n * p.hq, p.nq, p.dv))
            return
        acc = _planes_dot(p, weights, v_rows)  # (b, Hkv, G, Nq, Dv)
        acc = np.ascontiguousarray(acc).reshape(n * p.hq, p.nq, p.dv)
        _finish(m, row_sum, acc)
        _store(p, dst, acc.reshape(n, p.hkv, p.group, p.nq, p.dv))

    _run(p, cfg, worker, _small_chunks(p))


# --------------------------------------------------------------------------------------------
# Weights on demand
# --------------------------------------------------------------------------------------------
@_quietly
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
    _, step = _step_for(p, cfg)
    c = p.compute
    flat, lse_flat = p.flat(result), p.flat(lse[..., None])[..., 0]  # (B, Hq, Nq, Nk), (B, Hq, Nq)

    if p.nq * p.nk <= cfg.small:  # all heads at once, as the small forward
        def small(_: int, rows: slice) -> None:
            s, allowed = _small_scores(p, rows)  # (b, Hkv, G, Nk, Nq)
            step.probabilities(_planes(s, p.nq), _planes(allowed, p.nq),
                               lse_flat[rows].reshape(-1, p.nq))
            flat[rows] = np.swapaxes(s, -1, -2).reshape(-1, p.hq, p.nq, p.nk)

        _run(p, cfg, small, _small_chunks(p))
    else:
        planner = _plan(p, cfg, cfg.tile_k, cfg.key_tile(False))
        q, k = p.flat(p.q), _in_compute(p, p.k)
        use = cfg.resolved_gemm()
        items = [(b, h, q0, q1) for q0, q1 in blocks(p.nq, cfg.tile_q)
                 for b in range(p.batch_size) for h in range(p.hq)]

        def worker(_: int, item) -> None:
            b, h, q0, q1 = item
            q_scaled = q[b, h, q0:q1].astype(c) * c.type(p.scale)
            k_bh = k[b, h // p.group].astype(c, copy=False)
            for r0, r1, k0, k1, kind, block in planner.tiles(b, h, q0, q1):
                qi, kj = p.q_pos[q0 + r0: q0 + r1], p.k_pos[k0:k1]
                s = _tile_scores(p, q_scaled[r0:r1], k_bh[k0:k1], b, h, qi, kj,
                                 use=use)  # (tk, tr)
                step.probabilities(s[None], _allowed_t(kind, block),
                                   lse_flat[None, b, h, q0 + r0: q0 + r1], products=True)
                flat[b, h, q0 + r0: q0 + r1, k0:k1] = s.T

        _run(p, cfg, worker, items, tiled=True)
    # exp(s − lse) sums to 1 up to the exponential's rounding (≈ |s − lse|·eps): divide by the
    # actual sum so that every row sums to 1 to the dtype's precision.
    total = flat.sum(axis=-1, dtype=c, keepdims=True)
    np.divide(flat, total, out=flat, where=total != 0)
    # Weights below the result dtype's normal range (float16's, say) flush to 0 as well.
    np.copyto(result, 0, where=result < np.finfo(p.dtype).tiny)
    return result


# --------------------------------------------------------------------------------------------
# Backward
# --------------------------------------------------------------------------------------------
@_quietly
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
    backend, step = _step_for(p, cfg)
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
            grads = _backward_small(p, cfg, step, delta_used, lse_used, dout_used, dbias, sums,
                                    direct)
        else:
            grads = _backward_tiled(p, cfg, step, delta_used, lse_used, dout_used,
                                    deterministic, dbias, sums, direct)
        return grads, sums

    grads, (psum, dsum) = run(delta, dout_f, lse_f)
    lost = _rows_lost(p, lse_f, psum) if whole else None
    if lost is not None:
        # Scores so large that the lse's own rounding (or the forward's tiles rounding them
        # otherwise) is past the exponential's range: exp(s − lse) under- or overflowed. Shift
        # those rows by their largest score as this backward computes it — bitwise its own, so
        # the weights are ≤ 1 with a 1 among them — and normalise below (P / ΣP).
        own = _own_row_max(p, cfg, path)
        shifted = np.where(lost, own, lse_f)
        grads, (psum, dsum) = run(delta, dout_f, shifted)
        with np.errstate(divide="ignore"):  # ΣP = 0: nothing allowed after all, own lse −inf
            _check_own_lse(p, lse_f, shifted + np.log(np.where(lost, psum, 1)), lost)
        lse_f = shifted
        if cfg.stats is not None:
            cfg.stats.add_path("backward shifted")
    off = _rows_off(p, lse_f, psum) if whole else None  # (B, Hq, Nq) bool, or None
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


def _rows_lost(p: Problem, lse: np.ndarray, psum: np.ndarray) -> np.ndarray | None:
    """Rows (``(B, Hq, Nq)`` bool, or None) whose recomputed weights left the exponential's
    useful range — ΣP off 1 by more than half of it, 0 or ∞ included — where the rounding of
    these scores and this lse could have put them there: the lse cannot place such a row's
    weights (at |scores| ~ 1e10 in float32 one rounding of the lse is ~1e3), so the backward
    re-centres it on its own scores. Where rounding could not, :func:`_rows_off` refuses."""
    half = -0.5 * math.log(float(np.finfo(p.compute).tiny))  # ~44 in float32, ~354 in float64
    lost = (np.abs(_log_sums(lse, psum)) > half) & (_lse_rounding(p, lse) > half)
    return lost if lost.any() else None


def _check_own_lse(p: Problem, given: np.ndarray, own: np.ndarray, rows: np.ndarray) -> None:
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


def _own_row_max(p: Problem, cfg: KernelConfig, path: str) -> np.ndarray:
    """Each row's largest allowed score ``(B, Hq, Nq)`` as this backward computes it — the
    same tiles through the same calls, so the very numbers its passes recompute (−inf where
    nothing is allowed). For rows whose lse cannot place their weights (:func:`_rows_lost`)."""
    c = p.compute
    top = np.full((p.batch_size, p.hq, p.nq), -np.inf, dtype=c)
    if path == "small":
        for rows in _small_chunks(p):
            s, allowed = _small_scores(p, rows)  # (b, Hkv, G, Nk, Nq)
            m = s.max(axis=-2, initial=-np.inf, where=True if allowed is None else allowed)
            top[rows] = m.reshape(-1, p.hq, p.nq)
        return top
    scale = c.type(p.scale)
    q, k = p.flat(p.q), _in_compute(p, p.k)
    use = cfg.resolved_gemm()
    planner = _plan(p, cfg, cfg.tile_k, cfg.tile_k, align=cfg.tile_k)
    for b, hk in np.ndindex(p.batch_size, p.hkv):
        k_bh = k[b, hk].astype(c, copy=False)
        for (k0, k1), h, (q0, q1) in itertools.product(
                blocks(p.nk, cfg.tile_k), range(hk * p.group, (hk + 1) * p.group),
                blocks(p.nq, cfg.tile_q)):
            q_scaled = q[b, h, q0:q1].astype(c) * scale  # (tq, Dk), as _backward_tiled's
            for r0, r1, t0, t1, kind, block in planner.tiles(b, h, q0, q1, (k0, k1)):
                s = _tile_scores(p, q_scaled[r0:r1], k_bh[t0:t1], b, h,
                                 p.q_pos[q0 + r0: q0 + r1], p.k_pos[t0:t1],
                                 use=use)  # Sᵀ (tk, tr)
                allowed = _allowed_t(kind, block)
                m = s.max(axis=0, initial=-np.inf, where=True if allowed is None else allowed[0])
                np.maximum(top[b, h, q0 + r0: q0 + r1], m, out=top[b, h, q0 + r0: q0 + r1])
    return top


def _rows_off(p: Problem, lse: np.ndarray, psum: np.ndarray) -> np.ndarray | None:
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
    from .problem import finite_max_abs

    s = p.dk * abs(p.scale) * finite_max_abs(p.q) * finite_max_abs(p.k)
    if p.softcap is not None:
        s = min(s, p.softcap)
    return s + (p.bias.magnitude() if p.bias is not None else 0.0)


def _softcap_grad(ds: np.ndarray, t: np.ndarray | None) -> None:
    """dS with respect to the capped scores → with respect to the raw ones: × (1 − tanh²)."""
    if t is not None:
        t *= t
        np.subtract(1, t, out=t)
        ds *= t


def _zeros_or(into, p: Problem) -> tuple[np.ndarray, np.ndarray]:
    """dK and dV to accumulate into: the caller's (``into``), or new zeros."""
    if into is not None:
        return into
    return (np.zeros((p.batch_size, p.hkv, p.nk, p.dk), dtype=p.compute),
            np.zeros((p.batch_size, p.hkv, p.nk, p.dv), dtype=p.compute))


def _backward_tiled(p, cfg, step, delta, lse_f, dout_f, deterministic=False, dbias=None,
                    sums=None, into=None):
    c = p.compute
    scale = c.type(p.scale)
    dk, dv = _zeros_or(into, p)  # added into tile by tile: one work item owns a key tile
    dq_parts: dict[int, np.ndarray] = {}
    sum_parts: dict[int, np.ndarray] = {}  # per worker: Σ_j P, Σ_j dS per row (see backward)
    q, k, v = p.flat(p.q), _in_compute(p, p.k), _in_compute(p, p.v)
    q_blocks = blocks(p.nq, cfg.tile_q)
    use = cfg.resolved_gemm()
    # Merged tiles stay within one work item's keys.
    planner = _plan(p, cfg, cfg.tile_k, cfg.tile_k, align=cfg.tile_k)
    items = [(b, hk, k0, k1) for b in range(p.batch_size) for hk in range(p.hkv)
             for k0, k1 in blocks(p.nk, cfg.tile_k)]
    # the loop below compiled whole (step/fused.py), where the problem's tiles are only GEMMs
    # and steps and no dS is kept (dbias): one call per query head of a work item
    fused = (_fused_loop(p, step, use, True, "backward") if cfg.fused and dbias is None
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
            q_scaled = q[b, h].astype(c) * scale  # (Nq, Dk), as the loop below scales a block
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
        bad_k = _bad_rows(p, k_bh)
        for h in range(hk * p.group, (hk + 1) * p.group):
            for q0, q1 in q_blocks:
                q_scaled = None
                for r0, r1, t0, t1, kind, block in planner.tiles(b, h, q0, q1, (k0, k1)):
                    if q_scaled is None:
                        q_scaled = q[b, h, q0:q1].astype(c) * scale  # (tq, Dk)
                        do_tile = dout_f[b, h, q0:q1].astype(c)  # (tq, Dv)
                    rows = slice(r0, r1)
                    qi, kj = p.q_pos[q0 + r0: q0 + r1], p.k_pos[t0:t1]
                    s, t = _tile_scores(p, q_scaled[rows], k_bh[t0:t1], b, h, qi, kj,
                                        keep_tanh=True, use=use,
                                        out=scratch.tile(worker_id, t1 - t0, r1 - r0, c))
                    step.probabilities(s[None], _allowed_t(kind, block),
                                       lse_f[None, b, h, q0 + r0: q0 + r1],
                                       products=True)  # Pᵀ, recomputed
                    row_sums[0, b, h, q0 + r0: q0 + r1] += s.sum(axis=0)
                    kept = _kept(p, b, h, qi, kj, c)  # dropout: Z / (1 − rate), or None
                    gemm.matmul(s if kept is None else s * kept, do_tile[rows], dv_acc[t0:t1],
                                accumulate=True, use=use)  # dV += Pᵀ dO
                    dp = gemm.matmul(v_bh[t0:t1], do_tile[rows].T, use=use)  # dPᵀ (tk, tr)
                    if kept is not None:
                        dp *= kept
                    step.softmax_grad(dp[None], s[None], delta[None, b, h, q0 + r0: q0 + r1])
                    row_sums[1, b, h, q0 + r0: q0 + r1] += dp.sum(axis=0)
                    if dbias is not None:  # dS itself: a work item owns its key columns
                        dbias[b, h, q0 + r0: q0 + r1, t0:t1] += dp.T
                    _softcap_grad(dp, t)
                    # dSᵀ (Q · scale): the forward's own q·scale, which is in range — Q alone
                    # times dS may overflow where the product with scale would not.
                    gemm.matmul(dp, q_scaled[rows], dk_acc[t0:t1], accumulate=True,
                                use=use)  # (tk, Dk)
                    if not deterministic:  # dQ_i (tr, Dk) += (dS K_j) · scale, one GEMM
                        _dot(dp.T, k_bh[t0:t1], None if bad_k is None else bad_k[t0:t1],
                             dq[b, h, q0 + r0: q0 + r1], use=use, alpha=scale)

    with scratch:
        _run(p, cfg, worker, items, passes=2.5, tiled=True)
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
            bad_k = _bad_rows(p, k_bh)
            q_scaled = q[b, h, q0:q1].astype(c) * scale
            do_tile = dout_f[b, h, q0:q1].astype(c)
            for r0, r1, t0, t1, kind, block in planner.tiles(b, h, q0, q1):  # key tiles in order
                qi, kj = p.q_pos[q0 + r0: q0 + r1], p.k_pos[t0:t1]
                s, t = _tile_scores(p, q_scaled[r0:r1], k_bh[t0:t1], b, h, qi, kj,
                                    keep_tanh=True, use=use)
                step.probabilities(s[None], _allowed_t(kind, block),
                                   lse_f[None, b, h, q0 + r0: q0 + r1], products=True)
                dp = gemm.matmul(v_bh[t0:t1], do_tile[r0:r1].T, use=use)
                kept = _kept(p, b, h, qi, kj, c)
                if kept is not None:
                    dp *= kept
                step.softmax_grad(dp[None], s[None], delta[None, b, h, q0 + r0: q0 + r1])
                _softcap_grad(dp, t)
                _dot(dp.T, k_bh[t0:t1], None if bad_k is None else bad_k[t0:t1],
                     dq[b, h, q0 + r0: q0 + r1], use=use, alpha=scale)

    _run(p, cfg, dq_worker, dq_items, passes=1.5, tiled=True)
    return dq, dk, dv


def _backward_small(p, cfg, step, delta, lse_f, dout_f, dbias=None, sums=None, into=None):
    """The backward with all heads at once, for problems whose score matrix per head fits in
    one tile (as :func:`_forward_small`): the same step on every row of every head."""
    c = p.compute
    scale = c.type(p.scale)
    g = (p.batch_size, p.hkv, p.group)
    dq = np.zeros((*g, p.nq, p.dk), dtype=c)
    dk, dv = _zeros_or(into, p)  # added into: a chunk of batch rows owns its rows of dK, dV
    q_g = p.flat(p.q).reshape(*g, p.nq, p.dk)
    k_g, v_g = p.flat(p.k)[:, :, None], p.flat(p.v)[:, :, None]  # (B, Hkv, 1, Nk, D)
    do_g = dout_f.reshape(*g, p.nq, p.dv)
    delta_flat = delta.reshape(p.batch_size, p.hq, p.nq)
    lse_flat = lse_f.reshape(p.batch_size, p.hq, p.nq)

    def worker(_: int, rows: slice) -> None:
        with np.errstate(over="ignore", invalid="ignore"):  # as in _backward_tiled
            _backward_rows(rows)

    def _backward_rows(rows: slice) -> None:
        s, allowed, t = _small_scores(p, rows, keep_tanh=True)  # Sᵀ (b, Hkv, G, Nk, Nq)
        step.probabilities(_planes(s, p.nq), _planes(allowed, p.nq),
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
        step.softmax_grad(_planes(dp, p.nq), _planes(s, p.nq), delta_flat[rows].reshape(-1, p.nq))
        if sums is not None:
            sums[1, rows] = dp.sum(axis=-2).reshape(n, p.hq, p.nq)
        if dbias is not None:
            dbias[rows] = np.swapaxes(dp, -1, -2).reshape(-1, p.hq, p.nq, p.nk)
        _softcap_grad(dp, t)
        ds = np.swapaxes(dp, -1, -2)  # dS (b, Hkv, G, Nq, Nk)
        k_rows = k_g[rows].astype(c, copy=False)  # (b, Hkv, 1, Nk, Dk)
        dq[rows] = _planes_dot(p, ds, k_rows) * scale  # dS K
        # dSᵀ (Q · scale), as the tiled path: the forward's in-range q·scale
        dk[rows] += (dp @ (q_g[rows].astype(c) * scale)).sum(axis=2)

    _run(p, cfg, worker, _small_chunks(p), passes=2.5)
    return dq.reshape(p.batch_size, p.hq, p.nq, p.dk), dk, dv
