"""The element-wise hot loops compiled with Numba (the ``qkv[fast]`` extra): BERT's exact-erf
GELU and GPT-2's tanh GELU, forward and backward, LayerNorm's inference pass (with the residual
add) and the AdamW update. Each is one pass over memory without the GIL, where the NumPy forms
(:mod:`.activations`, :mod:`.norm`, :mod:`.optim`) make several passes with a temporary per
operation (and scipy's ``erf`` costs many times more per element). Imported only when Numba is
(see :func:`available`).

Exact GELU. x Φ(x), with the normal CDF Φ(x) = ½ erfc(−x/√2) taken from erfc(z), z = |x|/√2:
Φ = ½ erfc(z) for x < 0 and 1 − ½ erfc(z) otherwise, so the negative tail is never a
difference of two numbers near 1. In float32, erfc is Numerical Recipes' Chebyshev form
(``erfcc``: relative error below 1.2e-7 for every z ≥ 0, measured 1.04e-7 in float64)

    erfc(z) = t · exp(−z² − 1.26551223 + t P(t)),      t = 1 / (1 + z/2),  P of degree 9

with the exponential the engine's vectorisable ``exp2``, so the loop vectorises (several times
cheaper than scipy's erf: ``benchmarks/minilm.py --profile`` prints both). x Φ(x) is then within
about one float32 rounding of the exact value at max(1, |x|) — 0.9 measured, torch's own float32
GELU 1.3 (tests/test_nn_compiled.py). In float64, ``math.erf`` (a scalar libm call: float64 is
not the hot path).

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

# Numba is imported through the engine's compiled module, which first turns off Numba's
# coloured messages (their exit hook writes a terminal reset code to stdout: an MPI rank's
# "RESULT …" line would start with it). Imported here first, Numba would keep its colours.
from ..engine.step.compiled import FLAGS, exp2, njit, wide_vectors

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
    wide_vectors()
    for i in range(x.size):
        s, _ = _sigmoid_parts32(x[i])
        out[i] = x[i] * s


@njit(nogil=True, fastmath=FLAGS, error_model="numpy", cache=True)
def _gelu_backward32(x, dy, out):
    wide_vectors()
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


def _elementwise(loop32, loop64, *arrays: np.ndarray) -> np.ndarray:
    """A new array of ``arrays[0]``'s shape and dtype, written by the float32 or float64 loop
    (``loop(*flat inputs, flat out)``); the inputs share one shape and one dtype."""
    out = np.empty(arrays[0].shape, dtype=arrays[0].dtype)
    loop = loop32 if arrays[0].dtype == np.float32 else loop64
    loop(*(_flat(a) for a in arrays), out.reshape(-1))
    return out


def gelu_tanh(x: np.ndarray) -> np.ndarray:
    """GPT-2's GELU of a float32 or float64 array (any shape); a new array of x's dtype."""
    return _elementwise(_gelu32, _gelu64, x)


def gelu_tanh_backward(x: np.ndarray, dy: np.ndarray) -> np.ndarray:
    """∂loss/∂x for x and dy of one shape and one dtype (float32 or float64)."""
    return _elementwise(_gelu_backward32, _gelu_backward64, x, dy)


# Numerical Recipes' erfcc: erfc(z) = t exp(−z² + NR0 + t (NR1 + t (NR2 + … + t NR9)))
NR0 = F32(-1.26551223)
NR1, NR2, NR3, NR4, NR5, NR6, NR7, NR8, NR9 = (F32(c) for c in (
    1.00002368, 0.37409196, 0.09678418, -0.18628806, 0.27886807, -1.13520398, 1.48851587,
    -0.82215223, 0.17087277))
SQRT_HALF32 = F32(1.0 / math.sqrt(2.0))
HALF32 = F32(0.5)
LOG2E32 = F32(math.log2(math.e))
INV_SQRT_2PI32 = F32(1.0 / math.sqrt(2.0 * math.pi))
_SQRT_HALF = 1.0 / math.sqrt(2.0)
_INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)


@njit(inline="always", fastmath=FLAGS, error_model="numpy")
def _phi32(x):
    """Φ(x) = ½ erfc(−x/√2) in float32 (0 for −inf, 1 for +inf, NaN for NaN)."""
    z = abs(x) * SQRT_HALF32
    t = ONE32 / (ONE32 + HALF32 * z)
    p = NR1 + t * (NR2 + t * (NR3 + t * (NR4 + t * (NR5 + t * (NR6 + t * (NR7 + t * (
        NR8 + t * NR9)))))))
    half_erfc = HALF32 * t * exp2((NR0 + t * p - z * z) * LOG2E32)  # ½ erfc(|x|/√2)
    return half_erfc if x < ZERO32 else ONE32 - half_erfc


@njit(nogil=True, fastmath=FLAGS, error_model="numpy", cache=True)
def _gelu_erf32(x, out):
    wide_vectors()  # element-wise: full-width vectors, the same bits
    for i in range(x.size):
        out[i] = x[i] * _phi32(x[i])


@njit(nogil=True, fastmath=FLAGS, error_model="numpy", cache=True)
def _gelu_erf_bias32(x, bias, out):
    wide_vectors()  # element-wise, as _gelu_erf32
    for i in range(x.shape[0]):
        row, dst = x[i], out[i]
        for j in range(x.shape[1]):
            u = row[j] + bias[j]  # rounded to float32, as NumPy's x + bias is
            dst[j] = u * _phi32(u)


@njit(nogil=True, fastmath=FLAGS, error_model="numpy", cache=True)
def _gelu_erf_backward32(x, dy, out):
    wide_vectors()
    # d/dx [x Φ(x)] = Φ(x) + x φ(x),  φ(x) = e^(−x²/2) / √(2π)
    for i in range(x.size):
        xi = x[i]
        pdf = INV_SQRT_2PI32 * exp2((-HALF32 * (xi * xi)) * LOG2E32)
        out[i] = dy[i] * (_phi32(xi) + xi * pdf)


@njit(nogil=True, error_model="numpy", cache=True)
def _gelu_erf64(x, out):
    for i in range(x.size):
        out[i] = 0.5 * x[i] * (1.0 + math.erf(x[i] * _SQRT_HALF))


@njit(nogil=True, error_model="numpy", cache=True)
def _gelu_erf_backward64(x, dy, out):
    for i in range(x.size):
        xi = x[i]
        cdf = 0.5 * (1.0 + math.erf(xi * _SQRT_HALF))
        out[i] = dy[i] * (cdf + xi * (_INV_SQRT_2PI * math.exp(-0.5 * xi * xi)))


def gelu(x: np.ndarray) -> np.ndarray:
    """BERT's exact GELU x Φ(x) of a float32 or float64 array (any shape); a new array."""
    return _elementwise(_gelu_erf32, _gelu_erf64, x)


def gelu_bias(x: np.ndarray, bias: np.ndarray) -> np.ndarray:
    """:func:`gelu` of ``x + bias`` for float32 x ``(..., d)`` and bias ``(d,)``, the add in the
    same pass (one pass over x instead of two); a new array."""
    flat = np.ascontiguousarray(x).reshape(-1, x.shape[-1])  # (M, d)
    out = np.empty(flat.shape, dtype=np.float32)
    _gelu_erf_bias32(flat, np.ascontiguousarray(bias, dtype=np.float32), out)
    return out.reshape(x.shape)


def gelu_backward(x: np.ndarray, dy: np.ndarray) -> np.ndarray:
    """∂loss/∂x of :func:`gelu` for x and dy of one shape and one dtype (float32 or float64)."""
    return _elementwise(_gelu_erf_backward32, _gelu_erf_backward64, x, dy)


@njit(nogil=True, fastmath=FLAGS, error_model="numpy", cache=True)
def _layer_norm(x, residual, has_residual, weight, bias, eps, row, out):
    # Each row once through the cache: v = x (+ residual) rounded to x's dtype, as NumPy's
    # ``x + residual`` is; its mean and biased variance summed in float64; then the affine map.
    m, d = x.shape
    for i in range(m):
        if has_residual:
            for j in range(d):
                row[j] = x[i, j] + residual[i, j]
        else:
            for j in range(d):
                row[j] = x[i, j]
        total = 0.0
        for j in range(d):
            total += row[j]
        mean = total / d
        sq = 0.0
        for j in range(d):
            c = row[j] - mean
            sq += c * c
        inv_std = 1.0 / math.sqrt(sq / d + eps)
        for j in range(d):
            out[i, j] = (row[j] - mean) * inv_std * weight[j] + bias[j]


def layer_norm(x: np.ndarray, weight: np.ndarray, bias: np.ndarray, eps: float,
               residual: np.ndarray | None = None) -> np.ndarray:
    """LayerNorm of ``x (+ residual)`` over the last axis, x and residual ``(..., d)`` of one
    shape and dtype (float32 or float64), weight and bias ``(d,)``; a new array."""
    flat = np.ascontiguousarray(x).reshape(-1, x.shape[-1])  # (M, d)
    res = flat if residual is None else np.ascontiguousarray(residual).reshape(flat.shape)
    out = np.empty(flat.shape, dtype=x.dtype)
    _layer_norm(flat, res, residual is not None, weight.astype(x.dtype, copy=False),
                bias.astype(x.dtype, copy=False), float(eps), np.empty(flat.shape[1], x.dtype),
                out)
    return out.reshape(x.shape)


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
