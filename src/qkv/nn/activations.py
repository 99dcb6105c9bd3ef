"""Activations as pure functions with their derivatives (no parameters, so no Layer)."""

from __future__ import annotations

import math

import numpy as np

_SQRT_HALF = 1.0 / math.sqrt(2.0)
_INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)


def _erf(x: np.ndarray) -> np.ndarray:
    from scipy.special import erf  # the 'model'/'train' extra; imported only when used

    return erf(x)


def gelu(x):
    """GELU, the exact erf form used by BERT: x · Φ(x) = ½ x (1 + erf(x / √2)).

    Not the tanh approximation. Keeps the dtype of float inputs. Needs scipy (imported lazily).
    """
    x = np.asarray(x)
    return 0.5 * x * (1.0 + _erf(x * x.dtype.type(_SQRT_HALF)))


def gelu_backward(x, dy):
    """∂loss/∂x given dy = ∂loss/∂gelu(x):  d/dx [x Φ(x)] = Φ(x) + x φ(x)."""
    x = np.asarray(x)
    cdf = 0.5 * (1.0 + _erf(x * x.dtype.type(_SQRT_HALF)))
    pdf = x.dtype.type(_INV_SQRT_2PI) * np.exp(-0.5 * x * x)
    return dy * (cdf + x * pdf)


def relu(x):
    return np.maximum(x, 0)


def relu_backward(x, dy):
    return dy * (np.asarray(x) > 0)
