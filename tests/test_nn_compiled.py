"""qkv.nn's compiled loops (the qkv[fast] extra) against their NumPy forms and a 40-digit
reference: the exact (erf) and tanh GELUs to rounding, the AdamW update bit for bit; and which one
each entry point runs. torch's GELU is measured beside them and reported, never asserted on: a
peer's accuracy on one CPU's kernels is not qkv's contract (issue 36: torch 2.13's float32 erf
GELU is 2.47 roundings off at x ≈ −3.389 on an AVX-512 EPYC)."""

from __future__ import annotations

import functools

import numpy as np
import pytest

from helpers import gelu_reference, needs_numba
from qkv import nn
from qkv.nn import activations, optim

torch = pytest.importorskip("torch")

# x over GELU's whole range: the saturated tails (x·σ(2u) → x, → −0), the bend near 0, and
# magnitudes where x³ overflows float32 (|x| > 7e12: u = ±inf)
X = np.concatenate([np.linspace(-12, 12, 48001), [-1e3, -40.0, -0.0, 0.0, 1e-30, 40.0, 1e3]])


@functools.cache
def _reference(form: str, dtype):
    """(GELU, its slope) at X rounded to ``dtype``, in a precision well above the dtype's: float64
    NumPy (and scipy's Φ) for float32 inputs, 30 digits (helpers.gelu_reference) for float64
    ones — whose own float64 kernels would be a few of the roundings under test."""
    x = X.astype(dtype).astype(np.float64)  # the inputs the functions see, exactly
    if dtype == np.float64:
        return gelu_reference(x, form)
    with np.errstate(over="ignore", invalid="ignore"):  # x³ of ±1e3 is fine in float64
        if form == "tanh":
            c = np.sqrt(2 / np.pi)
            t = np.tanh(c * (x + 0.044715 * x**3))
            du = c * (1 + 3 * 0.044715 * x * x)  # ∂u/∂x
            return x * (1 + t) / 2, (1 + t) / 2 + x * (1 - t * t) * du / 2
        from scipy.special import ndtr

        pdf = np.exp(-0.5 * x * x) / np.sqrt(2 * np.pi)
        return x * ndtr(x), ndtr(x) + x * pdf


def test_the_erf_reference_is_mpmaths_30_digits_rounded_once():
    """helpers.gelu_reference sums Taylor series from anchors for the erf form; here mpmath
    itself, point by point, at every 40th point of X and at the points farthest from their
    anchors (halfway between two): the same float64 values, bit for bit."""
    import mpmath

    x = np.concatenate([X[::40], np.arange(-12, 12, 0.125) + 0.0625, [-12.0, 12.0, 5e-324]])
    y, slope = gelu_reference(x, "erf")
    with mpmath.workdps(30):
        for v, got, got_slope in zip(x, y, slope, strict=True):
            m = mpmath.mpf(float(v))
            assert got == float(m * mpmath.ncdf(m)), v
            assert got_slope == float(mpmath.ncdf(m) + m * mpmath.npdf(m)), v


def _torch_gelu(x, approximate):
    """torch's GELU of ``x`` in ``x``'s own dtype: the peer's own rounding."""
    return torch.nn.functional.gelu(torch.tensor(x), approximate=approximate).numpy()


def _report_torch(capsys, name, dtype, y, ref, x):
    """torch beside qkv, in roundings at max(1, |x|): printed, not asserted."""
    ulps = np.abs(y.astype(np.float64) - ref) / _bound(x, dtype, 1)
    with capsys.disabled():
        print(f"\n  {name} {np.dtype(dtype).name}: torch {ulps.max():.2f} roundings off at most "
              f"(x = {float(x[ulps.argmax()]):.4g}; reported, not asserted)")


def _bound(x, dtype, ulps):
    """``ulps`` units of the dtype's rounding at |x| (≥ 1): gelu(x) and its derivative times dy
    are sums of terms as large as |x| and |dy|·(1 + |x|), each a few roundings off."""
    return ulps * np.finfo(dtype).eps * np.maximum(1.0, np.abs(x))


@needs_numba
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_compiled_gelu_tanh_equals_numpy_and_the_reference(dtype, capsys):
    from qkv.nn import _compiled

    x = X.astype(dtype)
    dy = np.cos(3 * X).astype(dtype)
    y_ref, slope = _reference("tanh", dtype)
    dx_ref = dy.astype(np.float64) * slope
    _report_torch(capsys, "tanh GELU", dtype, _torch_gelu(x, "tanh"), y_ref, x)
    fast, slow = _compiled.gelu_tanh(x), activations.numpy_gelu_tanh(x)
    dfast = _compiled.gelu_tanh_backward(x, dy)
    dslow = activations.numpy_gelu_tanh_backward(x, dy)
    assert fast.dtype == slow.dtype == dfast.dtype == dslow.dtype == dtype
    for y, ref, ulps in ((fast, y_ref, 8), (slow, y_ref, 8), (dfast, dx_ref, 24),
                         (dslow, dx_ref, 24)):
        err = np.abs(y.astype(np.float64) - ref)
        assert (err <= _bound(x, dtype, ulps)).all(), (dtype, ulps, float(err.max()))
    np.testing.assert_array_equal(fast[x >= 12], x[x >= 12])  # σ(2u) is exactly 1 there
    # the entry points take the compiled loop for float32/float64 arrays of any shape
    shaped = x[:48000].reshape(12, 40, 100)
    np.testing.assert_array_equal(nn.gelu_tanh(shaped), fast[:48000].reshape(shaped.shape))
    np.testing.assert_array_equal(nn.gelu_tanh_backward(shaped, dy[:48000].reshape(shaped.shape)),
                                  dfast[:48000].reshape(shaped.shape))
    strided = x[::2]  # not contiguous: copied, same values
    np.testing.assert_array_equal(nn.gelu_tanh(strided), fast[::2])


def test_gelu_tanh_in_float16_and_mixed_dtypes_takes_numpy():
    x = np.linspace(-4, 4, 33, dtype=np.float16)
    np.testing.assert_array_equal(nn.gelu_tanh(x), activations.numpy_gelu_tanh(x))
    dy = np.ones(33, np.float64)
    np.testing.assert_array_equal(nn.gelu_tanh_backward(x, dy),
                                  activations.numpy_gelu_tanh_backward(x, dy))


@needs_numba
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_compiled_exact_gelu_is_within_rounding_of_the_reference(dtype, capsys):
    from qkv.nn import _compiled

    x = X.astype(dtype)
    dy = np.cos(3 * X).astype(dtype)
    y_ref, slope = _reference("erf", dtype)
    dx_ref = dy.astype(np.float64) * slope
    fast, dfast = _compiled.gelu(x), _compiled.gelu_backward(x, dy)
    slow, dslow = activations.numpy_gelu(x), activations.numpy_gelu_backward(x, dy)
    _report_torch(capsys, "erf GELU", dtype, _torch_gelu(x, "none"), y_ref, x)
    assert fast.dtype == slow.dtype == dfast.dtype == dslow.dtype == dtype
    for name, y, ref, ulps in (("compiled", fast, y_ref, 2), ("numpy", slow, y_ref, 2),
                               ("compiled backward", dfast, dx_ref, 4),
                               ("numpy backward", dslow, dx_ref, 4)):
        err = np.abs(y.astype(np.float64) - ref)
        assert (err <= _bound(x, dtype, ulps)).all(), (name, dtype, ulps, float(err.max()))
    np.testing.assert_array_equal(fast[x >= 12], x[x >= 12])  # Φ(x) rounds to exactly 1 there
    assert (fast[x <= -12] <= 0).all() and (fast[x <= -12] > -1e-30).all()  # → −0, no NaN
    special = np.array([np.inf, -np.inf, np.nan, -0.0], dtype)
    with np.errstate(invalid="ignore"):  # −inf · Φ(−inf) = −inf · 0 is NaN, as in scipy
        np.testing.assert_array_equal(_compiled.gelu(special), activations.numpy_gelu(special))
    # the entry points take the compiled loop for float32/float64 arrays of any shape
    shaped = x[:48000].reshape(12, 40, 100)
    np.testing.assert_array_equal(nn.gelu(shaped), fast[:48000].reshape(shaped.shape))
    np.testing.assert_array_equal(nn.gelu_backward(shaped, dy[:48000].reshape(shaped.shape)),
                                  dfast[:48000].reshape(shaped.shape))
    np.testing.assert_array_equal(nn.gelu(x[::2]), fast[::2])  # strided: copied, same values


@needs_numba
def test_full_width_vectors_leave_every_gelu_bit_as_it_was():
    # the float32 GELU loops carry the engine's width hint; compiled without it they give the
    # same bits on every value, specials included (element-wise: no sum across a vector)
    from helpers import recompiled, width_hint_in_ir
    from qkv.nn import _compiled

    x = np.concatenate([X, [np.inf, -np.inf, np.nan, -0.0, 0.0, 1e-40, -1e-40]]).astype(
        np.float32)
    dy = np.cos(3 * np.where(np.isfinite(x), x, 0)).astype(np.float32)
    rows = x[None]  # (1, n): the bias loop's rows, dy as its bias
    for loop, args, like in ((_compiled._gelu32, (x,), x),
                             (_compiled._gelu_backward32, (x, dy), x),
                             (_compiled._gelu_erf32, (x,), x),
                             (_compiled._gelu_erf_backward32, (x, dy), x),
                             (_compiled._gelu_erf_bias32, (rows, dy), rows)):
        shipped, plain = np.empty_like(like), np.empty_like(like)
        with np.errstate(invalid="ignore", over="ignore"):
            loop(*args, shipped)
            without = recompiled(loop, hint=False)
            without(*args, plain)
        np.testing.assert_array_equal(shipped, plain)
        assert not width_hint_in_ir(without)
    hinted = recompiled(_compiled._gelu_erf32, hint=True)
    hinted(x, np.empty_like(x))
    assert width_hint_in_ir(hinted)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
def test_gelu_with_a_bias_is_the_gelu_of_the_sum_bit_for_bit(dtype):
    # MiniLM's feed-forward adds W₁'s bias inside the GELU's pass (float32, compiled): the
    # same bits as gelu(x + bias), specials included; other dtypes add first
    rng = np.random.default_rng(3)
    x = (rng.standard_normal((37, 29)) * 4).astype(dtype)
    x[0, :7] = [np.inf, -np.inf, np.nan, -0.0, 0.0, 1e-40, 6e4]
    bias = (rng.standard_normal(29) * 3).astype(dtype)
    with np.errstate(invalid="ignore", over="ignore"):
        np.testing.assert_array_equal(nn.gelu(x, bias=bias), nn.gelu(x + bias))
        np.testing.assert_array_equal(nn.gelu(x[3], bias=bias), nn.gelu(x[3] + bias))
    empty = np.zeros((3, 0), dtype)
    assert nn.gelu(empty, bias=np.zeros(0, dtype)).shape == (3, 0)
    for wrong in (bias[:5], bias[None], np.float32(1.0)):
        with pytest.raises(ValueError, match=r"gelu: bias has shape .*expected bias \(29,\)"):
            nn.gelu(x, bias=wrong)
    with pytest.raises(ValueError, match="gelu: x has shape \\(\\); with a bias x needs"):
        nn.gelu(np.float32(1.0), bias=bias[:1])


def test_exact_gelu_in_float16_and_mixed_dtypes_takes_numpy():
    x = np.linspace(-4, 4, 33, dtype=np.float16)
    np.testing.assert_array_equal(nn.gelu(x), activations.numpy_gelu(x))
    dy = np.ones(33, np.float64)
    np.testing.assert_array_equal(nn.gelu_backward(x, dy), activations.numpy_gelu_backward(x, dy))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_layer_norm_normalize_is_forward_of_the_sum_to_rounding(dtype):
    """``normalize(x, residual)`` (compiled with Numba) = ``forward(x + residual)[0]`` and the
    float64 LayerNorm of the rounded sum, within a few roundings of the output's scale."""
    rng = np.random.default_rng(0)
    ln = nn.LayerNorm(384, eps=1e-12, dtype=dtype)
    ln.params["weight"][:] = rng.normal(1, 0.3, 384)
    ln.params["bias"][:] = rng.normal(0, 0.5, 384)
    x = (rng.normal(3, 5, (2, 7, 384)) * 10.0 ** rng.integers(-3, 4, (2, 7, 1))).astype(dtype)
    r = rng.normal(0, 2, x.shape).astype(dtype)
    s = (x + r).astype(np.float64)  # the sum, rounded to dtype as both forms round it
    xhat = (s - s.mean(-1, keepdims=True)) / np.sqrt(s.var(-1, keepdims=True) + 1e-12)
    w, b = (ln.params[n].astype(np.float64) for n in ("weight", "bias"))
    ref = xhat * w + b
    scale = np.abs(xhat * w) + np.abs(b) + 1  # (|x̂ w| + |b|): the terms the result sums
    for y in (ln.normalize(x, r), ln.forward(x + r)[0]):
        assert y.dtype == dtype and y.shape == x.shape
        err = np.abs(y.astype(np.float64) - ref)
        assert (err <= 8 * np.finfo(dtype).eps * scale).all(), float((err / scale).max())
    np.testing.assert_array_equal(ln.normalize(x + r), ln.normalize(x, r))  # same rounded sum
    if dtype == np.float32:  # a float64 input to a float32 layer takes NumPy: forward, exactly
        x64 = x.astype(np.float64)
        np.testing.assert_array_equal(ln.normalize(x64, r), ln.forward(x64 + r)[0])


@needs_numba
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("weight_decay", [0.0, 0.1])
def test_compiled_adam_update_is_bit_for_bit_numpy(dtype, weight_decay):
    from qkv.nn import _compiled

    rng = np.random.default_rng(0)
    p = rng.normal(size=(40, 7)).astype(dtype)
    p[0, :3] = (0.0, -0.0, 1e-30)
    state = [(p.copy(), np.zeros(p.shape), np.zeros(p.shape)) for _ in range(2)]
    for t in range(1, 8):
        # gradients over many magnitudes (and an exact zero), in float32 as GPT's are
        g = (rng.normal(size=p.shape) * 10.0 ** rng.integers(-9, 4, p.shape)).astype(np.float32)
        g[1, 0] = 0.0
        kw = dict(betas=(0.9, 0.99), c1=1 - 0.9**t, c2=1 - 0.99**t, eps=1e-8,
                  lr=3e-3 / t, weight_decay=weight_decay)
        optim.numpy_adam_update(*state[0][:1], g, *state[0][1:], **kw)
        _compiled.adam_update(*state[1][:1], g, *state[1][1:], **kw)
    for a, b in zip(*state, strict=True):
        assert a.dtype == b.dtype and a.tobytes() == b.tobytes()
    assert not np.array_equal(state[0][0], p)  # it moved


def test_adam_refuses_a_gradient_of_another_shape():
    opt = nn.Adam({"w": np.ones((3, 2))})
    with pytest.raises(ValueError, match=r"grads\['w'\] has shape \(2, 3\), expected .*\(3, 2\)"):
        opt.step({"w": np.ones((2, 3))})


def test_adam_keeps_non_contiguous_parameters_on_the_numpy_path():
    base = np.arange(12.0).reshape(3, 4)
    view = base[:, ::2]  # a view: updated in place, through NumPy
    nn.Adam({"w": view}, lr=0.5).step({"w": np.ones((3, 2))})
    # the first step moves by lr · m̂ / (√v̂ + eps) = lr · 1 / (1 + eps) for a gradient of 1
    expected = np.arange(12.0).reshape(3, 4)[:, ::2] - 0.5 * (1 / (1 + 1e-8))
    np.testing.assert_array_equal(base[:, ::2], expected)
    np.testing.assert_array_equal(base[:, 1::2], np.arange(12.0).reshape(3, 4)[:, 1::2])
