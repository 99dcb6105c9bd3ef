"""The tile step built ahead of time (``qkv warm``): bitwise the JIT's, found only when current,
and a broken or stale build falls back to the JIT with one warning and no traceback."""

import os
import subprocess
import sys

import numpy as np
import pytest

import qkv
from helpers import needs_numba
from qkv.engine import step
from qkv.engine.step import aot

pytestmark = [needs_numba, pytest.mark.slow]


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """One build (≈ 10 s) in a private cache, shared by the tests of this file."""
    from qkv.engine.step import aot_build

    cache = tmp_path_factory.mktemp("qkv-cache")
    old = os.environ.get("QKV_CACHE_DIR")
    os.environ["QKV_CACHE_DIR"] = str(cache)
    try:
        path, fresh = aot_build.build()
        assert fresh and path.parent == cache
        yield path
    finally:
        if old is None:
            os.environ.pop("QKV_CACHE_DIR")
        else:
            os.environ["QKV_CACHE_DIR"] = old
        aot.forget()
        step._aot = None


def _run_both(fn):
    """``fn()`` on the prebuilt step and on the JIT, in this process."""
    assert aot.available()
    results = []
    for use_aot in (True, False):
        step._aot = use_aot
        results.append(fn())
    step._aot = None
    return results


CASES = [
    ((1, 2, 700, 64), qkv.causal()),  # tiled, masked diagonal tiles
    ((2, 3, 300, 32), None),  # tiled, dense
    ((1, 2, 40, 16), qkv.window(7)),  # the small path: every plane in one tile step
    ((1, 1, 1000, 80), qkv.documents(np.repeat(np.arange(4), 250))),
]


@pytest.mark.parametrize("shape, mask", CASES)
def test_prebuilt_step_is_bitwise_the_jit(built, shape, mask):
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal(shape).astype(np.float32) for _ in range(3))
    dout = rng.standard_normal(shape).astype(np.float32)

    def forward_backward():
        out, lse = qkv.attention(q, k, v, mask=mask, return_lse=True)
        grads = qkv.attention_backward(q, k, v, out, lse, dout, mask=mask)
        return out, lse, *grads, qkv.attention_weights(q[..., :50, :], k[..., :50, :])

    ours, theirs = _run_both(forward_backward)
    for a, b in zip(ours, theirs, strict=True):
        np.testing.assert_array_equal(a, b)


def test_build_is_checked_and_a_second_build_is_a_no_op(built):
    from qkv.engine.step import aot_build

    assert aot_build.check_against_jit(built) == ""
    mtime = built.stat().st_mtime_ns
    path, fresh = aot_build.build()
    assert (path, fresh) == (built, False) and built.stat().st_mtime_ns == mtime


def test_qkv_warm_is_idempotent(built, capsys):
    from qkv.cli import main

    assert main(["warm"]) == 0
    assert "already current" in capsys.readouterr().out
    assert main(["warm", "--check"]) == 0
    assert sorted(p.name for p in built.parent.iterdir()) == sorted(
        [built.name, built.with_suffix(".sha256").name])


def test_unexpected_layouts_go_to_the_jit(built):
    from qkv.engine.step import compiled

    assert aot.available()
    rng = np.random.default_rng(2)
    s = rng.standard_normal((1, 64, 48)).astype(np.float32)
    strided = np.asfortranarray(s)  # not C-contiguous: the built entry points do not take it
    lse = rng.standard_normal((1, 48)).astype(np.float32)
    ours, theirs = strided.copy(order="F"), s.copy()
    aot.probabilities(ours, None, lse)
    compiled.probabilities(theirs, None, lse)
    np.testing.assert_array_equal(ours, theirs)


def test_key_names_sources_versions_and_cpu(monkeypatch):
    import importlib.metadata

    first = aot.key.__wrapped__()
    real = importlib.metadata.version
    monkeypatch.setattr(importlib.metadata, "version",
                        lambda name: "0.0.0" if name == "numba" else real(name))
    assert aot.key.__wrapped__() != first  # another Numba: another file name, never loaded
    monkeypatch.setattr(aot, "_cpu", lambda: "another cpu")
    monkeypatch.setattr(importlib.metadata, "version", real)
    assert aot.key.__wrapped__() != first


FIRST_CALL = ("import numpy as np, qkv, sys\n"
              "from qkv.engine import step\n"
              "x = np.ones((600, 64), np.float32)\n"
              "qkv.attention(x, x, x, mask=qkv.causal())\n"
              "print(step._aot, 'numba' in sys.modules)\n")


def _fresh_process(cache) -> subprocess.CompletedProcess:
    env = dict(os.environ, QKV_CACHE_DIR=str(cache))
    return subprocess.run([sys.executable, "-c", FIRST_CALL], env=env, capture_output=True,
                          text=True, timeout=300)


def test_a_fresh_process_runs_the_prebuilt_step_without_numba(built):
    run = _fresh_process(built.parent)
    assert run.returncode == 0 and run.stdout.split() == ["True", "False"], run.stderr


def test_stale_and_corrupt_builds_fall_back_to_the_jit(built, tmp_path):
    stale = tmp_path / "stale"
    stale.mkdir()
    (stale / built.name.replace(aot.key(), "0" * 16)).write_bytes(built.read_bytes())
    run = _fresh_process(stale)  # another key's module: not looked at, no warning
    assert run.returncode == 0 and run.stdout.split()[0] == "False", run.stderr
    assert run.stderr == ""

    corrupt = tmp_path / "corrupt"
    corrupt.mkdir()
    (corrupt / built.name).write_bytes(built.read_bytes()[:4096])  # truncated: dlopen would
    sums = built.with_suffix(".sha256")  # die of SIGBUS, so the digest must catch it first
    (corrupt / sums.name).write_bytes(sums.read_bytes())
    run = _fresh_process(corrupt)
    assert run.returncode == 0 and run.stdout.split()[0] == "False", run.stderr
    assert "Traceback" not in run.stderr
    assert "cannot be loaded" in run.stderr and "qkv warm --force" in run.stderr
