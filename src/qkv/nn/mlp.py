"""The position-wise feed-forward block: Linear → GELU → Linear."""

from __future__ import annotations

import numpy as np

from ._base import Layer, as_rng, prefixed
from .activations import activation as activation_fns
from .linear import Linear


class MLP(Layer):
    """y = gelu(x W₁ + b₁) W₂ + b₂, applied to every position independently.

    ``activation``: "gelu" (the exact erf form, BERT's and nanoGPT's) or "gelu_tanh" (GPT-2's
    tanh approximation).

    Params: ``fc1.weight (d_model, d_hidden)``, ``fc1.bias``, ``fc2.weight (d_hidden, d_model)``,
    ``fc2.bias``. Shapes: x ``(..., d_model)`` → y ``(..., d_model)``.
    """

    def __init__(self, d_model: int, d_hidden: int, bias: bool = True, rng=None,
                 dtype=np.float32, activation: str = "gelu"):
        self.act, self.act_backward = activation_fns(activation)
        self.activation = activation
        gen = as_rng(rng)
        self.fc1 = Linear(d_model, d_hidden, bias=bias, rng=gen, dtype=dtype)
        self.fc2 = Linear(d_hidden, d_model, bias=bias, rng=gen, dtype=dtype)
        self.params = {**prefixed("fc1", self.fc1.params), **prefixed("fc2", self.fc2.params)}

    def forward(self, x):
        h, ctx1 = self.fc1.forward(x)  # (..., d_hidden)
        y, ctx2 = self.fc2.forward(self.act(h))  # (..., d_model)
        return y, (ctx1, h, ctx2)

    def backward(self, ctx, dy):
        ctx1, h, ctx2 = ctx
        da, g2 = self.fc2.backward(ctx2, dy)
        dx, g1 = self.fc1.backward(ctx1, self.act_backward(h, da))
        return dx, {**prefixed("fc1", g1), **prefixed("fc2", g2)}

    def __repr__(self):
        return f"MLP({self.fc1.d_in}, {self.fc1.d_out})"
