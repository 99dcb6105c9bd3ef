"""What a ring rank's memory holds: the arrays, counted in shard-sized units, and Numba's code.

    mpirun -n 2 python benchmarks/ring_memory.py --n 32768     # the arrays (add --oversubscribe
    mpirun -n 3 --oversubscribe python benchmarks/ring_memory.py --n 24576   # beyond 2 cores)
    python benchmarks/ring_memory.py --code                    # Numba's code: RSS, one process

The arrays: NumPy's allocations traced with ``tracemalloc`` (exact, unlike RSS) over one ring
forward and one backward (causal zigzag, H = 1, D = 64, float32; a first call of each runs
untraced, so compiling is not counted), as multiples of one shard array of c × D float32
(c = N/P): the forward's peak beyond its inputs q, k, v; the backward's beyond q, k, v and
dout (out and lse, held from the forward, are in it). These units do not depend on N, so they
scale any run: at N = 1,048,576 on 4 ranks one unit is 64 MB.

``--code``: a fresh process's resident set (RSS) after ``import qkv``, after its first
attention call and after its first backward — with the compiled tile step, then again with
``QKV_BACKEND=numpy`` (no Numba code loaded): the difference is the compiled code's memory.
Results: docs/distributed.md, "The 1M-token run's memory".
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tracemalloc

import numpy as np


def rss_mb() -> float:
    """This process's resident set now, MB (/proc/self/statm: pages)."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def code_side() -> None:
    import qkv
    from qkv import engine

    x = np.random.default_rng(0).standard_normal((1, 1, 2048, 64)).astype(np.float32)
    before = rss_mb()
    out, lse = qkv.attention(x, x, x, mask=qkv.causal(), return_lse=True)
    after_forward = rss_mb()
    qkv.attention_backward(x, x, x, out, lse, out, mask=qkv.causal())
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"tile step {engine.backend():8s}: RSS {before:4.0f} MB after import, "
          f"{after_forward:4.0f} after the first attention call, {rss_mb():4.0f} after the "
          f"first backward (peak {peak:.0f})")


def arrays(n: int, dim: int = 64) -> None:
    from mpi4py import MPI

    import qkv
    from qkv.distributed import positions, ring_attention, ring_attention_backward

    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    c = len(positions(n, rank, size))
    unit = c * dim * 4  # bytes of one (c, D) float32 shard array
    rng = np.random.default_rng(rank)
    q, k, v, dout = (rng.standard_normal((1, 1, c, dim)).astype(np.float32) for _ in range(4))
    out, lse = ring_attention(q, k, v, mask=qkv.causal(), return_lse=True)  # untraced: compiles
    ring_attention_backward(q, k, v, out, lse, dout, mask=qkv.causal())
    del out, lse
    # Each traced call's tile buffers count as a fresh call allocates them: free the ones
    # qkv keeps between calls first (qkv.engine.scratch).
    qkv.engine.release_scratch()
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    out, lse = ring_attention(q, k, v, mask=qkv.causal(), return_lse=True)
    forward = tracemalloc.get_traced_memory()[1] - base
    qkv.engine.release_scratch()
    tracemalloc.reset_peak()
    ring_attention_backward(q, k, v, out, lse, dout, mask=qkv.causal())
    backward = tracemalloc.get_traced_memory()[1] - base
    rows = comm.gather((rank, forward / unit, backward / unit), root=0)
    if rank == 0:
        print(f"{size} ranks, N {n}, c = {c}, one unit = c × {dim} float32 = "
              f"{unit / 2**20:.2f} MB; peaks beyond the inputs (q, k, v; and dout), in units:")
        for r, fwd, bwd in rows:
            print(f"  rank {r}: forward {fwd:5.2f}   backward (out and lse included) {bwd:5.2f}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=32768, help="sequence length (under mpirun)")
    parser.add_argument("--code", action="store_true", help="Numba's code: RSS in one process")
    parser.add_argument("--code-side", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.code_side:
        code_side()
    elif args.code:  # each in a fresh process: the first call is what is measured
        for backend in ("compiled", "numpy"):
            env = dict(os.environ, QKV_BACKEND=backend)
            subprocess.run([sys.executable, __file__, "--code-side"], env=env, check=True)
    else:
        arrays(args.n)
    return 0


if __name__ == "__main__":
    sys.exit(main())
