"""Shared test helpers: kernel configurations and dtype-justified tolerances."""

from __future__ import annotations

import contextlib

import numpy as np
import pytest

from qkv.engine import current, has_numba, kernel_config

# Every path of the kernel, at sizes small enough for property tests:
#   small   — all heads at once (one tile step over every row);
#   tiled   — online softmax over tiles of 8 queries × 16 keys, one thread, partial tiles split
#             into quadrants down to 2 × 2;
#   threads — the same tiles, unsplit, on a pool of threads.
# The tiled path's GEMMs are the default choice (MKL on an Intel CPU with the qkv[mkl] extra),
# the threads path's NumPy's: both are held to every tolerance (qkv.engine.gemm).
KERNEL_PATHS = ("small", "tiled", "threads")
# Both tile steps: NumPy (always there) and compiled (the qkv[fast] extra, Numba).
BACKENDS = ("numpy", "compiled")
needs_numba = pytest.mark.skipif(not has_numba(), reason="the compiled step needs Numba")
BACKEND_PARAMS = [pytest.param("numpy"), pytest.param("compiled", marks=needs_numba)]


@contextlib.contextmanager
def kernel_path(path: str, backend: str = "numpy"):
    """Run a block on one path of the kernel with one tile step (see KERNEL_PATHS)."""
    tiles = dict(tile_q=8, tile_k=16, tile_k_unmasked=16, small=0) if path != "small" else {}
    with kernel_config(
        **tiles,
        thread_min_work=0 if path == "threads" else 1 << 62,
        split_min=2 if path == "tiled" else 1 << 30,
        workers=2 if path == "threads" else None,
        backend=backend,
        gemm="numpy" if path == "threads" else current().gemm,
    ) as config:
        yield config


EPS = {np.dtype(np.float16): 2.0**-11, np.dtype(np.float32): 2.0**-24,
       np.dtype(np.float64): 2.0**-53}


def output_atol(q, k, v, scale=None, bias=None) -> float:
    """Absolute error allowed in an attention output, from first-order error analysis.

    A scaled score s = scale · q·k summed over Dk terms carries a rounding error of at most
    ~Dk·eps·scale·max|q|·max|k| (+ the bias's own magnitude times eps); the weights then have a
    relative error of that size, so the output, a convex blend of values, is off by at most that
    times max|v|. The kernel computes in float32 for float16 inputs and rounds the result to
    float16 once, which adds eps16 · max|v|. A factor 8 covers the log2 folding, exp2 and the
    sums' own rounding.
    """
    dtype = np.asarray(v).dtype
    q, k, v = (np.asarray(x, dtype=np.float64) for x in (q, k, v))
    dk = q.shape[-1]
    scale = 1 / np.sqrt(dk) if scale is None else scale
    compute = np.dtype(np.float32) if dtype == np.float16 else np.dtype(dtype)
    eps = EPS[compute]
    s_bound = abs(scale) * dk * _max(q) * _max(k) + (0 if bias is None else _max(bias))
    vmax = max(_max(v), 1e-30)
    atol = 8 * eps * (1 + s_bound) * vmax
    if dtype == np.float16:
        atol += EPS[np.dtype(np.float16)] * vmax
    return atol


def lse_atol(q, k, dtype, scale=None, bias=None) -> float:
    """lse = m + log Σ exp(s − m): off by the scores' error plus log's rounding of a sum ≤ Nk."""
    q, k = np.asarray(q, np.float64), np.asarray(k, np.float64)
    dk = q.shape[-1]
    scale = 1 / np.sqrt(dk) if scale is None else scale
    compute = np.dtype(np.float32) if np.dtype(dtype) == np.float16 else np.dtype(dtype)
    eps = EPS[compute]
    s_bound = abs(scale) * dk * _max(q) * _max(k) + (0 if bias is None else _max(bias))
    return 8 * eps * (1 + s_bound + np.log(max(k.shape[-2], 1)))


def _max(x) -> float:
    x = np.asarray(x, dtype=np.float64)
    return float(np.abs(x).max()) if x.size else 0.0


def grad_atols(q, k, v, dout, scale=None, bias=None) -> tuple[float, float, float]:
    """Absolute errors allowed in (dq, dk, dv), by the same first-order analysis.

    The recomputed weights P carry a relative error δ ≈ Dk·eps·scale·max|q|·max|k| (see
    ``output_atol``). With dS = P ∘ (dP − Δ) and |dP − Δ| ≤ 2·Dv·max|dout|·max|v|:
      dq_i = scale Σ_j dS_ij k_j   — Σ_j P_ij = 1, so error ≲ scale·δ·2Dv|do||v|·|k|
      dk_j = scale Σ_i dS_ij q_i   — a sum over up to Nq queries: the same times Nq·|q|/|k|
      dv_j = Σ_i P_ij dout_i       — a sum over up to Nq queries: δ·Nq·|do|·Dv
    with the factor 8 of ``output_atol`` for the exp2 and accumulation rounding.

    A float16 problem's backward is handed the forward's output rounded to float16 (half an ulp,
    2^-11 relative), so Δ_i = Σ dout_i·out_i is off by up to 2^-11·Dv·|do|·|out| ≤ 2^-11·Dv·|do|·
    |v| more: dq by scale·that·|k| and dk by scale·that·Nq·|q| (Σ_j P_ij = 1; Σ_i P_ij ≤ Nq).
    """
    dtype = np.asarray(v).dtype
    q, k, v, dout = (np.asarray(x, np.float64) for x in (q, k, v, dout))
    dk_, dv_, nq = q.shape[-1], v.shape[-1], q.shape[-2]
    scale = 1 / np.sqrt(dk_) if scale is None else abs(scale)
    eps = EPS[np.dtype(np.float32) if dtype == np.float16 else np.dtype(dtype)]
    s_bound = scale * dk_ * _max(q) * _max(k) + (0 if bias is None else _max(bias))
    delta = 8 * eps * (1 + s_bound)
    ds_bound = 2 * dv_ * _max(dout) * _max(v)
    out_err = 2.0**-11 * dv_ * _max(dout) * _max(v) if dtype == np.float16 else 0.0
    return (delta * scale * ds_bound * _max(k) + 2 * scale * out_err * _max(k),
            delta * scale * ds_bound * _max(q) * nq + 2 * scale * out_err * _max(q) * nq,
            delta * nq * _max(dout) * dv_)


def gelu_reference(x: np.ndarray, form: str) -> tuple[np.ndarray, np.ndarray]:
    """GELU and its slope at the float64 points ``x``, in mpmath's 30 digits rounded once to
    float64: an oracle independent of any CPU's vectorised tanh, erf or exp (a peer's float64
    kernel may be a few float64 roundings off, and differently on another CPU). ``form``:
    "tanh" (x·½(1 + tanh u), u = √(2/π)(x + 0.044715 x³)) or "erf" (x Φ(x), through
    :func:`_erf_gelu_reference` for |x| ≤ 12)."""
    import mpmath

    def one(v):
        x = mpmath.mpf(float(v))
        if form == "tanh":
            c = mpmath.sqrt(2 / mpmath.pi)
            t = mpmath.tanh(c * (x + mpmath.mpf("0.044715") * x**3))
            slope = (1 + t) / 2 + x * (1 - t * t) * c * (1 + 3 * mpmath.mpf("0.044715") * x * x) / 2
            return float(x * (1 + t) / 2), float(slope)
        return float(x * mpmath.ncdf(x)), float(mpmath.ncdf(x) + x * mpmath.npdf(x))

    x = np.asarray(x, dtype=np.float64)
    y, slope = np.empty_like(x), np.empty_like(x)
    anchored = (np.abs(x) <= ERF_ANCHORED) if form == "erf" else np.zeros(x.shape, bool)
    if anchored.any():
        y[anchored], slope[anchored] = _erf_gelu_reference(x[anchored])
    with mpmath.workdps(30):
        pairs = [one(v) for v in x[~anchored]]
    y[~anchored] = [v for v, _ in pairs]
    slope[~anchored] = [d for _, d in pairs]
    return y, slope


# The erf GELU's oracle over many points, without mpmath's ~0.2 ms per point: Φ's and φ's Taylor
# coefficients at anchors a = j/8 in mpmath (40 digits); each point x is within 1/16 of its anchor,
# h = x − a is exact in float64, and the series in h is summed in double-double arithmetic
# (~32 digits, IEEE + and × only: the same bits on every CPU). 34 terms: at every anchor the last
# is below 10⁻⁴⁴ of Φ(x) and of φ(x). Rounded once, these are mpmath's 30-digit values' float64
# roundings (all 48,008 of tests/test_nn_compiled.py's points, checked: identical; its
# test_the_erf_reference_is_mpmaths_30_digits_rounded_once checks a sample on every run).
ERF_ANCHORED, ERF_ANCHORS, ERF_TERMS = 12.0, 8, 34


def _erf_gelu_reference(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """x·Φ(x) and Φ(x) + x·φ(x) at |x| ≤ ERF_ANCHORED, each rounded once to float64."""
    import mpmath

    j = np.rint(x * ERF_ANCHORS)
    h = x - j / ERF_ANCHORS  # exact: a multiple of x's ulp, at most 2⁻⁴
    anchors, at = np.unique(j, return_inverse=True)
    # rows: [Φ's coefficients; φ's], as (hi, lo) pairs, per anchor
    coef = np.empty((2, 2, len(anchors), ERF_TERMS + 1))
    with mpmath.workdps(40):
        for i, a in enumerate(anchors):
            a = mpmath.mpf(int(a)) / ERF_ANCHORS
            # φ⁽ᵏ⁾(a)/k! = (−1)ᵏ Heₖ(a) φ(a)/k!, Hermite's Heₖ₊₁ = a Heₖ − k Heₖ₋₁; Φ⁽ᵏ⁾ = φ⁽ᵏ⁻¹⁾
            he, he_before, scale = mpmath.mpf(1), mpmath.mpf(0), mpmath.npdf(a)
            phi = []
            for k in range(ERF_TERMS + 1):
                phi.append((-1) ** k * he * scale)
                he, he_before, scale = a * he - k * he_before, he, scale / (k + 1)
            cdf = [mpmath.ncdf(a)] + [phi[k - 1] / k for k in range(1, ERF_TERMS + 1)]
            for row, series in enumerate((cdf, phi)):
                for k, c in enumerate(series):
                    coef[row, 0, i, k] = hi = float(c)
                    coef[row, 1, i, k] = float(c - hi)

    def series(row):  # Horner in h, in double-double
        hi, lo = coef[row, 0, at, ERF_TERMS], coef[row, 1, at, ERF_TERMS]
        for k in range(ERF_TERMS - 1, -1, -1):
            hi, lo = _dd_add(*_dd_mul(hi, lo, h), coef[row, 0, at, k], coef[row, 1, at, k])
        return hi, lo

    cdf, pdf = series(0), series(1)
    y = _dd_mul(*cdf, x)
    slope = _dd_add(*cdf, *_dd_mul(*pdf, x))
    return y[0] + y[1], slope[0] + slope[1]  # one rounding of hi + lo


def _two_sum(a, b):
    s = a + b
    v = s - a
    return s, (a - (s - v)) + (b - v)


def _fast_two_sum(a, b):  # |a| ≥ |b|
    s = a + b
    return s, b - (s - a)


def _dd_add(ah, al, bh, bl):
    s, e = _two_sum(ah, bh)
    t, f = _two_sum(al, bl)
    s, e = _fast_two_sum(s, e + t)
    return _fast_two_sum(s, e + f)


def _dd_mul(ah, al, b):
    """(ah + al)·b for a float64 b: Dekker's exact product, no fused multiply-add."""
    p = ah * b
    s, t = 134217729.0 * ah, 134217729.0 * b  # Veltkamp's split into 26-bit halves
    a1, b1 = s - (s - ah), t - (t - b)
    a2, b2 = ah - a1, b - b1
    return _fast_two_sum(p, ((a1 * b1 - p) + a1 * b2 + a2 * b1) + a2 * b2 + al * b)


EPS32 = 2.0**-24


def beside_peer(peer_err: float, layers: int, scale: float = 1.0) -> float:
    """qkv's bound against a float64 oracle, from a float32 peer's own distance to the same
    oracle: four times the peer's (the same arithmetic in another order), but never tighter
    than float32 through ``layers`` layers (~16 roundings of ``scale`` each) — so a peer that
    happens to round better on some CPU cannot tighten qkv's bar."""
    return max(4 * peer_err, 16 * layers * EPS32 * scale) + 8 * EPS32 * scale


def recompiled(dispatcher, hint: bool):
    """A compiled function of qkv's compiled anew, not cached (Numba shows no IR for cached code):
    with its full-width-vector hint (``wide_vectors()``) or with the hint a no-op, i.e. at LLVM's
    default width for this CPU."""
    import types

    import numba

    from qkv.engine.step import compiled

    @numba.njit(inline="always")
    def default_width():
        return None

    fn = dispatcher.py_func
    assert "wide_vectors" in fn.__code__.co_names, f"{fn.__name__} has no width hint"
    scope = dict(fn.__globals__, wide_vectors=compiled.wide_vectors if hint else default_width)
    return numba.njit(nogil=True, fastmath=compiled.FLAGS, error_model="numpy")(
        types.FunctionType(fn.__code__, scope, fn.__name__, fn.__defaults__, fn.__closure__))


def width_hint_in_ir(fn) -> bool:
    """Whether a (not cached) compiled function's LLVM IR carries the full-width hint."""
    from qkv.engine.step import compiled

    return all(compiled.WIDE in ir for ir in fn.inspect_llvm().values())
