"""qkv's speed and memory against its peers, measured side by side in one run.

    qkv bench [--quick] [--load] [--isolation quiesce|none] [--json results.json] [--only NAME ...]
              [--backend B]
    qkv bench scaling [--quick] [--json PATH] [--plot PATH]   # time and memory vs n: O(n²)

For each case it times qkv.attention, torch's fused SDPA (when torch is installed) and a naive
NumPy implementation (when its n × n matrix fits), interleaved, as the median of ≥ 5 runs after a
warm-up, and prints times, qkv/peer ratios, achieved GFLOP/s, the fraction of the machine's GEMM
rate measured in the same run, and peak memory beyond the inputs: for qkv the exact peak of NumPy's
allocations (tracemalloc), for torch the process's peak RSS above its baseline, reset before the
measurement through /proc/self/clear_refs. Timings on a shared machine are noisy:
compare the ratios, not the absolute times.

Each timed run starts only once every other thread of this process is asleep (``quiesce``: no
thread but the caller has run for 50 ms, read from /proc/self/task; at most 2 s): a BLAS or
OpenMP call leaves its threads spinning after it returns, and the next peer would be timed beside
them (qkv's dense N=2048: 59 ms alone, 85 ms right after a NumPy 2048² GEMM). The header says so,
the last line says how long it waited and whether it ever timed out, and ``--json`` records it
as ``isolation``; ``--isolation none`` times without it.

``--load`` runs everything again beside a competing process that keeps one core busy (a
single-threaded BLAS loop), as on a shared machine. The header says which tile step ran
(``compiled``: the Numba step of the ``qkv[fast]`` extra; ``numpy``) and what the first call costs
in a fresh process — importing qkv, and the compiled step's compile (cold JIT), the load of
Numba's cache (JIT cache), or the module ``qkv warm`` built ahead of time (prebuilt).

This machine may set OPENBLAS_CORETYPE (and OPENBLAS_L2_SIZE) to work around old OpenBLAS bugs;
with a current NumPy they select slower kernels, so the benchmark re-runs itself without them
(``--keep-blas-env`` keeps them) and reports which BLAS kernel it ran.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
import tracemalloc
from dataclasses import asdict, dataclass, field

import numpy as np

from ._quiesce import Quiet, quiesce, thread_stats

HELP = "benchmark qkv.attention against torch SDPA and naive NumPy, in one run"
QUIESCE_INTERVAL = 0.05  # s: no other thread may have run for this long before a timed run
QUIESCE_TIMEOUT = 2.0  # s: then the run is timed anyway, and counted as timed out
BLAS_ENV = ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")


@dataclass
class Case:
    name: str
    goal: str
    n: int
    heads: int = 8
    dim: int = 64
    mask: str | None = None  # None, "causal", "window", "documents"
    dtype: str = "float32"
    key_scale: float = 1.0  # > 1: scores spread far, most weights would be subnormal
    backward: bool = False
    nk: int | None = None


CASES = [
    Case("dense N=2048", "1", 2048),
    Case("dense N=8192", "1", 8192),
    Case("causal N=2048", "2", 2048, mask="causal"),
    Case("causal N=8192", "2", 8192, mask="causal"),
    Case("window 256, N=16384", "3", 16384, mask="window"),
    Case("16 documents of 1024, N=16384", "3", 16384, mask="documents"),
    Case("one long head H=1, N=8192", "4", 8192, heads=1),
    Case("one long causal head H=1, N=8192", "4", 8192, heads=1, mask="causal"),
    Case("D=128, N=4096", "5", 4096, dim=128),
    Case("small N=512", "5", 512),
    Case("dense N=4096 (goal 6's reference)", "6", 4096),
    Case("scaled keys (subnormal trap), N=4096", "6", 4096, key_scale=12.0),
    Case("float16, N=4096", "6", 4096, dtype="float16"),
    Case("odd sizes N=1000, D=80", "6", 1000, dim=80),
    Case("forward+backward causal N=2048", "7", 2048, mask="causal", backward=True),
    Case("forward+backward dense N=4096", "7", 4096, backward=True),
]
QUICK = {"dense N=2048", "causal N=2048", "window 256, N=16384", "small N=512",
         "forward+backward causal N=2048"}


@dataclass
class Result:
    case: Case
    seconds: dict[str, float] = field(default_factory=dict)  # peer → median seconds
    peak_mib: dict[str, float] = field(default_factory=dict)
    gflops: float = 0.0
    gemm_gflops: float = 0.0  # the BLAS's rate on attention-shaped GEMMs, timed beside the case
    gemm_fraction: float = 0.0
    square_fraction: float = 0.0  # qkv's GFLOP/s over a large square GEMM's
    max_error: float = 0.0  # qkv vs torch (or naive), max abs difference
    # the share of the n × n pairs qkv's tiles computed, and the least a mask allows (its
    # allowed pairs): the work done, counted by the kernel (TileStats), beside the minimum
    work_done: float = 1.0
    work_min: float = 1.0
    cores_busy: float = 0.0  # qkv's CPU time over its wall time in the timed runs


# -- memory ------------------------------------------------------------------------------------
def _rss_kib(field_name: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field_name):
                return int(line.split()[1])
    return 0


def peak_mib(fn) -> float:
    """Peak resident memory (MiB) that ``fn()`` adds above the current RSS."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # reset VmHWM, the peak RSS, to the current RSS
    except OSError:
        return float("nan")
    before = _rss_kib("VmRSS:")
    fn()
    return max(0, _rss_kib("VmHWM:") - before) / 1024


# -- the problem and its peers -----------------------------------------------------------------
def inputs(case: Case, rng):
    dtype = np.dtype(case.dtype)
    nk = case.nk or case.n
    q = rng.standard_normal((1, case.heads, case.n, case.dim), dtype=np.float32)
    k = rng.standard_normal((1, case.heads, nk, case.dim), dtype=np.float32) * case.key_scale
    v = rng.standard_normal((1, case.heads, nk, case.dim), dtype=np.float32)
    return q.astype(dtype), k.astype(dtype), v.astype(dtype)


def qkv_mask(case: Case):
    import qkv

    if case.mask == "causal":
        return qkv.causal()
    if case.mask == "window":
        return qkv.window(255)
    if case.mask == "documents":
        return qkv.documents(np.repeat(np.arange(16), case.n // 16))
    return None


def allowed_pairs(case: Case) -> float:
    """The (query, key) pairs the case's mask allows: the least work any kernel must do."""
    nk = case.nk or case.n
    if case.mask == "causal":
        return case.n * (case.n + 1) / 2
    if case.mask == "window":
        return sum(min(i + 1, 256) for i in range(case.n))
    if case.mask == "documents":
        return 16 * (case.n // 16) ** 2
    return case.n * nk


def work_counted(case: Case, run) -> tuple[float, float]:
    """(pairs qkv's tiles computed, pairs the mask allows), each over n × nk: one run of the
    forward counted by the kernel's own TileStats (the backward's plan is the same)."""
    from qkv.engine import TileStats, kernel_config

    stats = TileStats()
    with kernel_config(stats=stats):
        run()
    total = case.heads * case.n * (case.nk or case.n)
    done = stats.pairs["full"] + stats.pairs["partial"]
    passes = 1 if not case.backward else max(1, round(sum(stats.pairs.values()) / total))
    return (done / passes / total if stats.pairs else 1.0), allowed_pairs(case) / (
        case.n * (case.nk or case.n))


def flops(case: Case) -> float:
    """Multiply-adds × 2 of the work a mask leaves (QKᵀ and PV), ×2.5 more for the backward."""
    nk = case.nk or case.n
    pairs = case.n * nk
    if case.mask == "causal":
        pairs = case.n * (case.n + 1) / 2
    elif case.mask == "window":
        pairs = case.n * 256
    elif case.mask == "documents":
        pairs = 16 * (case.n // 16) ** 2
    total = 4 * case.heads * pairs * case.dim
    return total * (3.5 if case.backward else 1.0)


def run_qkv(case, q, k, v, mask):
    import qkv

    if not case.backward:
        return lambda: qkv.attention(q, k, v, mask=mask)

    dout = np.ones((*q.shape[:-1], v.shape[-1]), dtype=q.dtype)

    def fwd_bwd():
        out, lse = qkv.attention(q, k, v, mask=mask, return_lse=True)
        return qkv.attention_backward(q, k, v, out, lse, dout, mask=mask)

    return fwd_bwd


def run_torch(case, q, k, v, mask):
    try:
        import torch
    except ImportError:
        return None
    torch.set_num_threads(os.cpu_count() or 1)
    tq, tk, tv = (torch.from_numpy(np.ascontiguousarray(x)) for x in (q, k, v))
    kwargs = {}
    if case.mask == "causal":
        kwargs["is_causal"] = True
    elif mask is not None:  # torch takes a custom mask as a dense bool matrix
        kwargs["attn_mask"] = torch.from_numpy(mask.to_dense(q.shape[-2], k.shape[-2]))
    F = torch.nn.functional
    if not case.backward:
        def fwd():
            with torch.no_grad():
                return F.scaled_dot_product_attention(tq, tk, tv, **kwargs)
        return fwd
    tq, tk, tv = (x.clone().requires_grad_(True) for x in (tq, tk, tv))

    def fwd_bwd():
        tq.grad = tk.grad = tv.grad = None  # fresh gradients each run, not accumulated ones
        out = F.scaled_dot_product_attention(tq, tk, tv, **kwargs)
        out.backward(torch.ones_like(out))
        return tq.grad.clone()

    return fwd_bwd


def run_naive(case, q, k, v, mask):
    """The formula with the full matrix, in the inputs' dtype (skipped when it needs > 2 GiB)."""
    nk = k.shape[-2]
    if case.backward or case.heads * case.n * nk * 4 * 3 > 2 * 2**30:
        return None
    if q.dtype == np.float16:  # NumPy has no float16 BLAS: its matmul is emulated, minutes long
        return None
    allowed = None if mask is None else mask.to_dense(case.n, nk)

    def naive():
        scores = q @ np.swapaxes(k, -1, -2) / np.sqrt(q.shape[-1]).astype(q.dtype)
        if allowed is not None:
            scores = np.where(allowed, scores, -np.inf)
        scores = np.exp(scores - scores.max(axis=-1, keepdims=True))
        return (scores / scores.sum(axis=-1, keepdims=True)) @ v

    return naive


@dataclass
class Isolation:
    """How the timed runs were kept apart: ``quiesce`` before each (``method``), and what it
    saw — how long it waited and how many times it gave up with threads still busy."""

    method: str  # "quiesce" or "none"
    interval_s: float = QUIESCE_INTERVAL
    timeout_s: float = QUIESCE_TIMEOUT
    runs: int = 0
    timed_out: int = 0
    waits_s: list[float] = field(default_factory=list)
    still_busy: list[str] = field(default_factory=list)  # threads busy at a timeout (first 5)

    def add(self, quiet: Quiet) -> None:
        self.runs += 1
        self.waits_s.append(quiet.waited)
        if not quiet.settled:
            self.timed_out += 1
            self.still_busy = sorted(set(self.still_busy) | set(quiet.busy))[:5]

    def describe(self) -> str:
        if self.method == "none":
            return ("Isolation: none (--isolation none): each timed run starts right after the "
                    "previous peer's, beside any threads it left spinning.")
        return (f"Isolation: before each timed run, wait until no other thread of this process "
                f"has run for {self.interval_s * 1e3:.0f} ms (/proc/self/task; at most "
                f"{self.timeout_s:.0f} s), so no peer is timed beside another's leftover "
                "BLAS/OpenMP threads; other processes (--load's) are not waited for.")

    def summary(self) -> str:
        if self.method == "none" or not self.runs:
            return ""
        waits = np.array(self.waits_s) * 1e3
        busy = f" (still busy: {', '.join(self.still_busy)})" if self.timed_out else ""
        return (f"Isolation: {self.runs} timed runs; waited median {np.median(waits):.0f} ms, "
                f"max {waits.max():.0f} ms; {self.timed_out} timed out{busy}.")

    def to_json(self) -> dict:
        waits = self.waits_s or [math.nan]
        return {"method": self.method, "interval_s": self.interval_s,
                "timeout_s": self.timeout_s, "runs": self.runs, "timed_out": self.timed_out,
                "wait_median_s": float(np.median(waits)), "wait_max_s": float(max(waits)),
                "still_busy": self.still_busy}


GEMM_COUNT = 32
SQUARE = 2048  # the "large square GEMM" the attention's rate is also compared with


def gemm_probe(dim: int):
    """The BLAS on the kernel's own tile GEMM (tq×Dk · Dk×tk, the unmasked tile sizes of the
    kernel config, K = Dk as in attention), into preallocated outputs, run on qkv's thread pool
    with one BLAS thread per worker — the ceiling qkv's kernel works against. Timed beside every
    case, so the fraction uses the machine's rate at that moment. Returns (probe, flops)."""
    from qkv.engine import current, gemm, threads
    from qkv.engine.tiles import cpu_workers

    cfg = current()
    use = cfg.resolved_gemm()  # the GEMM the kernel's tiles run on (qkv.engine.gemm)
    tq, tk = cfg.tile_q, cfg.key_tile(masked=False)
    rng = np.random.default_rng(0)
    a = rng.standard_normal((tq, dim), dtype=np.float32)
    b = rng.standard_normal((dim, tk), dtype=np.float32)
    workers = cpu_workers()
    outs = [np.empty((tq, tk), dtype=np.float32) for _ in range(workers)]

    def probe():
        threads.run(lambda w, _: gemm.matmul(a, b, out=outs[w], use=use),
                    list(range(GEMM_COUNT)), workers)

    return probe, 2.0 * GEMM_COUNT * tq * dim * tk


def square_gemm_rate() -> float:
    """GFLOP/s of one large square float32 GEMM with the BLAS's own threads (median of 3)."""
    rng = np.random.default_rng(0)
    a, b = (rng.standard_normal((SQUARE, SQUARE), dtype=np.float32) for _ in range(2))
    out = np.empty_like(a)
    np.matmul(a, b, out=out)
    times = []
    for _ in range(3):
        start = time.perf_counter()
        np.matmul(a, b, out=out)
        times.append(time.perf_counter() - start)
    return 2 * SQUARE**3 / float(np.median(times)) / 1e9


def measure(case: Case, repeats: int, peers: tuple[str, ...] = ("qkv", "torch", "naive"),
            isolation: Isolation | None = None) -> Result:
    rng = np.random.default_rng(0)
    q, k, v = inputs(case, rng)
    mask = qkv_mask(case)
    runners = {"qkv": run_qkv(case, q, k, v, mask), "torch": run_torch(case, q, k, v, mask),
               "naive": run_naive(case, q, k, v, mask)}
    runners = {name: fn for name, fn in runners.items() if fn is not None and name in peers}
    runners["gemm"], gemm_flops = gemm_probe(case.dim)
    result = Result(case)
    outputs = {}
    for name, fn in runners.items():  # warm-up, outputs for the cross-check, and peak memory
        if name == "gemm":
            fn()
            continue
        result.peak_mib[name] = peak_mib(lambda fn=fn, name=name: outputs.__setitem__(name, fn()))
    # NumPy reports its allocations to tracemalloc: for qkv that is exact, where the RSS may
    # hide allocations that reuse memory freed by earlier cases. The tile buffers qkv keeps
    # between calls are freed first, so that the peak counts them as a fresh call does.
    from qkv.engine import release_scratch

    release_scratch()
    tracemalloc.start()
    runners["qkv"]()
    result.peak_mib["qkv"] = tracemalloc.get_traced_memory()[1] / 2**20
    tracemalloc.stop()
    result.work_done, result.work_min = work_counted(case, runners["qkv"])
    times = {name: [] for name in runners}
    cpu = []  # qkv's runs: process CPU seconds (all threads) per wall second
    for _ in range(repeats):  # interleaved, so a noisy moment hits every peer alike
        for name, fn in runners.items():
            # the previous peer's BLAS/OpenMP threads may still spin: wait until they sleep
            if isolation is not None and isolation.method == "quiesce":
                isolation.add(quiesce(isolation.interval_s, isolation.timeout_s))
            start, start_cpu = time.perf_counter(), time.process_time()
            fn()
            times[name].append(time.perf_counter() - start)
            if name == "qkv":
                cpu.append((time.process_time() - start_cpu) / times[name][-1])
    result.cores_busy = float(np.median(cpu))
    gemm_seconds = float(np.median(times.pop("gemm")))
    result.seconds = {name: float(np.median(t)) for name, t in times.items()}
    result.gflops = flops(case) / result.seconds["qkv"] / 1e9
    result.gemm_gflops = gemm_flops / gemm_seconds / 1e9
    result.gemm_fraction = result.gflops / result.gemm_gflops
    peer = "torch" if "torch" in outputs else "naive" if "naive" in outputs else None
    if peer is not None:
        ours = outputs["qkv"][0] if case.backward else outputs["qkv"]
        theirs = outputs[peer]
        theirs = theirs.detach().numpy() if hasattr(theirs, "detach") else theirs
        result.max_error = float(np.abs(np.asarray(ours, np.float64) - np.asarray(theirs)).max())
    return result


# -- report ------------------------------------------------------------------------------------
def report_header(blas: str, backend: str, square: float, first: dict, isolation: str) -> None:
    header = (f"{'case':38} {'goal':>4} {'qkv ms':>9} {'torch ms':>9} {'qkv/torch':>9} "
              f"{'naive ms':>9} {'qkv/naive':>9} {'GFLOP/s':>8} {'of GEMM':>7} "
              f"{'of sq.':>6} {'work':>5} {'min':>5} {'cores':>5} {'qkv MiB':>8} {'torch MiB':>9} "
              f"{'max err':>8}")
    from qkv.engine import current, gemm

    print(f"BLAS: {blas}; {os.cpu_count()} cores; qkv tile step: {backend}; qkv's tile GEMMs: "
          f"{gemm.describe(current().gemm)}.")
    print(f"Large square GEMM ({SQUARE}³, float32, BLAS threads): {square:.0f} GFLOP/s. "
          "'of GEMM': qkv's GFLOP/s over the BLAS's rate on the kernel's own tile GEMM "
          "(K = Dk), timed interleaved with each case; 'of sq.': over the square GEMM's rate. "
          "Either can exceed 1.0: masked cases count only the allowed pairs' work, and qkv's "
          "threads may run the tile GEMMs faster than the probe did at that moment. 'work': the "
          "share of the n × n pairs qkv's tiles computed (counted by the kernel), 'min': the "
          "share the mask allows; 'cores': qkv's CPU time over its wall time (2.00 = both of 2 "
          "cores busy throughout).")
    if first:
        print("First call in a fresh process: " + ", ".join(
            k if math.isnan(v) else f"{k} {v:.2f} s" for k, v in first.items()))
    print(isolation)
    print(header)
    print("-" * len(header), flush=True)


def report_row(r: Result) -> None:
    print(f"{r.case.name:38} {r.case.goal:>4} {_ms(r, 'qkv')} {_ms(r, 'torch')} "
          f"{_ratio(r, 'torch')} {_ms(r, 'naive')} {_ratio(r, 'naive')} {r.gflops:8.0f} "
          f"{r.gemm_fraction:7.2f} {r.square_fraction:6.2f} {r.work_done:5.3f} {r.work_min:5.3f} "
          f"{r.cores_busy:5.2f} {_mib(r, 'qkv')} "
          f"{_mib(r, 'torch'):>9} {r.max_error:8.1e}",
          flush=True)


def _ms(r: Result, name: str) -> str:
    return f"{r.seconds[name] * 1e3:9.1f}" if name in r.seconds else f"{'—':>9}"


def _ratio(r: Result, name: str) -> str:
    return f"{r.seconds['qkv'] / r.seconds[name]:9.2f}" if name in r.seconds else f"{'—':>9}"


def _mib(r: Result, name: str) -> str:
    value = r.peak_mib.get(name, math.nan)
    return f"{'—':>8}" if math.isnan(value) else f"{value:8.0f}"


def blas_description() -> str:
    try:
        from threadpoolctl import threadpool_info
    except ImportError:
        return "unknown (install threadpoolctl)"
    infos = [i for i in threadpool_info() if i.get("user_api") == "blas"]
    return ", ".join(f"{i['internal_api']} {i.get('version')} ({i.get('architecture')})"
                     for i in infos) or "unknown"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("suite", nargs="?", default="attention", choices=("attention", "scaling"),
                        help="attention (default): qkv against its peers, case by case; "
                             "scaling: time and memory against n, the O(n²) bill")
    parser.add_argument("--quick", action="store_true", help="a few cases, 3 runs each")
    parser.add_argument("--repeats", type=int, default=5, help="timed runs per peer (default 5)")
    parser.add_argument("--only", nargs="*", default=None, help="case names containing these")
    parser.add_argument("--json", metavar="PATH", help="also write the results as JSON")
    parser.add_argument("--plot", metavar="PATH", help="scaling: where to save the plot")
    parser.add_argument("--peers", default="torch,naive",
                        help="peers to time beside qkv, comma-separated (default torch,naive)")
    parser.add_argument("--backend", choices=("auto", "compiled", "numpy"), default="auto",
                        help="qkv's tile step (default auto: compiled when Numba is installed)")
    parser.add_argument("--isolation", choices=("quiesce", "none"), default="quiesce",
                        help="quiesce (default): before each timed run, wait until this "
                             "process's other threads (BLAS, OpenMP) are asleep; none: don't")
    parser.add_argument("--load", action="store_true",
                        help="run beside a competing process that keeps one core busy")
    parser.add_argument("--keep-blas-env", action="store_true",
                        help="keep OPENBLAS_CORETYPE/OPENBLAS_L2_SIZE as they are")


LOAD_SCRIPT = """
import os, numpy as np
a = np.random.default_rng(0).standard_normal((512, 512), dtype=np.float32)
while True:
    a = a @ a; a /= np.abs(a).max()
"""


def competing_load():
    """A process that keeps one core busy (a single-threaded BLAS loop) until killed."""
    import subprocess

    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    return subprocess.Popen([sys.executable, "-c", LOAD_SCRIPT], env=env)


FIRST_CALL = """
import time, sys
t0 = time.perf_counter()
import numpy as np, qkv
t1 = time.perf_counter()
x = np.ones((600, 64), np.float32)
qkv.attention(x, x, x, mask=qkv.causal())
t2 = time.perf_counter()
print(t1 - t0, t2 - t1)
"""
# How a fresh process gets its compiled tile step: Numba's JIT with an empty cache (a compile),
# with the cache that run left, and the module `qkv warm` built ahead of time.
FIRST_CALL_MODES = ("cold JIT", "JIT cache", "prebuilt")


def first_call(mode: str, numba_cache: str, qkv_cache: str | None = None,
               backend: str = "compiled") -> tuple[float, float]:
    """(import qkv, first attention call) in seconds, in a fresh process, for one of
    :data:`FIRST_CALL_MODES` (``qkv_cache``: the prebuilt module's folder, for "prebuilt")."""
    import subprocess

    env = dict(os.environ, NUMBA_CACHE_DIR=numba_cache, QKV_BACKEND=backend,
               QKV_AOT="1" if mode == "prebuilt" else "0")
    if qkv_cache is not None:
        env["QKV_CACHE_DIR"] = qkv_cache
    run = subprocess.run([sys.executable, "-c", FIRST_CALL], env=env, capture_output=True,
                         text=True, timeout=300)
    if run.returncode != 0:
        raise RuntimeError(f"first call ({mode}) failed:\n{run.stderr}")
    imported, first = (float(x) for x in run.stdout.split())
    return imported, first


def first_call_costs(backend: str) -> dict:
    """Seconds for ``import qkv`` and the first attention call, in fresh processes: with an
    empty Numba cache (the compile), with the cache the first run left, and with the module
    ``qkv warm`` built (when the user's cache has a current one)."""
    import tempfile

    from qkv.engine.step import aot

    costs = {}
    modes = list(FIRST_CALL_MODES[:2] if backend == "compiled" else ("numpy",))
    if backend == "compiled" and aot.available():
        modes.append("prebuilt")
    with tempfile.TemporaryDirectory() as cache:
        for mode in modes:
            try:
                imported, first = first_call(mode, cache, backend=backend)
            except (RuntimeError, ValueError):
                return {"first call": math.nan}
            costs[f"import qkv ({mode})"] = imported
            costs[f"first attention ({mode})"] = first
    if backend == "compiled" and "prebuilt" not in modes:
        costs["prebuilt: absent, run `qkv warm`"] = math.nan
    return costs


def run(args: argparse.Namespace) -> int:
    if not args.keep_blas_env and any(v in os.environ for v in BLAS_ENV):
        env = {k: v for k, v in os.environ.items() if k not in BLAS_ENV}
        # the same command line (qkv bench … or python -m qkv.commands.bench …), before NumPy
        os.execve(sys.executable, [sys.executable, *sys.orig_argv[1:]], env)
    if args.suite == "scaling":
        from qkv.tasks import scaling

        argv = ["--quick"] if args.quick else []
        argv += ["--json", args.json] if args.json else []
        argv += ["--plot", args.plot] if args.plot else []
        return scaling.main(argv)
    from qkv.engine import kernel_config

    cases = [c for c in CASES if not args.quick or c.name in QUICK]
    if args.only is not None:
        cases = [c for c in cases if any(word in c.name for word in args.only)]
        if not cases:  # nothing to time: say so before any work, never an empty table
            pool = [c.name for c in CASES if not args.quick or c.name in QUICK]
            print(f"qkv bench: --only {' '.join(args.only) or '(nothing)'} matches no case"
                  f"{' of --quick' if args.quick else ''}; the cases are: {', '.join(pool)}",
                  file=sys.stderr)
            return 2
    repeats = 3 if args.quick else max(args.repeats, 5)
    isolation = Isolation(args.isolation)
    if args.isolation == "quiesce" and not thread_stats():
        print("qkv bench: cannot read /proc/self/task here, so runs are timed without waiting "
              "for other threads to sleep (--isolation none)", file=sys.stderr)
        isolation = Isolation("none")
    with kernel_config(backend=args.backend) as config:
        backend = config.resolved_backend()
        first = {} if args.quick else first_call_costs(backend)
        load = competing_load() if args.load else None
        try:
            if load is not None:
                time.sleep(1.0)
                print("Under load: a competing process keeps one core busy.")
            square = square_gemm_rate()
            report_header(blas_description(), backend, square, first, isolation.describe())
            results = []
            for case in cases:
                results.append(measure(case, repeats, ("qkv", *args.peers.split(",")),
                                       isolation))
                results[-1].square_fraction = results[-1].gflops / square
                report_row(results[-1])
            if isolation.summary():
                print(isolation.summary())
        finally:
            if load is not None:
                load.kill()
                load.wait()
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"blas": blas_description(), "cores": os.cpu_count(), "backend": backend,
                       "load": bool(args.load), "isolation": isolation.to_json(),
                       "square_gemm_gflops": square,
                       "first_call_s": first, "results": [asdict(r) for r in results]},
                      f, indent=2)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="qkv bench", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(parser)
    return run(parser.parse_args(sys.argv[1:] if argv is None else argv))


if __name__ == "__main__":
    sys.exit(main())
