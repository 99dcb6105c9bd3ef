"""Minor page faults per ``qkv.attention`` call, and its best time: the cost of fresh buffers.

Each call allocates its workers' score tiles (up to 2 MiB each) and its output; when glibc's
allocator hands such buffers back to the system between calls, the next call faults every page
in again. Run it as is, then with glibc told to keep freed memory (a measurement only — qkv does
not change the allocator of the process it runs in)::

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python benchmarks/page_faults.py
    GLIBC_TUNABLES=glibc.malloc.trim_threshold=67108864:glibc.malloc.mmap_threshold=33554432 \\
        env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python benchmarks/page_faults.py
"""

from __future__ import annotations

import resource
import time

import numpy as np

import qkv

CASES = [(8, 1000, 80), (8, 512, 64), (8, 2048, 64)]  # (H, N, D): bench's odd, small, dense


def main() -> int:
    rng = np.random.default_rng(0)
    for heads, n, d in CASES:
        q, k, v = (rng.standard_normal((1, heads, n, d), dtype=np.float32) for _ in range(3))
        for _ in range(3):
            qkv.attention(q, k, v)
        before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        times = []
        for _ in range(20):
            t0 = time.perf_counter()
            qkv.attention(q, k, v)
            times.append(time.perf_counter() - t0)
        faults = (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) / 20
        print(f"H={heads} N={n} D={d}: {faults:6.0f} minor faults a call, best of 20 "
              f"{min(times) * 1e3:7.2f} ms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
