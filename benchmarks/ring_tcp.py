"""Ring attention over TCP between network namespaces: compute, wait and the crossover.

    python benchmarks/ring_tcp.py --rate 1gbit --n 1024,2048,4096,8192,16384    # as root
    python benchmarks/ring_tcp.py --rate 1gbit --n 2048,8192 --backward         # the backward

Runs 2 ranks, each in its own network namespace (benchmarks/_netns.py: a private bridge, TCP
only, links shaped to ``--rate`` with tc tbf), and for each N times, on every rank,

* ``T``: one step's transfer alone (a kv shard of 8·c·D bytes, c = N/2, exchanged both ways
  around the ring with nothing else to do),
* ``C``: one ring forward's compute per step (causal, zigzag; the run with the shortest wall
  time of 3, after a warm-up),
* ``W``: its wait per transfer (the P − 1 steps that receive a shard; the last step sends
  nothing),

and prints them beside the model of docs/distributed.md: with transfers progressing during the
compute a rank waits max(0, T − C) per transfer, so the transfer hides once C ≥ T, i.e.
c ≥ 4·F/B for a causal zigzag step (F = the rank's measured flop rate, B = the link's measured
bandwidth). W also holds any wait for a neighbour that computed more slowly (the cores are
shared). Results: docs/distributed.md, "Across hosts, tested on one machine".

``--backward`` times ``ring_attention_backward`` instead (given the forward's out and lse): C is
its compute per step and W its wait per *hop*, every transfer the rank waits for — kv shards
and the dk/dv accumulators (each as large as a kv shard in float32) — counted from the ring's
``stats["hop_waits"]``. A backward step does about 2.5× the forward's flops. Both modes print
``other``: the call's wall time beyond its compute and waits (checks, agreements between the
ranks, merges; and a neighbour that started late), per call.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from functools import partial
from pathlib import Path

import numpy as np


def rank_main(ns: list[int], dim: int, backward: bool) -> None:
    """Inside mpirun: one JSON line per N from rank 0."""
    from mpi4py import MPI

    import qkv
    from qkv.distributed import positions, ring_attention, ring_attention_backward

    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    for n in ns:
        rng = np.random.default_rng(0)
        pos = positions(n, rank, size)
        q, k, v = (rng.standard_normal((1, 1, n, dim)).astype(np.float32)[..., pos, :]
                   for _ in range(3))
        c = len(pos)
        # T: the step's transfer alone — k and v packed, sent right, received from the left
        buf, got = np.ones(2 * c * dim, np.float32), np.empty(2 * c * dim, np.float32)
        best_t = np.inf
        for _ in range(5):
            comm.Barrier()
            start = time.perf_counter()
            reqs = [comm.Irecv(got, source=(rank - 1) % size),
                    comm.Isend(buf, dest=(rank + 1) % size)]
            MPI.Request.Waitall(reqs)
            best_t = min(best_t, time.perf_counter() - start)
        out, lse = ring_attention(q, k, v, mask=qkv.causal(), return_lse=True)  # warm-up
        dout = rng.standard_normal(out.shape).astype(np.float32)

        call = (partial(ring_attention_backward, q, k, v, out, lse, dout, mask=qkv.causal())
                if backward else partial(ring_attention, q, k, v, mask=qkv.causal()))
        call(stats={})  # warm-up of the timed call (compiles, allocates)
        runs = []
        for _ in range(3):
            stats = {}
            comm.Barrier()
            start = time.perf_counter()
            call(stats=stats)
            # hops: transfers this rank waited for (code before stats["hop_waits"]: the forward's
            # P − 1 kv shards; its backward's P − 1 kv shards and P − 1 of its P accumulator
            # hops — its wait_s left out the last hop home)
            hops = len(stats.get("hop_waits", [])) or (size - 1) * (2 if backward else 1)
            runs.append((time.perf_counter() - start, stats["compute_s"], stats["wait_s"], hops))
        wall, compute, wait, hops = min(runs)
        mine = {"rank": rank, "transfer_s": best_t, "compute_s": compute, "wait_s": wait,
                "wall_s": wall, "steps": size, "hops": hops}
        every = comm.gather(mine, root=0)
        if rank == 0:
            print("JSON " + json.dumps({"n": n, "dim": dim, "c": c, "ranks": every}), flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rate", default="1gbit", help="tc tbf rate of each link, or 'none'")
    parser.add_argument("--n", default="1024,2048,4096,8192,16384", help="sequence lengths")
    parser.add_argument("--dim", type=int, default=64)
    parser.add_argument("--backward", action="store_true",
                        help="time ring_attention_backward (W per hop: kv and accumulators)")
    parser.add_argument("--rank-side", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    ns = [int(x) for x in args.n.split(",")]
    if args.rank_side:
        rank_main(ns, args.dim, args.backward)
        return 0
    from _netns import Hosts, unavailable  # this folder's shared launcher

    why = unavailable()
    if why:
        print(f"ring_tcp: {why}", file=sys.stderr)
        return 2
    rate = None if args.rate == "none" else args.rate
    with Hosts(2, rate=rate) as hosts:
        run = hosts.run(2, [sys.executable, str(Path(__file__).resolve()), "--rank-side",
                            "--n", args.n, "--dim", str(args.dim),
                            *(["--backward"] if args.backward else [])], timeout=1800)
    rows = [json.loads(ln[5:]) for ln in run.stdout.splitlines() if ln.startswith("JSON ")]
    if run.returncode or not rows:
        print(run.stdout, run.stderr, file=sys.stderr)
        return 1
    what = "backward (W per hop: kv shards and accumulators)" if args.backward else "forward"
    print(f"2 ranks in 2 network namespaces, TCP only, links {args.rate}; causal zigzag, "
          f"D={args.dim}, float32, {what}; per step (C) and transfer (T, W), the rank that "
          "waited most")
    print("     N      c   shard_KB   T_ms   C_ms   W_ms  hops  other_ms  max(0,T-C)  F_GFLOP/s  "
          "B_MB/s  C≥T  c*=4F/B")
    for row in rows:
        c, d = row["c"], row["dim"]
        r = max(row["ranks"], key=lambda x: x["wait_s"])
        steps, hops = r["steps"], r["hops"]
        t, cm, w = r["transfer_s"], r["compute_s"] / steps, r["wait_s"] / hops
        other = r["wall_s"] - r["compute_s"] - r["wait_s"]
        flops = 2 * c * c * d * (2.5 if args.backward else 1)  # a causal zigzag step: ½ 4·c²·D
        f = flops / cm
        b = 8 * c * d / t
        print(f"{row['n']:6d} {c:6d} {8 * c * d / 1024:9.0f} {1e3 * t:6.2f} {1e3 * cm:6.2f} "
              f"{1e3 * w:6.2f} {hops:5d} {1e3 * other:9.2f} {1e3 * max(0.0, t - cm):11.2f} "
              f"{f / 1e9:10.1f} {b / 1e6:7.1f}  {'yes' if cm >= t else 'no ':3s} "
              f"{4 * f / b:8.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
