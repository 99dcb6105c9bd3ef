"""What one call's leftover threads cost the next timing, and what `quiesce` gives back.

    python benchmarks/leftovers.py [--repeats 7] [--n 2048]

Each round runs a NumPy 2048² float32 GEMM (the BLAS's own threads, as ``qkv bench``'s
square-GEMM probe) and then times one peer (qkv.attention or torch's SDPA, dense, H=8, D=64)
either at once — beside the BLAS threads still spinning — or after ``quiesce()`` has seen every
other thread of the process asleep. The two orders alternate round by round; medians are printed
with every run, and how long quiesce waited.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

import qkv
from qkv.commands._quiesce import quiesce


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--n", type=int, default=2048)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    a = rng.standard_normal((2048, 2048), dtype=np.float32)
    q, k, v = (rng.standard_normal((1, 8, args.n, 64), dtype=np.float32) for _ in range(3))
    peers = {"qkv": lambda: qkv.attention(q, k, v)}
    try:
        import torch

        tq, tk, tv = (torch.from_numpy(x) for x in (q, k, v))

        def sdpa():
            with torch.no_grad():
                return torch.nn.functional.scaled_dot_product_attention(tq, tk, tv)

        peers["torch"] = sdpa
    except ImportError:
        pass
    for fn in peers.values():  # warm-up: compile, caches, thread pools
        fn()
    times = {(name, mode): [] for name in peers for mode in ("right after", "quiesced")}
    waits = []
    for r in range(args.repeats):
        for name, fn in peers.items():
            modes = ("right after", "quiesced") if r % 2 == 0 else ("quiesced", "right after")
            for mode in modes:
                quiesce()  # every round starts from quiet: only the GEMM's leftovers differ
                a @ a
                if mode == "quiesced":
                    waits.append(quiesce())
                start = time.perf_counter()
                fn()
                times[name, mode].append(time.perf_counter() - start)
    print(f"dense H=8 N={args.n} D=64, timed after a 2048² NumPy GEMM; median of {args.repeats}")
    for name in peers:
        after, quiet = (np.array(times[name, m]) * 1e3 for m in ("right after", "quiesced"))
        print(f"{name:6} right after {np.median(after):7.1f} ms   quiesced {np.median(quiet):7.1f}"
              f" ms   ({np.median(after) / np.median(quiet):.2f}×)   runs: "
              + " ".join(f"{x:.0f}" for x in after) + " / " + " ".join(f"{x:.0f}" for x in quiet))
    settled = sum(w.settled for w in waits)
    print(f"quiesce waited median {np.median([w.waited for w in waits]) * 1e3:.0f} ms, max "
          f"{max(w.waited for w in waits) * 1e3:.0f} ms; settled {settled} of {len(waits)}")


if __name__ == "__main__":
    main()
