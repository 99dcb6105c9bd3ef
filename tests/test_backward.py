"""Gradients: the reference backward against finite differences, the tiled backward against it."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import qkv
from helpers import BACKEND_PARAMS, KERNEL_PATHS, grad_atols, kernel_path
from qkv import reference
from qkv.nn.gradcheck import numerical_grad


@pytest.mark.parametrize("mask", [None, qkv.causal(), qkv.padding([3, 0]) & qkv.window(2)],
                         ids=["dense", "causal", "padding&window"])
def test_reference_backward_matches_finite_differences(mask):
    rng = np.random.default_rng(0)
    q = rng.standard_normal((2, 4, 5, 3))
    k = rng.standard_normal((2, 2, 5, 3))  # GQA: 2 query heads per kv head
    v = rng.standard_normal((1, 2, 5, 2))  # broadcast along the batch
    dout = rng.standard_normal((2, 4, 5, 2))

    def loss():
        return float((reference.attention(q, k, v, mask=mask) * dout).sum())

    dq, dk, dv = reference.attention_backward(q, k, v, dout, mask=mask)
    # Central differences have error O(eps²·f''') ≈ 1e-10 here, plus rounding ~1e-16/eps.
    for grad, x in ((dq, q), (dk, k), (dv, v)):
        np.testing.assert_allclose(grad, numerical_grad(loss, x), atol=1e-8, rtol=0)


@st.composite
def grad_problems(draw):
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    dtype = draw(st.sampled_from([np.float32, np.float64]))
    hkv = draw(st.integers(1, 2))
    hq = hkv * draw(st.integers(1, 2))
    nq, nk = draw(st.integers(1, 30)), draw(st.integers(1, 30))
    d = draw(st.integers(1, 6))
    q = rng.standard_normal((2, hq, nq, d)).astype(dtype)
    k = rng.standard_normal((draw(st.sampled_from([1, 2])), hkv, nk, d)).astype(dtype)
    v = rng.standard_normal((2, hkv, nk, draw(st.integers(1, 5)))).astype(dtype)
    mask = draw(st.sampled_from([
        None, qkv.causal(), qkv.window(3, 1), qkv.padding([nk // 2, 0], [nq, nq // 2]),
        qkv.prefix(2) | qkv.documents(np.arange(nq) % 2, np.arange(nk) % 2)]))
    bias = draw(st.sampled_from([None, qkv.alibi()]))
    return q, k, v, mask, bias


@pytest.mark.parametrize("path", KERNEL_PATHS)
@pytest.mark.parametrize("backend", BACKEND_PARAMS)
@given(problem=grad_problems())
def test_tiled_backward_matches_reference(path, backend, problem):
    q, k, v, mask, bias = problem
    rng = np.random.default_rng(1)
    with kernel_path(path, backend):
        out, lse = qkv.attention(q, k, v, mask=mask, bias=bias, return_lse=True)
        dout = rng.standard_normal(out.shape).astype(q.dtype)
        grads = qkv.attention_backward(q, k, v, out, lse, dout, mask=mask, bias=bias)
    expected = reference.attention_backward(q, k, v, dout, mask=mask, bias=bias)
    bias_mag = None if bias is None else np.array([30.0])  # alibi: slope·distance ≤ 30 here
    atols = grad_atols(q, k, v, dout, bias=bias_mag)
    for grad, ref, x, atol in zip(grads, expected, (q, k, v), atols, strict=True):
        assert grad.shape == x.shape and grad.dtype == x.dtype
        np.testing.assert_allclose(grad, ref, atol=atol, rtol=0)


def test_fully_masked_rows_get_zero_gradient():
    rng = np.random.default_rng(2)
    q, k, v = (rng.standard_normal((6, 4)) for _ in range(3))
    mask = qkv.padding(4, query_lengths=3)
    out, lse = qkv.attention(q, k, v, mask=mask, return_lse=True)
    dq, dk, dv = qkv.attention_backward(q, k, v, out, lse, np.ones_like(out), mask=mask)
    assert not dq[3:].any() and not dk[4:].any() and not dv[4:].any()
    assert np.isfinite(dq).all()


@pytest.mark.parametrize("path", KERNEL_PATHS)
@pytest.mark.parametrize("backend", BACKEND_PARAMS)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_backward_into_adds_the_blocks_gradients_in_place(path, backend, dtype):
    """engine.backward(..., into=(dk, dv)) over two query blocks adds dK, dV of all the queries
    to what the arrays held — the ring's use (blocks of queries against one kv shard)."""
    from qkv import engine

    rng = np.random.default_rng(3)
    q = rng.standard_normal((2, 4, 21, 5)).astype(dtype)
    k = rng.standard_normal((2, 2, 17, 5)).astype(dtype)  # GQA: 2 query heads per kv head
    v = rng.standard_normal((2, 2, 17, 3)).astype(dtype)
    mask = qkv.causal()
    out, lse = qkv.attention(q, k, v, mask=mask, return_lse=True)
    dout = rng.standard_normal(out.shape).astype(dtype)
    start = [rng.standard_normal(x.shape) for x in (k, v)]  # what the accumulators held
    into = tuple(s.astype(dtype) for s in start)
    dq = np.empty(q.shape, dtype)
    with kernel_path(path, backend):
        for rows in (slice(0, 9), slice(9, 21)):
            pos = np.arange(21)[rows]
            p = engine.prepare(q[..., rows, :], k, v, mask, positions=(pos, np.arange(17), 21, 17))
            dq[..., rows, :], dk, dv = engine.backward(p, out[..., rows, :], lse[..., rows],
                                                       dout[..., rows, :], into=into)
            assert dk is into[0] and dv is into[1]
    dq_ref, dk_ref, dv_ref = reference.attention_backward(q, k, v, dout, mask=mask)
    atols = grad_atols(q, k, v, dout)
    eps = np.finfo(dtype).eps
    np.testing.assert_allclose(dq, dq_ref, atol=atols[0], rtol=0)
    for got, s, ref, atol in ((into[0], start[0], dk_ref, atols[1]),
                              (into[1], start[1], dv_ref, atols[2])):
        # the start values and two additions of rounded sums: |start|·eps per addition
        np.testing.assert_allclose(got, s + ref, atol=atol + 4 * eps * np.abs(s).max(), rtol=0)


def test_backward_into_refuses_arrays_of_the_wrong_shape_or_dtype():
    from qkv import engine

    x = np.ones((1, 3, 4), np.float32)
    p = engine.prepare(x, x, x)
    out, lse = qkv.attention(x, x, x, return_lse=True)
    good = np.zeros((1, 1, 3, 4), np.float32)
    for into, error, words in (
            ((good, np.zeros((1, 1, 3, 5), np.float32)), ValueError, "into's dv has shape"),
            ((good, np.zeros((1, 1, 3, 4), np.float64)), ValueError, "dtype float64"),
            ((good, np.zeros((1, 1, 4, 3), np.float32).T), ValueError, "shape"),
            ((good, np.zeros((1, 1, 3, 8), np.float32)[..., ::2]), ValueError, "C-contiguous"),
            ([good, good], TypeError, "into must be a tuple"),
            ((good, good.tolist()), TypeError, "NumPy array")):
        with pytest.raises(error, match=words):
            engine.backward(p, out, lse, np.ones_like(out), into=into)
