"""How much a second core gives on this machine: the same tile-sized work on one core, then on two.

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python benchmarks/two_cores.py

Three pieces of work, each timed on one worker and on two (medians of ``--calls``):

- **two processes**, each running tile GEMMs (512 × 64 by 64 × 512, one BLAS thread) in a loop:
  the time of one GEMM alone, then in each process while both run. No Python threads, no qkv:
  what the machine gives two independent programs.
- **eight items of three such GEMMs** through :func:`qkv.engine.threads.run` (the pool the
  kernel's workers run on), on one worker and on two: the pool's share of the loss.
- **qkv.attention's small call** (1, 8, 512, 64) — eight one-tile heads — on one worker and two.

A speed-up under 2.0× with no Python in the way (the first line) is the machine's: on a shared
virtual machine two busy vCPUs each run slower than one alone. The other two lines are then
read against it.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import time

import numpy as np
import threadpoolctl

import qkv
from qkv.engine import kernel_config, threads

TILE = (512, 64)  # a query block against a key block: 512 × 64 by 64 × 512


def _operands(seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return (rng.standard_normal(TILE, dtype=np.float32),
            rng.standard_normal(TILE[::-1], dtype=np.float32))


def gemm_loop(count: int, start=None, result=None) -> float:
    """Seconds per tile GEMM over ``count`` of them on one BLAS thread (after ``start`` is set,
    when given, so that two processes begin together)."""
    a, b = _operands()
    out = np.empty((TILE[0], TILE[0]), np.float32)
    with threadpoolctl.threadpool_limits(1, "blas"):
        for _ in range(50):
            np.matmul(a, b, out=out)
        if start is not None:
            start.wait()
        t0 = time.perf_counter()
        for _ in range(count):
            np.matmul(a, b, out=out)
        seconds = (time.perf_counter() - t0) / count
    if result is not None:
        result.put(seconds)
    return seconds


def two_processes(count: int) -> list[float]:
    """Seconds per GEMM in each of two processes started together."""
    ctx = mp.get_context("spawn")  # a fresh interpreter each: no BLAS state shared with ours
    start, result = ctx.Event(), ctx.Queue()
    procs = [ctx.Process(target=gemm_loop, args=(count, start, result)) for _ in range(2)]
    for p in procs:
        p.start()
    time.sleep(1.0)  # both imported and warmed up
    start.set()
    times = sorted(result.get() for _ in procs)
    for p in procs:
        p.join()
    return times


def median_ms(fn, calls: int) -> float:
    fn()
    walls = []
    for _ in range(calls):
        t0 = time.perf_counter()
        fn()
        walls.append(time.perf_counter() - t0)
    return float(np.median(walls)) * 1e3


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=100)
    parser.add_argument("--gemms", type=int, default=6000, help="GEMMs per process (6000)")
    args = parser.parse_args(argv)

    alone = gemm_loop(args.gemms)
    both = two_processes(args.gemms)
    print(f"two processes, a tile GEMM each:  {alone * 1e3:.3f} ms alone, "
          f"{both[0] * 1e3:.3f} / {both[1] * 1e3:.3f} ms with both running: "
          f"{2 * alone / both[1]:.2f}–{2 * alone / both[0]:.2f}× the work of one core")

    a, b = _operands()
    outs = [np.empty((TILE[0], TILE[0]), np.float32) for _ in range(2)]

    def item(worker: int, _index: int) -> None:
        for _ in range(3):
            np.matmul(a, b, out=outs[worker])

    one, two = (median_ms(lambda w=w: threads.run(item, range(8), w), args.calls) for w in (1, 2))
    print(f"threads.run, 8 items of 3 GEMMs:  {one:.2f} ms on one worker, {two:.2f} on two: "
          f"{one / two:.2f}×")

    rng = np.random.default_rng(1)
    q, k, v = (rng.standard_normal((1, 8, 512, 64), dtype=np.float32) for _ in range(3))
    times = []
    for workers in (1, 2):
        with kernel_config(workers=workers):
            times.append(median_ms(lambda: qkv.attention(q, k, v), args.calls))
    print(f"qkv.attention (1, 8, 512, 64):    {times[0]:.2f} ms on one worker, {times[1]:.2f} "
          f"on two: {times[0] / times[1]:.2f}×")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
