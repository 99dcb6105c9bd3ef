"""Where a call's time goes beyond its tiles: the same call warm (back to back) and cold (after
50 ms idle, as ``qkv bench`` times every run after ``quiesce``), with the workers pinned to a
core each (the default) and not (``kernel_config(pin=False)``), and torch's SDPA beside it.

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python benchmarks/small_call.py

For each case: the median wall time of ``--calls`` calls, the cores kept busy (process CPU time
over wall time), and ``qkv.engine.prepare`` alone (the argument checks: shapes, dtypes, NaN/inf
and the overflow guard, which read q, k and v once) in the same state.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

import qkv
from qkv.engine import kernel_config, prepare

CASES = [("small N=512", (1, 8, 512, 64), None), ("causal N=2048", (1, 8, 2048, 64), "causal")]


def timed(fn, calls: int, idle: float) -> tuple[float, float]:
    """(median ms, median cores busy) of ``calls`` calls, each after ``idle`` seconds asleep."""
    fn()
    walls, cores = [], []
    for _ in range(calls):
        if idle:
            time.sleep(idle)
        t0, c0 = time.perf_counter(), time.process_time()
        fn()
        wall = time.perf_counter() - t0
        walls.append(wall)
        cores.append((time.process_time() - c0) / wall)
    return float(np.median(walls)) * 1e3, float(np.median(cores))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=30)
    args = parser.parse_args(argv)
    try:
        import torch
    except ImportError:
        torch = None
    rng = np.random.default_rng(0)
    print(f"{'case':14} {'state':5} {'pinned':>16} {'not pinned':>16} {'prepare':>8} "
          f"{'torch':>8}")
    for name, shape, mask_name in CASES:
        q, k, v = (rng.standard_normal(shape, dtype=np.float32) for _ in range(3))
        mask = qkv.causal() if mask_name == "causal" else None
        for state, idle in (("warm", 0.0), ("cold", 0.05)):
            cells = []
            for pin in (True, False):
                with kernel_config(pin=pin):
                    ms, busy = timed(lambda q=q, k=k, v=v, mask=mask: qkv.attention(
                        q, k, v, mask=mask), args.calls, idle)
                cells.append(f"{ms:6.2f} ms {busy:4.2f}c")
            checks, _ = timed(lambda q=q, k=k, v=v, mask=mask: prepare(q, k, v, mask),
                              args.calls, idle)
            peer = "—"
            if torch is not None:
                tq, tk, tv = (torch.from_numpy(x) for x in (q, k, v))
                with torch.no_grad():
                    peer_ms, _ = timed(lambda tq=tq, tk=tk, tv=tv, causal=mask is not None:
                                       torch.nn.functional.scaled_dot_product_attention(
                                           tq, tk, tv, is_causal=causal), args.calls, idle)
                peer = f"{peer_ms:5.2f} ms"
            print(f"{name:14} {state:5} {cells[0]:>16} {cells[1]:>16} {checks:5.2f} ms "
                  f"{peer:>8}", flush=True)
    print("(c: cores busy, process CPU time over wall time; medians)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
