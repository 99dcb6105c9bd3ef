"""The element-wise hot loops of training compiled with Numba (the ``qkv[fast]`` extra): GPT-2's
tanh GELU forward and backward, and the AdamW update. Each is one pass over memory without the
GIL, where the NumPy forms (:mod:`.activations`, :mod:`.optim`) make several passes with a
temporary per operation. Imported only when Numba is (see :func:`available`).

GELU. ½ x (1 + tanh u) is written as x · σ(2u), with σ(z) = 1 / (1 + e^(−z)): the same function
(½(1 + tanh u) = σ(2u)) without the cancellation of 1 + tanh u for negative x, and one
exponential instead of a tanh. In float32 the exponential is the engine's vectorisable
:func:`~qkv.engine.step.compiled.exp2` (a scalar libm call would stop LLVM from vectorising the
loop); in float64, ``math.exp``. The derivative, with s = σ(2u) and 1 − s = e^(−2u) s:

    d/dx = s + 2 x s (1 − s) · √(2/π) (1 + 3·0.044715 x²)

AdamW. The same operations in the same order as :meth:`qkv.nn.Adam.step`'s NumPy form, in
float64 without fast-math (no fused multiply-adds, no reassociation), so the two agree bit for
bit; only the temporaries are gone.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from ..engine.step.compiled import FLAGS, exp2

_C = math.sqrt(2.0 / math.pi)
_A = 0.044715
F32 = np.float32
C32, A32, A3_32 = F32(_C), F32(_A), F32(3 * _A)
M2LOG2E_32 = F32(-2.0 * math.log2(math.e))  # e^(−2u) = 2^(−2u·log₂e)
ONE32, TWO32, ZERO32, INF32 = F32(1.0), F32(2.0), F32(0.0), F32(np.inf)


@njit(inline="always", fastmath=FLAGS, error_model="numpy")
def _sigmoid_parts32(x):
    """(s, s(1 − s)) for s = σ(2u), u = √(2/π)(x + 0.044715 x³), float32."""
    u = C32 * (x + A32 * (x * x * x))
    e = exp2(u * M2LOG2E_32)  # e^(−2u): 0 for large u, inf for very negative u
    s = ONE32 / (ONE32 + e)
    return s, (e * s) * s if e < INF32 else ZERO32


@njit(inline="always", error_model="numpy")
def _sigmoid_parts64(x):
    u = _C * (x + _A * (x * x * x))
    e = math.exp(-2.0 * u)
    s = 1.0 / (1.0 + e)
    return s, (e * s) * s if e < math.inf else 0.0


@njit(nogil=True, fastmath=FLAGS, error_model="numpy", cache=True)
def _gelu32(x, out):
    for i in range(x.size):
        s, _ = _sigmoid_parts32(x[i])
        out[i] = x[i] * s


@njit(nogil=True, fastmath=FLAGS, error_model="numpy", cache=True)
def _gelu_backward32(x, dy, out):
    for i in range(x.size):
        xi = x[i]
        s, s1s = _sigmoid_parts32(xi)
        out[i] = dy[i] * (s + TWO32 * xi * s1s * C32 * (ONE32 + A3_32 * (xi * xi)))


@njit(nogil=True, error_model="numpy", cache=True)
def _gelu64(x, out):
    for i in range(x.size):
        s, _ = _sigmoid_parts64(x[i])
        out[i] = x[i] * s


@njit(nogil=True, error_model="numpy", cache=True)
def _gelu_backward64(x, dy, out):
    for i in range(x.size):
        xi = x[i]
        s, s1s = _sigmoid_parts64(xi)
        out[i] = dy[i] * (s + 2.0 * xi * s1s * _C * (1.0 + 3 * _A * (xi * xi)))


def _flat(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a).reshape(-1)


def gelu_tanh(x: np.ndarray) -> np.ndarray:
    """GPT-2's GELU of a float32 or float64 array (any shape); a new array of x's dtype."""
    out = np.empty(x.shape, dtype=x.dtype)
    (_gelu32 if x.dtype == np.float32 else _gelu64)(_flat(x), out.reshape(-1))
    return out


def gelu_tanh_backward(x: np.ndarray, dy: np.ndarray) -> np.ndarray:
    """∂loss/∂x for x and dy of one shape and one dtype (float32 or float64)."""
    out = np.empty(x.shape, dtype=x.dtype)
    (_gelu_backward32 if x.dtype == np.float32 else _gelu_backward64)(
        _flat(x), _flat(dy), out.reshape(-1))
    return out


@njit(nogil=True, error_model="numpy", cache=True)
def _adam(p, g, m, v, b1, a1, b2, a2, c1, c2, eps, lr, decay, weight_decay, step):
    # Adam.step's NumPy lines element by element, in their order of operations. Two casts
    # follow NumPy's promotion: ``weight_decay * p`` is computed in p's dtype (a Python float
    # is weak), and the step is rounded to p's dtype (``step``, one element of it) before
    # the subtraction.
    for i in range(p.size):
        gi = np.float64(g[i])
        mi = m[i] * b1
        mi = mi + a1 * gi
        vi = v[i] * b2
        vi = vi + a2 * gi * gi
        m[i] = mi
        v[i] = vi
        update = (mi / c1) / (np.sqrt(vi / c2) + eps)
        if decay:
            update = update + weight_decay[0] * p[i]
        step[0] = lr * update
        p[i] = p[i] - step[0]


def adam_update(p, g, m, v, *, betas, c1, c2, eps, lr, weight_decay) -> None:
    """One AdamW update of the parameter ``p`` in place (float32 or float64, C-contiguous),
    its float64 moments ``m``, ``v`` (``p``'s shape) from the gradient ``g``; ``c1``, ``c2`` are
    the bias corrections 1 − βᵢᵗ. Bit for bit :meth:`qkv.nn.Adam.step`'s NumPy update."""
    b1, b2 = betas
    _adam(p.reshape(-1), _flat(g), m.reshape(-1), v.reshape(-1), b1, 1 - b1, b2, 1 - b2,
          c1, c2, eps, lr, bool(weight_decay), np.asarray([weight_decay], dtype=p.dtype),
          np.empty(1, p.dtype))
