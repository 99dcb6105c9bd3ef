"""Decode-step time and memory: the paged KV cache against the contiguous one.

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python benchmarks/paged_cache.py
    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python benchmarks/paged_cache.py --quick

One decode step of one attention layer: append each sequence's new k, v to the cache, then its
one query attends to everything cached (``mask=qkv.causal()``) —
``qkv.attention(q, **cache.attention_args())`` for both caches. B = 4 sequences, Hq = 8,
Hkv = 2 (GQA), D = 64, float32, blocks of 16 positions. Equal lengths at 1k, 4k, 16k and 32k
cached tokens, then a ragged batch (512, 2k, 8k, 32k): the contiguous cache cannot hold ragged
sequences, so it holds 4 × 32k positions and masks the rest with ``qkv.padding(lengths)``
(what a batch padded to its longest does); the paged one holds their blocks only.

Time: the median of ``--steps`` steps per cache, the two caches alternating step by step in one
process (the same load for both). Memory: tracemalloc's peak during one step beyond what was
allocated before it (the step's temporaries), and the bytes the cache holds (the contiguous
cache's capacity doubles when full; the paged pool is sized to the sequences here).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import tracemalloc

import numpy as np

import qkv
from qkv import nn

B, HQ, HKV, D, BLOCK = 4, 8, 2, 64, 16
SHAPES = {"1k": [1024] * B, "4k": [4096] * B, "16k": [16384] * B, "32k": [32768] * B,
          "ragged": [512, 2048, 8192, 32768]}


class Contiguous:
    def __init__(self, lens, g):
        self.layer = nn.LayerCache()
        self.lens = np.asarray(lens)
        n = int(self.lens.max())
        k, v = (g.standard_normal((B, HKV, n, D), dtype=np.float32) for _ in range(2))
        self.layer.append(k, v)

    def step(self, q, k_new, v_new):
        self.layer.append(k_new, v_new)
        self.lens = self.lens + 1
        ragged = len(set(self.lens.tolist())) > 1
        # Ragged rows padded to the longest: keys past each row's length masked (a timing
        # baseline — its new keys sit at the end, not at each row's length).
        mask = qkv.padding(self.lens) if ragged else qkv.causal()
        return qkv.attention(q, **self.layer.attention_args(), mask=mask)

    @property
    def nbytes(self):
        return self.layer.nbytes


class Paged:
    def __init__(self, lens, g, steps):
        blocks = sum(-(-(n + steps + 2) // BLOCK) for n in lens)
        self.layer = nn.PagedLayerCache(B, num_blocks=blocks, block_size=BLOCK)
        for b, n in enumerate(lens):
            k, v = (g.standard_normal((1, HKV, n, D), dtype=np.float32) for _ in range(2))
            self.layer.append(k, v, seqs=[b])

    def step(self, q, k_new, v_new):
        self.layer.append(k_new, v_new)
        return qkv.attention(q, **self.layer.attention_args(), mask=qkv.causal())

    @property
    def nbytes(self):
        return self.layer.nbytes


def step_memory(cache, q, k_new, v_new) -> int:
    qkv.engine.release_scratch()  # the step's tile buffers count, as if allocated afresh
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    tracemalloc.reset_peak()
    cache.step(q, k_new, v_new)
    peak = tracemalloc.get_traced_memory()[1] - base
    tracemalloc.stop()
    return peak


def run(name, lens, steps, g):
    caches = {"contiguous": Contiguous(lens, g), "paged": Paged(lens, g, steps)}
    q = g.standard_normal((B, HQ, 1, D), dtype=np.float32)
    new = [g.standard_normal((B, HKV, 1, D), dtype=np.float32) for _ in range(2)]
    for cache in caches.values():  # warm up: compile, first-touch the pages
        cache.step(q, *new)
    times = {k: [] for k in caches}
    for _ in range(steps):
        for key, cache in caches.items():
            start = time.perf_counter()
            cache.step(q, *new)
            times[key].append(time.perf_counter() - start)
    mem = {key: step_memory(cache, q, *new) for key, cache in caches.items()}
    row = {"shape": name, "tokens": sum(lens)}
    for key, cache in caches.items():
        row[key] = (statistics.median(times[key]) * 1e3, mem[key] / 2**20, cache.nbytes / 2**20)
    return row


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=21)
    parser.add_argument("--quick", action="store_true", help="1k and ragged only, 5 steps")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    names = ["1k", "ragged"] if args.quick else list(SHAPES)
    steps = 5 if args.quick else args.steps
    g = np.random.default_rng(args.seed)
    shown = sys.argv[1:] if argv is None else argv
    print(" ".join(["$ env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python "
                    "benchmarks/paged_cache.py", *shown]))
    print(f"B={B} Hq={HQ} Hkv={HKV} D={D} float32, block_size={BLOCK}, backend "
          f"{qkv.engine.backend()}, median of {steps} steps (interleaved)\n")
    print("| batch (cached tokens) | contiguous ms | paged ms | paged/contiguous | "
          "step peak MiB contiguous / paged | cache MiB contiguous / paged |")
    print("|---|---:|---:|---:|---:|---:|")
    for name in names:
        r = run(name, SHAPES[name], steps, g)
        (tc, mc, bc), (tp, mp, bp) = r["contiguous"], r["paged"]
        print(f"| {name} ({r['tokens']:,}) | {tc:.2f} | {tp:.2f} | {tp / tc:.2f}× | "
              f"{mc:.2f} / {mp:.2f} | {bc:.1f} / {bp:.1f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
