"""Rank-side fault cases for tests/test_distributed.py, one per launch, under real mpirun.

    mpirun -n 2 python tests/mpi_faults.py CASE[,CASE...]

Rank 0 prints ``OUTCOME <case> <rank> <json>`` for every rank: what its call did (the error
it raised, and whether a later ring call on the same communicator still gives the right
answer). ``kill`` and ``stop`` never print: rank 1 SIGKILLs / SIGSTOPs itself in the middle
of the ring, and the test measures how long the job takes to end. ``cut`` (ranks in network
namespaces, benchmarks/_netns.py) pauses rank 1 mid-ring for 3 s while the test takes its link down.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time

import numpy as np
from mpi4py import MPI

import qkv
from qkv.distributed import positions, ring_attention, ring_attention_backward, shard

RANK = MPI.COMM_WORLD.Get_rank()
N, D = 1200, 64  # zigzag on 2 ranks: 600 rows, a 307 KB kv message per step in float32


def arrays(n=N, d=D):
    rng = np.random.default_rng(0)
    return [rng.standard_normal((1, 2, n, d)).astype(np.float32) for _ in range(4)]


RANK1_ROW = int(positions(N, 1, MPI.COMM_WORLD.Get_size())[-1])  # rank 1's last query row


def outcome(call) -> dict:
    started = time.monotonic()
    try:
        call()
        res = {"error": None}
    except Exception as exc:
        res = {"error": f"{type(exc).__name__}: {exc}"}
    res["seconds"] = time.monotonic() - started
    return res


def still_works() -> bool:
    """A ring call after the failure, on the same communicator: the right answer everywhere."""
    q, k, v, _ = arrays()
    out = ring_attention(*(shard(x) for x in (q, k, v)), mask=qkv.causal())
    want = shard(qkv.attention(q, k, v, mask=qkv.causal()))
    return bool(np.abs(out - want).max() < 1e-4)


def main(case: str) -> None:
    q, k, v, dout = arrays()
    qs, ks, vs, ds = (shard(x) for x in (q, k, v, dout))

    def rule(i, j):  # causal, but raises on the tile holding rank 1's first row — rank 1 only
        if RANK == 1 and (i == RANK1_ROW).any():  # globals: the same rule (code) on every rank
            raise ZeroDivisionError("the mask rule failed on rank 1's rows")
        return j <= i

    def suicide(sig):
        def rule(i, j):
            if RANK == 1 and (i == RANK1_ROW).any():
                print(f"rank 1 sends itself {sig.name} mid-ring", file=sys.stderr, flush=True)
                os.kill(os.getpid(), sig)
            return j <= i
        return rule

    def hold(i, j):  # causal; rank 1 pauses mid-ring so that the test can cut its link
        if RANK == 1 and (i == RANK1_ROW).any():
            print("rank 1 is mid-ring: cut its link now", file=sys.stderr, flush=True)
            time.sleep(3)
        return j <= i

    calls = {
        "raise": lambda: ring_attention(qs, ks, vs, mask=qkv.predicate(rule)),
        "raise_backward": lambda: ring_attention_backward(
            qs, ks, vs, *ring_attention(qs, ks, vs, mask=qkv.causal(), return_lse=True), ds,
            mask=qkv.predicate(rule)),
        "comm": lambda: ring_attention(qs, ks, vs, comm=object() if RANK == 1 else None),
        "stats": lambda: ring_attention(qs, ks, vs, stats="x" if RANK == 1 else None),
        "scale": lambda: ring_attention(qs, ks, vs, scale=0.125 if RANK == 1 else None),
        "mask": lambda: ring_attention(qs, ks, vs, mask=qkv.causal() if RANK == 1 else None),
        "window": lambda: ring_attention(qs, ks, vs, mask=qkv.window(10 + RANK)),
        "kill": lambda: ring_attention(qs, ks, vs, mask=qkv.predicate(suicide(signal.SIGKILL))),
        "stop": lambda: ring_attention(qs, ks, vs, mask=qkv.predicate(suicide(signal.SIGSTOP)),
                                       timeout=5),
        # timeout above the harness's ~6 s keepalive window: see the test's docstring
        "cut": lambda: ring_attention(qs, ks, vs, mask=qkv.predicate(hold), timeout=10),
    }
    res = outcome(calls[case])
    res["still_works"] = still_works()
    every = MPI.COMM_WORLD.gather(res, root=0)  # one writer: ranks' lines could interleave
    if RANK == 0:
        for rank, mine in enumerate(every):
            sys.stdout.write(f"OUTCOME {case} {rank} {json.dumps(mine)}\n")
        sys.stdout.flush()


if __name__ == "__main__":
    for name in sys.argv[1].split(","):
        main(name)
