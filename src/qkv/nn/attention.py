"""Multi-head attention with learned W_Q, W_K, W_V, W_O — forward, backward and KV-cache decoding.

With heads h = 1..H, each of width d_head (the lesson's row convention, X of shape (N, d_model)):

    Q = X W_Q + b_q      K = C W_K + b_k      V = C W_V + b_v      (C = X, or the context)
    head_h = softmax(Q_h K_gᵀ / √d_head) V_g        g = h // (H / H_kv)   (grouped-query)
    Y = concat_h(head_h) W_O + b_o

The attention itself is :func:`qkv.attention` (tiled, never builds N × N) and its gradient is
:func:`qkv.attention_backward`; this module only adds the projections around them.
"""

from __future__ import annotations

import numpy as np

from ..engine import api as functional
from ._base import (
    Layer,
    as_input,
    as_rng,
    check_dtype,
    matmul_rows,
    outer_sum,
    positive_int,
    sum_to_last,
)


def split_heads(t: np.ndarray, heads: int) -> np.ndarray:
    """(..., N, heads·d) → (..., heads, N, d)."""
    return np.swapaxes(t.reshape(*t.shape[:-1], heads, t.shape[-1] // heads), -2, -3)


def merge_heads(t: np.ndarray) -> np.ndarray:
    """(..., heads, N, d) → (..., N, heads·d)."""
    t = np.swapaxes(t, -2, -3)  # (..., N, heads, d)
    return t.reshape(*t.shape[:-2], t.shape[-2] * t.shape[-1])


class MultiHeadAttention(Layer):
    """Multi-head (and grouped-query) attention, self- or cross-.

    Args:
        d_model: width of the inputs and outputs.
        n_heads: query heads H.
        n_kv_heads: key/value heads H_kv (default H); H must be a multiple of it. H_kv = 1 is
            multi-query attention.
        d_head: width of each head (default d_model // n_heads). The scores are scaled by
            1/√d_head — the head dimension, never d_model.
        bias: whether the four projections have biases.
        rng: None, an int seed or a numpy Generator, for the N(0, 1/d_in) initialisation.
        dtype: parameter dtype.
        scale: override the score scale (default 1/√d_head).

    Params (row convention ``Q = X W_Q``): ``w_q (d_model, H·d_head)``, ``b_q (H·d_head,)``,
    ``w_k``/``w_v (d_model, H_kv·d_head)``, ``b_k``/``b_v (H_kv·d_head,)``,
    ``w_o (H·d_head, d_model)``, ``b_o (d_model,)``.

    Calls: ``mha(x, context=None, mask=None)`` with x ``(..., N, d_model)`` and context
    ``(..., Nk, d_model)`` → ``(..., N, d_model)``. ``mask`` is a qkv mask (True = may attend),
    bound to the head-split problem: ``qkv.padding(lengths)`` takes lengths shaped like the batch
    dims ``...``; ``qkv.allow(a)`` / ``qkv.deny(a)`` take arrays broadcasting to
    ``(..., H, N, Nk)``.
    """

    def __init__(self, d_model: int, n_heads: int, n_kv_heads: int | None = None,
                 d_head: int | None = None, bias: bool = True, rng=None, dtype=np.float32,
                 *, scale: float | None = None):
        owner = "MultiHeadAttention"
        self.d_model = positive_int(d_model, "d_model", owner)
        self.n_heads = positive_int(n_heads, "n_heads", owner)
        self.n_kv_heads = (self.n_heads if n_kv_heads is None
                           else positive_int(n_kv_heads, "n_kv_heads", owner))
        if self.n_heads % self.n_kv_heads:
            raise ValueError(
                f"{owner}: n_heads={self.n_heads} must be a multiple of n_kv_heads="
                f"{self.n_kv_heads} (each kv head serves a group of query heads)"
            )
        if d_head is None:
            if self.d_model % self.n_heads:
                raise ValueError(
                    f"{owner}: d_model={self.d_model} is not divisible by n_heads={self.n_heads}; "
                    "pass d_head explicitly"
                )
            d_head = self.d_model // self.n_heads
        self.d_head = positive_int(d_head, "d_head", owner)
        self.dtype = check_dtype(dtype)
        self.scale = scale
        gen = as_rng(rng)

        def init(d_in, d_out):
            return (gen.standard_normal((d_in, d_out)) / np.sqrt(d_in)).astype(self.dtype)

        dq, dkv = self.n_heads * self.d_head, self.n_kv_heads * self.d_head
        self.params = {"w_q": init(self.d_model, dq), "w_k": init(self.d_model, dkv),
                       "w_v": init(self.d_model, dkv), "w_o": init(dq, self.d_model)}
        if bias:
            self.params.update(b_q=np.zeros(dq, self.dtype), b_k=np.zeros(dkv, self.dtype),
                               b_v=np.zeros(dkv, self.dtype),
                               b_o=np.zeros(self.d_model, self.dtype))

    # project()'s q, k, v as strided views of the projections (no copy into heads): the engine
    # reads them at the same bits, and MiniLM's encoder saves 1.5 ms a batch and layer. Off by
    # default: the views keep each projection's whole output alive, and callers may expect
    # contiguous heads.
    head_views: bool = False

    @property
    def has_bias(self) -> bool:
        return "b_q" in self.params

    # -- the pieces -------------------------------------------------------------------------
    def _inputs(self, x, context):
        x = as_input(x, "x", "MultiHeadAttention", self.d_model, self.dtype)
        if x.ndim < 2:
            raise ValueError(f"MultiHeadAttention: x has shape {x.shape}; expected "
                             f"(..., N, {self.d_model}) — positions, then features")
        if context is None:
            return x, None
        ctx = as_input(context, "context", "MultiHeadAttention", self.d_model, x.dtype)
        if ctx.ndim < 2:
            raise ValueError(f"MultiHeadAttention: context has shape {ctx.shape}; expected "
                             f"(..., Nk, {self.d_model})")
        return x.astype(ctx.dtype, copy=False), ctx

    def _proj(self, t, name):
        y = matmul_rows(t, self.params[f"w_{name}"], self.row_gemm)
        if self.has_bias:
            y += self.params[f"b_{name}"]  # in place: y is the product's fresh array
        return y

    def _heads(self, t, name, heads):
        """``t W + b`` split into heads ``(..., heads, N, d_head)``: contiguous, the bias added
        in the same pass that lays the heads out (one pass over the product, not two) — or,
        with :attr:`head_views`, the bias added in place and the heads a strided view."""
        if self.head_views:
            return split_heads(self._proj(t, name), heads)  # a view: rows heads·d apart
        y = matmul_rows(t, self.params[f"w_{name}"], self.row_gemm)  # (..., N, heads·d): fresh
        y = split_heads(y, heads)
        if not self.has_bias:
            return np.ascontiguousarray(y)
        out = np.empty(y.shape, dtype=y.dtype)  # the product's dtype, as y += b keeps it
        return np.add(y, self.params[f"b_{name}"].reshape(heads, 1, -1), out=out)

    def project(self, x, context=None):
        """q ``(..., H, N, d_head)``; k, v ``(..., H_kv, Nk, d_head)`` (context defaults to x)."""
        x, ctx = self._inputs(x, context)
        src = x if ctx is None else ctx
        return (self._heads(x, "q", self.n_heads),  # (..., H, N, d_head)
                self._heads(src, "k", self.n_kv_heads),  # (..., Hkv, Nk, d_head)
                self._heads(src, "v", self.n_kv_heads))  # (..., Hkv, Nk, d_head)

    def attention_weights(self, x, context=None, mask=None, *, rows=None):
        """The softmax weights ``(..., H, N, Nk)`` (only query ``rows`` if given)."""
        q, k, _ = self.project(x, context)
        return functional.attention_weights(q, k, mask=mask, scale=self.scale, rows=rows)

    # -- the attention itself: qkv's engine here; ring attention in qkv.distributed ----------
    def _attention(self, q, k, v, mask):
        """``(out, lse)`` of q ``(..., H, N, d)`` against k, v ``(..., H_kv, Nk, d)``."""
        return functional.attention(q, k, v, mask=mask, scale=self.scale, return_lse=True)

    def _attention_backward(self, q, k, v, out, lse, dout, mask):
        """``(dq, dk, dv)`` of :meth:`_attention`, given its out, lse and ∂loss/∂out."""
        return functional.attention_backward(q, k, v, out, lse, dout, mask=mask,
                                             scale=self.scale)

    # -- forward / backward -----------------------------------------------------------------
    def forward(self, x, context=None, mask=None, *, cache=None, seqs=None):
        """``(y, ctx)``; y ``(..., N, d_model)``.

        With ``cache`` (a :class:`qkv.nn.LayerCache`, i.e. ``kv_cache[layer]``) this is a
        decoding step: the new positions' k and v are appended to the cache and the new queries
        attend to everything cached — pass ``mask=qkv.causal()``, which aligns bottom-right, so
        query i of Nq new ones stands at position i + Nk − Nq. Cost O(Nq·Nk·d); ctx is None
        (decoding is inference only). A :class:`qkv.nn.PagedLayerCache` takes ``seqs``, the
        sequence slots x's rows belong to (x ``(len(seqs), N, d_model)``; all if None), and
        keeps a length per sequence: causal then aligns at each sequence's own length. Both
        caches reach attention the same way, through ``cache.attention_args(seqs)``.
        """
        if cache is not None:
            if context is not None:
                raise ValueError("MultiHeadAttention: cache is for self-attention decoding; "
                                 "for cross-attention pass context (its k, v do not grow)")
            q, k_new, v_new = self.project(x)
            cache.append(k_new, v_new, seqs=seqs)
            out = functional.attention(q, **cache.attention_args(seqs), mask=mask,
                                       scale=self.scale)
            return self._proj(merge_heads(out), "o"), None
        x, ctx_in = self._inputs(x, context)
        q, k, v = self.project(x, ctx_in)
        out, lse = self._attention(q, k, v, mask)
        merged = merge_heads(out)  # (..., N, H·d_head)
        y = self._proj(merged, "o")  # (..., N, d_model)
        return y, (x, ctx_in, q, k, v, out, lse, merged, mask)

    def backward(self, ctx, dy):
        """``((dx, dcontext), grads)``; dcontext is None for self-attention (its share is in dx).

        Chain rule through Y = merge(attn(Q, K, V)) W_O + b_o with Q = X W_Q + b_q, etc.:
        ∂merged = ∂Y W_Oᵀ; (∂Q, ∂K, ∂V) from the FlashAttention-2 backward; then each
        projection's ∂W = Σ inputᵀ ∂(projection) and its input gets ∂(projection) Wᵀ.
        """
        if ctx is None:
            raise ValueError("MultiHeadAttention.backward: this forward ran with a KV cache "
                             "(inference only); run forward without cache to train")
        x, ctx_in, q, k, v, out, lse, merged, mask = ctx
        p = self.params
        dy = np.asarray(dy, dtype=merged.dtype)
        grads = {"w_o": outer_sum(merged, dy)}
        dout = split_heads(matmul_rows(dy, p["w_o"].T, self.row_gemm),
                           self.n_heads)  # (..., H, N, d_head)
        dq, dk, dv = self._attention_backward(q, k, v, out, lse, np.ascontiguousarray(dout),
                                              mask)
        dq, dk, dv = merge_heads(dq), merge_heads(dk), merge_heads(dv)  # (..., N, ·)
        src = x if ctx_in is None else ctx_in
        grads["w_q"], grads["w_k"], grads["w_v"] = (
            outer_sum(x, dq), outer_sum(src, dk), outer_sum(src, dv))
        if self.has_bias:
            grads.update(b_q=sum_to_last(dq), b_k=sum_to_last(dk), b_v=sum_to_last(dv),
                         b_o=sum_to_last(dy))
        dx = matmul_rows(dq, p["w_q"].T, self.row_gemm)
        dsrc = (matmul_rows(dk, p["w_k"].T, self.row_gemm)
                + matmul_rows(dv, p["w_v"].T, self.row_gemm))
        # A context broadcast against x's batch dims receives the sum over them.
        if ctx_in is None:
            dx, dctx = dx + dsrc, None
        else:
            dctx = _unbroadcast(dsrc, ctx_in.shape)
            dx = _unbroadcast(dx, x.shape)
        grads = {name: grads[name].astype(self.dtype, copy=False) for name in p}
        return (dx, dctx), grads

    # -- torch interop ----------------------------------------------------------------------
    @classmethod
    def from_torch(cls, module, dtype=np.float32):
        """A copy of a ``torch.nn.MultiheadAttention`` (see :mod:`qkv.nn.interop`)."""
        from .interop import mha_from_torch

        return mha_from_torch(cls, module, dtype)

    def to_torch(self, *, batch_first: bool = True):
        """An equivalent ``torch.nn.MultiheadAttention`` (needs n_kv_heads == n_heads)."""
        from .interop import mha_to_torch

        return mha_to_torch(self, batch_first=batch_first)

    def __repr__(self):
        kv = "" if self.n_kv_heads == self.n_heads else f", n_kv_heads={self.n_kv_heads}"
        return (f"MultiHeadAttention(d_model={self.d_model}, n_heads={self.n_heads}{kv}, "
                f"d_head={self.d_head}, bias={self.has_bias})")


def _unbroadcast(grad: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """Sum ``grad`` over the leading dims that were broadcast to reach it, back to ``shape``."""
    extra = grad.ndim - len(shape)
    if extra:
        grad = grad.sum(axis=tuple(range(extra)))
    axes = tuple(i for i, n in enumerate(shape) if n == 1 and grad.shape[i] != 1)
    return grad.sum(axis=axes, keepdims=True) if axes else grad
