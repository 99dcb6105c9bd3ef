"""Why weights below 2^-63 are flushed to 0: the P·V GEMM of one tile (512 × 1024 weights times
a 1024 × 64 V, one thread) with weights of each size, on MKL and on NumPy's OpenBLAS.

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python benchmarks/subnormal_gemm.py

Weights near 1e-36 and below make products with V that are subnormal numbers, which Intel and
AMD cores compute in microcode; the time of each size is printed against weights near 1e-3.
"""

from __future__ import annotations

import time

import numpy as np
import threadpoolctl

from qkv.engine import gemm


def best(fn, rounds: int = 15) -> float:
    fn()
    times = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def main() -> int:
    rng = np.random.default_rng(0)
    v = rng.standard_normal((1024, 64)).astype(np.float32)
    out = np.zeros((512, 64), np.float32)
    uses = ["numpy"] + (["mkl"] if gemm.mkl_available() else [])
    with threadpoolctl.threadpool_limits(1, "blas"):
        base = {}
        for size in (1e-3, 1e-20, 1e-30, 1e-36, 1e-37, 2e-38):
            p = (rng.random((1024, 512)) * size + size).astype(np.float32).T  # (512, 1024)
            cells = []
            for use in uses:
                seconds = best(lambda p=p, use=use: gemm.matmul(p, v, out, accumulate=True,
                                                                use=use))
                base.setdefault(use, seconds)
                cells.append(f"{use} {seconds * 1e3:7.3f} ms ({seconds / base[use]:5.1f}×)")
            print(f"weights ~{size:7.0e}: " + "   ".join(cells))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
