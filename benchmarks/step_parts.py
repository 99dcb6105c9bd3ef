"""Two changes to the compiled tile step, each timed against what it replaced, one thread:

1. the weights' exponential for x ≤ 0 (``_exp2_nonpositive``) against the general one
   (``_exp2_above``: clamped at 2^128, two compares) in the step's exponential pass, unmasked,
   on one cache-warm tile of 1024 keys × 512 queries;
2. the small path's short rows: the step on MiniLM's 768 planes of 21 × 21 scores plane by
   plane, against every plane's queries side by side in one row (the kernel's
   ``_side_by_side``, both copies included).

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python benchmarks/step_parts.py

Each pair is timed interleaved, best of ``--rounds``; each checks that both give the same bits.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from numba import njit

from qkv.engine.kernel import _back_to_planes, _side_by_side
from qkv.engine.step import compiled
from qkv.engine.step.compiled import FLAGS, LOG2E, _exp2_above, _exp2_nonpositive, wide_vectors


@njit(nogil=True, fastmath=FLAGS)
def _weights_general(tile, m_ref, floor, row_sum):  # the exponential pass as it was
    wide_vectors()
    for j in range(tile.shape[0]):
        row = tile[j]
        for i in range(tile.shape[1]):
            p = _exp2_above((row[i] - m_ref[i]) * LOG2E, floor)
            row[i] = p
            row_sum[i] += p


@njit(nogil=True, fastmath=FLAGS)
def _weights_nonpositive(tile, m_ref, floor, row_sum):  # the exponential pass as it is
    wide_vectors()
    for j in range(tile.shape[0]):
        row = tile[j]
        for i in range(tile.shape[1]):
            p = _exp2_nonpositive((row[i] - m_ref[i]) * LOG2E, floor)
            row[i] = p
            row_sum[i] += p


def best(fn, rounds: int) -> float:
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def exponentials(rounds: int) -> None:
    rng = np.random.default_rng(0)
    scores = (rng.standard_normal((1024, 512)) * 5).astype(np.float32)  # (keys, queries)
    m_ref = scores.max(axis=0)
    results, times = {}, {}
    for name, loop in (("general", _weights_general), ("x ≤ 0", _weights_nonpositive)):
        tile, row_sum = scores.copy(), np.zeros(512, np.float32)
        loop(tile, m_ref, compiled.PRODUCT_FLOOR, row_sum)  # compile, and the result
        results[name] = (tile, row_sum)
        times[name] = []
    for _ in range(rounds):
        for name, loop in (("general", _weights_general), ("x ≤ 0", _weights_nonpositive)):
            tile, row_sum = scores.copy(), np.zeros(512, np.float32)
            start = time.perf_counter()
            loop(tile, m_ref, compiled.PRODUCT_FLOOR, row_sum)
            times[name].append(time.perf_counter() - start)
    same = all(np.array_equal(a, b) for a, b in zip(*results.values(), strict=True))
    general, fast = (min(times[n]) / scores.size * 1e9 for n in ("general", "x ≤ 0"))
    print(f"exponential pass, 1024 × 512 tile: general {general:.3f} ns a score, x ≤ 0 "
          f"{fast:.3f} ({fast / general:.2f}×); same bits: {same}")


def short_rows(rounds: int) -> None:
    rng = np.random.default_rng(0)
    planes, n = 768, 21  # MiniLM: 64 sentences × 12 heads, 21 tokens
    s0 = rng.standard_normal((planes, 1, 1, n, n)).astype(np.float32)  # (b, Hkv, G, Nk, Nq)
    allowed = rng.random(s0.shape) < 0.9

    def by_plane():
        s = s0.copy()
        m, row_sum = np.full((planes, n), -np.inf, np.float32), np.zeros((planes, n), np.float32)
        compiled.online_softmax(s.reshape(planes, n, n), allowed.reshape(planes, n, n), m,
                                row_sum, None)
        return s, m, row_sum

    def side_by_side():
        s = s0.copy()
        m, row_sum = np.full((planes, n), -np.inf, np.float32), np.zeros((planes, n), np.float32)
        wide = _side_by_side(s, n)
        compiled.online_softmax(wide, _side_by_side(allowed, n), m.reshape(1, -1),
                                row_sum.reshape(1, -1), None)
        _back_to_planes(wide, s, n)
        return s, m, row_sum

    same = all(np.array_equal(a, b) for a, b in zip(by_plane(), side_by_side(), strict=True))
    t_plane, t_side = [], []
    for _ in range(rounds):
        t_plane.append(best(by_plane, 1))
        t_side.append(best(side_by_side, 1))
    plane, side = min(t_plane) * 1e3, min(t_side) * 1e3
    print(f"step on {planes} planes of {n} × {n}: plane by plane {plane:.2f} ms, side by side "
          f"{side:.2f} ms with its copies ({side / plane:.2f}×); same bits: {same}")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=50)
    args = parser.parse_args(argv)
    exponentials(args.rounds)
    short_rows(args.rounds)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
