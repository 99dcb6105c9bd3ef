"""Two changes to the compiled tile step, each timed against what it replaced, one thread:

1. the weights' exponential for x ≤ 0 (``_exp2_nonpositive``) against the general one
   (``_exp2_above``: clamped at 2^128, two compares) in the step's exponential pass, unmasked,
   on one cache-warm tile of 1024 keys × 512 queries;
2. the small path's short rows: the step plane by plane against every plane's queries side by
   side in one row (the kernel's ``side_by_side``, both copies included) — on MiniLM's 768
   planes of 21 × 21 scores, on 32 planes of 4096 keys × 21 queries, and on 32 planes of
   4096 × 32, where rows are whole vectors and the kernel keeps plane by plane
   (``kernel.small.SIDE_BY_SIDE_BELOW``).

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python benchmarks/step_parts.py

Each pair is timed interleaved, best of ``--rounds``; each checks that both give the same bits.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from numba import njit

from qkv.engine.kernel import small
from qkv.engine.step import compiled
from qkv.engine.step.compiled import FLAGS, LOG2E, _exp2_above, _exp2_nonpositive, wide_vectors


def _weights_pass(exp2):
    """The step's exponential pass (unmasked) with ``exp2`` compiled into it."""

    @njit(nogil=True, fastmath=FLAGS)
    def weights(tile, m_ref, floor, row_sum):
        wide_vectors()
        for j in range(tile.shape[0]):
            row = tile[j]
            for i in range(tile.shape[1]):
                p = exp2((row[i] - m_ref[i]) * LOG2E, floor)
                row[i] = p
                row_sum[i] += p

    return weights


PASSES = {"general": _weights_pass(_exp2_above),  # the exponential pass as it was
          "x ≤ 0": _weights_pass(_exp2_nonpositive)}  # as it is


def timed(fn, *args) -> float:
    start = time.perf_counter()
    fn(*args)
    return time.perf_counter() - start


def exponentials(rounds: int) -> None:
    rng = np.random.default_rng(0)
    scores = (rng.standard_normal((1024, 512)) * 5).astype(np.float32)  # (keys, queries)
    m_ref = scores.max(axis=0)
    results, times = {}, {name: [] for name in PASSES}
    for name, loop in PASSES.items():  # compile, and the result
        tile, row_sum = scores.copy(), np.zeros(512, np.float32)
        loop(tile, m_ref, compiled.PRODUCT_FLOOR, row_sum)
        results[name] = (tile, row_sum)
    for _ in range(rounds):
        for name, loop in PASSES.items():
            tile, row_sum = scores.copy(), np.zeros(512, np.float32)
            times[name].append(timed(loop, tile, m_ref, compiled.PRODUCT_FLOOR, row_sum))
    same = all(np.array_equal(a, b) for a, b in zip(*results.values(), strict=True))
    general, fast = (min(times[n]) / scores.size * 1e9 for n in ("general", "x ≤ 0"))
    print(f"exponential pass, 1024 × 512 tile: general {general:.3f} ns a score, x ≤ 0 "
          f"{fast:.3f} ({fast / general:.2f}×); same bits: {same}")


def short_rows(rounds: int, planes: int, keys: int, queries: int) -> None:
    rng = np.random.default_rng(0)
    shape = (planes, 1, 1, keys, queries)  # (b, Hkv, G, Nk, Nq)
    s0 = rng.standard_normal(shape).astype(np.float32)
    allowed = rng.random(shape) < 0.9

    def state():
        return (np.full((planes, queries), -np.inf, np.float32),
                np.zeros((planes, queries), np.float32))

    def by_plane():
        s, (m, row_sum) = s0.copy(), state()
        compiled.online_softmax(s.reshape(planes, keys, queries),
                                allowed.reshape(planes, keys, queries), m, row_sum, None)
        return s, m, row_sum

    def wide_row():
        s, (m, row_sum) = s0.copy(), state()
        wide = small.side_by_side(s, queries)
        compiled.online_softmax(wide, small.side_by_side(allowed, queries), m.reshape(1, -1),
                                row_sum.reshape(1, -1), None)
        small.back_to_planes(wide, s, queries)
        return s, m, row_sum

    same = all(np.array_equal(a, b) for a, b in zip(by_plane(), wide_row(), strict=True))
    t_plane, t_side = [], []
    for _ in range(rounds):
        t_plane.append(timed(by_plane))
        t_side.append(timed(wide_row))
    plane, side = min(t_plane) * 1e3, min(t_side) * 1e3
    used = "side by side" if queries < small.SIDE_BY_SIDE_BELOW else "plane by plane"
    print(f"step on {planes} planes of {keys} keys × {queries} queries: plane by plane "
          f"{plane:.2f} ms, side by side {side:.2f} ms with its copies ({side / plane:.2f}×; "
          f"the kernel runs {used}); same bits: {same}")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=50)
    args = parser.parse_args(argv)
    exponentials(args.rounds)
    for planes, keys, queries in ((768, 21, 21), (32, 4096, 21), (32, 4096, 32)):
        short_rows(args.rounds if keys < 1024 else max(3, args.rounds // 5), planes, keys,
                   queries)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
