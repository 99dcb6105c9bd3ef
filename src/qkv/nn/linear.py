"""Linear: y = x W + b, in the lesson's row convention (W has shape (d_in, d_out))."""

from __future__ import annotations

import numpy as np

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


class Linear(Layer):
    """y = x W + b.

    Params: ``weight (d_in, d_out)``, ``bias (d_out,)`` (only when ``bias=True``). Initialised
    with N(0, 1/d_in) weights (so y has roughly unit variance for unit-variance x) and zero bias.

    Shapes: x ``(..., d_in)`` → y ``(..., d_out)``.
    """

    def __init__(self, d_in: int, d_out: int, bias: bool = True, rng=None, dtype=np.float32):
        self.d_in = positive_int(d_in, "d_in", "Linear")
        self.d_out = positive_int(d_out, "d_out", "Linear")
        self.dtype = check_dtype(dtype)
        gen = as_rng(rng)
        w = gen.standard_normal((self.d_in, self.d_out)) / np.sqrt(self.d_in)
        self.params = {"weight": w.astype(self.dtype)}
        if bias:
            self.params["bias"] = np.zeros(self.d_out, dtype=self.dtype)

    def product(self, x):
        """``x W`` without the bias ``(..., d_out)``: for a caller that adds the bias in its next
        pass (MiniLM's feed-forward: into the GELU)."""
        x = as_input(x, "x", "Linear", self.d_in, self.dtype)
        return matmul_rows(x, self.params["weight"], self.row_gemm)  # (..., d_out)

    def forward(self, x):
        x = as_input(x, "x", "Linear", self.d_in, self.dtype)
        y = matmul_rows(x, self.params["weight"], self.row_gemm)  # (..., d_out)
        if "bias" in self.params:
            y += self.params["bias"]  # in place: y is the product's fresh array
        return y, x

    def backward(self, x, dy):
        # y = x W + b  ⇒  ∂x = dy Wᵀ,  ∂W = Σ xᵀ dy,  ∂b = Σ dy   (Σ over batch positions)
        grads = {"weight": outer_sum(x, dy).astype(self.dtype, copy=False)}
        if "bias" in self.params:
            grads["bias"] = sum_to_last(dy).astype(self.dtype, copy=False)
        return matmul_rows(dy, self.params["weight"].T, self.row_gemm), grads

    def __repr__(self):
        return f"Linear({self.d_in}, {self.d_out}, bias={'bias' in self.params})"
