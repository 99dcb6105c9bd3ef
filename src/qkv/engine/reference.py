"""The formula, written literally in float64: the oracle every fast path is tested against.

    scores  = Q Kᵀ                               (..., Hq, Nq, Nk)
    scaled  = scores · scale + bias              scale = 1/√d_k by default
              (with a softcap c: c · tanh(scores · scale / c) + bias)
    weights = softmax(scaled) over the keys      masked pairs get weight 0
    output  = weights V                          (..., Hq, Nq, Dv)

It materialises the full Nq × Nk matrix, so it is for small inputs: tests, ``qkv.explain`` and
anyone who wants to read the mechanism. The softmax subtracts each row's maximum before
exponentiating — the same function, without overflow — and a row with no allowed key gets
weights 0, output 0 and lse = −inf.

The module is callable: ``qkv.reference(q, k, v)`` is ``qkv.reference.attention(q, k, v)``.
"""

from __future__ import annotations

import sys
import types

import numpy as np

from .api import check_size, query_rows
from .problem import Problem, check_like, prepare, require_v
from .shapes import sum_to_shape, unbroadcast

__all__ = ["attention", "attention_backward", "attention_weights", "intermediates"]


def _expand_kv(x: np.ndarray, group: int) -> np.ndarray:
    """Repeat each kv head for the ``group`` query heads that read it (GQA)."""
    return np.repeat(x, group, axis=-3) if group > 1 else x


def _sum_groups(x: np.ndarray, group: int) -> np.ndarray:
    """Inverse of :func:`_expand_kv` for gradients: sum over the query heads of each kv head."""
    if group == 1:
        return x
    *lead, hq, n, d = x.shape
    return x.reshape(*lead, hq // group, group, n, d).sum(axis=-3)


def intermediates(p: Problem, max_bytes: int | None = None) -> dict[str, np.ndarray]:
    """Every step of the formula for a validated problem, in float64, shaped (*batch, Hq, ...).

    It holds about five Nq × Nk float64 matrices per head: past ``max_bytes`` (default 1 GiB) it
    refuses with an error rather than take the machine's memory.
    """
    check_size(5 * 8 * p.batch_size * p.hq * p.nq * p.nk, max_bytes,
               f"the float64 reference ({p.nq} × {p.nk} scores per head, five matrices)",
               "use qkv.attention (tiled) for large inputs")
    with p.quiet():  # check_finite=False: the caller's NaN/inf, kept out of masked pairs
        return _intermediates(p)


def _intermediates(p: Problem) -> dict[str, np.ndarray]:
    q = p.q.astype(np.float64)
    k = _expand_kv(p.k.astype(np.float64), p.group)
    scores = q @ np.swapaxes(k, -1, -2)  # (..., Hq, Nq, Nk)
    scaled = scores * p.scale
    if p.softcap is not None:  # Gemma 2's soft-capping: scores squashed into (−c, c)
        scaled = p.softcap * np.tanh(scaled / p.softcap)
    if p.bias is not None:
        scaled = scaled + p.bias.dense(p.q_pos, p.k_pos)
    if p.score_mod is not None:
        from .kernel import apply_score_mod

        planes = np.array(np.broadcast_to(scaled, (*p.batch_shape, p.hq, p.nq, p.nk)))
        flat = planes.reshape(p.batch_size, p.hq, p.nq, p.nk)
        for b in range(flat.shape[0]):
            for h in range(p.hq):
                flat[b, h] = apply_score_mod(p, flat[b, h], b, h, p.q_pos[:, None],
                                             p.k_pos[None, :], np.float64)
        scaled = planes
    if p.mask is not None:
        allowed = np.broadcast_to(p.mask.dense(p.q_pos, p.k_pos), scaled.shape)
    else:
        allowed = np.ones(scaled.shape, dtype=bool)

    # Masked pairs are excluded before any arithmetic, and a −inf score (a −inf bias) is a pair
    # with weight 0: a row with nothing else is a masked row.
    masked = np.where(allowed, scaled, -np.inf)
    row_max = masked.max(axis=-1, keepdims=True, initial=-np.inf)
    row_max = np.where(np.isfinite(row_max), row_max, 0.0)  # all-masked rows: avoid −inf − −inf
    exp = np.exp(masked - row_max)  # exp(−inf) = 0 for masked pairs
    total = exp.sum(axis=-1, keepdims=True)
    has_keys = total > 0
    weights = np.divide(exp, total, out=np.zeros_like(exp), where=has_keys)
    lse = np.log(total, out=np.full_like(total, -np.inf), where=has_keys) + row_max
    result = {
        "scores": scores,
        "scaled": scaled,
        "allowed": np.array(allowed),
        "weights": weights,
        "lse": lse[..., 0],
        # softmax's middle step, as the seed works it by hand (after the shift by the row max)
        "row_max": row_max[..., 0],  # (..., Hq, Nq); 0 for a row with no allowed key
        "exp": exp,  # e^(scaled − row_max), 0 where masked (..., Hq, Nq, Nk)
        "exp_sum": total[..., 0],  # Σ_j of exp; weights = exp / exp_sum (..., Hq, Nq)
    }
    if p.dropout:
        result["kept"] = _dropout_scales(p)  # Z / (1 − rate), (..., Hq, Nq, Nk)
    if p.v is not None:
        v = _expand_kv(p.v.astype(np.float64), p.group)
        kept = result.get("kept", 1.0)
        result["output"] = (weights * kept) @ v  # (..., Hq, Nq, Dv)
    return result


def attention(q, k, v, mask=None, bias=None, scale=None, *, return_lse=False, check_finite=True,
              max_bytes=None, softcap=None, dropout=0.0, dropout_seed=None, score_mod=None):
    """softmax(q kᵀ · scale + bias) v in float64, with the arguments of :func:`qkv.attention`."""
    require_v(v, "reference.attention")
    p = prepare(q, k, v, mask, bias, scale, check_finite=check_finite, softcap=softcap,
                dropout=dropout, dropout_seed=dropout_seed, score_mod=score_mod)
    steps = intermediates(p, max_bytes)
    out = p.present(steps["output"])
    return (out, p.present(steps["lse"], -2)) if return_lse else out


def attention_weights(q, k, mask=None, bias=None, scale=None, *, rows=None, check_finite=True,
                      max_bytes=None, softcap=None):
    """The weight matrix (..., Hq, Nq, Nk) in float64 (rows ``rows`` only, if given)."""
    p = prepare(q, k, None, mask, bias, scale, check_finite=check_finite, softcap=softcap)
    at = None
    if rows is not None:
        p, at = p.rows(query_rows(rows, p.nq))
    w = intermediates(p, max_bytes)["weights"]
    return p.present(w if at is None else w[..., at, :])


def attention_backward(q, k, v, dout, mask=None, bias=None, scale=None, *, dlse=None,
                       check_finite=True, max_bytes=None, softcap=None, return_dbias=False,
                       dropout=0.0, dropout_seed=None):
    """Gradients (dq, dk, dv) of ``sum(attention(q, k, v) * dout)`` (+ ``sum(lse * dlse)``), in
    float64.

    With P the weights and S the scaled scores (the FlashAttention paper's notation):
        dV = Pᵀ dO,   dP = dO Vᵀ,   dS = P ∘ (dP − rowsum(dP ∘ P)),
        dQ = dS K · scale,   dK = dSᵀ Q · scale,
    with dK and dV summed over the query heads that share a kv head (GQA).
    """
    require_v(v, "reference.attention_backward")
    p = prepare(q, k, v, mask, bias, scale, check_finite=check_finite, softcap=softcap,
                dropout=dropout, dropout_seed=dropout_seed)
    out_shape = p.out_shape(p.v.shape[-1])
    dout = check_like(dout, "dout", p.present(np.empty(out_shape, dtype=bool)).shape, "the output")
    dout = np.asarray(dout, dtype=np.float64).reshape(out_shape)
    steps = intermediates(p, max_bytes)
    weights = steps["weights"]  # (..., Hq, Nq, Nk)
    q64 = p.q.astype(np.float64)
    k64 = _expand_kv(p.k.astype(np.float64), p.group)
    v64 = _expand_kv(p.v.astype(np.float64), p.group)
    kept = steps.get("kept", 1.0)  # dropout's Z / (1 − rate)
    dv = np.swapaxes(weights * kept, -1, -2) @ dout  # (..., Hq, Nk, Dv)
    dweights = (dout @ np.swapaxes(v64, -1, -2)) * kept  # (..., Hq, Nq, Nk)
    dscaled = weights * (dweights - (dweights * weights).sum(axis=-1, keepdims=True))
    if dlse is not None:  # ∂lse_i/∂scaled_ij = weights_ij
        dlse = check_like(dlse, "dlse", p.present(np.empty(out_shape[:-1], dtype=bool)).shape,
                          "lse")
        dscaled = dscaled + weights * np.asarray(dlse, np.float64).reshape(out_shape[:-1])[
            ..., None]
    dbias = dscaled  # the bias is added to the (capped) scaled scores
    if p.softcap is not None:  # d/dx c·tanh(x/c) = 1 − tanh²(x/c)
        dscaled = dscaled * (1 - np.tanh(steps["scores"] * p.scale / p.softcap) ** 2)
    dq = dscaled @ k64 * p.scale
    dk = np.swapaxes(dscaled, -1, -2) @ q64 * p.scale
    shapes = [np.shape(q), np.shape(k), np.shape(v)]
    grads = (dq, _sum_groups(dk, p.group), _sum_groups(dv, p.group))
    # Broadcast batch dims: a gradient is summed over the dims its input was broadcast along.
    result = tuple(unbroadcast(g, s, p.two_d) for g, s in zip(grads, shapes, strict=True))
    if return_dbias:
        result += (sum_to_shape(p.present(dbias, -3) if p.two_d else dbias, np.shape(bias)),)
    return result


def _dropout_scales(p: Problem) -> np.ndarray:
    """The dropout mask of the whole problem, as the kernel draws it tile by tile."""
    from . import dropout

    kept = dropout.scales(p.dropout, p.dropout_seed, p.layout,
                          np.arange(p.batch_size)[:, None], np.arange(p.hq)[None, :],
                          p.q_pos, p.k_pos)  # (B, Hq, Nk, Nq)
    return np.swapaxes(kept, -1, -2).reshape(p.out_shape(p.nk))


class _CallableModule(types.ModuleType):
    def __call__(self, q, k, v, mask=None, bias=None, scale=None, **kwargs):
        return attention(q, k, v, mask, bias, scale, **kwargs)


sys.modules[__name__].__class__ = _CallableModule
