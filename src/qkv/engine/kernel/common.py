"""What the kernel's paths share: the tile plan and step, a tile's scores (softcap, bias,
score_mod), dropout's scales, GEMMs that keep a non-finite row of k or v out of the rows that do
not weight it, the pool of workers, and the final division ``acc / ℓ``, ``lse = m + log ℓ``."""

from __future__ import annotations

import functools

import numpy as np

from .. import dropout as dropout_rule
from .. import gemm, threads
from .. import step as steps
from ..masks import PARTIAL
from ..problem import Problem, check_narrowing, output_fix
from ..tiles import KernelConfig, TilePlan

# Below this much work (multiply-adds) a call is too small for holding the BLAS to one thread to
# pay for itself (~30 µs, see threads.run); its GEMMs are too small for BLAS threads anyway.
BLAS_HOLD_MIN = 1 << 20



def plan_tiles(p: Problem, cfg: KernelConfig, tile_k: int, merge_k: int,
               align: int | None = None) -> TilePlan:
    """The plan of this problem's tiles: cells of ``tile_k`` keys, FULL runs merged up to
    ``merge_k`` keys, never across a multiple of ``align`` (see :class:`.tiles.TilePlan`)."""
    return TilePlan(p.mask, p.q_pos, p.k_pos, cfg, tile_k, merge_k, align)



def step_for(p: Problem, cfg: KernelConfig):
    """The tile step for this problem: float64 always runs the NumPy step."""
    backend = "numpy" if p.compute == np.float64 else cfg.resolved_backend()
    return backend, steps.get(backend)



def dropout_scales(p: Problem, b, h, qi, kj, dtype) -> np.ndarray | None:
    """Dropout's Z / (1 − rate) for a tile, transposed ``(..., tk, tq)``; None without dropout."""
    if not p.dropout:
        return None
    return dropout_rule.scales(p.dropout, p.dropout_seed, p.layout, b, h, qi, kj).astype(dtype)



def apply_softcap(p: Problem, s: np.ndarray) -> np.ndarray | None:
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



def tile_scores(p: Problem, q_scaled, k, b, h, qi, kj, *, keep_tanh=False, out=None,
                 use="numpy"):
    """Sᵀ = k (q · scale)ᵀ (softcapped, + bias): one tile's scores in natural units, transposed
    ``(tk, tq)`` (into ``out`` if given; the GEMM by ``use``, see :mod:`.gemm`) — with
    ``keep_tanh``, ``(Sᵀ, tanh)`` for the softcap's derivative."""
    s = gemm.matmul(k, q_scaled.T, out=out, use=use)
    t = apply_softcap(p, s)
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



def allowed_t(kind: int, block) -> np.ndarray | None:
    """A PARTIAL tile's block ``(tq, tk)`` as the step wants it: ``(1, tk, tq)``, contiguous."""
    return None if kind != PARTIAL else block(True)[None]



def bad_rows(p: Problem, x: np.ndarray) -> np.ndarray | None:
    """Rows of k or v holding NaN/inf, when the caller skipped the finiteness check; else None.

    Such rows may sit in masked slots (a KV cache's unused, uninitialised tail): their weights
    are exactly 0, but a GEMM would still compute 0 · NaN = NaN. :func:`dot` keeps them out.
    """
    if p.checked_finite:
        return None
    bad = ~np.isfinite(x).all(axis=-1)
    return bad if bad.any() else None



def dot(weights: np.ndarray, x: np.ndarray, bad: np.ndarray | None,
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



def dot_t(x: np.ndarray, weights_t: np.ndarray, bad: np.ndarray | None, into_t: np.ndarray,
           use: str) -> None:
    """``into_t += xᵀ @ weights_t``: (D, R) += (D, T) @ (T, R), i.e. :func:`dot` transposed,
    from a tile stored keys × queries — the orientation MKL multiplies fastest. Rows of x
    flagged ``bad`` reach only the queries that weight them, as in :func:`dot`."""
    if bad is None or not bad.any():
        gemm.matmul(x.T, weights_t, into_t, accumulate=True, use=use)
    else:
        into_t += dot(weights_t.T, x, bad).T



def planes_dot(p: Problem, weights: np.ndarray, x: np.ndarray) -> np.ndarray:
    """The small path's batched ``weights @ x``: ``(b, Hkv, G, Nq, Nk) @ (b, Hkv, 1, Nk, D)``.
    Non-finite rows of x (only possible with check_finite=False) go plane by plane through
    :func:`dot`, so they reach only the outputs that weight them."""
    if p.checked_finite or np.isfinite(x).all():
        return weights @ x
    xb = np.broadcast_to(x, (*weights.shape[:3], *x.shape[-2:]))
    n = int(np.prod(weights.shape[:3]))  # not -1: D may be 0
    planes = [dot(w, xi, bad_rows(p, xi)) for w, xi in
              zip(weights.reshape(n, *weights.shape[-2:]), xb.reshape(n, *x.shape[-2:]),
                  strict=True)]
    return np.stack(planes).reshape(*weights.shape[:-1], x.shape[-1])



def in_compute(p: Problem, x: np.ndarray) -> np.ndarray:
    """k or v as ``(B, H, N, D)`` in the compute dtype: float16 is converted once per call (not
    once per tile — a query tile per head would otherwise convert the whole head again)."""
    flat = p.flat(x)
    return flat if flat.dtype == p.compute else flat.astype(p.compute)



def with_quiet_problem(fn):
    """Run an entry point of this module under ``p.quiet()`` (NumPy's error state is per
    thread, so :func:`run_items` sets it in the workers too)."""
    @functools.wraps(fn)
    def wrapper(p: Problem, *args, **kwargs):
        with p.quiet():
            return fn(p, *args, **kwargs)
    return wrapper



def run_items(p: Problem, cfg: KernelConfig, worker, items, passes: float = 1.0,
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



def store_rounded(p: Problem, dst: np.ndarray, src: np.ndarray) -> None:
    """``dst[...] = src``, rounding the compute dtype to the output's (float32 → float16). A
    finite value past float16's range is refused by name (:func:`check_narrowing`), never a
    warning from inside a worker thread nor a silent inf."""
    with np.errstate(over="ignore"):
        dst[...] = src
    check_narrowing(src, dst, "the output", output_fix(p))



def finish_into(p: Problem, m: np.ndarray, row_sum: np.ndarray, acc: np.ndarray | None,
                 dst: np.ndarray | None) -> np.ndarray:
    """:func:`finish` with acc / ℓ stored into ``dst`` (the output's rows); lse. Where dst
    has acc's dtype the quotients are written straight into it: one pass over the block
    instead of a division and a copy; else :func:`store_rounded` rounds them to dst's dtype."""
    if acc is None or dst.dtype == acc.dtype:
        return finish(m, row_sum, acc, out=dst)
    lse = finish(m, row_sum, acc)
    store_rounded(p, dst, acc)
    return lse



def finish(m: np.ndarray, row_sum: np.ndarray, acc: np.ndarray | None,
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


def softcap_grad(ds: np.ndarray, t: np.ndarray | None) -> None:
    """dS with respect to the capped scores → with respect to the raw ones: × (1 − tanh²)."""
    if t is not None:
        t *= t
        np.subtract(1, t, out=t)
        ds *= t


def zeros_or(into, p: Problem) -> tuple[np.ndarray, np.ndarray]:
    """dK and dV to accumulate into: the caller's (``into``), or new zeros."""
    if into is not None:
        return into
    return (np.zeros((p.batch_size, p.hkv, p.nk, p.dk), dtype=p.compute),
            np.zeros((p.batch_size, p.hkv, p.nk, p.dv), dtype=p.compute))
