"""A fresh process's `import qkv` and first attention call, by how it gets its tile step.

    python benchmarks/first_call.py [--repeats 3]

Three ways, each in fresh processes, interleaved round by round: ``cold JIT`` (Numba compiles
the step: an empty NUMBA_CACHE_DIR), ``JIT cache`` (Numba loads what that run cached) and
``prebuilt`` (the module ``qkv warm`` builds; built here first, into a temporary
QKV_CACHE_DIR with an empty Numba cache, and the build timed — what ``scripts/install.sh`` pays
once on a fresh machine). The call is
``qkv.attention`` on one causal head of 600 × 64 float32, as in ``qkv bench``'s header.
The issue's goal: the first call ≤ 0.3 s after the install. Last, the speed of the two steps
once loaded: dense H=8 N=2048 D=64, the prebuilt step and the JIT alternating in this process
(median of 7), and whether their outputs are bitwise equal.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

from qkv.commands.bench import FIRST_CALL_MODES, first_call


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=3, help="rounds of the three (default 3)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as qkv_cache, tempfile.TemporaryDirectory() as empty:
        # `qkv warm` as install.sh runs it on a fresh machine: its own process, no Numba cache
        start = time.perf_counter()
        subprocess.run([sys.executable, "-m", "qkv", "warm"], check=True,
                       env=dict(os.environ, QKV_CACHE_DIR=qkv_cache, NUMBA_CACHE_DIR=empty))
        print(f"qkv warm (build + bitwise check): {time.perf_counter() - start:.1f} s")
        seen = {mode: [] for mode in FIRST_CALL_MODES}
        for _ in range(args.repeats):
            with tempfile.TemporaryDirectory() as numba_cache:  # empty: the first run compiles
                for mode in FIRST_CALL_MODES:
                    seen[mode].append(first_call(mode, numba_cache, qkv_cache))
        print(f"{'step':10} {'import qkv s':>13} {'first call s':>13}   (median; all first calls)")
        for mode, runs in seen.items():
            imports, firsts = np.array(runs).T
            print(f"{mode:10} {np.median(imports):13.3f} {np.median(firsts):13.3f}   "
                  + " ".join(f"{x:.3f}" for x in firsts))
        os.environ["QKV_CACHE_DIR"] = qkv_cache
        speed()


def speed(repeats: int = 7) -> None:
    """The prebuilt step against the JIT once both are loaded, alternating in this process."""
    import qkv
    from qkv.engine import step
    from qkv.engine.step import aot

    assert aot.available(), "the prebuilt step did not load"
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((1, 8, 2048, 64), dtype=np.float32) for _ in range(3))
    times, outs = {True: [], False: []}, {}
    for use_aot in (True, False):  # warm-up, and the outputs to compare
        step._aot = use_aot
        outs[use_aot] = qkv.attention(q, k, v, mask=qkv.causal())
    for _ in range(repeats):
        for use_aot in (True, False):
            step._aot = use_aot
            start = time.perf_counter()
            qkv.attention(q, k, v)
            times[use_aot].append(time.perf_counter() - start)
    print(f"dense H=8 N=2048 D=64, median of {repeats}: prebuilt "
          f"{np.median(times[True]) * 1e3:.1f} ms, JIT {np.median(times[False]) * 1e3:.1f} ms; "
          f"causal outputs bitwise equal: {np.array_equal(outs[True], outs[False])}")


if __name__ == "__main__":
    main()
