"""Minor page faults per ``qkv.attention`` call, and its best time: the cost of fresh buffers.

Each call needs its workers' score tiles (up to 2 MiB each) and its output. qkv keeps the tiles
between calls (``qkv.engine.scratch``); ``--release`` frees them before every call, as qkv did
before it kept them, so each call allocates its tiles afresh — and when glibc's allocator has
handed such buffers back to the system, faults every page in again. With glibc told to keep
freed memory (a measurement only: qkv does not change the allocator of its process)::

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python benchmarks/page_faults.py
    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python benchmarks/page_faults.py --release
    GLIBC_TUNABLES=glibc.malloc.trim_threshold=67108864:glibc.malloc.mmap_threshold=33554432 \\
        env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python benchmarks/page_faults.py --release
"""

from __future__ import annotations

import argparse
import resource
import time

import numpy as np

import qkv

CALLS = 30
CASES = [(8, 1000, 80), (8, 512, 64), (8, 2048, 64)]  # (H, N, D): bench's odd, small, dense


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--release", action="store_true",
                        help="free the kept tile buffers before every call")
    args = parser.parse_args(argv)
    rng = np.random.default_rng(0)
    for heads, n, d in CASES:
        q, k, v = (rng.standard_normal((1, heads, n, d), dtype=np.float32) for _ in range(3))
        for _ in range(3):
            qkv.attention(q, k, v)
        before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        times = []
        for _ in range(CALLS):
            if args.release:
                qkv.engine.release_scratch()
            t0 = time.perf_counter()
            qkv.attention(q, k, v)
            times.append(time.perf_counter() - t0)
        faults = (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) / CALLS
        print(f"H={heads} N={n} D={d}: {faults:6.0f} minor faults a call; of {CALLS} calls, "
              f"best {min(times) * 1e3:6.2f} ms, median {np.median(times) * 1e3:6.2f} ms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
