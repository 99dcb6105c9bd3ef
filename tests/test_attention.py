"""qkv.attention against the float64 reference, on random and adversarial problems."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import qkv
from helpers import BACKEND_PARAMS, KERNEL_PATHS, kernel_path, lse_atol, output_atol
from qkv import reference

DTYPES = [np.float16, np.float32, np.float64]


def draw_mask(data, batch, heads, nq, nk, rng):
    kind = data.draw(st.sampled_from(
        ["none", "causal", "window", "prefix", "padding", "documents", "allow", "deny",
         "predicate", "and", "or", "not"]), label="mask")

    def simple():
        name = data.draw(st.sampled_from(["causal", "window", "prefix", "padding", "documents",
                                          "allow", "predicate"]))
        return build(name)

    def build(name):
        if name == "causal":
            return qkv.causal()
        if name == "window":
            return qkv.window(data.draw(st.integers(0, 12)), data.draw(st.integers(0, 5)))
        if name == "prefix":
            return qkv.prefix(data.draw(st.integers(0, nk)))
        if name == "padding":
            lengths = rng.integers(0, nk + 1, size=batch)
            qlens = rng.integers(0, nq + 1, size=batch) if data.draw(st.booleans()) else None
            return qkv.padding(lengths, qlens)
        if name == "documents":
            n_docs = data.draw(st.integers(1, 4))
            ids_k = np.sort(rng.integers(0, n_docs, size=(*batch, nk)), axis=-1)
            ids_q = np.sort(rng.integers(0, n_docs, size=(*batch, nq)), axis=-1)
            return qkv.documents(ids_q, ids_k)
        if name in ("allow", "deny"):
            shape = data.draw(st.sampled_from([(nq, nk), (heads, nq, nk), (*batch, 1, nq, nk)]))
            arr = rng.random(shape) < data.draw(st.sampled_from([0.1, 0.5, 0.9]))
            return qkv.allow(arr) if name == "allow" else qkv.deny(arr)
        if name == "predicate":
            mod = data.draw(st.integers(2, 4))
            return qkv.predicate(lambda i, j: (i * 7 + j * 3) % mod != 0)
        raise AssertionError(name)

    if kind == "none":
        return None
    if kind == "and":
        return simple() & simple()
    if kind == "or":
        return simple() | simple()
    if kind == "not":
        return ~simple()
    return build(kind)


@st.composite
def problems(draw):
    data = draw(st.data())
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    dtype = draw(st.sampled_from(DTYPES))
    two_d = draw(st.booleans()) and draw(st.booleans())
    batch = () if two_d else tuple(draw(st.lists(st.integers(1, 3), max_size=2)))
    hkv = 1 if two_d else draw(st.integers(1, 2))
    hq = hkv * (1 if two_d else draw(st.integers(1, 3)))
    nq, nk = draw(st.integers(1, 40)), draw(st.integers(1, 40))
    dk, dv = draw(st.integers(1, 9)), draw(st.integers(1, 6))
    magnitude = draw(st.sampled_from([0.5, 1.0, 3.0]))

    def batch_of():  # each array may broadcast along any batch dim
        return tuple(n if draw(st.booleans()) else 1 for n in batch)

    def make(*shape):
        return (rng.standard_normal(shape) * magnitude).astype(dtype)

    if two_d:
        q, k, v = make(nq, dk), make(nk, dk), make(nk, dv)
    else:
        q = make(*batch_of(), hq, nq, dk)
        k = make(*batch_of(), hkv, nk, dk)
        v = make(*batch_of(), hkv, nk, dv)
        batch = np.broadcast_shapes(q.shape[:-3], k.shape[:-3], v.shape[:-3])
    mask = draw_mask(data, batch, hq, nq, nk, rng)
    bias = None
    choice = draw(st.sampled_from(["none", "none", "dense", "alibi"]))
    if choice == "dense":
        bias = rng.standard_normal((hq, nq, nk) if not two_d else (nq, nk))
    elif choice == "alibi":
        bias = qkv.alibi()
    scale = draw(st.sampled_from([None, None, 0.3, 1.0]))
    return q, k, v, mask, bias, scale


def dense_bias(bias):
    return bias if isinstance(bias, np.ndarray) else None


@pytest.mark.parametrize("path", KERNEL_PATHS)
@pytest.mark.parametrize("backend", BACKEND_PARAMS)
@given(problem=problems())
def test_matches_reference(path, backend, problem):
    q, k, v, mask, bias, scale = problem
    with kernel_path(path, backend):
        out, lse = qkv.attention(q, k, v, mask=mask, bias=bias, scale=scale, return_lse=True)
    ref_out, ref_lse = reference.attention(q, k, v, mask=mask, bias=bias, scale=scale,
                                           return_lse=True)
    assert out.dtype == q.dtype
    assert out.shape == ref_out.shape
    bias_mag = dense_bias(bias)
    if isinstance(bias, qkv.engine.bias.Bias) and bias is not None:  # alibi: |slope·distance| ≤ 40
        bias_mag = np.array([40.0])
    atol = output_atol(q, k, v, scale, bias_mag)
    np.testing.assert_allclose(out.astype(np.float64), ref_out, rtol=0, atol=atol)
    # Rows with no allowed key: exactly zero output and lse = -inf, in both.
    np.testing.assert_array_equal(np.isneginf(lse), np.isneginf(ref_lse))
    empty = np.isneginf(ref_lse)
    assert not out[empty].any()
    finite = ~empty
    np.testing.assert_allclose(lse[finite], ref_lse[finite], rtol=0,
                               atol=lse_atol(q, k, q.dtype, scale, bias_mag))


@pytest.mark.parametrize("dtype", DTYPES)
def test_large_problem_crosses_real_tiles(dtype):
    # The real tile sizes (256 × 512), threads on, ragged edges and GQA.
    rng = np.random.default_rng(5)
    q = rng.standard_normal((1, 4, 700, 24)).astype(dtype)
    k = rng.standard_normal((1, 2, 1100, 24)).astype(dtype)
    v = rng.standard_normal((1, 2, 1100, 8)).astype(dtype)
    for mask in (None, qkv.causal(), qkv.window(100, 20) | qkv.prefix(7)):
        out = qkv.attention(q, k, v, mask=mask)
        ref = reference.attention(q, k, v, mask=mask)
        np.testing.assert_allclose(out.astype(np.float64), ref, atol=output_atol(q, k, v))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("path", KERNEL_PATHS)
@pytest.mark.parametrize("backend", BACKEND_PARAMS)
def test_huge_scores_stay_exact(dtype, path, backend):
    # Scores of ±1e4: a naive exp overflows; the online softmax must not.
    rng = np.random.default_rng(6)
    q = (rng.standard_normal((2, 30, 8)) * 100).astype(dtype)
    k = (rng.standard_normal((2, 40, 8)) * 100).astype(dtype)
    v = rng.standard_normal((2, 40, 3)).astype(dtype)
    assert np.abs(q[0] @ k[0].T).max() > 1e4
    with kernel_path(path, backend):
        out, lse = qkv.attention(q, k, v, return_lse=True, mask=qkv.causal())
    ref, ref_lse = reference.attention(q, k, v, return_lse=True, mask=qkv.causal())
    assert np.isfinite(out).all()
    np.testing.assert_allclose(out, ref, atol=output_atol(q, k, v))
    np.testing.assert_allclose(lse, ref_lse, atol=lse_atol(q, k, dtype), rtol=0)


@pytest.mark.parametrize("path", KERNEL_PATHS)
@pytest.mark.parametrize("backend", BACKEND_PARAMS)
def test_float16_near_overflow(path, backend):
    # float16 tops out at 65504: q·k overflows float16 but not the float32 accumulation, and
    # values near the top of the range come back finite.
    rng = np.random.default_rng(7)
    q = (rng.standard_normal((20, 16)) * 100).astype(np.float16)
    k = (rng.standard_normal((33, 16)) * 100).astype(np.float16)
    v = rng.uniform(-60000, 60000, (33, 4)).astype(np.float16)
    assert np.abs(q.astype(np.float32) @ k.T.astype(np.float32)).max() > 65504
    with kernel_path(path, backend):
        out = qkv.attention(q, k, v, scale=1.0)
    assert out.dtype == np.float16 and np.isfinite(out).all()
    ref = reference.attention(q, k, v, scale=1.0)
    np.testing.assert_allclose(out.astype(np.float64), ref,
                               atol=output_atol(q, k, v, scale=1.0), rtol=0)


@pytest.mark.parametrize("path", KERNEL_PATHS)
@pytest.mark.parametrize("backend", BACKEND_PARAMS)
def test_would_be_subnormal_weights_stay_exact(path, backend):
    # Keys scaled up so most weights fall below float32's smallest normal (the subnormal trap).
    rng = np.random.default_rng(8)
    q = rng.standard_normal((40, 16)).astype(np.float32)
    k = (rng.standard_normal((50, 16)) * 30).astype(np.float32)
    v = rng.standard_normal((50, 4)).astype(np.float32)
    weights = reference.attention_weights(q, k)
    assert ((weights > 0) & (weights < np.finfo(np.float32).tiny)).mean() > 0.01
    with kernel_path(path, backend):
        out = qkv.attention(q, k, v)
        w = qkv.attention_weights(q, k)
    np.testing.assert_allclose(out, reference.attention(q, k, v), atol=output_atol(q, k, v))
    # Weights are an output with values 1: the same first-order bound applies.
    np.testing.assert_allclose(w, weights, rtol=0,
                               atol=output_atol(q, k, np.ones((50, 1), np.float32)))
    assert not ((w > 0) & (w < np.finfo(np.float32).tiny)).any()  # nothing subnormal


@pytest.mark.parametrize("path", KERNEL_PATHS)
@pytest.mark.parametrize("backend", BACKEND_PARAMS)
def test_fully_masked_rows_are_zero_without_warnings(path, backend):
    # pytest turns RuntimeWarnings into errors, so a 0/0 or log(0) here fails the test.
    rng = np.random.default_rng(9)
    q = rng.standard_normal((2, 3, 20, 4)).astype(np.float32)
    k = rng.standard_normal((2, 3, 20, 4)).astype(np.float32)
    v = rng.standard_normal((2, 3, 20, 5)).astype(np.float32)
    mask = qkv.padding([0, 20], [20, 7])  # batch 0: no keys at all; batch 1: rows ≥ 7 padded
    with kernel_path(path, backend):
        out, lse = qkv.attention(q, k, v, mask=mask, return_lse=True)
        weights = qkv.attention_weights(q, k, mask=mask)
    assert not out[0].any() and np.isneginf(lse[0]).all()
    assert not out[1, :, 7:].any() and np.isneginf(lse[1, :, 7:]).all()
    assert not weights[0].any() and not weights[1, :, 7:].any()
    np.testing.assert_allclose(out[1, :, :7], reference.attention(q, k, v, mask=mask)[1, :, :7],
                               atol=output_atol(q, k, v))


def test_empty_sizes():
    q = np.zeros((2, 0, 4), np.float32)
    k = np.zeros((2, 5, 4), np.float32)
    v = np.zeros((2, 5, 3), np.float32)
    assert qkv.attention(q, k, v).shape == (2, 0, 3)
    out, lse = qkv.attention(np.ones((2, 3, 4), np.float32), k[:, :0], v[:, :0],
                             return_lse=True)
    assert out.shape == (2, 3, 3) and not out.any() and np.isneginf(lse).all()


def test_lists_are_float64_and_2d_stays_2d():
    out = qkv.attention([[1, 0]], [[1, 0], [0, 1]], [[1, 2], [3, 4]])
    assert out.shape == (1, 2) and out.dtype == np.float64


def test_cross_attention_decoding_alignment():
    # One new query against Nk cached keys: causal (bottom-right) lets it see every key.
    rng = np.random.default_rng(10)
    x = rng.standard_normal((12, 8))
    full = qkv.attention(x, x, x, mask=qkv.causal())
    last = qkv.attention(x[-1:], x, x, mask=qkv.causal())
    np.testing.assert_allclose(last, full[-1:], rtol=1e-12, atol=1e-14)
