"""Activations as pure functions with their derivatives (no parameters, so no Layer)."""

from __future__ import annotations

import math

import numpy as np

from ..engine import has_numba

_SQRT_HALF = 1.0 / math.sqrt(2.0)
_INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)


def _erf(x: np.ndarray) -> np.ndarray:
    from scipy.special import erf  # the 'model'/'train' extra; imported only when used

    return erf(x)


def gelu(x, bias=None):
    """GELU, the exact erf form used by BERT: x · Φ(x) = ½ x (1 + erf(x / √2)).

    Not the tanh approximation. Keeps the dtype of float inputs. With Numba, float32 and float64
    arrays take the compiled loop of :mod:`._compiled` (one vectorised pass, no GIL, within about
    one float32 rounding of the exact value); :func:`numpy_gelu` is the form without Numba (scipy's
    ``erf``, imported lazily).

    ``bias`` (``(d,)``, x ``(..., d)``): the GELU of ``x + bias`` — a Linear's bias taken into its
    activation, the add in the same compiled pass for float32 (the same bits as
    ``gelu(x + bias)``).
    """
    x = np.asarray(x)
    if bias is not None:
        bias = np.asarray(bias)
        if x.ndim < 1:
            raise ValueError(f"gelu: x has shape {x.shape}; with a bias x needs at least one "
                             "axis (the bias is added along the last)")
        if bias.shape != x.shape[-1:]:
            raise ValueError(f"gelu: bias has shape {bias.shape}, x {x.shape}; expected "
                             f"bias ({x.shape[-1]},), added along x's last axis")
        if (_compiled_ok(x) and x.dtype == np.float32 and bias.dtype == np.float32
                and x.size):
            return _compiled().gelu_bias(x, bias)
        x = x + bias
    if _compiled_ok(x):
        return _compiled().gelu(x)
    return numpy_gelu(x)


def numpy_gelu(x):
    """:func:`gelu` with scipy's ``erf`` (the path without Numba, and float16)."""
    x = np.asarray(x)
    return 0.5 * x * (1.0 + _erf(x * x.dtype.type(_SQRT_HALF)))


def gelu_backward(x, dy):
    """∂loss/∂x given dy = ∂loss/∂gelu(x):  d/dx [x Φ(x)] = Φ(x) + x φ(x).

    With Numba, x and dy of one shape and dtype (float32, float64) take the compiled loop.
    """
    x, dy = np.asarray(x), np.asarray(dy)
    if _compiled_ok(x) and dy.dtype == x.dtype and dy.shape == x.shape:
        return _compiled().gelu_backward(x, dy)
    return numpy_gelu_backward(x, dy)


def numpy_gelu_backward(x, dy):
    """:func:`gelu_backward` in NumPy with scipy's ``erf`` (the path without Numba)."""
    x = np.asarray(x)
    cdf = 0.5 * (1.0 + _erf(x * x.dtype.type(_SQRT_HALF)))
    pdf = x.dtype.type(_INV_SQRT_2PI) * np.exp(-0.5 * x * x)
    return dy * (cdf + x * pdf)


_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)


def _compiled_ok(x: np.ndarray) -> bool:
    """Whether ``x`` takes the compiled loops: Numba importable and a float32/float64 array."""
    return x.dtype in (np.float32, np.float64) and has_numba()


def _compiled():
    from . import _compiled  # imports Numba: only once it is needed

    return _compiled


def gelu_tanh(x):
    """GPT-2's GELU, the tanh approximation (transformers' "gelu_new", torch's
    ``GELU(approximate="tanh")``): ½ x (1 + tanh(√(2/π) (x + 0.044715 x³))).

    Needs no scipy and costs one tanh per element (~50× less than scipy's erf here). With
    Numba, float32 and float64 arrays take the compiled loop of :mod:`._compiled` (one pass, no
    GIL); :func:`numpy_gelu_tanh` is the NumPy form, the same function to rounding.
    """
    x = np.asarray(x)
    if _compiled_ok(x):
        return _compiled().gelu_tanh(x)
    return numpy_gelu_tanh(x)


def numpy_gelu_tanh(x):
    """:func:`gelu_tanh` in NumPy (the path without Numba, and float16)."""
    x = np.asarray(x)
    c = x.dtype.type(_SQRT_2_OVER_PI)
    return 0.5 * x * (1.0 + np.tanh(c * (x + x.dtype.type(0.044715) * (x * x * x))))


def gelu_tanh_backward(x, dy):
    """∂loss/∂x given dy = ∂loss/∂gelu_tanh(x): with u = √(2/π)(x + 0.044715 x³), t = tanh u,
    d/dx = ½ (1 + t) + ½ x (1 − t²) √(2/π) (1 + 3·0.044715 x²).

    Written in place on two buffers: the same expression with a fresh temporary per operation
    ran ~8× slower on (12, 64, 512) float32 (each temporary a fresh, page-faulting mapping).
    With Numba, x and dy of one shape and dtype (float32, float64) take the compiled loop.
    """
    x, dy = np.asarray(x), np.asarray(dy)
    if _compiled_ok(x) and dy.dtype == x.dtype and dy.shape == x.shape:
        return _compiled().gelu_tanh_backward(x, dy)
    return numpy_gelu_tanh_backward(x, dy)


def numpy_gelu_tanh_backward(x, dy):
    """:func:`gelu_tanh_backward` in NumPy (the path without Numba, and float16)."""
    x = np.asarray(x)
    f = x.dtype.type
    c = f(_SQRT_2_OVER_PI)
    x2 = x * x
    t = np.multiply(x2, f(0.044715))
    t *= x
    t += x
    t *= c
    np.tanh(t, out=t)  # t = tanh u
    d = np.multiply(t, t)
    np.subtract(f(1.0), d, out=d)  # 1 − t²
    d *= x
    d *= c * f(0.5)
    x2 *= f(3 * 0.044715)
    x2 += f(1.0)
    d *= x2  # ½ x (1 − t²) √(2/π) (1 + 3·0.044715 x²)
    t += f(1.0)
    t *= f(0.5)
    d += t
    return np.multiply(d, dy, out=d) if np.result_type(d, dy) == d.dtype else d * dy


ACTIVATIONS = {"gelu": (gelu, gelu_backward), "gelu_tanh": (gelu_tanh, gelu_tanh_backward)}


def activation(name: str):
    """``(f, f_backward)`` for an activation's name: "gelu" (exact erf) or "gelu_tanh"."""
    if name not in ACTIVATIONS:
        raise ValueError(f"activation must be one of {sorted(ACTIVATIONS)}, got {name!r}")
    return ACTIVATIONS[name]


def relu(x):
    return np.maximum(x, 0)


def relu_backward(x, dy):
    return dy * (np.asarray(x) > 0)
