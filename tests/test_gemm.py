"""The tile GEMMs (qkv.engine.gemm): MKL and NumPy against a float64 product, on the operand
layouts the kernel hands them (tiles, transposed tiles, row slices), and the fallbacks."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import qkv
from helpers import EPS, output_atol
from qkv import reference
from qkv.engine import gemm, kernel_config

needs_mkl = pytest.mark.skipif(not gemm.mkl_available(), reason="the qkv[mkl] extra is absent")
USES = [pytest.param("numpy"), pytest.param("mkl", marks=needs_mkl)]


def product_atol(a, b, dtype, extra: int = 0) -> np.ndarray:
    """Per element: (K + extra) · eps · Σ|a||b| bounds a dot product of K terms in dtype (first
    order), ``extra`` roundings more of the result (an add into ``out``: one)."""
    k = a.shape[1] + extra
    return k * EPS[np.dtype(dtype)] * (np.abs(a.astype(np.float64)) @ np.abs(b.astype(np.float64)))


@st.composite
def operands(draw):
    dtype = draw(st.sampled_from([np.float32, np.float64]))
    m, k, n = (draw(st.integers(1, 70)) for _ in range(3))
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    scale = draw(st.sampled_from([1.0, 1e-20, 1e20]))
    a = (rng.standard_normal((m, k)) * scale).astype(dtype)
    b = rng.standard_normal((k, n)).astype(dtype)
    # the layouts of the kernel: a tile, a transposed tile, a slice of a wider array's rows
    if draw(st.booleans()):
        a = np.ascontiguousarray(a.T).T  # F-ordered: a transposed view
    if draw(st.booleans()):
        b = np.ascontiguousarray(b.T).T
    if draw(st.booleans()):
        wide = np.zeros((k, n + 5), dtype=dtype)
        wide[:, :n] = b
        b = wide[:, :n]  # rows with a leading dimension wider than n
    return a, b


@pytest.mark.parametrize("use", USES)
@settings(max_examples=60, deadline=None)
@given(ops=operands(), accumulate=st.booleans(), alpha=st.sampled_from([1.0, 0.125, -0.3]))
def test_matches_float64_product(use, ops, accumulate, alpha):
    a, b = ops
    start = np.random.default_rng(1).standard_normal((a.shape[0], b.shape[1])).astype(a.dtype)
    out = start.copy()
    result = gemm.matmul(a, b, out, accumulate=accumulate, alpha=alpha, use=use)
    assert result is out
    # the oracle in x87's 64-bit significand: a float64 oracle rounds as often as the float64
    # GEMM it checks, and they could land an ulp apart (hypothesis found one: out ≈ start)
    wide = np.longdouble
    alpha_wide = wide(a.dtype.type(alpha))  # the BLAS is handed alpha in the operands' dtype
    exact = (alpha_wide * (a.astype(wide) @ b.astype(wide))
             + (start.astype(wide) if accumulate else 0))
    # out + alpha a b is a sum of K + 1 terms, and a BLAS may add them in any order: a blocked
    # GEMM adds each block of K's partial products into out, rounding at |start|'s scale each
    # time (MKL on an AMD EPYC: 2 ulps of out where a·b ≪ start, found by hypothesis). The
    # bound of any order: (K + 1)·eps·(|start| + |alpha| Σ|a||b|); alpha ≠ 1 one rounding more
    atol = (abs(float(alpha_wide)) * product_atol(a, b, a.dtype,
                                                  extra=int(accumulate) + int(alpha != 1))
            + (np.abs(start) * (a.shape[1] + 1) * EPS[a.dtype] if accumulate else 0))
    assert (np.abs(out - exact) <= atol + np.finfo(a.dtype).tiny).all()


@pytest.mark.parametrize("use", USES)
def test_beta_zero_ignores_garbage_in_out(use):
    # the kernel's score buffers are reused: NaN left in one must not reach the next tile
    rng = np.random.default_rng(2)
    a, b = (rng.standard_normal(s).astype(np.float32) for s in ((9, 4), (4, 7)))
    out = np.full((9, 7), np.nan, np.float32)
    gemm.matmul(a, b, out, use=use)
    assert np.isfinite(out).all()
    np.testing.assert_allclose(out, a @ b, rtol=1e-5)


@pytest.mark.parametrize("use", USES)
def test_falls_back_where_mkl_cannot_read(use):
    rng = np.random.default_rng(3)
    a16 = rng.standard_normal((5, 3)).astype(np.float16)
    b16 = rng.standard_normal((3, 4)).astype(np.float16)
    np.testing.assert_array_equal(gemm.matmul(a16, b16, use=use), a16 @ b16)
    strided = rng.standard_normal((10, 8)).astype(np.float32)[::2, ::2]  # no unit stride
    b = rng.standard_normal((4, 3)).astype(np.float32)
    np.testing.assert_allclose(gemm.matmul(strided, b, use=use), strided @ b, rtol=1e-5)
    into = np.ones((5, 3), np.float32)  # alpha and accumulate on the fallback too
    gemm.matmul(strided, b, into, accumulate=True, alpha=0.5, use=use)
    np.testing.assert_allclose(into, 1 + 0.5 * (strided @ b), rtol=1e-5)
    np.testing.assert_allclose(gemm.matmul(strided, b, alpha=-2.0, use=use), -2 * (strided @ b),
                               rtol=1e-5)
    empty = gemm.matmul(np.zeros((0, 3), np.float32), b[:3], use=use)
    assert empty.shape == (0, 3)
    mixed = gemm.matmul(b.astype(np.float64), b.T, use=use)  # float64 @ float32: NumPy's rules
    assert mixed.dtype == np.float64


def test_choice_is_checked_and_explained():
    with pytest.raises(ValueError, match="gemm must be one of"):
        kernel_config(gemm="openblas").__enter__()
    assert "asked for" in gemm.describe("numpy")
    line = gemm.describe("auto")
    assert line.startswith("MKL") or "NumPy" in line


@needs_mkl
@pytest.mark.parametrize("mask", [None, "causal", "window"])
def test_kernel_paths_agree_within_rounding(mask):
    # The same problem on MKL's and NumPy's GEMMs, both within the reference's bound, through
    # real tiles with threads, GQA and a ragged edge.
    rng = np.random.default_rng(4)
    q = rng.standard_normal((2, 4, 700, 32)).astype(np.float32)
    k = rng.standard_normal((2, 2, 900, 32)).astype(np.float32)
    v = rng.standard_normal((2, 2, 900, 16)).astype(np.float32)
    m = {None: None, "causal": qkv.causal(), "window": qkv.window(100, 20)}[mask]
    ref = reference.attention(q, k, v, mask=m)
    for use in ("mkl", "numpy"):
        with kernel_config(gemm=use, small=0, workers=2, thread_min_work=0):
            out = qkv.attention(q, k, v, mask=m)
        np.testing.assert_allclose(out.astype(np.float64), ref, rtol=0,
                                   atol=output_atol(q, k, v))


def test_mkl_choice_refused_by_name_when_absent(monkeypatch):
    monkeypatch.setattr(gemm, "mkl_available", lambda: False)
    with pytest.raises(ModuleNotFoundError, match=r"gemm=.mkl.*mkl"):
        gemm.resolve("mkl")
    assert gemm.resolve("auto") == "numpy"


@pytest.mark.parametrize("use", USES)
def test_a_lone_row_is_read_as_packed_whatever_its_stride(use):
    # NumPy gives a length-1 axis any stride (0 here); the paged and contiguous kernels slice
    # the same row differently and must get the same bits (tests/test_paged_cache.py)
    rng = np.random.default_rng(5)
    row = np.broadcast_to(rng.standard_normal(8).astype(np.float32), (1, 8))
    b = rng.standard_normal((8, 3)).astype(np.float32)
    assert row.strides[0] == 0
    np.testing.assert_array_equal(gemm.matmul(row, b, use=use),
                                  gemm.matmul(np.ascontiguousarray(row), b, use=use))
