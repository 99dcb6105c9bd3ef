"""The score tile's layout, measured: one head's tile loop with the tile as the kernel stores it
(keys × queries, ``Sᵀ = K Qᵀ``) against queries × keys (``S = Q Kᵀ``, as torch's CPU kernel
does), both on the GEMMs qkv uses (:mod:`qkv.engine.gemm`), one thread, timed part by part; and
the kernel's loop as it was before its accumulator was transposed (``acc += P V`` from the
transposed tile).

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python benchmarks/tile_layout.py

The keys × queries loop is the kernel's (its compiled step, ``accᵀ += Vᵀ Pᵀ``: P read
untransposed, MKL's faster orientation); "acc += P V" is the same step with the accumulator
query-major (the kernel before), its GEMM reading the tile transposed; the queries × keys one is
a prototype written here: the same online-softmax update per query row (max, 2^x flushed below
2^-63, the running sum, the accumulator's rescale), then ``P V`` from a row-major P. Best of
``--rounds`` passes.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import threadpoolctl
from numba import njit

from qkv.engine import KernelConfig, gemm, step

# the compiled step's own pieces (the engine's internal surface; a benchmark may read it)
from qkv.engine.step.compiled import (
    FLAGS,
    LOG2E,
    NEG_INF,
    ONE,
    POS_INF,
    PRODUCT_FLOOR,
    _exp2_above,
    _maxnum,
    exp2,
    wide_vectors,
)


@njit(nogil=True, fastmath=FLAGS)
def rows_step(s, m, row_sum, acc):
    """The online softmax on a queries × keys tile ``s (R, T)``; m, row_sum ``(R,)``."""
    wide_vectors()  # as the kernel's step (its sums across vectors: bits differ by width)
    rows, keys = s.shape
    for i in range(rows):
        r = s[i]
        top = m[i]
        for j in range(keys):
            top = _maxnum(top, r[j])
        alpha = exp2((m[i] - top) * LOG2E) if top != NEG_INF else ONE
        ref = top if top != NEG_INF else POS_INF
        total = np.float32(0.0)
        for j in range(keys):
            p = _exp2_above((r[j] - ref) * LOG2E, PRODUCT_FLOOR)  # as the tiled kernel
            r[j] = p
            total += p
        row_sum[i] = row_sum[i] * alpha + total
        m[i] = top
        acc_i = acc[i]
        for d in range(acc_i.shape[0]):
            acc_i[d] *= alpha


LAYOUTS = ("keys × queries (the kernel)", "keys × queries, acc += P V", "queries × keys")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=2048)
    parser.add_argument("--d", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=10)
    args = parser.parse_args(argv)
    n, d = args.n, args.d
    cfg = KernelConfig()
    use = cfg.resolved_gemm()
    tq, tk = min(cfg.tile_q, n), min(cfg.key_tile(masked=False), n)
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((n, d), dtype=np.float32) for _ in range(3))
    qs = q * np.float32(d ** -0.5)
    compiled = step.get("compiled")
    tile_t, tile = np.empty((tk, tq), np.float32), np.empty((tq, tk), np.float32)
    parts = np.zeros(3)

    def head(layout: str) -> np.ndarray:
        out = np.zeros((n, d), np.float32)
        for q0 in range(0, n, tq):
            m = np.full(tq, -np.inf, np.float32)
            row_sum = np.zeros(tq, np.float32)
            acc = out[q0:q0 + tq]  # (tq, D)
            acc_t = np.zeros((d, tq), np.float32)  # accᵀ (D, tq), the kernel's
            for k0 in range(0, n, tk):
                t0 = time.perf_counter()
                if layout != LAYOUTS[2]:
                    s = gemm.matmul(k[k0:k0 + tk], qs[q0:q0 + tq].T, out=tile_t, use=use)
                    t1 = time.perf_counter()
                    into = acc_t if layout == LAYOUTS[0] else acc.T  # the step's (D, tq) view
                    compiled.online_softmax(s[None], None, m[None], row_sum[None], into[None])
                    t2 = time.perf_counter()
                    if layout == LAYOUTS[0]:
                        gemm.matmul(v[k0:k0 + tk].T, s, acc_t, accumulate=True, use=use)
                    else:
                        gemm.matmul(s.T, v[k0:k0 + tk], acc, accumulate=True, use=use)
                else:
                    s = gemm.matmul(qs[q0:q0 + tq], k[k0:k0 + tk].T, out=tile, use=use)
                    t1 = time.perf_counter()
                    rows_step(s, m, row_sum, acc)
                    t2 = time.perf_counter()
                    gemm.matmul(s, v[k0:k0 + tk], acc, accumulate=True, use=use)
                parts[:] += (t1 - t0, t2 - t1, time.perf_counter() - t2)
            if layout == LAYOUTS[0]:
                acc[...] = acc_t.T
            acc /= row_sum[:, None]
        return out

    layouts = LAYOUTS
    with threadpoolctl.threadpool_limits(1, "blas"):
        first = head(layouts[0])
        diff = max(np.abs(first - head(layout)).max() for layout in layouts[1:])
        print(f"one head, N={n}, D={d}, float32, one thread, tiles {tq} × {tk}; GEMMs: "
              f"{gemm.describe(cfg.gemm)}; the outputs differ by {diff:.1e} at most")
        best = {}
        for _ in range(args.rounds):  # interleaved: a noisy moment hits them all
            for layout in layouts:
                parts[:] = 0
                t0 = time.perf_counter()
                head(layout)
                total = time.perf_counter() - t0
                if layout not in best or total < best[layout][0]:
                    best[layout] = (total, *parts)
    for layout in layouts:
        total, scores, step_s, pv = best[layout]
        print(f"  {layout:30s} {total * 1e3:6.2f} ms (score GEMM {scores * 1e3:.2f}, step "
              f"{step_s * 1e3:.2f}, P·V GEMM {pv * 1e3:.2f}), "
              f"{total / best[layouts[0]][0]:.2f}× the kernel's")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
