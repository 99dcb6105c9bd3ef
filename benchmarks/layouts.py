"""What a memory layout costs (issue 48): ``qkv.attention`` with q, k, v as C-ordered arrays
against the same values as a transposed q, Fortran-ordered k and v, head-split views
``(B, N, H, D) → (B, H, N, D)`` and every other row of a larger buffer — beside torch's SDPA on
the C-ordered arrays, in one process, interleaved round by round.

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python benchmarks/layouts.py

The operand contract (``qkv.engine.operands``) scales q into C order in every tiled path anyway
(no extra copy for any q); k and v whose rows the BLAS cannot read in place (column-major,
reversed, broadcast, unaligned) are copied once per call. The table prints each layout's time,
its ratio to C order and to torch, and the bytes copied because of the layout
(``TileStats.copies``). Best of ``--rounds``.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch

import qkv
from qkv.engine import TileStats, current, gemm, kernel_config

CASES = [("dense H=8 N=2048", 8, 2048, False), ("causal H=8 N=2048", 8, 2048, True),
         ("causal H=1 N=8192", 1, 8192, True)]


def layouts(q, k, v):
    """label → (q, k, v): the same values in each layout."""
    def transposed(x):  # the last two axes column-major
        return np.swapaxes(np.ascontiguousarray(np.swapaxes(x, -1, -2)), -1, -2)

    def head_split(x):  # (B, N, H, D) memory, viewed as (B, H, N, D)
        return np.ascontiguousarray(np.swapaxes(x, 1, 2)).swapaxes(1, 2)

    def every_other_row(x):
        buf = np.zeros((*x.shape[:-2], 2 * x.shape[-2], x.shape[-1]), x.dtype)
        buf[..., ::2, :] = x
        return buf[..., ::2, :]

    return {"C order": (q, k, v),
            "q transposed": (transposed(q), k, v),
            "k, v Fortran": (q, np.asfortranarray(k), np.asfortranarray(v)),
            "head-split views": (head_split(q), head_split(k), head_split(v)),
            "every other row": (every_other_row(q), every_other_row(k), every_other_row(v))}


def timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args(argv)
    rng = np.random.default_rng(0)
    workers = current().num_workers(float(1 << 40))
    torch.set_num_threads(workers)
    print(f"float32, D=64, {workers} workers; GEMMs: {gemm.describe(current().gemm)}; "
          f"best of {args.rounds} interleaved rounds")
    print(f"{'case':20s} {'layout':18s} {'ms':>8s} {'/ C order':>10s} {'/ torch':>8s} "
          f"{'copied MB':>10s}")
    for name, heads, n, causal in CASES:
        q, k, v = (rng.standard_normal((1, heads, n, 64), dtype=np.float32) for _ in range(3))
        mask = qkv.causal() if causal else None
        tq, tk, tv = (torch.from_numpy(x) for x in (q, k, v))
        runs = {"torch": lambda tq=tq, tk=tk, tv=tv, causal=causal:
                 torch.nn.functional.scaled_dot_product_attention(tq, tk, tv, is_causal=causal)}
        copied = {}
        for label, (lq, lk, lv) in layouts(q, k, v).items():
            stats = TileStats()
            with kernel_config(stats=stats):
                qkv.attention(lq, lk, lv, mask=mask)  # warm, and the copies of one call
            copied[label] = sum(stats.copies.values())
            runs[label] = (lambda lq=lq, lk=lk, lv=lv, mask=mask:
                           qkv.attention(lq, lk, lv, mask=mask))
        best = {label: float("inf") for label in runs}
        runs["torch"]()
        for _ in range(args.rounds):
            for label, fn in runs.items():
                best[label] = min(best[label], timed(fn))
        for label in copied:
            ms = best[label] * 1e3
            print(f"{name:20s} {label:18s} {ms:8.1f} {best[label] / best['C order']:10.2f} "
                  f"{best[label] / best['torch']:8.2f} {copied[label] / 2**20:10.1f}", flush=True)
        print(f"{name:20s} {'torch (C order)':18s} {best['torch'] * 1e3:8.1f}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
