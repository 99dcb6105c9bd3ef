"""The tile plan's effect, in one process: the unsplit, unmerged plan (256 × 512 tiles, as before
the TilePlan) against the default, interleaved, on the masked cases of ``qkv bench``.

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python benchmarks/tile_plan.py [--repeats 5]

For each case and plan it prints the share of the dense pairs computed (``work_fraction``) and
the median over the repeats of one call's CPU time on one worker (the calling thread's CPU
time: less sensitive to other processes than the wall clock on a shared machine) and its wall
time on the default workers.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

import qkv
from qkv.engine import kernel_config, work_fraction

CASES = {  # name: (N, mask), as in qkv bench (H=8, D=64, float32)
    "causal N=2048": (2048, qkv.causal()),
    "causal N=8192": (8192, qkv.causal()),
    "window 256, N=16384": (16384, qkv.window(255)),
    "16 documents of 1024, N=16384": (16384, qkv.documents(np.repeat(np.arange(16), 1024))),
}
PLANS = {"unsplit, unmerged": dict(split_min=1 << 30, tile_k_unmasked=512), "default": {}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--only", nargs="*", default=None, help="case names (default: all)")
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    for name, (n, mask) in CASES.items():
        if args.only and name not in args.only:
            continue
        q, k, v = (rng.standard_normal((1, 8, n, 64), dtype=np.float32) for _ in range(3))
        cpu: dict[str, list[float]] = {plan: [] for plan in PLANS}
        wall: dict[str, list[float]] = {plan: [] for plan in PLANS}
        for changes in PLANS.values():  # warm-up
            with kernel_config(**changes):
                qkv.attention(q, k, v, mask=mask)
        for _ in range(args.repeats):
            for plan, changes in PLANS.items():
                with kernel_config(workers=1, **changes):
                    start = time.thread_time()
                    qkv.attention(q, k, v, mask=mask)
                    cpu[plan].append(time.thread_time() - start)
                with kernel_config(**changes):
                    start = time.perf_counter()
                    qkv.attention(q, k, v, mask=mask)
                    wall[plan].append(time.perf_counter() - start)
        for plan, changes in PLANS.items():
            with kernel_config(**changes):
                fraction = work_fraction(mask, n, n)
            print(f"{name:31s} {plan:18s} pairs computed {fraction:.4f}   "
                  f"CPU, 1 worker {1e3 * np.median(cpu[plan]):7.1f} ms   "
                  f"wall {1e3 * np.median(wall[plan]):7.1f} ms", flush=True)


if __name__ == "__main__":
    main()
