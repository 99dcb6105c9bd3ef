"""A pre-norm transformer block: x + attn(LN(x)), then + MLP(LN(·)) — as in GPT-2 / nanoGPT."""

from __future__ import annotations

import numpy as np

from ._base import Layer, as_rng, prefixed
from .attention import MultiHeadAttention
from .mlp import MLP
from .norm import LayerNorm


class TransformerBlock(Layer):
    """h = x + MHA(LN₁(x), mask);  y = h + MLP(LN₂(h)).   x, y ``(..., N, d_model)``.

    Params: ``ln1.*``, ``attn.*`` (see :class:`MultiHeadAttention`), ``ln2.*``, ``mlp.*``.
    ``forward(x, mask=None, cache=None)``: with a :class:`qkv.nn.LayerCache` the block runs one
    decoding step (inference only) — the residual stream is per position, so only attention
    needs the past (a :class:`qkv.nn.PagedLayerCache` also takes ``seqs``, the sequence slots
    of x's rows). ``activation``: the MLP's, "gelu" or "gelu_tanh" (see :class:`MLP`).
    """

    def __init__(self, d_model: int, n_heads: int, d_hidden: int | None = None,
                 n_kv_heads: int | None = None, rng=None, dtype=np.float32,
                 activation: str = "gelu"):
        gen = as_rng(rng)
        self.ln1 = LayerNorm(d_model, dtype=dtype)
        self.attn = MultiHeadAttention(d_model, n_heads, n_kv_heads, rng=gen, dtype=dtype)
        self.ln2 = LayerNorm(d_model, dtype=dtype)
        self.mlp = MLP(d_model, d_hidden or 4 * d_model, rng=gen, dtype=dtype,
                       activation=activation)
        self.params = {**prefixed("ln1", self.ln1.params), **prefixed("attn", self.attn.params),
                       **prefixed("ln2", self.ln2.params), **prefixed("mlp", self.mlp.params)}

    def forward(self, x, mask=None, *, cache=None, seqs=None):
        a, c_ln1 = self.ln1.forward(x)
        att, c_att = self.attn.forward(a, mask=mask, cache=cache, seqs=seqs)
        h = x + att  # (..., N, d_model)
        b, c_ln2 = self.ln2.forward(h)
        m, c_mlp = self.mlp.forward(b)
        return h + m, (None if cache is not None else (c_ln1, c_att, c_ln2, c_mlp))

    def backward(self, ctx, dy):
        if ctx is None:
            raise ValueError("TransformerBlock.backward: the forward ran with a KV cache "
                             "(inference only)")
        c_ln1, c_att, c_ln2, c_mlp = ctx
        db, g_mlp = self.mlp.backward(c_mlp, dy)
        dh_norm, g_ln2 = self.ln2.backward(c_ln2, db)
        dh = dy + dh_norm  # the residual passes dy straight through
        (da, _), g_att = self.attn.backward(c_att, dh)
        dx_norm, g_ln1 = self.ln1.backward(c_ln1, da)
        grads = {**prefixed("ln1", g_ln1), **prefixed("attn", g_att),
                 **prefixed("ln2", g_ln2), **prefixed("mlp", g_mlp)}
        return dh + dx_norm, grads
