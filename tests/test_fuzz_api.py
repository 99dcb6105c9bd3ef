"""Nothing silent (issue 23): each cause the fuzzer found, as a regression test, and a
fixed-seed run of the fuzzer itself (tests/fuzz_api.py; the long run is documented there)."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import qkv
from fuzz_api import FAILING, run, table
from helpers import BACKEND_PARAMS, grad_atols, output_atol
from qkv.engine import has_numba, kernel_config
from qkv.engine.masks import Layout


def test_the_fuzzer_finds_nothing_wrong_in_a_fixed_seed_run():
    counts, failures = run(400, seed_=23, show=5)
    assert sum(counts.values()) >= 300  # Hypothesis drew (nearly) all it was asked for
    assert counts["correct"] > 0 and counts["clear error"] > 0
    assert not any(counts[c] for c in FAILING), table(counts) + "".join(
        f"\n[{o}] {case}\n    {detail}" for o, case, detail in failures)


# -- 1. rows= in any order reads those rows ---------------------------------------------------
@pytest.mark.parametrize("backend", BACKEND_PARAMS)
@pytest.mark.parametrize("rows", [[0, 4, 2], [5, 1, 3, 0, 4, 2], [2, 0, 1], [-1, 0]])
def test_weights_of_unsorted_rows_are_those_rows(backend, rows):
    rng = np.random.default_rng(0)
    q, k, b = (rng.standard_normal((6, 6)) for _ in range(3))
    allow = rng.random((6, 6)) < 0.7
    with kernel_config(backend=backend, small=0, tile_q=2, tile_k=2, split_min=1):
        for kw in ({"bias": b}, {"mask": qkv.allow(allow)}, {"mask": qkv.deny(allow)},
                   {"mask": qkv.causal()}, {"mask": qkv.window(1, 2)}):
            full = qkv.reference.attention_weights(q, k, **kw)
            got = qkv.attention_weights(q, k, rows=rows, **kw)
            np.testing.assert_allclose(got, full[rows], atol=1e-12, err_msg=str(kw))


def test_rows_given_as_bools_are_refused():
    q = np.ones((3, 2))
    for rows in (np.array([True, False]), [True, False], [0, True]):
        with pytest.raises(TypeError, match="rows must be query indices"):
            qkv.attention_weights(q, q, rows=rows)


# -- 2. a NaN in a masked slot does not switch the overflow guard off -------------------------
def test_a_nan_in_a_masked_slot_keeps_the_overflow_guard():
    q = np.full((1, 1, 4, 2), 2e19, np.float32)
    k = q.copy()
    k[0, 0, 3, 0] = np.nan  # the padded slot
    for kk in (q, k):  # refused with or without the NaN
        with pytest.raises(ValueError, match="would overflow float32"):
            qkv.attention(q, kk, q, mask=qkv.padding([3]), check_finite=False)


# -- 3. lengths past the arrays are refused; bounds never wrap ---------------------------------
def test_lengths_past_the_arrays_are_refused():
    """Lengths that place positions (the position masks' and alibi's alignment) must fit the
    arrays; padding's lengths only deny keys, and one past the array denies none."""
    x = np.ones((1, 1, 4, 2))
    for mask in (qkv.window(2**30, key_lengths=[2**30 + 2]), qkv.causal(key_lengths=[5]),
                 qkv.prefix(1, query_lengths=[5]), qkv.alibi(key_lengths=[5])):
        with pytest.raises(ValueError, match="lengths must be ≤"):
            qkv.attention(x, x, x, **{"bias" if isinstance(mask, qkv.engine.bias.Bias)
                                      else "mask": mask})
    w = qkv.attention_weights(x, x, mask=qkv.window(2**30, key_lengths=[4]))
    np.testing.assert_allclose(w[0, 0, 3], [0.25] * 4)


def test_window_bounds_past_2_to_the_30_hold_at_positions_past_it():
    """The int32 shortcut (a bound ≥ 2**30 cannot cut a grid of positions < 2**30) must not be
    taken on an int64 grid: at position 2**31 a window of 2**30 still cuts."""
    n = 2**31 + 4
    bound = qkv.window(2**30).bind(Layout((), 1, n, n))
    qi, kj = np.array([n - 1]), np.array([0, n - 1 - 2**30 - 1, n - 1 - 2**30, n - 1])
    np.testing.assert_array_equal(bound.block(qi, kj, 0, 0), [[False, False, True, True]])


# -- 5., 6. the backward: its own weights sum to 1, or the lse is refused ----------------------
@pytest.mark.parametrize("backend", BACKEND_PARAMS)
def test_the_backward_is_right_with_narrow_key_tiles_and_huge_scores(backend):
    """Scores ~1e16 are rounded to a few units, differently by GEMMs of other shapes: the
    forward's lse (default tiles) does not fit the backward's scores (1-key tiles) and must be
    corrected, or each row's weights sum to e^±(a few) and dv is off by that factor."""
    rng = np.random.default_rng(1)
    q, k = (rng.standard_normal((8, 4)) * 1e8 for _ in range(2))
    v, dout = (rng.standard_normal((8, 4)) for _ in range(2))
    want = qkv.reference.attention_backward(q, k, v, dout)
    out, lse = qkv.attention(q, k, v, return_lse=True)  # default tiles
    for config in ({"small": 0, "tile_k": 2}, {"small": 0, "tile_k": 1, "tile_q": 3}, {}):
        with kernel_config(backend=backend, **config):
            dq, dk, dv = qkv.attention_backward(q, k, v, out, lse, dout)
        # the weights the backward used sum to 1 per row: Σ_j dv_j = Σ_i dout_i (Σ_j P_ij = 1)
        np.testing.assert_allclose(dv.sum(axis=0), dout.sum(axis=0), atol=1e-12 * 8,
                                   err_msg=str(config))
        for g, w, a in zip((dq, dk, dv), want, grad_atols(q, k, v, dout), strict=True):
            np.testing.assert_allclose(g, w, atol=a)


@pytest.mark.parametrize("shift", [-800.0, 800.0, 1.0, -1e-3])
def test_an_lse_that_belongs_to_other_inputs_is_refused(shift):
    rng = np.random.default_rng(2)
    q, k, v = (rng.standard_normal((2, 5, 3)) for _ in range(3))
    out, lse = qkv.attention(q, k, v, return_lse=True)
    with pytest.raises(ValueError, match="lse does not belong"):
        qkv.attention_backward(q, k, v, out, lse + shift, np.ones_like(out))
    other = qkv.attention(q * 2, k, v, return_lse=True)[1]
    with pytest.raises(ValueError, match="lse does not belong"):
        qkv.attention_backward(q, k, v, out, other, np.ones_like(out))


# -- 7. float32's backward does not overflow where the gradient is in range --------------------
@pytest.mark.parametrize("backend", BACKEND_PARAMS)
def test_a_tiny_scale_with_huge_q_and_v_keeps_the_float32_backward_finite(backend):
    rng = np.random.default_rng(2)
    q = (rng.standard_normal((4, 3)) * 1e18).astype(np.float32)
    k = rng.standard_normal((4, 3)).astype(np.float32)
    v = (rng.standard_normal((4, 3)) * 1e18).astype(np.float32)
    dout = np.full((4, 3), 100, np.float32)
    want = qkv.reference.attention_backward(q, k, v, dout, scale=1e-30)
    for config in ({}, {"small": 0, "tile_k": 2}):
        with kernel_config(backend=backend, **config):
            out, lse = qkv.attention(q, k, v, scale=1e-30, return_lse=True)
            got = qkv.attention_backward(q, k, v, out, lse, dout, scale=1e-30)
        atols = grad_atols(q, k, v, dout, 1e-30)
        for g, w, a in zip(got, want, atols, strict=True):
            assert np.isfinite(g).all()
            np.testing.assert_allclose(g, w, atol=a + 1e-6 * np.abs(w).max())


# -- 8. garbage in masked slots leaks no warning ------------------------------------------------
@pytest.mark.parametrize("backend", BACKEND_PARAMS)
def test_nan_and_inf_in_masked_slots_leak_no_warning(backend):
    rng = np.random.default_rng(3)
    q, k, v = (rng.standard_normal((2, 1, 5, 3)) for _ in range(3))
    want = qkv.attention(q, k[..., :3, :], v[..., :3, :])
    k[..., 3:, :] = np.inf
    k[0, 0, 4, 1] = np.nan
    v[..., 3:, :] = np.nan
    for config in ({}, {"small": 0, "tile_k": 2, "tile_q": 2}):
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            with kernel_config(backend=backend, **config):
                out, lse = qkv.attention(q, k, v, mask=qkv.padding([3, 3]), check_finite=False,
                                         return_lse=True)
                w = qkv.attention_weights(q, k, mask=qkv.padding([3, 3]), check_finite=False)
                grads = qkv.attention_backward(q, k, v, out, lse, np.ones_like(out),
                                               mask=qkv.padding([3, 3]), check_finite=False)
        np.testing.assert_allclose(out, want, atol=output_atol(q, k[..., :3, :], v[..., :3, :]))
        assert not w[..., 3:].any() and all(np.isfinite(g[..., :3, :]).all() for g in grads)


@pytest.mark.parametrize("backend", BACKEND_PARAMS)
def test_a_nan_score_in_an_allowed_slot_makes_its_row_nan_on_both_steps(backend):
    q, k, v = np.ones((1, 1, 2, 2), np.float32), np.ones((1, 1, 3, 2), np.float32), \
        np.ones((1, 1, 3, 2), np.float32)
    k[0, 0, 1, 0] = np.nan
    with kernel_config(backend=backend):
        out = qkv.attention(q, k, v, check_finite=False)
    assert np.isnan(out).all()  # not a weight of 0 that drops the key silently


# -- 9. empty problems give empty results -------------------------------------------------------
def test_zero_size_problems_give_the_empty_result():
    z = np.zeros
    assert qkv.attention(z((2, 1, 3, 4)), z((2, 1, 3, 4)), z((2, 1, 3, 0))).shape == (2, 1, 3, 0)
    assert qkv.attention(z((2, 1, 0, 4)), z((2, 1, 3, 4)), z((2, 1, 3, 2)),
                         bias=z((2, 1, 0, 3))).shape == (2, 1, 0, 2)
    assert qkv.attention(z((2, 1, 3, 4)), z((2, 1, 0, 4)), z((2, 1, 0, 2)),
                         bias=z((3, 0))).shape == (2, 1, 3, 2)
    docs = qkv.documents(z((2, 0), int), z((2, 3), int))
    assert qkv.attention(z((2, 1, 0, 4)), z((2, 1, 3, 4)), z((2, 1, 3, 2)),
                         mask=docs).shape == (2, 1, 0, 2)
    out, lse = qkv.attention(z((2, 1, 3, 4)), z((2, 1, 3, 4)), z((2, 1, 3, 0)), return_lse=True)
    grads = qkv.attention_backward(z((2, 1, 3, 4)), z((2, 1, 3, 4)), z((2, 1, 3, 0)), out, lse,
                                   out)
    assert [g.shape for g in grads] == [(2, 1, 3, 4), (2, 1, 3, 4), (2, 1, 3, 0)]


# -- 10. every entry point checks its arguments --------------------------------------------------
def test_every_entry_point_refuses_bad_arguments_by_name():
    q = np.random.default_rng(0).standard_normal((3, 2))
    cases = [
        (lambda: qkv.merge(np.zeros((2, 3)), np.zeros(2), np.zeros((3, 3)), np.zeros(3)),
         ValueError, "out_b has shape"),
        (lambda: qkv.merge([[1.0]], [0.0], [[1.0]], [0.0]), TypeError, "out is updated in place"),
        (lambda: qkv.merge(np.zeros((2, 3)), np.zeros(2), np.zeros((2, 3), complex),
                           np.zeros(2)), TypeError, "out_b"),
        (lambda: qkv.merge(np.zeros((2, 3), int), np.zeros(2), np.zeros((2, 3)), np.zeros(2)),
         TypeError, "out is updated in place, so it must be a float"),
        (lambda: qkv.merge(np.zeros((2, 3)), np.zeros(3), np.zeros((2, 3)), np.zeros(3)),
         ValueError, "lse has shape"),
        (lambda: qkv.explain(q, q, None), TypeError, "explain needs v"),
        (lambda: qkv.attention(q, q, None), TypeError, "attention needs v"),
        (lambda: qkv.attention_backward(q, q, q, [[1, 2], [1]], np.zeros(3), q), ValueError,
         "out is ragged"),
        (lambda: qkv.nn.MultiHeadAttention(4, 2).forward(np.zeros(4)), ValueError,
         "x has shape"),
        (lambda: qkv.nn.MultiHeadAttention(4, 2).forward([[1.0] * 4, [1.0]]), ValueError,
         "x is ragged"),
        (lambda: qkv.nn.KVCache(1)[0].append([[[1.0]], [[1.0, 2.0]]], np.zeros((1, 1, 1))),
         ValueError, "k_new is ragged"),
    ]
    for call, kind, words in cases:
        with pytest.raises(kind, match=words):
            call()


def test_merge_still_merges_exactly():
    rng = np.random.default_rng(4)
    q, k, v = (rng.standard_normal((2, 4, 3)) for _ in range(3))
    full = qkv.attention(q, k, v)
    out, lse = qkv.attention(q, k[:, :2], v[:, :2], return_lse=True)
    qkv.merge(out, lse, *qkv.attention(q, k[:, 2:], v[:, 2:], return_lse=True))
    np.testing.assert_allclose(out, full, atol=1e-14)


# -- issue 36: the edges the independent fuzzer found -----------------------------------------
# Every rendering of every trace explain returns, zero-size axes included.
@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(lead=st.sampled_from([(), (2,), (0, 2), (2, 1), (3, 1)]), nq=st.integers(0, 3),
       nk=st.integers(0, 3), dv=st.integers(0, 2),
       mask=st.sampled_from(["none", "causal", "documents", "composed"]),
       dtype=st.sampled_from([np.float16, np.float32, np.float64]))
def test_every_rendering_of_every_trace_works(lead, nq, nk, dv, mask, dtype):
    rng = np.random.default_rng(0)
    lead_kv = (*lead[:-1], 1) if len(lead) == 2 else lead  # (batch, Hq) reads 1 kv head
    q = rng.standard_normal((*lead, nq, 2)).astype(dtype)
    k = rng.standard_normal((*lead_kv, nk, 2)).astype(dtype)
    v = rng.standard_normal((*lead_kv, nk, dv)).astype(dtype)
    m = {"none": None, "causal": qkv.causal(),
         "documents": qkv.documents(np.zeros(nq, np.int64), np.zeros(nk, np.int64)),
         "composed": qkv.causal() | (qkv.window(0, 3) & ~qkv.prefix(1))}[mask]
    trace = qkv.explain(q, k, v, mask=m)
    text = str(trace)
    assert text.startswith(f"Attention trace: {nq} quer")
    json.dumps(trace.to_dict(), allow_nan=False)
    assert trace._repr_html_().startswith('<div class="qkv-trace"')
    if trace.weights.size:
        assert "<svg" in qkv.show(trace)._repr_html_() or "<img" in qkv.show(trace)._repr_html_()
    else:  # no weight to draw: said so, naming the shape, never an IndexError
        with pytest.raises(ValueError, match=r"show: this trace's weights have shape .*"
                                             r"there is no weight to draw"):
            qkv.show(trace)
    if nq and trace.allowed.size == 0 and np.prod(lead, dtype=int):  # planes with no key
        assert "there are no keys" in text
    if not np.prod(lead, dtype=int):
        assert "no batch/head planes" in text


def test_the_issue_36_traces_render():
    """The two traces of the issue, as given (the second with its padding on a batch)."""
    t1 = qkv.explain(np.zeros((3, 2, 0, 2)), np.zeros((3, 1, 0, 2)), np.zeros((3, 1, 0, 1)),
                     mask=qkv.documents(np.zeros((1, 0), np.int64)))
    t2 = qkv.explain(np.ones((1, 2, 31, 8), np.float32), np.zeros((1, 2, 0, 8), np.float32),
                     np.zeros((1, 2, 0, 8), np.float32), scale=0.001,
                     mask=qkv.causal() | (qkv.padding([2]) | qkv.window(0, 3)))
    for t in (t1, t2):
        assert "· output = weights V" in str(t) and t._repr_html_()
    assert "there are no queries" in str(t1)
    assert "there are no keys" in str(t2) and "(no columns: 31 × 0)" in str(t2)


# Extreme magnitudes × narrow tiles × dtypes: forward → backward with the forward's own lse,
# judged against the fuzzer's float64 formula. Warnings are errors here (pyproject), so an
# overflow in a cast surfaces. Each outcome is correct or a clear error, never the backward
# refusing the lse its own forward returned.
EDGE = {np.float16: 6e4, np.float32: 1e17, np.float64: 1e150}


@settings(max_examples=120, deadline=None, suppress_health_check=list(HealthCheck))
@given(dtype=st.sampled_from([np.float16, np.float32, np.float64]),
       shape=st.sampled_from([((6, 9, 3), (3, 16, 3), 0), ((8, 16), (40, 16), 8),
                              ((2, 5, 4), (2, 7, 4), 2), ((1, 3, 2), (1, 4, 2), 3)]),
       mag=st.sampled_from([1.0, 1e-3, 0.3]),
       mask=st.sampled_from([("none",), ("not", ("window", None, 0, None, None)),
                             ("window", None, 0, None, None), ("window", 1, 1, None, None)]),
       tiles=st.sampled_from([(1, 1), (2, 1), (3, 2), (512, 512)]),
       dlse=st.booleans(), dropout=st.sampled_from([0.0, 0.5, 0.9]),
       deterministic=st.booleans(),
       backend=st.sampled_from(["numpy", "compiled"] if has_numba() else ["numpy"]),
       seed_=st.integers(0, 2**16))
def test_the_backward_takes_its_own_forwards_lse_at_every_scale(
        dtype, shape, mag, mask, tiles, dlse, dropout, deterministic, backend, seed_):
    from fuzz_api import FAILING as failing
    from fuzz_api import Problem, backward_case, classify

    rng = np.random.default_rng(seed_)
    (qs, ks, dv), top = shape, float(np.finfo(dtype).max)

    def arr(s, m):
        return np.clip(rng.standard_normal(s) * m, -top, top).astype(dtype)

    two_d = len(qs) == 2
    pr = Problem(arr(qs, EDGE[dtype] * mag), arr(ks, EDGE[dtype] * mag),
                 arr((*ks[:-1], dv), 1.0), ("none",) if two_d else mask, None, None, None,
                 False, dropout, 7)
    case = backward_case(pr, 0.0, dlse, False, extreme=True, deterministic=deterministic)
    case.config = dict(tile_q=tiles[0], tile_k=tiles[1], tile_k_unmasked=tiles[1], small=1,
                       split_min=1, backend=backend)
    outcome, detail = classify(case)
    assert outcome not in failing, f"[{outcome}] {case}\n    {detail}"
    assert "lse does not belong" not in detail, detail
