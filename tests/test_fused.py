"""The forward's tile loop compiled whole (engine/step/fused.py): the same bits as the Python
loop it replaces, on the problems it takes, calling MKL's GEMM or NumPy's OpenBLAS's; the others
never reach it; MKL never refuses a call.

The float64 reference checks it too: test_attention's tiled path runs through it."""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import qkv
from helpers import grad_atols, needs_numba, output_atol
from qkv import reference
from qkv.engine import TileStats, gemm, kernel_config
from test_attention import draw_mask

pytestmark = needs_numba

# the BLAS the loop calls: MKL's (the qkv[mkl] extra) and NumPy's own (its wheels' OpenBLAS)
BLASES = [pytest.param("mkl", marks=pytest.mark.skipif(
              gemm.address(np.float32, "mkl") is None, reason="MKL is not installed")),
          pytest.param("numpy", marks=pytest.mark.skipif(
              gemm.address(np.float32, "numpy") is None,
              reason="NumPy's BLAS exports no ILP64 cblas_sgemm"))]

TINY = dict(tile_q=8, tile_k=16, tile_k_unmasked=16, small=0, split_min=2)  # many tiles
TILED = dict(small=0)  # the default tiles, every problem tiled


def both(q, k, v, tiles=TINY, workers=None, blas="mkl", **kwargs):
    """``[(out, lse, stats)]`` of the fused loop and of the Python loop, same tiles, the same
    BLAS's GEMMs both."""
    runs = []
    for fused in (True, False):
        stats = TileStats()
        with kernel_config(**tiles, fused=fused, gemm=blas, backend="compiled", stats=stats,
                           workers=workers):
            out, lse = qkv.attention(q, k, v, return_lse=True, **kwargs)
        runs.append((out, lse, stats))
    return runs


def assert_same_bits(runs):
    (out, lse, stats), (out_py, lse_py, stats_py) = runs
    assert stats.paths["tiled fused"] > 0 and stats_py.paths["tiled fused"] == 0
    np.testing.assert_array_equal(out, out_py)
    np.testing.assert_array_equal(lse, lse_py)
    assert stats.tiles == stats_py.tiles  # the same tiles computed (and counted)


@st.composite
def problems(draw):
    data = draw(st.data())
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    dtype = draw(st.sampled_from([np.float16, np.float32]))
    batch = tuple(draw(st.lists(st.integers(1, 2), max_size=2)))
    hkv = draw(st.integers(1, 2))
    hq = hkv * draw(st.integers(1, 3))
    nq, nk = draw(st.integers(1, 70)), draw(st.integers(1, 70))
    # D ≥ 2: for a one-column operand MKL picks its kernel by how the call describes it
    # (transposed or not), and the two loops describe it differently — 1 ulp apart at most;
    # test_attention checks D = 1 on this loop against the reference
    dk, dv = draw(st.integers(2, 9)), draw(st.integers(2, 6))
    layout = draw(st.sampled_from(["bhnd", "bnhd"]))  # (B, N, H, D) views: rows H·D apart

    def make(heads, n, d):
        x = (rng.standard_normal((*batch, n, heads, d)) * 3).astype(dtype)
        return np.swapaxes(x, -2, -3) if layout == "bnhd" else np.ascontiguousarray(
            np.swapaxes(x, -2, -3))

    q, k, v = make(hq, nq, dk), make(hkv, nk, dk), make(hkv, nk, dv)
    if draw(st.booleans()):
        k.flags.writeable = v.flags.writeable = False
    mask = draw_mask(data, batch, hq, nq, nk, rng)
    return q, k, v, mask


# capfd is read (and emptied) once per example
@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(problem=problems())
@pytest.mark.parametrize("blas", BLASES)
def test_the_fused_loop_is_bitwise_the_python_loop(blas, problem, capfd):
    q, k, v, mask = problem
    runs = both(q, k, v, blas=blas, mask=mask)
    assert_same_bits(runs)
    ref = reference.attention(q, k, v, mask=mask)
    np.testing.assert_allclose(runs[0][0].astype(np.float64), ref, rtol=0,
                               atol=output_atol(q, k, v))
    assert "MKL ERROR" not in capfd.readouterr().out  # MKL prints a refused call and goes on


@pytest.mark.parametrize("blas", BLASES)
@pytest.mark.parametrize("workers", [1, 2])
def test_large_heads_on_default_tiles_and_both_workers(workers, blas):
    rng = np.random.default_rng(0)
    q = rng.standard_normal((2, 4, 1500, 64)).astype(np.float32)
    k, v = (rng.standard_normal((2, 2, 1300, 64)).astype(np.float32) for _ in range(2))
    documents = qkv.documents(np.repeat(np.arange(3), [500, 700, 300]),
                              np.repeat(np.arange(3), [400, 500, 400]))
    for mask in (None, qkv.causal(), qkv.window(300), documents):
        assert_same_bits(both(q, k, v, TILED, workers, blas, mask=mask))


def padded_garbage(seed: int, lengths, stale_v: float):
    """q (3, 2, 40, 16) and k, v (3, 2, 50, 16) float32 whose keys past each batch element's
    length hold huge finite values: k = 1e30 (scores of ~1e31) and v = ``stale_v``."""
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((3, 2, 40, 16)).astype(np.float32)
    k, v = (rng.standard_normal((3, 2, 50, 16)).astype(np.float32) for _ in range(2))
    for b, n in enumerate(lengths):
        k[b, :, n:] = 1e30
        v[b, :, n:] = stale_v
    return q, k, v


@pytest.mark.parametrize("blas", BLASES)
def test_garbage_where_it_must_not_matter(blas):
    # keys past each sequence's length hold huge finite values (scores of 1e31: any weight
    # from them would be inf), in PARTIAL tiles the step masks them before any exponential; a
    # query with no key at all gets 0 and lse = −inf; one key's head (any row stride) works
    lengths = np.array([50, 17, 0])
    q, k, v = padded_garbage(3, lengths, stale_v=-1e30)
    runs = both(q, k, v, blas=blas, mask=qkv.padding(lengths))
    assert_same_bits(runs)
    out, lse, _ = runs[0]
    assert np.isfinite(out).all() and not out[2].any() and (lse[2] == -np.inf).all()
    np.testing.assert_allclose(out[:2], reference.attention(q[:2], k[:2, :, :50], v[:2],
                                                            mask=qkv.padding(lengths[:2])),
                               rtol=0, atol=1e-5)
    one = both(q, k[:, :, :1], v[:, :, :1], blas=blas)
    assert_same_bits(one)
    np.testing.assert_allclose(one[0][0], np.broadcast_to(v[:, :, :1], one[0][0].shape),
                               rtol=0, atol=0)


@pytest.mark.parametrize("case", ["bias", "softcap", "score_mod", "dropout", "unchecked",
                                  "float64", "numpy step", "switched off"])
def test_problems_it_does_not_take_run_the_python_loop(case):
    rng = np.random.default_rng(5)
    dtype = np.float64 if case == "float64" else np.float32
    q, k, v = (rng.standard_normal((1, 2, 300, 16)).astype(dtype) for _ in range(3))
    kwargs = {"bias": dict(bias=rng.standard_normal((2, 300, 300))),
              "softcap": dict(softcap=5.0),
              "score_mod": dict(score_mod=lambda s, b, h, i, j: s - 0.01 * abs(i - j)),
              "dropout": dict(dropout=0.1, dropout_seed=1),
              "unchecked": dict(check_finite=False)}.get(case, {})
    config = {"numpy step": dict(backend="numpy"),
              "switched off": dict(fused=False)}.get(case, {})
    stats = TileStats()
    with kernel_config(small=0, stats=stats, **config):
        qkv.attention(q, k, v, **kwargs)
    assert stats.paths["tiled fused"] == 0


# -- the backward's loop (fused.backward_run) ---------------------------------------------------
def both_backward(q, k, v, tiles=TINY, workers=1, blas="mkl", deterministic=False, **kwargs):
    """``[((dq, dk, dv), stats)]`` of the compiled backward loop and of the Python loop, the
    same forward's out and lse, tiles and BLAS. One worker unless ``deterministic``: dQ's
    per-worker parts are summed in the order the workers took the tiles."""
    out, lse = qkv.attention(q, k, v, return_lse=True, **kwargs)
    dout = np.random.default_rng(7).standard_normal(out.shape).astype(out.dtype)
    runs = []
    for fused in (True, False):
        stats = TileStats()
        with kernel_config(**tiles, fused=fused, gemm=blas, backend="compiled", stats=stats,
                           workers=workers):
            grads = qkv.attention_backward(q, k, v, out, lse, dout,
                                           deterministic=deterministic, **kwargs)
        runs.append((grads, stats))
    return runs


def assert_same_gradients(runs):
    (grads, stats), (grads_py, stats_py) = runs
    assert stats.paths["tiled fused backward"] > 0 and stats_py.paths["tiled fused backward"] == 0
    for name, ours, theirs in zip(("dq", "dk", "dv"), grads, grads_py, strict=True):
        np.testing.assert_array_equal(ours, theirs, err_msg=name)
    assert stats.tiles == stats_py.tiles


@settings(max_examples=40, deadline=None)
@given(problem=problems(), one_column=st.booleans(), deterministic=st.booleans())
@pytest.mark.parametrize("blas", BLASES)
def test_the_fused_backward_is_bitwise_the_python_loop(blas, problem, one_column, deterministic):
    # D = 1 too: the compiled loop describes each operand to the BLAS as gemm.matmul does
    q, k, v, mask = problem
    if one_column:
        q, k, v = q[..., :1], k[..., :1], v[..., :1]
    runs = both_backward(q, k, v, blas=blas, workers=2 if deterministic else 1,
                         deterministic=deterministic, mask=mask)
    assert_same_gradients(runs)
    if q.dtype == np.float16:  # the output the backward reads (Δ = rowsum(dO ∘ O)) is rounded
        return  # to float16, past grad_atols' float32 analysis: test_backward checks float32
    dout = _dout_of(q, k, v, mask)
    expected = reference.attention_backward(q, k, v, dout, mask=mask)
    for grad, ref, atol in zip(runs[0][0], expected, grad_atols(q, k, v, dout), strict=True):
        np.testing.assert_allclose(grad, ref, rtol=0, atol=atol)


def _dout_of(q, k, v, mask):
    out = qkv.attention(q, k, v, mask=mask)
    return np.random.default_rng(7).standard_normal(out.shape).astype(out.dtype)


@pytest.mark.parametrize("blas", BLASES)
def test_the_fused_backward_on_default_tiles_and_both_workers(blas):
    rng = np.random.default_rng(4)
    q = rng.standard_normal((1, 4, 1100, 64)).astype(np.float32)
    k, v = (rng.standard_normal((1, 2, 1300, 64)).astype(np.float32) for _ in range(2))
    for mask in (None, qkv.causal(), qkv.window(300)):
        # dK, dV: one work item owns each key tile, the same bits on any worker; dQ: the
        # deterministic pass, or one worker
        for workers, deterministic in ((2, True), (1, False)):
            assert_same_gradients(both_backward(q, k, v, TILED, workers, blas, deterministic,
                                                mask=mask))
        (dq, dk, dv), _ = both_backward(q, k, v, TILED, 2, blas, mask=mask)[0]
        expected = reference.attention_backward(q, k, v, _dout_of(q, k, v, mask), mask=mask)
        for grad, ref, atol in zip((dq, dk, dv), expected,
                                   grad_atols(q, k, v, _dout_of(q, k, v, mask)), strict=True):
            np.testing.assert_allclose(grad, ref, rtol=0, atol=atol)


@pytest.mark.parametrize("blas", BLASES)
def test_the_fused_backward_ignores_garbage_in_masked_slots(blas):
    # keys past each sequence's length hold huge finite values: dP = dO Vᵀ overflows there,
    # P is 0, so dS must be exactly 0 and no inf or NaN may reach a gradient
    lengths = np.array([50, 17, 1])
    q, k, v = padded_garbage(6, lengths, stale_v=-3e38)
    runs = both_backward(q, k, v, blas=blas, mask=qkv.padding(lengths))
    assert_same_gradients(runs)
    dq, dk, dv = runs[0][0]
    for grad in (dq, dk, dv):
        assert np.isfinite(grad).all()
    for b, n in enumerate(lengths):
        assert not dk[b, :, n:].any() and not dv[b, :, n:].any()


@pytest.mark.parametrize("case", ["bias", "softcap", "dropout", "unchecked",
                                  "float64", "numpy step", "switched off"])
def test_backwards_it_does_not_take_run_the_python_loop(case):
    rng = np.random.default_rng(8)
    dtype = np.float64 if case == "float64" else np.float32
    q, k, v = (rng.standard_normal((1, 2, 300, 16)).astype(dtype) for _ in range(3))
    kwargs = {"bias": dict(bias=rng.standard_normal((2, 300, 300)).astype(dtype)),
              "softcap": dict(softcap=5.0),
              "dropout": dict(dropout=0.1, dropout_seed=1),
              "unchecked": dict(check_finite=False)}.get(case, {})
    config = {"numpy step": dict(backend="numpy"),
              "switched off": dict(fused=False)}.get(case, {})
    with kernel_config(small=0):
        out, lse = qkv.attention(q, k, v, return_lse=True, **kwargs)
    stats = TileStats()
    with kernel_config(small=0, stats=stats, **config):
        qkv.attention_backward(q, k, v, out, lse, out, **kwargs)
    assert sum(stats.paths.values()) > 0 and stats.paths["tiled fused backward"] == 0
