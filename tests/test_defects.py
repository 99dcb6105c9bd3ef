"""Regressions for the defects found by running the peers' own test cases and by fuzzing the
API (engine v2 issue): each must stay fixed on both tile steps."""

import sys
import threading
import warnings

import numpy as np
import pytest

import qkv
from helpers import BACKEND_PARAMS, grad_atols, output_atol
from qkv.engine import kernel_config

RNG = np.random.default_rng(20261203)


def qkv_f32(*shape):
    return (RNG.standard_normal(shape).astype(np.float32) for _ in range(3))


@pytest.fixture(params=[pytest.param((b.values[0], small), marks=b.marks,
                                      id=f"{b.values[0]}-{'small' if small else 'tiled'}")
                         for b in BACKEND_PARAMS for small in (0, 1 << 30)])
def tiled(request):
    """Each tile step on the tiled path (real tile sizes) and on the all-heads-at-once path."""
    backend, small = request.param
    with kernel_config(backend=backend, small=small) as config:
        yield config


# ---- garbage in a masked slot must never reach a result -------------------------------------
def test_bias_on_masked_pairs_gives_no_nan_gradients(tiled):
    # A bias of 90 on the masked (future) pairs: exp(90) overflows float32 if it is ever taken.
    n = 512
    q, k, v = qkv_f32(1, 2, n, 32)
    bias = np.where(np.triu(np.ones((n, n), bool), 1), 90.0, 0.0).astype(np.float32)
    out, lse = qkv.attention(q, k, v, mask=qkv.causal(), bias=bias, return_lse=True)
    dout = RNG.standard_normal(out.shape).astype(np.float32)
    grads = qkv.attention_backward(q, k, v, out, lse, dout, mask=qkv.causal(), bias=bias)
    ref = qkv.reference.attention_backward(q, k, v, dout, mask=qkv.causal(), bias=bias)
    for got, want, atol in zip(grads, ref, grad_atols(q, k, v, dout), strict=True):
        assert np.isfinite(got).all()
        np.testing.assert_allclose(got, want, atol=atol, rtol=0)


def test_stale_huge_values_past_padding_do_not_matter(tiled):
    n, length = 512, 300
    q, k, v = qkv_f32(1, 2, n, 32)
    dout = RNG.standard_normal(q.shape).astype(np.float32)
    mask = qkv.padding([length])
    clean = qkv.attention(q, k, v, mask=mask, return_lse=True)
    clean_grads = qkv.attention_backward(q, k, v, *clean, dout, mask=mask)
    k2, v2 = k.copy(), v.copy()
    k2[..., length:, :] = 1e18  # stale keys: scores of ~1e19 in the masked slots
    v2[..., length:, :] = 3e37  # stale values: dO·v overflows to inf there
    k2[..., length + 1, 0] = np.nan
    out, lse = qkv.attention(q, k2, v2, mask=mask, return_lse=True, check_finite=False)
    grads = qkv.attention_backward(q, k2, v2, out, lse, dout, mask=mask, check_finite=False)
    np.testing.assert_array_equal(out, clean[0])
    np.testing.assert_array_equal(lse, clean[1])
    np.testing.assert_array_equal(grads[0], clean_grads[0])
    for got, want in zip(grads[1:], clean_grads[1:], strict=True):  # real keys: the same;
        np.testing.assert_array_equal(got[..., :length, :], want[..., :length, :])
        assert not got[..., length:, :].any()  # masked keys get exactly no gradient


@pytest.mark.parametrize("score", [3e5, 3e6, 3e7, 3e9])
def test_float32_backward_at_huge_scores_is_consistent_with_the_forward(tiled, score):
    # The weights recomputed from lse must be the forward's: scores and lse in the same units,
    # so exp(s_max − lse) is exactly what the forward summed. dV = Pᵀ dO then matches float64.
    n, d = 512, 16
    q, k, v = (RNG.standard_normal((n, d)) for _ in range(3))
    q *= score / np.abs(q @ k.T / np.sqrt(d)).max()
    q, k, v = (x.astype(np.float32) for x in (q, k, v))
    dout = RNG.standard_normal((n, d)).astype(np.float32)
    out, lse = qkv.attention(q, k, v, mask=qkv.causal(), return_lse=True)
    dq, dk, dv = qkv.attention_backward(q, k, v, out, lse, dout, mask=qkv.causal())
    ref = qkv.reference.attention_backward(q, k, v, dout, mask=qkv.causal())
    assert all(np.isfinite(g).all() for g in (dq, dk, dv))
    # P is one-hot at these scores, so dV is a sum of dO rows: float32's rounding of that sum.
    np.testing.assert_allclose(dv, ref[2], atol=8 * 2**-24 * n * np.abs(dout).max(), rtol=0)
    for got, want, atol in zip((dq, dk), ref[:2], grad_atols(q, k, v, dout)[:2], strict=True):
        np.testing.assert_allclose(got, want, atol=atol, rtol=0)


# ---- overflow must not read as masking ----------------------------------------------------
@pytest.mark.parametrize(("what", "call"), [
    ("q·k", lambda: qkv.attention(np.full((2, 4), 1e20, np.float32),
                                  np.full((3, 4), 1e20, np.float32), np.ones((3, 2), np.float32))),
    ("scale", lambda: qkv.attention(*qkv_f32(8, 4), scale=1e39)),
    ("bias", lambda: qkv.attention(*qkv_f32(4, 4), bias=np.full((4, 4), 1e39))),
    ("alibi", lambda: qkv.attention(*qkv_f32(2, 4, 4), bias=qkv.alibi([-1e300, -1e300]))),
    ("weights", lambda: qkv.attention_weights(np.full((2, 4), 1e20, np.float32),
                                              np.full((3, 4), 1e20, np.float32))),
])
def test_scores_that_would_overflow_are_refused(what, call):
    with pytest.raises(ValueError, match="would overflow float32"):
        call()


def test_overflow_sized_but_finite_float64_is_computed():
    q = np.full((2, 4), 1e20)
    k = np.array([[1e20, 1e20, 1e20, 1e20], [1e20, 1e20, 1e20, 0.0]])
    out, lse = qkv.attention(q, k, np.eye(2), return_lse=True)
    np.testing.assert_allclose(out, [[1, 0], [1, 0]])  # the larger score wins outright
    assert np.isfinite(lse).all()


# ---- values whose weighted sums would overflow -------------------------------------------
@pytest.mark.parametrize("backend", BACKEND_PARAMS)
@pytest.mark.parametrize("shape", [(4, 8), (1, 2, 600, 8), (1, 2, 3000, 8)])  # small and tiled
def test_overflow_sized_values_give_their_blend_not_inf(backend, shape):
    # out is a blend of v's rows, but the kernels sum unnormalised weights first: Nk · 3e38 is
    # past float32 while the answer (every row 3e38 here) is not. It used to return inf.
    rng = np.random.default_rng(7)
    q = (0.1 * rng.standard_normal(shape)).astype(np.float32)  # near-uniform weights
    v = (rng.uniform(0.5, 1.0, shape) * 3e38).astype(np.float32)
    ref = qkv.reference.attention(q.astype(np.float64), q.astype(np.float64),
                                  v.astype(np.float64))
    with kernel_config(backend=backend), warnings.catch_warnings():
        warnings.simplefilter("error")  # no overflow warning from the first attempt either
        out = qkv.attention(q, q, v)
        causal = qkv.attention(q, q, v, mask=qkv.causal())
        # scaling by a power of two is exact in every sum and product: the bits of v scaled
        # down by hand, then scaled back up
        by_hand = qkv.attention(q, q, v * np.float32(2**-20)) * np.float32(2**20)
    assert np.isfinite(out).all() and np.isfinite(causal).all()
    np.testing.assert_array_equal(out, by_hand)
    # the same-sign sums over Nk keys round within γ_Nk ≈ Nk·2^-24 of max|v| (Higham)
    atol = output_atol(q, q, v) + shape[-2] * 2**-24 * float(np.abs(v).max())
    np.testing.assert_allclose(out, ref, atol=atol, rtol=0)
    np.testing.assert_allclose(causal[..., 0, :], v[..., 0, :], rtol=2**-23)  # one key: itself


def test_float64_values_near_its_top_with_dropout_give_their_blend():
    # Nk · max|v| / (1 − dropout) is past float64 itself here: the rescale is found in
    # logarithms (it raised OverflowError: the fuzzer's find once v could be overflow-sized)
    q = np.zeros((2, 5, 3))
    v = np.full((5, 3), np.finfo(np.float64).max / 4)
    out = qkv.attention(q[0], q[0], v, dropout=0.3, dropout_seed=1)
    ref = qkv.attention(q[0], q[0], v / 2**20, dropout=0.3, dropout_seed=1) * 2**20
    assert np.isfinite(out).all()
    np.testing.assert_array_equal(out, ref)


def test_overflow_sized_values_keep_the_callers_inf():
    # check_finite=False: an inf the caller put in v stays in the rows that read it (and only
    # there) when the overflowed sums are redone; a masked one never shows
    q = np.zeros((6, 4), np.float32)
    v = np.full((6, 4), 3e38, np.float32)
    v[3, 0] = np.inf
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = qkv.attention(q, q, v, mask=qkv.causal(), check_finite=False)
    np.testing.assert_allclose(out[:3], 3e38, rtol=2**-22)
    assert (out[3:, 0] == np.inf).all()
    np.testing.assert_allclose(out[3:, 1:], 3e38, rtol=2**-22)


def test_a_blend_of_the_largest_values_that_rounds_past_them_is_refused():
    # every row of v is float32's largest: the blend is too, but its rounding may pass it
    top = np.finfo(np.float32).max
    q, k = np.array([[0.5, 0, 0, 0]], np.float32), np.array([[0, 0, 0, 0], [1, 0, 0, 0]],
                                                             np.float32)
    with pytest.raises(ValueError, match=r"the output overflows float32: a blend of v's rows "
                                         r"\(max\|v\| 3.4e\+38\) rounded past .*float64"):
        qkv.attention(q, k, np.full((2, 3), top, np.float32))
    out = qkv.attention(q.astype(np.float64), k.astype(np.float64), np.full((2, 3), float(top)))
    np.testing.assert_allclose(out, top, rtol=1e-15)


def test_paged_values_whose_sums_overflow_are_refused():
    cache = np.full((1, 1, 16, 4), 3e38, np.float32)  # (blocks, Hkv, block size, D)
    keys = np.zeros_like(cache)
    q = np.zeros((1, 1, 1, 4), np.float32)
    with pytest.raises(ValueError, match=r"sequence 0's output overflows float32.*16 cached "
                                         r"rows.*v / c"):
        qkv.attention(q, keys, cache, block_table=np.array([[0]]), seq_lens=np.array([16]))
    out = qkv.attention(q, keys, cache / 2**8, block_table=np.array([[0]]),
                        seq_lens=np.array([16])) * 2**8
    np.testing.assert_allclose(out, 3e38, rtol=2**-20)


@pytest.mark.parametrize("backend", BACKEND_PARAMS)
@pytest.mark.parametrize("small", [1 << 30, 0])
def test_a_row_of_minus_inf_scores_is_a_masked_row(backend, small):
    q, k, v = qkv_f32(4, 8)
    bias = np.zeros((4, 4), np.float32)
    bias[1] = -np.inf
    bias[2, 1:] = -np.inf
    bias[3, 0] = np.nan  # NaN in a masked-out slot must not reach the output either
    mask = qkv.allow(np.array([[1, 1, 1, 1]] * 3 + [[0, 1, 1, 1]], bool))
    with kernel_config(backend=backend, small=small, tile_q=2, tile_k=2):
        out, lse = qkv.attention(q, k, v, mask=mask, bias=bias, return_lse=True,
                                 check_finite=False)
        w = qkv.attention_weights(q, k, mask=mask, bias=bias, check_finite=False)
    assert not out[1].any() and lse[1] == -np.inf  # torch's convention too: zeros
    np.testing.assert_allclose(out[2], v[0], rtol=1e-6)  # only key 0 is finite
    assert np.isfinite(out).all() and np.isfinite(w).all()
    np.testing.assert_array_equal(w[1], 0)
    np.testing.assert_allclose(w.sum(-1), [1, 0, 1, 1], rtol=1e-6)


def test_backward_checks_lse():
    q, k, v = qkv_f32(6, 4)
    out, lse = qkv.attention(q, k, v, return_lse=True)
    for bad in (np.nan, np.inf):
        broken = lse.copy()
        broken[2] = bad
        with pytest.raises(ValueError, match="lse contains NaN or \\+inf"):
            qkv.attention_backward(q, k, v, out, broken, np.ones_like(out))


# ---- bounds, sizes and odd shapes -----------------------------------------------------------
def test_window_bounds_are_unbounded_by_none_and_checked():
    np.testing.assert_array_equal(qkv.window(0, None).to_dense(4, 4), np.triu(np.ones((4, 4))))
    np.testing.assert_array_equal(qkv.window(None, 0).to_dense(4, 4),
                                  qkv.causal().to_dense(4, 4))
    for bad in (sys.maxsize, 2**63, 2**62):
        with pytest.raises(ValueError, match=r"too large .* None for unbounded"):
            qkv.window(0, bad)
    assert qkv.window(0, 2**62 - 1).to_dense(3, 3).sum() == 6  # large but safe: still right


def test_dv_zero_is_an_empty_output():
    q, k, _ = qkv_f32(5, 4)
    v = np.zeros((5, 0), np.float32)
    out, lse = qkv.attention(q, k, v, return_lse=True)
    assert out.shape == (5, 0)
    np.testing.assert_allclose(lse, qkv.reference(q, k, v, return_lse=True)[1], rtol=1e-6)
    dq, dk, dv = qkv.attention_backward(q, k, v, out, lse, out)
    assert dv.shape == (5, 0) and not dq.any() and not dk.any()


def test_a_predicate_that_calls_qkv_does_not_deadlock():
    def rule(i, j):
        x = np.ones((600, 4), np.float32)
        qkv.attention(x, x, x)  # re-enters qkv from inside a worker thread
        return j <= i

    q, k, v = qkv_f32(512, 8)
    done = []
    worker = threading.Thread(target=lambda: done.append(qkv.attention(
        q, k, v, mask=qkv.predicate(rule))), daemon=True)
    with kernel_config(tile_q=64, tile_k=64, small=0, thread_min_work=0, workers=2):
        worker.start()
        worker.join(timeout=60)
    assert done, "deadlocked"
    np.testing.assert_allclose(done[0], qkv.reference(q, k, v, mask=qkv.causal()),
                               atol=output_atol(q, k, v))


def test_size_guards_say_how():
    x = np.zeros((30000, 8), np.float32)
    with pytest.raises(ValueError, match=r"3\.35 GiB .* rows=") as info:
        qkv.attention_weights(x, x)
    assert "max_bytes" in str(info.value)
    assert qkv.attention_weights(x, x, rows=[0, 29999]).shape == (2, 30000)
    with pytest.raises(ValueError, match=r"float64 reference .* qkv\.attention"):
        qkv.reference(x, x, x)
    small = np.zeros((300, 4))
    with pytest.raises(ValueError, match="max_bytes"):
        qkv.attention_weights(small, small, max_bytes=1000)


@pytest.mark.parametrize(("call", "exc", "match"), [
    (lambda: qkv.attention(*qkv_f32(4, 4), scale=10**400), ValueError, "scale .*401 digits"),
    (lambda: qkv.attention_weights(*list(qkv_f32(4, 4))[:2], rows=[2**63]), ValueError,
     "rows has index 9223372036854775808"),
    (lambda: qkv.alibi("abc"), TypeError, "alibi: slopes must be real numbers"),
    (lambda: qkv.documents([[0, 0, 1], [0, 1]]), ValueError, "documents: q_ids is ragged"),
    (lambda: qkv.attention(*qkv_f32(4, 4), mask=qkv.predicate(lambda i, j: np.ones(3, bool))),
     ValueError, "predicate: .*returned shape \\(3,\\)"),
    (lambda: qkv.attention([["1", "0"]], [["1", "0"]], [["1", "0"]]), TypeError,
     "q holds strings"),
    (lambda: qkv.attention([[None, 0]], [[1, 0]], [[1, 0]]), TypeError, "q holds non-numbers"),
    (lambda: qkv.attention(*qkv_f32(4, 4), bias="1"), TypeError, "bias must be an array"),
])
def test_unclear_inputs_get_errors_naming_the_argument(call, exc, match):
    with pytest.raises(exc, match=match):
        call()


def test_deeply_nested_masks_are_refused_not_a_recursion_error():
    mask = qkv.causal()
    with pytest.raises(ValueError, match="nests 65 levels deep"):
        for _ in range(1000):
            mask = ~(mask & qkv.window(3))
    flat = qkv.causal()
    for w in range(1000):  # flat compositions have no depth problem
        flat = flat & qkv.window(w + 3)
    np.testing.assert_array_equal(flat.to_dense(5, 5), qkv.window(3).to_dense(5, 5))


def test_integer_inputs_are_promoted_like_numpy_linalg():
    out = qkv.attention(np.array([[1, 0]]), np.array([[1, 0], [0, 1]]), [[1, 0], [0, 1]])
    assert out.dtype == np.float64
    np.testing.assert_allclose(out, qkv.reference([[1.0, 0]], [[1.0, 0], [0, 1]],
                                                  [[1.0, 0], [0, 1]]))


# ---- threads --------------------------------------------------------------------------------
def test_the_pool_runs_every_item_once_with_the_caller_as_worker_zero():
    from qkv.engine import threads

    seen: dict[int, tuple[int, int]] = {}
    lock = threading.Lock()
    gate = threading.Barrier(2, timeout=30)  # both threads must take an item before either ends

    def worker(worker_id: int, item: int) -> None:
        if item < 2:
            gate.wait()
        with lock:
            seen[item] = (worker_id, threading.get_ident())

    threads.run(worker, list(range(40)), 2)
    assert sorted(seen) == list(range(40))
    ids = {wid: tid for wid, tid in seen.values()}
    assert set(ids) == {0, 1} and ids[0] == threading.get_ident() != ids[1]


def test_the_blas_is_held_at_one_thread_from_any_thread():
    """single_threaded_blas must work on every thread, not only the first that used it
    (threadpoolctl ≥ 3.8 silently ignores limits from a second thread unless control is given
    back): the explorer's request threads and MiniLM's batch threads rely on it."""
    threadpoolctl = pytest.importorskip("threadpoolctl")
    from qkv.engine import threads

    def blas_threads() -> set[int]:
        return {i["num_threads"] for i in threadpoolctl.threadpool_info()
                if i["user_api"] == "blas" and "libscipy_openblas64_" in i["filepath"]}

    before = blas_threads()
    if not before or max(before) < 2:
        pytest.skip(f"NumPy's OpenBLAS runs {before} thread(s) here: nothing to hold")
    seen = []

    def look() -> None:
        with threads.single_threaded_blas():
            seen.append(blas_threads())

    look()  # this thread first, then two others, one after the other
    for _ in range(2):
        t = threading.Thread(target=look)
        t.start()
        t.join()
    # and one thread entering while another holds it, the first to leave not the last
    inside, leave = threading.Event(), threading.Event()

    def holder() -> None:
        with threads.single_threaded_blas():
            inside.set()
            leave.wait(30)

    t = threading.Thread(target=holder)
    t.start()
    inside.wait(30)
    with threads.single_threaded_blas():
        seen.append(blas_threads())
        leave.set()
        t.join()
        seen.append(blas_threads())  # the holder left first: still held for us
    assert seen == [{1}] * 5
    assert blas_threads() == before  # the last one out restored it, whichever thread it was


@pytest.mark.parametrize("failing", [0, 1])
def test_an_error_in_any_worker_reaches_the_caller(failing):
    from qkv.engine import threads

    gate = threading.Barrier(2, timeout=30)

    def worker(worker_id: int, item: int) -> None:
        if item < 2:
            gate.wait()
        if worker_id == failing:
            raise RuntimeError(f"item {item} failed on worker {worker_id}")

    with pytest.raises(RuntimeError, match=f"failed on worker {failing}"):
        threads.run(worker, list(range(10)), 2)


@pytest.mark.parametrize("backend", BACKEND_PARAMS)
def test_concurrent_calls_from_several_threads_agree(backend):
    q, k, v = qkv_f32(2, 4, 700, 32)
    masks = [None, qkv.causal(), qkv.window(64), qkv.padding([500, 700])]
    with kernel_config(backend=backend):
        expected = [qkv.attention(q, k, v, mask=m) for m in masks]
        results: dict = {}

        def call(i):
            results[i] = qkv.attention(q, k, v, mask=masks[i % len(masks)])

        threads = [threading.Thread(target=call, args=(i,)) for i in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=120)
    assert len(results) == 8
    for i, got in results.items():  # the BLAS may split a GEMM differently: rounding only
        np.testing.assert_allclose(got, expected[i % len(masks)], atol=output_atol(q, k, v))
