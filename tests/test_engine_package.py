"""The engine package's own promises: a light import, one internal surface, both tile steps."""

import os
import subprocess
import sys
import time

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import qkv
from helpers import BACKEND_PARAMS, needs_numba, output_atol
from qkv import engine


def test_import_qkv_stays_light():
    # The compiled step (Numba) and the layers above the engine load on first use only.
    code = ("import sys, qkv; heavy = [m for m in ('numba', 'qkv.nn', 'qkv.models', 'torch', "
            "'qkv.render', 'rich') if m in sys.modules]; print(heavy)")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert run.stdout.strip() == "[]", run.stdout + run.stderr


def test_subpackages_load_lazily_and_aliases_work():
    assert qkv.nn.KVCache is not None and qkv.models is not None
    import qkv.masks as masks_by_import
    assert masks_by_import is qkv.masks and qkv.reference.attention is not None
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        _ = qkv.nope


def test_kernel_config_is_scoped_and_checked():
    before = engine.current()
    with engine.kernel_config(tile_q=8, backend="numpy") as cfg:
        assert engine.current() is cfg and cfg.tile_q == 8 and engine.backend() == "numpy"
    assert engine.current() is before
    with pytest.raises(ValueError, match="tile_q must be a positive int"):
        engine.kernel_config(tile_q=0).__enter__()
    with pytest.raises(ValueError, match="backend must be one of"):
        engine.kernel_config(backend="gpu").__enter__()


def test_stats_count_paths_and_tiles():
    stats = engine.TileStats()
    x = np.random.default_rng(0).standard_normal((300, 8)).astype(np.float32)
    with engine.kernel_config(stats=stats, tile_q=100, tile_k=100, tile_k_unmasked=100,
                              small=0, backend="numpy"):
        qkv.attention(x, x, x, mask=qkv.causal())
    assert stats.paths == {"tiled numpy": 1}
    assert stats.computed == 6 and stats.skipped == 3  # 3×3 tiles, the upper triangle skipped
    assert stats.pairs == {"full": 30000, "partial": 30000, "empty": 30000}
    assert stats.work_fraction == 2 / 3


def test_block_map_is_the_kernels_classification():
    kinds = engine.block_map(qkv.causal(), 4, 4, tile=(2, 2))
    np.testing.assert_array_equal(kinds, [[1, 0], [2, 1]])
    assert (engine.block_map(None, 3, 5, tile=(2, 2)) == 2).all()
    with pytest.raises(TypeError, match="block_map: mask must be"):
        engine.block_map("causal", 4, 4)


@needs_numba
def test_compiled_and_numpy_steps_agree_within_the_bound():
    rng = np.random.default_rng(1)
    q, k, v = (rng.standard_normal((2, 3, 700, 32)).astype(np.float32) for _ in range(3))
    for mask in (None, qkv.causal(), qkv.documents(np.repeat(np.arange(7), 100))):
        with engine.kernel_config(backend="numpy"):
            a = qkv.attention(q, k, v, mask=mask)
        with engine.kernel_config(backend="compiled"):
            b = qkv.attention(q, k, v, mask=mask)
        np.testing.assert_allclose(a, b, atol=2 * output_atol(q, k, v), rtol=0)


@needs_numba
def test_compiled_exp2_is_accurate_and_flushes_subnormals():
    import numba

    from qkv.engine.step import compiled

    @numba.njit
    def exp2_all(x):
        out = np.empty_like(x)
        for i in range(x.size):
            out[i] = compiled.exp2(x[i])
        return out

    x = np.concatenate([np.linspace(-126, 0, 200001), [-126.5, -200.0, -np.inf]]).astype(
        np.float32)
    got = exp2_all(x)
    exact = np.exp2(x.astype(np.float64))
    normal = x >= -126
    rel = np.abs(got[normal] / exact[normal] - 1)
    # 2^x to float32 accuracy, plus x's own rounding (|x|·eps for |x| ≤ 126): ≤ 1e-5 here
    assert rel.max() < 126 * 2**-24 * 1.5 + 4 * 2**-24
    assert rel[x[normal] > -1].max() < 4 * 2**-24  # near 0, a few ulp
    assert not got[~normal].any()  # below 2^-126: exactly 0, never subnormal


@needs_numba
def test_the_online_softmaxs_exp2_has_the_bits_of_the_general_one_where_it_is_used():
    # online_softmax's weights are 2^x for x = (score − its max)·log2 e ≤ 0, −inf or NaN: there
    # _exp2_nonpositive must give _exp2_above's bits, at both floors, vectorised as in the step
    import numba

    from qkv.engine.step import compiled

    @numba.njit(fastmath=compiled.FLAGS)
    def both(x, floor):
        compiled.wide_vectors()
        fast, general = np.empty_like(x), np.empty_like(x)
        for i in range(x.size):
            fast[i] = compiled._exp2_nonpositive(x[i], floor)
        for i in range(x.size):
            general[i] = compiled._exp2_above(x[i], floor)
        return fast, general

    rng = np.random.default_rng(7)
    # every float32 in [-2, 0] one bit pattern in 64, random ones down to -300, and the edges
    dense = (np.arange(0, np.float32(2.0).view(np.int32), 64, dtype=np.int32)
             .view(np.float32) * np.float32(-1))
    edges = np.array([0.0, -0.0, -np.inf, np.nan, -62.5, -63.0, -63.5, -125.5, -126.0, -126.5,
                      -149.0, -1e30, -3.4e38, np.nextafter(np.float32(-63), np.float32(0)),
                      np.nextafter(np.float32(-126), np.float32(0))], np.float32)
    x = np.concatenate([edges, dense, -rng.exponential(30.0, 2_000_000).astype(np.float32)])
    for floor in (compiled.FLOOR, compiled.PRODUCT_FLOOR):
        fast, general = both(x, floor)
        np.testing.assert_array_equal(fast, general)


@needs_numba
@pytest.mark.parametrize("masked", [False, True])
def test_full_width_vectors_change_the_steps_speed_never_its_bits(masked):
    # every compiled step function carries the width hint; compiled again without it (LLVM's
    # default width for this CPU) it writes the same bits, masked or not, −inf rows included
    from helpers import recompiled, width_hint_in_ir
    from qkv.engine.step import compiled

    rng = np.random.default_rng(3)
    s = (rng.standard_normal((2, 96, 77)) * 30).astype(np.float32)
    s[:, :, 5] = -np.inf  # a query with nothing finite
    allowed = rng.random((2, 96, 77)) < 0.6
    allowed[:, :, 6] = False  # a query with nothing allowed
    lse = rng.standard_normal((2, 77)).astype(np.float32) * 30

    def calls():
        """Each step function's arguments, fresh, and the arrays it writes."""
        m = np.full((2, 77), -np.inf, np.float32)
        m[:, :9] = 3.0  # some queries saw keys before this tile
        row_sum, acc = np.ones((2, 77), np.float32), np.ones((2, 8, 77), np.float32)
        tile, probs, grad = s.copy(), s.copy(), s.copy()
        return [((tile, allowed, masked, m, row_sum, acc, True, compiled.PRODUCT_FLOOR),
                 (tile, m, row_sum, acc)),
                ((probs, allowed, masked, lse, compiled.FLOOR), (probs,)),
                ((grad, np.abs(s) / 100, lse), (grad,))]

    dispatchers = (compiled._online_softmax, compiled._probabilities, compiled._softmax_grad)
    for dispatcher, (args, written), (args_plain, written_plain) in zip(
            dispatchers, calls(), calls(), strict=True):
        dispatcher(*args)  # the step as shipped (cached, with the hint)
        plain = recompiled(dispatcher, hint=False)
        plain(*args_plain)
        for a, b in zip(written, written_plain, strict=True):
            np.testing.assert_array_equal(a, b)
        hinted = recompiled(dispatcher, hint=True)
        hinted(*calls()[dispatchers.index(dispatcher)][0])
        assert width_hint_in_ir(hinted) and not width_hint_in_ir(plain)


@pytest.mark.parametrize("backend", BACKEND_PARAMS)
@pytest.mark.parametrize("products", [False, True])
def test_weights_flush_below_the_floor_of_their_path(backend, products):
    # 2^-126 (never subnormal); with products (the tiled kernel) 2^-63, so that a weight times a
    # value stays normal too (subnormal products slow the P·V GEMM 4–80×)
    from qkv.engine import step

    floor = -63 if products else -126
    x = np.array([0.0, -10.0, -62.9, -63.0, -63.1, -100.0, -125.9, -126.0, -126.5, -200.0,
                  -np.inf], np.float32)
    s = (x / np.float32(np.log2(np.e)))[None, None, :].copy()  # natural units, ref 0
    step.get(backend).probabilities(s, None, np.zeros((1, x.size), np.float32),
                                    products=products)
    keep = x >= floor
    np.testing.assert_allclose(s[0, 0][keep], np.exp2(x[keep].astype(np.float64)), rtol=1e-5)
    assert not s[0, 0][~keep].any()


# -- the score-tile buffers kept between calls (engine/scratch.py) ---------------------------
def _tiled_inputs(seed, n=700, d=48, heads=3):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal((1, heads, n, d), dtype=np.float32) for _ in range(3)]


def test_tile_buffers_are_kept_bounded_and_released():
    from qkv.engine.scratch import KEEP_MAX_BYTES
    from qkv.engine.tiles import cpu_workers

    engine.release_scratch()
    assert engine.kept_bytes() == 0
    q, k, v = _tiled_inputs(0)
    with engine.kernel_config(tile_q=128, tile_k_unmasked=256):
        out, lse = qkv.attention(q, k, v, mask=qkv.causal(), return_lse=True)
        qkv.attention_backward(q, k, v, out, lse, np.ones_like(q), mask=qkv.causal())
    kept = engine.kept_bytes()
    assert 0 < kept <= cpu_workers() * KEEP_MAX_BYTES
    assert engine.release_scratch() == kept and engine.kept_bytes() == 0


def test_a_kept_buffers_garbage_never_reaches_a_result():
    # A buffer handed back holds the last call's tile: poison one as a previous call could
    # leave it (NaN, huge values), and the next call's rows must still be the fresh ones.
    q, k, v = _tiled_inputs(1)
    mask, dout = qkv.window(100), np.ones_like(q)
    engine.release_scratch()
    with engine.kernel_config(tile_q=128, tile_k_unmasked=256):
        out, lse = qkv.attention(q, k, v, mask=mask, return_lse=True)
        # deterministic: dq's per-worker partial sums would otherwise add in any order
        grads = qkv.attention_backward(q, k, v, out, lse, dout, mask=mask, deterministic=True)
        for poison in (np.nan, 3e38, -np.inf):
            engine.release_scratch()
            with engine.scratch.Scratch() as scratch:
                for worker in range(4):
                    scratch.tile(worker, 1024, 512, np.float32)[:] = poison  # ≥ any tile here
            assert engine.kept_bytes() > 0
            np.testing.assert_array_equal(qkv.attention(q, k, v, mask=mask), out)
            again = qkv.attention_backward(q, k, v, out, lse, dout, mask=mask, deterministic=True)
            for got, want in zip(again, grads, strict=True):
                np.testing.assert_array_equal(got, want)


def test_concurrent_calls_never_share_a_tile_buffer():
    # Calls from several threads at once (the explorer's request threads do this) each get
    # their own buffers: every result is bitwise the one the same call gives alone.
    from concurrent.futures import ThreadPoolExecutor

    problems = [_tiled_inputs(seed) for seed in range(8)]
    with engine.kernel_config(tile_q=128, tile_k_unmasked=256):
        alone = [qkv.attention(q, k, v) for q, k, v in problems]

        def run(i):
            with engine.kernel_config(tile_q=128, tile_k_unmasked=256):
                return qkv.attention(*problems[i])

        for _ in range(3):
            with ThreadPoolExecutor(max_workers=4) as pool:
                together = list(pool.map(run, range(len(problems))))
            for got, want in zip(together, alone, strict=True):
                np.testing.assert_array_equal(got, want)


@pytest.mark.skipif(not hasattr(os, "sched_getaffinity") or len(os.sched_getaffinity(0)) < 2,
                    reason="pinning needs Linux and two usable cores")
def test_workers_each_get_a_core_for_the_call_and_the_caller_its_own_back():
    # the scheduler left both workers on one vCPU for most of a call (engine/threads.py)
    from qkv.engine import threads

    before = os.sched_getaffinity(0)
    seen: dict[int, set] = {}

    def work(worker_id, _item):
        seen.setdefault(worker_id, set()).update(os.sched_getaffinity(0))
        sum(range(20000))  # long enough that the helper takes items too

    threads.run(work, list(range(64)), 2)
    assert os.sched_getaffinity(0) == before  # the caller's mask is restored
    time.sleep(0.05)  # the helper gives its core back as it finishes (after the caller may)
    for tid in map(int, os.listdir("/proc/self/task")):  # and no thread keeps a pinned core
        try:
            assert os.sched_getaffinity(tid) == before
        except ProcessLookupError:  # a thread that ended meanwhile
            pass
    for cpus in seen.values():
        assert len(cpus) == 1 and cpus <= before
    if len(seen) == 2:
        assert seen[0] != seen[1]  # distinct cores
    # and an error inside the items restores it too
    with pytest.raises(ZeroDivisionError):
        threads.run(lambda w, i: 1 / 0, list(range(8)), 2)
    assert os.sched_getaffinity(0) == before


LINUX_TWO_CORES = pytest.mark.skipif(
    not hasattr(os, "sched_setaffinity") or len(os.sched_getaffinity(0)) < 2,
    reason="pinning needs Linux and two usable cores")


@LINUX_TWO_CORES
def test_pool_threads_made_by_a_pinned_caller_start_on_every_core(monkeypatch):
    # the pool makes its threads lazily, from a caller that a call has pinned to one core, and
    # a thread inherits its creator's affinity: one that never ran an item kept that core
    from qkv.engine import threads

    before = os.sched_getaffinity(0)
    monkeypatch.setattr(threads, "_pool", None)  # a fresh pool, made below
    os.sched_setaffinity(0, {min(before)})
    try:
        pool = threads._get_pool(2, before)
        seen = pool.submit(os.sched_getaffinity, 0).result()
    finally:
        os.sched_setaffinity(0, before)
    pool.shutdown()
    assert seen == before


FORK_THEN_CALL = """
import os, numpy as np, qkv
from qkv.engine import kernel_config
allowed = os.sched_getaffinity(0)
pid = os.fork()  # OpenBLAS shuts its server threads down at a fork; the next call remakes them
if pid == 0:
    os._exit(0)
os.waitpid(pid, 0)
x = np.random.default_rng(0).standard_normal((4096, 64)).astype(np.float32)
with kernel_config(gemm="numpy"):
    qkv.attention(x, x, x, mask=qkv.window(255))
print(sorted(t for t in map(int, os.listdir("/proc/self/task"))
             if os.sched_getaffinity(t) != allowed))
"""


@LINUX_TWO_CORES
def test_blas_threads_remade_during_a_call_are_not_pinned():
    # the BLAS's thread count is set around a call; OpenBLAS remakes its threads in that call
    # when a fork shut them down, and threads made by the pinned caller kept its core for good
    # (NumPy's and SciPy's OpenBLAS, seen in the full suite)
    done = subprocess.run([sys.executable, "-c", FORK_THEN_CALL], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "[]", f"threads left pinned: {done.stdout}"


@needs_numba
@pytest.mark.parametrize("backend", ["compiled", "prebuilt"])
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(planes=st.integers(1, 5), nk=st.integers(1, 30), nq=st.integers(1, 30),
       masked=st.booleans(), seed=st.integers(0, 2**32 - 1))
def test_the_small_pathsside_by_side_step_has_the_bits_of_plane_by_plane(
        backend, planes, nk, nq, masked, seed):
    # The small forward runs the step on every plane's queries side by side in one row when
    # rows are short (kernel.side_by_side): the step is element-wise per query, so m, the
    # sums and the weights must be bit for bit those of the step run plane by plane — with
    # garbage (huge, inf, NaN) in masked slots and rows with nothing allowed.
    from qkv.engine.kernel.small import back_to_planes, side_by_side
    from qkv.engine.step import aot, compiled

    if backend == "prebuilt" and not aot.available():
        pytest.skip("no prebuilt step (qkv warm)")
    step = aot if backend == "prebuilt" else compiled
    assert engine.step.per_query(step) and not engine.step.per_query(engine.step.get("numpy"))
    rng = np.random.default_rng(seed)
    s = (rng.standard_normal((planes, 1, 1, nk, nq)) * 30).astype(np.float32)
    allowed = rng.random(s.shape) < 0.7 if masked else None
    if masked:
        allowed[..., rng.integers(nq)] = False  # a query with nothing allowed
        s[~allowed] = rng.choice(np.array([np.inf, -np.inf, np.nan, 3e38], np.float32),
                                 size=int((~allowed).sum()))

    def state():
        return (np.full((planes, nq), -np.inf, np.float32), np.zeros((planes, nq), np.float32))

    by_plane, (m1, sum1) = s.copy(), state()
    step.online_softmax(by_plane.reshape(planes, nk, nq),
                        None if allowed is None else allowed.reshape(planes, nk, nq),
                        m1, sum1, None)
    side, (m2, sum2) = s.copy(), state()
    wide = side_by_side(side, nq)  # (1, Nk, planes·Nq)
    assert wide.shape == (1, nk, planes * nq)
    step.online_softmax(wide, side_by_side(allowed, nq), m2.reshape(1, -1),
                        sum2.reshape(1, -1), None)
    back_to_planes(wide, side, nq)
    np.testing.assert_array_equal(m2, m1)
    np.testing.assert_array_equal(sum2, sum1)
    np.testing.assert_array_equal(side, by_plane)
