"""qkv.distributed: ring attention over MPI equals the single-process engine.

The MPI tests launch real ``mpirun -n 2`` and ``mpirun -n 3 --oversubscribe`` runs of
tests/mpi_cases.py (one launch per size runs every case, as startup costs seconds); each rank
compares its shards with qkv.attention / qkv.attention_backward on the full arrays and with the
float64 reference, and rank 0 prints the report parsed here. The tolerances are those of
tests/helpers.py, justified in mpi_cases.py.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

import qkv
from qkv.distributed import merge, positions, shard_length

HERE = Path(__file__).parent
CASES = [
    "causal", "window", "documents_causal", "padding", "gqa_causal", "gqa_broadcast_batch",
    "cross_none", "cross_causal", "cross_masked_rows", "prefix_alibi", "two_d_none",
    "float64_causal", "tiny",
]
LAYOUTS = ("zigzag", "contiguous")


def mpirun(n: int, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    """Run ``python *args`` on n ranks (oversubscribed: this machine has 2 cores)."""
    if shutil.which("mpirun") is None:
        pytest.skip("mpirun not found: apt-get install openmpi-bin libopenmpi-dev")
    pytest.importorskip("mpi4py", reason="pip install -e '.[mpi]'")
    cmd = ["mpirun", "-n", str(n), "--oversubscribe"]
    if os.geteuid() == 0:
        cmd.append("--allow-run-as-root")
    env = dict(os.environ, QKV_NUM_THREADS="1", OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    return subprocess.run([*cmd, sys.executable, *args], capture_output=True, text=True,
                          timeout=timeout, env=env, cwd=HERE.parent)


_reports: dict[int, dict] = {}


def report(size: int) -> dict:
    if size not in _reports:
        run = mpirun(size, str(HERE / "mpi_cases.py"))
        lines = [ln for ln in run.stdout.splitlines() if ln.startswith("RESULT ")]
        assert run.returncode == 0 and lines, f"mpirun failed:\n{run.stdout}\n{run.stderr}"
        _reports[size] = json.loads(lines[-1][len("RESULT "):])
    return _reports[size]


@pytest.mark.parametrize("size", [2, 3])
def test_every_case_ran(size):
    rep = report(size)
    assert rep["size"] == size
    assert sorted(rep["cases"]) == sorted(f"{c}/{lay}" for c in CASES for lay in LAYOUTS)


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("size", [2, 3])
def test_ring_equals_engine(size, case, layout):
    """Forward (out, lse) and backward (dq, dk, dv) on every rank, against engine and exact."""
    ranks = report(size)["cases"][f"{case}/{layout}"]
    assert len(ranks) == size
    for rank, res in enumerate(ranks):
        assert "exception" not in res, f"rank {rank}:\n{res.get('exception')}"
        for key, value in res.items():
            if key.endswith(("_vs_engine", "_vs_exact")):
                err, ratio = value
                assert ratio <= 1, f"rank {rank}: {key} error {err:.3g} is {ratio:.3g}× the bound"
        for flag in ("lse_masked_same", "masked_rows_zero", "dtypes", "shapes",
                     "gather_roundtrip"):
            assert res[flag], f"rank {rank}: {flag} failed"


@pytest.mark.parametrize("size", [2, 3])
def test_fully_masked_rows_are_zero(size):
    """Queries that see no key (padding, more queries than keys) give zeros on their rank."""
    for case in ("padding", "cross_masked_rows"):
        for layout in LAYOUTS:
            ranks = report(size)["cases"][f"{case}/{layout}"]
            assert sum(r["masked_rows"] for r in ranks) > 0
            assert all(r["masked_rows_zero"] for r in ranks)
    # contiguous: with 190 queries and 60 keys, rank 0's queries are all masked — it computes
    # nothing, yet passes every kv shard on
    rank0 = report(size)["cases"]["cross_masked_rows/contiguous"][0]
    assert rank0["computed"] == [] and sorted(rank0["skipped"]) == list(range(size))


@pytest.mark.parametrize("size", [2, 3])
def test_empty_shards_are_skipped(size):
    """Causal + contiguous: rank r needs only the kv shards of ranks ≤ r; zigzag needs all."""
    for case in ("causal", "gqa_causal", "float64_causal"):
        contiguous = report(size)["cases"][f"{case}/contiguous"]
        for rank, res in enumerate(contiguous):
            assert sorted(res["computed"]) == list(range(rank + 1))
            assert sorted(res["skipped"]) == list(range(rank + 1, size))
        for res in report(size)["cases"][f"{case}/zigzag"]:
            assert sorted(res["computed"]) == list(range(size)) and res["skipped"] == []


@pytest.mark.parametrize("size", [2, 3])
def test_bad_input_on_one_rank_raises_on_every_rank(size):
    for rank, errors in enumerate(report(size)["errors"]):
        assert errors["wrong_length"].startswith("ValueError: k shards have lengths")
        assert "qkv.distributed.shard(k" in errors["wrong_length"]
        assert errors["wrong_dtype"].startswith("TypeError: dtypes differ across ranks")
        assert errors["raw_mask"].startswith("TypeError: mask got a raw array"), rank
        assert errors["bad_layout"].startswith("ValueError: layout must be 'zigzag'")


def test_demo_checks_against_engine():
    run = mpirun(2, "-m", "qkv.distributed", "--n", "3001", "--heads", "2", "--dim", "16",
                 "--mask", "causal", "--backward", "--check", "40")
    assert run.returncode == 0, run.stdout + run.stderr
    assert "check: 40 rows against the single-process engine" in run.stdout
    assert " ok" in run.stdout.splitlines()[-1]


def test_qkv_ring_command_launches_mpirun():
    if shutil.which("mpirun") is None:
        pytest.skip("mpirun not found: apt-get install openmpi-bin libopenmpi-dev")
    run = subprocess.run([sys.executable, "-m", "qkv", "ring", "--ranks", "3", "--n", "1500",
                          "--dim", "16", "--layout", "contiguous", "--mask", "window",
                          "--window", "40", "--seed", "3", "--check", "7"], capture_output=True,
                         text=True, timeout=120, env=dict(os.environ, QKV_NUM_THREADS="1"))
    assert run.returncode == 0, run.stdout + run.stderr
    first = run.stdout.splitlines()[0]
    if len(os.sched_getaffinity(0)) < 3:  # more ranks than cores
        assert "--oversubscribe" in first
    assert "--window 40 --layout contiguous --seed 3 --check 7" in first  # forwarded as given
    assert "check: 7 rows" in run.stdout and run.stdout.rstrip().endswith("ok")
    # progress: one line per ring step and rank, on stderr
    for rank in range(3):
        for step in (1, 2, 3):
            assert f"rank {rank}: forward step {step}/3 done" in run.stderr, run.stderr


def test_qkv_ring_has_the_demos_options():
    """One parser: every option of python -m qkv.distributed is an option of qkv ring."""
    import argparse

    from qkv.commands import ring
    from qkv.distributed.__main__ import add_arguments, forwarded, parse

    demo = argparse.ArgumentParser()
    add_arguments(demo)
    cli = argparse.ArgumentParser()
    ring.add_arguments(cli)
    options = {o for a in demo._actions for o in a.option_strings}
    assert options <= {o for a in cli._actions for o in a.option_strings}
    assert all(a.help for a in cli._actions)
    argv = ["--n", "99", "--mask", "window", "--window", "5", "--seed", "2", "--backward"]
    assert parse(forwarded(parse(argv))) == parse(argv)


def test_qkv_ring_without_mpi4py_says_how_to_install():
    code = ("import sys; sys.modules['mpi4py'] = None\n"
            "from qkv.cli import main; sys.exit(main(['ring', '--ranks', '2']))")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60)
    assert run.returncode == 2, run.stdout + run.stderr
    assert "mpi4py is not installed" in run.stderr
    assert "pip install -e '.[mpi]'" in run.stderr and "openmpi-bin" in run.stderr


# --------------------------------------------------------------------------------------------
# In one process: the layouts, the merge, and life without mpi4py
# --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("layout", LAYOUTS)
def test_positions_partition_the_sequence(layout):
    for size in range(1, 8):
        for n in [*range(0, 40), 203, 1000]:
            parts = [positions(n, r, size, layout) for r in range(size)]
            assert np.array_equal(np.sort(np.concatenate(parts)), np.arange(n))
            assert [len(p) for p in parts] == [shard_length(n, r, size, layout)
                                               for r in range(size)]
            assert max(map(len, parts)) - min(map(len, parts)) <= (1 if layout == "contiguous"
                                                                   else 2)
            assert all(np.all(np.diff(p) > 0) for p in parts)  # in order


def test_zigzag_balances_causal_work():
    """Causal work of a query at position i is i + 1 keys: zigzag evens it out, contiguous not."""
    def work(layout):
        w = [(positions(4096, r, 4, layout) + 1).sum() for r in range(4)]
        return max(w) / min(w)
    assert work("zigzag") < 1.01
    assert work("contiguous") > 6


def test_positions_reject_bad_arguments():
    with pytest.raises(ValueError, match="layout must be 'zigzag' or 'contiguous'"):
        positions(10, 0, 2, "ring")
    with pytest.raises(ValueError, match=r"rank must lie in \[0, size=2\)"):
        positions(10, 2, 2)


def test_merge_of_two_key_sets_is_exact():
    """Partials over two disjoint key sets, merged, equal attention over all keys (float64)."""
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((2, 3, 40, 8)) for _ in range(3))
    mask = qkv.causal()
    out, lse = qkv.attention(q, k, v, mask=mask, return_lse=True)
    from qkv.engine import forward, prepare

    def part(sel):
        p = prepare(q, k[..., sel, :], v[..., sel, :], mask,
                    positions=(np.arange(40), np.arange(40)[sel], 40, 40))
        return forward(p)

    a = np.arange(40) % 3 == 0  # interleaved, so some rows see keys only in one set
    out_a, lse_a = part(a)
    out_b, lse_b = part(~a)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        merge(out_a, lse_a, out_b, lse_b)
    np.testing.assert_allclose(out_a, out, rtol=0, atol=1e-13)
    np.testing.assert_allclose(lse_a, lse, rtol=0, atol=1e-13)


def test_merge_rows_without_keys_stay_zero_without_warnings():
    out = np.zeros((3, 2))
    lse = np.array([-np.inf, -np.inf, 0.5])
    out_b = np.array([[0.0, 0.0], [1.0, 2.0], [3.0, 4.0]])
    lse_b = np.array([-np.inf, 1.0, -np.inf])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        merge(out, lse, out_b, lse_b)
    assert np.array_equal(out, [[0, 0], [1, 2], [0, 0]])
    assert np.array_equal(lse, [-np.inf, 1.0, 0.5])


def test_without_mpi4py_import_works_and_calls_say_how_to_install():
    code = (
        "import sys; sys.modules['mpi4py'] = None\n"
        "import numpy as np, qkv.distributed as d\n"
        "assert len(d.positions(10, 1, 2)) == 5\n"
        "x = np.zeros((4, 2), np.float32)\n"
        "try:\n    d.ring_attention(x, x, x)\n"
        "except ModuleNotFoundError as e:\n    print(e)\n"
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    assert "pip install -e '.[mpi]'" in run.stdout
    assert "apt-get install -y openmpi-bin libopenmpi-dev" in run.stdout


def test_comm_must_be_a_communicator():
    from qkv.distributed import ring_attention, shard

    x = np.zeros((4, 2), np.float32)
    with pytest.raises(TypeError, match="comm must be an mpi4py communicator"):
        ring_attention(x, x, x, comm=object())
    with pytest.raises(TypeError, match="comm must be an mpi4py communicator"):
        shard(x, comm="world")


# --------------------------------------------------------------------------------------------
# Faults: one rank fails, disagrees, dies or stops — every rank must hear of it, no hang
# --------------------------------------------------------------------------------------------
FAULTS = ("raise", "raise_backward", "comm", "stats", "scale", "mask", "window")
_faults: dict = {}


def fault_outcomes() -> dict:
    """{case: [rank 0's outcome, rank 1's]} from one mpirun -n 2 of tests/mpi_faults.py."""
    if not _faults:
        run = mpirun(2, str(HERE / "mpi_faults.py"), ",".join(FAULTS), timeout=120)
        assert run.returncode == 0, run.stdout + run.stderr
        for line in run.stdout.splitlines():
            if line.startswith("OUTCOME "):
                _, case, rank, res = line.split(" ", 3)
                _faults.setdefault(case, [None, None])[int(rank)] = json.loads(res)
    return _faults


def test_error_on_one_rank_mid_ring_raises_on_every_rank():
    """A mask rule raising for rank 1's rows only (zigzag 1200 × 64 float32, 307 KB shards):
    rank 1 raises its own error, rank 0 a RingError naming it; no hang, no segfault, and the
    next ring call on the same communicator is right (no stray message, no freed buffer)."""
    for case in ("raise", "raise_backward"):
        r0, r1 = fault_outcomes()[case]
        assert r1["error"] == "ZeroDivisionError: the mask rule failed on rank 1's rows", case
        assert r0["error"] == ("RingError: ring attention failed on rank 1: ZeroDivisionError: "
                               "the mask rule failed on rank 1's rows"), case
        assert r0["still_works"] and r1["still_works"], case


@pytest.mark.parametrize(("case", "message"), [
    ("comm", "TypeError: comm must be an mpi4py communicator such as MPI.COMM_WORLD (or None "
             "for it), got object (on rank 1)"),
    ("stats", "TypeError: stats must be a dict to fill (or None), got str (on rank 1)"),
    ("scale", "ValueError: scale differs across ranks"),
    ("mask", "ValueError: mask differs across ranks"),
    ("window", "ValueError: mask differs across ranks"),
])
def test_bad_argument_on_one_rank_raises_the_same_on_every_rank(case, message):
    r0, r1 = fault_outcomes()[case]
    assert r0["error"] == r1["error"] and r0["error"].startswith(message)
    assert r0["still_works"] and r1["still_works"]


def _watch_job(cmd: list[str], env: dict, marker: str, on_marker=None) -> tuple[int, float, str]:
    """Run an MPI job, reading its output; on the first line holding ``marker`` call
    ``on_marker()``. Returns the exit code, seconds from the marker to the job's end, and the
    output. A job still running 90 s after launch fails the test with what it printed."""
    import threading
    import time

    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env=env, cwd=HERE.parent)
    seen, lines = [], []

    def read():
        for line in proc.stdout:
            lines.append(line)
            if marker in line and not seen:
                if on_marker is not None:
                    on_marker()
                seen.append(time.monotonic())

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        proc.wait(timeout=90)
    except subprocess.TimeoutExpired:
        proc.kill()
        pytest.fail(f"the job still ran 90 s after launch:\n{''.join(lines)}")
    ended = time.monotonic()
    reader.join(5)
    assert seen, "".join(lines)
    return proc.returncode, ended - seen[0], "".join(lines)


def _timed_death(case: str) -> tuple[int, float, str]:
    """Launch the case; exit code, seconds from rank 1's signal to the job's end, output."""
    if shutil.which("mpirun") is None:
        pytest.skip("mpirun not found: apt-get install openmpi-bin libopenmpi-dev")
    cmd = ["mpirun", "-n", "2", "--oversubscribe"] + (["--allow-run-as-root"]
                                                      if os.geteuid() == 0 else [])
    env = dict(os.environ, QKV_NUM_THREADS="1", OMP_NUM_THREADS="1")
    return _watch_job([*cmd, sys.executable, str(HERE / "mpi_faults.py"), case], env,
                      "mid-ring")


@pytest.mark.slow
def test_rank_killed_mid_ring_ends_the_job():
    """SIGKILL of rank 1 mid-ring: mpirun ends the job, non-zero, within 30 s."""
    code, seconds, err = _timed_death("kill")
    assert code != 0 and seconds <= 30, (code, seconds, err)
    assert "exited on signal 9" in err


@pytest.mark.slow
def test_rank_stopped_mid_ring_aborts_at_the_deadline():
    """SIGSTOP of rank 1 (a hung host, a cut link: nothing comes, nothing dies): rank 0's wait
    passes its deadline (timeout=5 s + twice its longest step) and aborts the job, saying why.

    Which wait it is depends on how far rank 1's sends got before it stopped: transfers progress
    during the compute (ring.py, ``_computing``), so rank 0 may already hold rank 1's shard and
    be waiting in the closing agreement instead."""
    code, seconds, err = _timed_death("stop")
    assert code == 14 and seconds <= 30, (code, seconds, err)
    assert ("rank 0 waited past its deadline for the kv shard from rank 1: that rank is dead"
            in err or "rank 0 waited past its deadline for the other ranks to finish the ring: "
            "one of them is dead" in err), err


# --------------------------------------------------------------------------------------------
# The long-context path: a transformer block trained through the ring
# --------------------------------------------------------------------------------------------
def test_transformer_block_trains_through_the_ring():
    """A causal qkv.nn TransformerBlock (GQA 4/2 heads, N = 203) on 2 ranks, attention by ring
    attention: loss, dx and all 16 weight gradients equal the single-process run (float64:
    1e-12 relative; float32: within 4× the single-process float32 error; see mpi_train.py)."""
    run = mpirun(2, str(HERE / "mpi_train.py"))
    lines = [ln for ln in run.stdout.splitlines() if ln.startswith("RESULT ")]
    assert run.returncode == 0 and lines, run.stdout + run.stderr
    report = json.loads(lines[-1][len("RESULT "):])
    for layout, ranks in report.items():
        for rank, res in enumerate(ranks):
            assert res["n_grads"] == 16
            for key in ("loss_rel64", "dx_rel64", "grads_rel64"):
                assert res[key] <= 1e-12, (layout, rank, key, res[key])
            for key in ("loss_ratio32", "dx_ratio32", "grads_ratio32"):
                assert res[key] <= 1, (layout, rank, key, res[key])


def test_ring_layer_shares_parameters_and_refuses_what_it_cannot_do():
    from qkv.distributed import RingMultiHeadAttention, ring_layer
    from qkv.nn import KVCache, Linear, TransformerBlock

    block = TransformerBlock(16, 2, rng=0)
    ring = ring_layer(block)
    assert isinstance(ring.attn, RingMultiHeadAttention)
    assert type(block.attn) is not RingMultiHeadAttention  # the original is untouched
    assert all(ring.params[n] is block.params[n] for n in block.params)
    assert ring.attn.params["w_q"] is block.attn.params["w_q"]
    with pytest.raises(TypeError, match=r"holds no qkv\.nn\.MultiHeadAttention"):
        ring_layer(Linear(4, 4))
    with pytest.raises(ValueError, match="decoding with a KV cache is single-process"):
        ring.attn.forward(np.zeros((1, 3, 16), np.float32), cache=KVCache(1)[0])


# --------------------------------------------------------------------------------------------
# Across hosts on one machine: 2 network namespaces, TCP only (benchmarks/_netns.py)
# --------------------------------------------------------------------------------------------
def _hosts_or_skip():
    """The ring benchmarks' launcher's Hosts (benchmarks/_netns.py: one launcher for both), or
    a skip saying why namespaces cannot be made here."""
    sys.path.insert(0, str(HERE.parent / "benchmarks"))
    from _netns import Hosts, unavailable

    why = unavailable()
    if why:
        pytest.skip(why)
    return Hosts


def _netns_env() -> dict:
    return dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(HERE.parent / "src"), os.environ.get("PYTHONPATH", "")]))


def _run_in_hosts(hosts, size: int, args: list[str]) -> subprocess.CompletedProcess:
    """mpirun of ``python *args`` with one rank per host; a hang fails with what it printed."""
    try:
        return hosts.run(size, [sys.executable, *args], timeout=60, env=_netns_env(),
                         cwd=HERE.parent)
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"mpirun on {size} hosts still ran after 60 s:\n{exc.stdout}\n{exc.stderr}")


def _check_netns_report(run: subprocess.CompletedProcess, size: int, n_cases: int) -> dict:
    lines = [ln for ln in run.stdout.splitlines() if ln.startswith("RESULT ")]
    assert run.returncode == 0 and lines, run.stdout + run.stderr
    rep = json.loads(lines[-1][len("RESULT "):])
    assert rep["size"] == size and len(rep["cases"]) == n_cases
    for name, ranks in rep["cases"].items():
        assert len(ranks) == size
        for rank, res in enumerate(ranks):
            assert "exception" not in res, (name, rank, res.get("exception"))
            checked = [k for k in res if k.endswith(("_vs_engine", "_vs_exact"))]
            assert len(checked) == 9, (name, rank, checked)  # out, lse, dq, dk, dv
            for key in checked:
                assert res[key][1] <= 1, (name, rank, key, res[key])
    for errors in rep["errors"]:
        assert errors["wrong_length"].startswith("ValueError: k shards have lengths")
        assert errors["wrong_dtype"].startswith("TypeError: dtypes differ across ranks")
    return rep


@pytest.mark.slow
def test_ring_over_tcp_between_network_namespaces():
    """Each rank in its own network namespace (a "host"), shared memory off, TCP over a private
    bridge: forward and backward equal the engine and the exact result, both layouts, and bad
    input on one rank still raises the same error on every rank."""
    hosts_cls = _hosts_or_skip()
    with hosts_cls(2) as hosts:
        run = _run_in_hosts(hosts, 2, [str(HERE / "mpi_cases.py"),
                                       "causal,documents_causal,gqa_causal"])
    _check_netns_report(run, 2, 6)


@pytest.mark.slow
@pytest.mark.parametrize("size", [3, 4])
def test_ring_over_tcp_on_three_and_four_hosts(size):
    """3 and 4 namespaces, one rank each (every hop of the ring crosses TCP): causal forward
    and backward, zigzag and contiguous, equal the engine and the exact result on every rank.
    (mpi_cases runs the tiled kernel with 8-row tiles, so every forward step is several
    query blocks, computed while the progress thread moves the transfers.)"""
    hosts_cls = _hosts_or_skip()
    with hosts_cls(size) as hosts:
        run = _run_in_hosts(hosts, size, [str(HERE / "mpi_cases.py"), "causal"])
    rep = _check_netns_report(run, size, 2)
    for rank, res in enumerate(rep["cases"]["causal/contiguous"]):  # the ring really went round
        assert sorted(res["computed"]) == list(range(rank + 1))
    for res in rep["cases"]["causal/zigzag"]:
        assert sorted(res["computed"]) == list(range(size))


@pytest.mark.slow
def test_cut_link_mid_ring_ends_the_job():
    """Rank 1's link taken down (``ip link set … down``) while the ring runs (2 hosts, 1200 ×
    64 zigzag, rank 1 paused mid-step): the job ends within 30 s with a non-zero exit code and a
    message saying a host was lost; no rank prints a result. mpirun notices through its TCP
    keepalive (benchmarks/_netns.py, KEEPALIVE: about 6 s). The ranks' deadline (timeout=10) is set
    above that window on purpose: a rank that aborts first makes mpirun send to the lost
    daemon, and with data unacknowledged on that connection keepalive no longer applies — the
    job then hung past 90 s (seen with the prebuilt step, whose fast first call made rank 0's
    5 s deadline fire before the keepalive did)."""
    hosts_cls = _hosts_or_skip()
    with hosts_cls(2) as hosts:
        code, seconds, out = _watch_job(
            hosts.mpirun(2, [sys.executable, str(HERE / "mpi_faults.py"), "cut"]),
            _netns_env(), "cut its link now", on_marker=lambda: hosts.cut(1))
    assert code != 0 and seconds <= 30, (code, seconds, out)
    assert ("ORTE has lost communication with a remote daemon" in out
            or "waited past its deadline" in out), out
    assert "OUTCOME" not in out  # no rank went on to report a result
