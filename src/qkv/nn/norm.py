"""LayerNorm: normalise each feature vector to mean 0, variance 1, then scale and shift."""

from __future__ import annotations

import numpy as np

from ..engine import has_numba
from ._base import Layer, as_input, check_dtype, positive_int, sum_to_last


class LayerNorm(Layer):
    """y = (x − mean) / sqrt(var + eps) · weight + bias, statistics over the last axis.

    Params: ``weight (d,)`` (ones), ``bias (d,)`` (zeros). ``var`` is the biased variance (divide
    by d), as in torch and BERT. Shapes: x ``(..., d)`` → y ``(..., d)``.
    """

    def __init__(self, d: int, eps: float = 1e-5, dtype=np.float32):
        self.d = positive_int(d, "d", "LayerNorm")
        if not (isinstance(eps, int | float) and eps > 0):
            raise ValueError(f"LayerNorm: eps must be a positive number, got {eps!r}")
        self.eps = float(eps)
        self.dtype = check_dtype(dtype)
        self.params = {"weight": np.ones(self.d, dtype=self.dtype),
                       "bias": np.zeros(self.d, dtype=self.dtype)}

    def forward(self, x):
        x = as_input(x, "x", "LayerNorm", self.d, self.dtype)
        mean = x.mean(axis=-1, keepdims=True)  # (..., 1)
        centred = x - mean
        inv_std = 1.0 / np.sqrt((centred * centred).mean(axis=-1, keepdims=True) + self.eps)
        xhat = centred * inv_std  # (..., d)
        y = xhat * self.params["weight"]
        y += self.params["bias"]  # in place: one temporary less, the same sums
        return y, (xhat, inv_std)

    def normalize(self, x, residual=None):
        """Inference only: ``y`` of :meth:`forward` for ``x + residual`` (the post-LN residual
        block's ``LN(x + sublayer(x))``), without the backward's context.

        With Numba, float32/float64 ``x`` and ``residual`` of one shape and of the layer's dtype
        take one compiled pass per row (the add, the statistics summed in float64, the affine
        map) instead of NumPy's seven; the result equals :meth:`forward`'s to a few roundings.
        """
        x = as_input(x, "x", "LayerNorm", self.d, self.dtype)
        if residual is not None:
            residual = as_input(residual, "residual", "LayerNorm", self.d, self.dtype)
        if (x.dtype == self.dtype and x.dtype in (np.float32, np.float64) and has_numba()
                and (residual is None or (residual.shape == x.shape
                                          and residual.dtype == x.dtype))):
            from ._compiled import layer_norm  # imports Numba: only once it is needed

            return layer_norm(x, self.params["weight"], self.params["bias"], self.eps, residual)
        return self(x if residual is None else x + residual)

    def backward(self, ctx, dy):
        xhat, inv_std = ctx
        grads = {"weight": sum_to_last(dy * xhat).astype(self.dtype, copy=False),
                 "bias": sum_to_last(dy).astype(self.dtype, copy=False)}
        # With g = dy·weight, the normalisation's Jacobian gives
        #   ∂x = inv_std · (g − mean(g) − x̂ · mean(g · x̂))       (means over the last axis)
        g = dy * self.params["weight"]
        dx = inv_std * (g - g.mean(axis=-1, keepdims=True)
                        - xhat * (g * xhat).mean(axis=-1, keepdims=True))
        return dx, grads

    def __repr__(self):
        return f"LayerNorm({self.d}, eps={self.eps})"
