"""The tiled loops compiled whole (``KernelConfig(fused=True)``, engine/step/fused.py) against
the same loops driven from Python (``fused=False``), beside torch's SDPA, in one process,
interleaved round by round, on one worker and on two: the forward's, and the backward's
(``attention_backward`` from a given out and lse, against torch's backward alone:
``torch.autograd.grad`` of a kept forward).

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python benchmarks/fused_loop.py

Same tiles, same GEMMs (the BLAS ``QKV_GEMM`` picks: MKL's or NumPy's), same step; what differs
is who calls them: the fused forward runs a query block's tiles in one compiled call without
the GIL, the fused backward a work item's tiles for one query head. Best of ``--rounds``; torch
with as many threads as qkv has workers.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch

import qkv
from qkv.engine import current, gemm, kernel_config

CASES = [("dense H=8 N=2048", 8, 2048, False, False), ("causal H=8 N=2048", 8, 2048, True, False),
         ("dense H=1 N=8192", 1, 8192, False, False), ("causal H=1 N=8192", 1, 8192, True, False),
         ("backward dense H=8 N=2048", 8, 2048, False, True),
         ("backward causal H=8 N=2048", 8, 2048, True, True)]


def timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def _runs(rng, heads: int, n: int, causal: bool, backward: bool, workers: int) -> dict:
    """The three peers on one random problem: label → a call."""
    q, k, v = (rng.standard_normal((1, heads, n, 64), dtype=np.float32) for _ in range(3))
    tq, tk, tv = (torch.from_numpy(x).requires_grad_(backward) for x in (q, k, v))
    mask = qkv.causal() if causal else None

    def sdpa():
        return torch.nn.functional.scaled_dot_product_attention(tq, tk, tv, is_causal=causal)

    if backward:
        out, lse = qkv.attention(q, k, v, mask=mask, return_lse=True)
        dout = rng.standard_normal(out.shape, dtype=np.float32)
        kept, t_dout = sdpa(), torch.from_numpy(dout)
        runs = {"torch": lambda: torch.autograd.grad(kept, (tq, tk, tv), t_dout,
                                                     retain_graph=True)}
    else:
        runs = {"torch": sdpa}
    for fused in (False, True):
        def run(fused=fused):
            with kernel_config(workers=workers, fused=fused):
                if backward:
                    qkv.attention_backward(q, k, v, out, lse, dout, mask=mask)
                else:
                    qkv.attention(q, k, v, mask=mask)
        runs["fused" if fused else "python"] = run
    return runs


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    args = parser.parse_args(argv)
    if gemm.address(np.float32, current().resolved_gemm()) is None:
        print(f"the fused loop needs an ILP64 cblas_sgemm: {gemm.describe(current().gemm)}; "
              "nothing to compare")
        return 1
    rng = np.random.default_rng(0)
    print(f"float32, D=64; GEMMs: {gemm.describe(current().gemm)}; "
          f"best of {args.rounds} interleaved rounds")
    print(f"{'case':26s} {'workers':>7s} {'torch ms':>9s} {'python ms':>10s} {'fused ms':>9s} "
          f"{'fused/python':>12s} {'python/torch':>12s} {'fused/torch':>11s}")
    for workers in args.workers:
        torch.set_num_threads(workers)
        for name, heads, n, causal, backward in CASES:
            runs = _runs(rng, heads, n, causal, backward, workers)
            best = {label: float("inf") for label in runs}
            for fn in runs.values():
                fn()  # warm
            for _ in range(args.rounds):
                for label, fn in runs.items():
                    best[label] = min(best[label], timed(fn))
            t, p, f = (best[label] * 1e3 for label in ("torch", "python", "fused"))
            print(f"{name:26s} {workers:7d} {t:9.1f} {p:10.1f} {f:9.1f} {f / p:12.2f} "
                  f"{p / t:12.2f} {f / t:11.2f}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
