"""The public engine: ``attention``, ``attention_weights`` and ``attention_backward``.

Shapes (names used throughout qkv):

    q    (..., Hq,  Nq, Dk)      queries: "what am I looking for?"
    k    (..., Hkv, Nk, Dk)      keys:    "here is what I contain"
    v    (..., Hkv, Nk, Dv)      values:  "here is the content to pass along"
    out  (..., Hq,  Nq, Dv)      each query's weighted sum of values
    lse  (..., Hq,  Nq)          log Σ_j exp(scaled score): the softmax's normaliser

Leading batch dims broadcast; 2-D inputs ``(N, D)`` are one head and give 2-D results. When
``Hq`` is a multiple of ``Hkv`` the query heads share kv heads in groups (GQA): query head h reads
kv head ``h // (Hq // Hkv)``.
"""

from __future__ import annotations

import dataclasses
import operator

import numpy as np

from . import kernel
from ._inputs import check_like, prepare, unbroadcast

__all__ = ["attention", "attention_backward", "attention_weights"]


def attention(q, k, v, mask=None, bias=None, scale=None, *, return_lse=False, check_finite=True):
    """softmax(q kᵀ · scale + bias) v, exactly, in memory that does not grow with Nq × Nk.

    Args:
        q, k, v: queries ``(..., Hq, Nq, Dk)``, keys ``(..., Hkv, Nk, Dk)``, values
            ``(..., Hkv, Nk, Dv)``; float16, float32 or float64, all the same dtype.
        mask: which pairs may attend (True = may attend): ``qkv.causal()``, ``qkv.window(...)``,
            ``qkv.padding(...)``, ``qkv.documents(...)``, ``qkv.allow(array)``, ... or any
            composition with ``& | ~``. Raw bool arrays are refused: wrap them in ``allow`` or
            ``deny`` to say which polarity they have.
        bias: added to the scaled scores: an array broadcastable to ``(..., Hq, Nq, Nk)`` or a
            rule such as ``qkv.alibi()``.
        scale: multiplies q kᵀ; default ``1/sqrt(Dk)`` — the head dimension, not d_model.
        return_lse: also return ``lse (..., Hq, Nq)``, the log-sum-exp of each row's scaled
            scores (natural log; float32 for float16 inputs). The backward needs it.
        check_finite: raise ValueError if q, k, v or bias hold NaN or inf.

    Returns:
        ``out (..., Hq, Nq, Dv)`` in the inputs' dtype, or ``(out, lse)``. A query with no
        allowed key gets zeros and ``lse = -inf`` — never NaN.

    float32 is computed in float32, float64 in float64; float16 is converted tile by tile and
    accumulated in float32. Memory beyond the inputs and output is O(tile² + (Nq + Nk)·D) per
    worker thread: the Nq × Nk matrix is never built.
    """
    p = prepare(q, k, v, mask, bias, scale, check_finite=check_finite)
    out, lse = kernel.forward(p)
    out = p.present(out)
    return (out, p.present(lse, -2)) if return_lse else out


def _rows(rows, nq: int) -> np.ndarray:
    if isinstance(rows, slice):
        return np.arange(nq)[rows]
    try:
        idx = np.asarray([operator.index(r) for r in np.atleast_1d(rows)], dtype=np.intp)
    except TypeError:
        raise TypeError(f"rows must be ints (query indices) or a slice, got {rows!r}") from None
    if np.ndim(rows) > 1:
        raise ValueError(f"rows must be a 1-D list of query indices, got shape {np.shape(rows)}")
    bad = (idx < -nq) | (idx >= nq)
    if bad.any():
        raise ValueError(
            f"rows has index {idx[bad][0]} but there are {nq} queries: rows must lie in "
            f"[-{nq}, {nq})"
        )
    return idx % nq if nq else idx


def attention_weights(q, k, mask=None, bias=None, scale=None, *, rows=None, check_finite=True):
    """The exact softmax weights ``(..., Hq, R, Nk)`` for query rows ``rows`` (all if None).

    ``rows`` is a list of query indices or a slice. Only the requested rows are computed — a
    few rows of a 100k-token sequence cost a few rows of memory — and masked pairs, like rows
    with no allowed key, have weight 0. Each row sums to 1 (or is all 0).
    """
    p = prepare(q, k, None, mask, bias, scale, check_finite=check_finite)
    if rows is not None:
        idx = _rows(rows, p.nq)
        p = dataclasses.replace(p, q=p.q[..., idx, :], q_pos=p.q_pos[idx])
    return p.present(kernel.weights(p))


def attention_backward(q, k, v, out, lse, dout, mask=None, bias=None, scale=None, *,
                       check_finite=True):
    """Gradients ``(dq, dk, dv)`` of a scalar loss, given ``dout`` = ∂loss/∂out.

    ``out`` and ``lse`` are what ``attention(q, k, v, ..., return_lse=True)`` returned for the
    same arguments. The weights are recomputed tile by tile from ``lse`` (FlashAttention-2), so
    memory stays O(tile² + (Nq + Nk)·D) per worker. dk and dv are summed over the query heads
    that share a kv head (GQA) and over any batch dims k and v were broadcast along. Rows with
    no allowed key get zero gradient. Results have the shapes and dtype of q, k and v.
    """
    p = prepare(q, k, v, mask, bias, scale, check_finite=check_finite)
    shown_out = p.present(np.empty(p.out_shape(p.v.shape[-1]), dtype=bool)).shape
    out = check_like(out, "out", shown_out, "attention(q, k, v) output")
    dout = check_like(dout, "dout", shown_out, "attention(q, k, v) output")
    lse = check_like(lse, "lse", shown_out[:-1], "the lse of attention(..., return_lse=True)")
    if check_finite:
        for name, arr in (("out", out), ("dout", dout)):
            if not np.isfinite(arr).all():
                raise ValueError(f"{name} contains NaN or inf")
    shape_out = p.out_shape(p.v.shape[-1])
    dq, dk, dv = kernel.backward(p, out.reshape(shape_out), lse.reshape(shape_out[:-1]),
                                 dout.reshape(shape_out))
    grads = []
    for grad, given, heads in ((dq, q, p.hq), (dk, k, p.hkv), (dv, v, p.hkv)):
        full = grad.reshape(*p.batch_shape, heads, *grad.shape[-2:])
        grads.append(unbroadcast(full, np.shape(given), p.two_d).astype(p.dtype, copy=False))
    return tuple(grads)
