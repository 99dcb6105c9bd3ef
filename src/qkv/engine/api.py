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

import math
import operator

import numpy as np

from . import kernel, paged
from .problem import check_like, check_lse, check_narrowing, prepare, require_v
from .shapes import sum_to_shape, unbroadcast

__all__ = ["MAX_WEIGHT_BYTES", "attention", "attention_backward", "attention_weights",
           "check_size"]

# attention_weights and the reference materialise Nq × Nk matrices; past this many bytes they
# ask for rows=... or an explicit max_bytes instead of quietly taking the machine's memory.
MAX_WEIGHT_BYTES = 1 << 30


def check_size(n_bytes: int, max_bytes: int | None, what: str, fix: str) -> None:
    limit = MAX_WEIGHT_BYTES if max_bytes is None else max_bytes
    if isinstance(limit, bool) or not isinstance(limit, int | np.integer) or limit < 0:
        raise ValueError(f"max_bytes must be a non-negative int, got {max_bytes!r}")
    if n_bytes > limit:
        raise ValueError(
            f"{what} would take {n_bytes / 2**30:.2f} GiB (more than max_bytes = "
            f"{limit / 2**30:.2f} GiB); {fix}, or raise the limit with max_bytes=..."
        )


def attention(q, k, v, mask=None, bias=None, scale=None, *, return_lse=False, check_finite=True,
              softcap=None, dropout=0.0, dropout_seed=None, score_mod=None, block_table=None,
              seq_lens=None):
    """softmax(q kᵀ · scale + bias) v, exactly, in memory that does not grow with Nq × Nk.

    Args:
        q, k, v: queries ``(..., Hq, Nq, Dk)``, keys ``(..., Hkv, Nk, Dk)``, values
            ``(..., Hkv, Nk, Dv)``; float16, float32 or float64, all the same dtype (integers
            are promoted to float64).
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
        softcap: soft-capping of the scores, ``c · tanh(scale·q·k / c)`` before the bias
            (Gemma 2; flash-attn's ``softcap``); None for none.
        dropout, dropout_seed: drop each weight with probability ``dropout`` (and scale the rest
            by 1/(1 − dropout)), reproducibly from ``dropout_seed``: the backward, given the
            same seed, uses the same mask. lse is the undropped softmax's.
        score_mod: FlexAttention's score modifier for the forward: ``fn(scores, b, h, q_idx,
            k_idx)`` gets a tile's scores ``(tq, tk)`` (after scale, softcap and bias), the flat
            batch index, the query head and the index grids ``(tq, 1)``, ``(1, tk)``, and returns
            new scores of that shape. Its backward would need ∂fn/∂scores (and ∂fn/∂its own
            parameters), which an arbitrary function does not give: ``attention_backward``
            refuses it — use ``softcap=`` or an array ``bias`` (``return_dbias=True``), which
            have gradients.
        block_table, seq_lens: a paged KV cache (vLLM's PagedAttention, flash-attn's
            ``block_table``): k and v are then pools of blocks ``(num_blocks, Hkv, block_size,
            D)``, ``block_table (B, max_blocks)`` lists each sequence's blocks in order,
            ``seq_lens (B,)`` its cached length, and q is ``(B, Hq, Nq, Dk)``. Each sequence
            attends to its own keys only, read tile by tile through the table; masks align at
            each sequence's own length. See :mod:`qkv.engine.paged` (no dropout or score_mod).

    Returns:
        ``out (..., Hq, Nq, Dv)`` in the inputs' dtype, or ``(out, lse)``. A query with no
        allowed key (or whose allowed scores are all −inf) gets zeros and ``lse = -inf`` —
        never NaN. Scores that would overflow the dtype are refused with an error, so −inf
        always means "no key". Overflow-sized values (Nk · max|v| past the dtype's range) give
        their blend, not inf: an overflowed sum is redone with v scaled by a power of two.

    float32 is computed in float32, float64 in float64; float16 is computed in float32 (k and v
    converted once per call, queries tile by tile) and the result rounded back to float16.
    Memory beyond the inputs and output is O(tile² + (Nq + Nk)·D) per worker thread: the
    Nq × Nk matrix is never built.
    """
    require_v(v, "attention")
    if block_table is not None or seq_lens is not None:
        if dropout or dropout_seed is not None or score_mod is not None:
            raise ValueError("attention with block_table (a paged KV cache, for inference) "
                             "takes no dropout, dropout_seed or score_mod")
        return paged.attention(q, k, v, block_table, seq_lens, mask=mask, bias=bias,
                               scale=scale, return_lse=return_lse, check_finite=check_finite,
                               softcap=softcap)
    p = prepare(q, k, v, mask, bias, scale, check_finite=check_finite, softcap=softcap,
                dropout=dropout, dropout_seed=dropout_seed, score_mod=score_mod)
    out, lse = kernel.forward(p)  # a float16 output that overflowed is refused there
    out = p.present(out)
    return (out, p.present(lse, -2)) if return_lse else out


def query_rows(rows, nq: int) -> np.ndarray:
    """``rows`` (ints or a slice) as an index array into ``nq`` queries, checked."""
    if isinstance(rows, slice):
        return np.arange(nq)[rows]
    try:
        items = np.asarray(rows, dtype=object)
    except ValueError:
        items = None
    if items is None or items.ndim > 1 or (items.ndim == 1 and any(
            np.ndim(r) for r in items)):
        raise ValueError(f"rows must be a 1-D list of query indices, got {rows!r}")
    items = np.atleast_1d(items)
    if any(isinstance(r, bool | np.bool_) for r in items):
        # A bool array is a selection, not indices: read as ints it would be rows 1 and 0.
        raise TypeError(f"rows must be query indices (ints) or a slice, got bools {rows!r}; "
                        "for a bool selection pass rows=np.flatnonzero(selection)")
    try:
        ints = [operator.index(r) for r in items]
    except TypeError:
        raise TypeError(f"rows must be ints (query indices) or a slice, got {rows!r}") from None
    bad = [r for r in ints if not -nq <= r < nq]
    if bad:
        raise ValueError(
            f"rows has index {bad[0]} but there are {nq} queries: rows must lie in [-{nq}, {nq})"
        )
    idx = np.asarray(ints, dtype=np.intp)
    return idx % nq if nq else idx


def attention_weights(q, k, mask=None, bias=None, scale=None, *, rows=None, check_finite=True,
                      max_bytes=None, softcap=None, score_mod=None):
    """The exact softmax weights ``(..., Hq, R, Nk)`` for query rows ``rows`` (all if None).

    ``rows`` is a list of query indices or a slice. Only the requested rows are computed — a
    few rows of a 100k-token sequence cost a few rows of memory — and masked pairs, like rows
    with no allowed key, have weight 0. Each row sums to 1 (or is all 0). A result larger than
    ``max_bytes`` (default 1 GiB) is refused with an error: ask for fewer rows.
    """
    p = prepare(q, k, None, mask, bias, scale, check_finite=check_finite, softcap=softcap,
                score_mod=score_mod)
    at = None
    if rows is not None:
        p, at = p.rows(query_rows(rows, p.nq))
    n_rows = p.nq if at is None else len(at)
    n_bytes = math.prod(p.batch_shape) * p.hq * n_rows * p.nk * p.dtype.itemsize
    check_size(n_bytes, max_bytes, f"the weights ({n_rows} rows × {p.nk} keys per head)",
               "ask for a few rows with rows=[...] or rows=slice(...)")
    w = kernel.weights(p)  # (*batch, Hq, R, Nk), rows sorted
    return p.present(w if at is None else w[..., at, :])


def attention_backward(q, k, v, out, lse, dout, mask=None, bias=None, scale=None, *,
                       dlse=None, deterministic=False, check_finite=True, softcap=None,
                       return_dbias=False, dropout=0.0, dropout_seed=None, score_mod=None):
    """Gradients ``(dq, dk, dv)`` of a scalar loss, given ``dout`` = ∂loss/∂out.

    ``out`` and ``lse`` are what ``attention(q, k, v, ..., return_lse=True)`` returned for the
    same arguments. The weights are recomputed tile by tile from ``lse`` (FlashAttention-2), so
    memory stays O(tile² + (Nq + Nk)·D) per worker. dk and dv are summed over the query heads
    that share a kv head (GQA) and over any batch dims k and v were broadcast along. Rows with
    no allowed key (lse = −inf) get zero gradient. Results have the shapes and dtype of q, k, v.

    ``dlse`` (shaped like ``lse``) is ∂loss/∂lse, for losses that use the log-sum-exp too (it
    adds ``P ∘ dlse`` to dS). ``deterministic=True`` makes the gradients bitwise identical on
    every run and thread count (dq in its own pass, key tiles in a fixed order; ~60% more time).
    ``return_dbias=True`` also returns the gradient of an array ``bias`` (a learnable bias, e.g.
    T5's relative-position table gathered by ``qkv.relative_position_buckets``), summed over the
    dims it was broadcast along: ``(dq, dk, dv, dbias)``. It needs the Nq × Nk bias's memory.
    """
    if score_mod is not None:
        raise ValueError(
            "attention_backward cannot differentiate an arbitrary score_mod (it would need "
            "∂score_mod/∂scores); use softcap= or an array bias with return_dbias=True")
    require_v(v, "attention_backward")
    p = prepare(q, k, v, mask, bias, scale, check_finite=check_finite, softcap=softcap,
                dropout=dropout, dropout_seed=dropout_seed)
    shown_out = p.present(np.empty(p.out_shape(p.dv), dtype=bool)).shape
    out = check_like(out, "out", shown_out, "attention(q, k, v) output")
    dout = check_like(dout, "dout", shown_out, "attention(q, k, v) output")
    lse = check_like(lse, "lse", shown_out[:-1], "the lse of attention(..., return_lse=True)")
    check_lse(lse)
    if check_finite:
        for name, arr in (("out", out), ("dout", dout)):
            if not np.isfinite(arr).all():
                raise ValueError(f"{name} contains NaN or inf")
    if dlse is not None:
        dlse = check_like(dlse, "dlse", shown_out[:-1], "lse")
        if not np.isfinite(dlse).all():
            raise ValueError("dlse contains NaN or inf")
    dbias = None
    if return_dbias:
        if bias is None or not isinstance(bias, np.ndarray | list | tuple):
            raise ValueError(
                "return_dbias=True needs an array bias (a rule such as qkv.alibi() has no "
                f"parameters to learn), got bias={type(bias).__name__}")
        dbias = np.zeros((p.batch_size, p.hq, p.nq, p.nk), dtype=p.compute)
    shape_out = p.out_shape(p.dv)
    dq, dk, dv = kernel.backward(p, out.reshape(shape_out), lse.reshape(shape_out[:-1]),
                                 dout.reshape(shape_out),
                                 None if dlse is None else dlse.reshape(shape_out[:-1]),
                                 deterministic=bool(deterministic), dbias=dbias, whole=True)
    if p.checked_finite and not all(np.isfinite(g).all() for g in (dq, dk, dv)):
        # Finite inputs, checked: an inf/NaN gradient is an overflow, never an answer.
        raise ValueError(
            f"the gradients overflow {p.compute} (finite inputs, but a product such as dS·K "
            "passes the dtype's range): rescale q, k, v or dout, or use float64 inputs")
    grads = []
    for name, grad, given, heads in (("dq", dq, q, p.hq), ("dk", dk, k, p.hkv),
                                     ("dv", dv, v, p.hkv)):
        full = unbroadcast(grad.reshape(*p.batch_shape, heads, *grad.shape[-2:]),
                           np.shape(given), p.two_d)
        with np.errstate(over="ignore"):  # an overflow is refused below, not warned about
            narrow = full.astype(p.dtype, copy=False)
        check_narrowing(full, narrow, f"the gradient {name}",
                        "pass float32 q, k, v (the gradients are then float32), or rescale "
                        "q, k, v or dout")
        grads.append(narrow)
    if dbias is not None:
        grads.append(sum_to_shape(dbias.reshape(p.out_shape(p.nk)), np.shape(bias)))
    return tuple(grads)
