"""attention_weights (exact rows on demand) and explain (the Trace of every step)."""

import json

import numpy as np
import pytest

import qkv
from helpers import BACKEND_PARAMS, KERNEL_PATHS, kernel_path, output_atol
from qkv import reference


@pytest.mark.parametrize("path", KERNEL_PATHS)
@pytest.mark.parametrize("backend", BACKEND_PARAMS)
@pytest.mark.parametrize("rows", [None, [0], [39, 3, 3, -1], slice(5, 30, 7)])
def test_weights_rows_match_reference(path, backend, rows):
    rng = np.random.default_rng(0)
    q = rng.standard_normal((2, 4, 40, 8)).astype(np.float32)
    k = rng.standard_normal((2, 2, 45, 8)).astype(np.float32)
    mask = qkv.causal() & qkv.padding([45, 30])
    with kernel_path(path, backend):
        w = qkv.attention_weights(q, k, mask=mask, rows=rows, bias=qkv.alibi())
    full = reference.attention_weights(q, k, mask=mask, bias=qkv.alibi())
    expected = full if rows is None else full[..., np.arange(40)[rows] if isinstance(rows, slice)
                                              else np.asarray(rows), :]
    atol = output_atol(q, k, np.ones((45, 1), np.float32), bias=np.array([45.0]))
    np.testing.assert_allclose(w, expected, atol=atol, rtol=0)
    sums = w.sum(axis=-1)
    assert np.all(np.isclose(sums, 1, atol=1e-5) | (sums == 0))


def test_weights_of_one_row_of_a_long_sequence_need_no_square_matrix():
    import tracemalloc

    rng = np.random.default_rng(1)
    n = 20000
    q = rng.standard_normal((n, 16)).astype(np.float32)
    k = rng.standard_normal((n, 16)).astype(np.float32)
    tracemalloc.start()
    w = qkv.attention_weights(q, k, rows=[n - 1], mask=qkv.causal())
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert w.shape == (1, n)
    assert peak < 8 * 2**20  # the full matrix would be 1.6 GB
    np.testing.assert_allclose(w[0], reference.attention_weights(q[-1:], k)[0], atol=1e-6)


def test_trace_fields_and_shapes():
    rng = np.random.default_rng(2)
    q, k, v = rng.standard_normal((2, 3, 4)), rng.standard_normal((2, 5, 4)), \
        rng.standard_normal((2, 5, 2))
    trace = qkv.explain(q, k, v, mask=qkv.causal())
    assert trace.scores.shape == trace.scaled.shape == trace.weights.shape == (2, 3, 5)
    assert trace.allowed.dtype == bool and trace.output.shape == (2, 3, 2)
    np.testing.assert_allclose(trace.scores, q @ np.swapaxes(k, -1, -2))
    np.testing.assert_allclose(trace.scaled, trace.scores / 2)
    np.testing.assert_array_equal(trace.allowed, np.broadcast_to(
        qkv.causal().to_dense(3, 5), (2, 3, 5)))
    np.testing.assert_allclose(trace.output, qkv.attention(q, k, v, mask=qkv.causal()))
    assert trace.mask == "causal()"


def test_trace_text_json_html():
    trace = qkv.explain([[1, 0]], [[1, 0], [0, 1], [0.7, 0.7]], [[2, 0], [0, 2], [1, 1]],
                        mask=qkv.padding(2))
    text = str(trace)
    for expected in ("scores = Q Kᵀ", "1/√2 = 0.7071", "0.7071", "0.6698", "allowed", "0.3302",
                     "output = weights V"):
        assert expected in text
    d = trace.to_dict()
    json.dumps(d, allow_nan=False)  # strict JSON
    assert d["weights"][0][2] == 0.0 and d["allowed"][0] == [True, True, False]
    html = trace._repr_html_()
    assert "<table" in html and "0.6698" in html
    assert "<script" not in html and "http" not in html


def test_trace_lse_of_an_empty_row_is_null_in_json():
    trace = qkv.explain(np.ones((2, 2)), np.ones((3, 2)), np.ones((3, 2)),
                        mask=qkv.padding(3, query_lengths=1))
    d = trace.to_dict()
    assert d["lse"][1] is None and d["lse"][0] is not None
    assert d["output"][1] == [0.0, 0.0]
