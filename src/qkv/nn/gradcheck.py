"""Central finite differences, to check every layer's backward (float64 only).

For a layer and a fixed random cotangent R, the scalar L(x, θ) = Σ layer(x; θ) ⊙ R has
∂L/∂x = layer.backward(ctx, R)[0] and ∂L/∂θ = layer.backward(ctx, R)[1]. Each entry is compared
with (L(t + h) − L(t − h)) / 2h, whose error is O(h²·|L'''|) (truncation) + O(eps·|L|/h)
(rounding); with h = 1e-6 in float64 that is ~1e-9 for the O(1)-sized losses in the tests.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np


def numerical_grad(f: Callable[[], float], arr: np.ndarray, h: float = 1e-6) -> np.ndarray:
    """∂f/∂arr by central differences, perturbing ``arr`` in place (restored afterwards)."""
    if arr.dtype != np.float64:
        raise TypeError(f"numerical_grad needs a float64 array, got {arr.dtype}: finite "
                        "differences in lower precision measure rounding, not the derivative")
    grad = np.zeros_like(arr)
    flat, gflat = arr.reshape(-1), grad.reshape(-1)
    for i in range(flat.size):
        saved = flat[i]
        flat[i] = saved + h
        up = f()
        flat[i] = saved - h
        down = f()
        flat[i] = saved
        gflat[i] = (up - down) / (2 * h)
    return grad


def max_rel_error(analytic: np.ndarray, numeric: np.ndarray) -> float:
    """max |a − n| / max(1, max |n|): absolute for small gradients, relative for large ones."""
    scale = max(1.0, float(np.abs(numeric).max()) if numeric.size else 0.0)
    return float(np.abs(np.asarray(analytic) - numeric).max()) / scale if numeric.size else 0.0
