"""A timeline of one ring backward over TCP: every engine call, wait and progress-thread handover.

    python benchmarks/ring_timeline.py --n 2048 --runs 2        # as root (network namespaces)

Runs 2 ranks in 2 network namespaces (benchmarks/_netns.py, links shaped to 1 Gbit/s, as
benchmarks/ring_tcp.py) and, on each rank, times from a barrier: each ``engine.backward`` call
(``bw``, with its query rows), each wait of the ring's channel, and entering and leaving
``Channel.progressing`` (the thread that moves transfers during the compute). The functions are
wrapped in this process only, for timing: a diagnostic, not an API. Printed per rank and run,
in ms since the barrier, with the ring's own ``stats["hop_waits"]``. Used for
docs/distributed.md, "The backward's transfers" (why the small case waited).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import numpy as np


def rank_main(n: int, runs: int) -> None:
    from mpi4py import MPI

    import qkv
    from qkv import engine
    from qkv.distributed import _channel, positions, ring_attention, ring_attention_backward

    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    events, t0 = [], [0.0]

    def timed(name, fn, rows=lambda *a: 0):
        def wrapper(*args, **kwargs):
            start = time.perf_counter()
            result = fn(*args, **kwargs)
            events.append((name(*args), rows(*args), start - t0[0], time.perf_counter() - t0[0]))
            return result
        return wrapper

    engine.backward = timed(lambda p, *a: "engine.backward", engine.backward,
                            rows=lambda p, *a: p.nq)
    _channel.Channel.wait = timed(lambda self, reqs, what: f"wait: {what[:34]}",
                                  _channel.Channel.wait)
    progressing = _channel.Channel.progressing

    @contextmanager
    def traced(self):
        start = time.perf_counter()
        with progressing(self):
            events.append(("progressing: enter", 0, start - t0[0], time.perf_counter() - t0[0]))
            try:
                yield
            finally:
                start = time.perf_counter()
        events.append(("progressing: leave", 0, start - t0[0], time.perf_counter() - t0[0]))

    _channel.Channel.progressing = traced
    rng = np.random.default_rng(0)
    pos = positions(n, rank, size)
    q, k, v = (rng.standard_normal((1, 1, n, 64)).astype(np.float32)[..., pos, :]
               for _ in range(3))
    out, lse = ring_attention(q, k, v, mask=qkv.causal(), return_lse=True)
    dout = rng.standard_normal(out.shape).astype(np.float32)
    ring_attention_backward(q, k, v, out, lse, dout, mask=qkv.causal())  # warm-up
    for _ in range(runs):
        events.clear()
        stats = {}
        comm.Barrier()
        t0[0] = time.perf_counter()
        ring_attention_backward(q, k, v, out, lse, dout, mask=qkv.causal(), stats=stats)
        wall = time.perf_counter() - t0[0]
        every = comm.gather((rank, wall, stats["hop_waits"], list(events)), root=0)
        if rank == 0:
            print("JSON " + json.dumps(every), flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=2048)
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--rate", default="1gbit")
    parser.add_argument("--rank-side", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.rank_side:
        rank_main(args.n, args.runs)
        return 0
    from _netns import Hosts, unavailable  # this folder's shared launcher

    why = unavailable()
    if why:
        print(f"ring_timeline: {why}", file=sys.stderr)
        return 2
    with Hosts(2, rate=None if args.rate == "none" else args.rate) as hosts:
        run = hosts.run(2, [sys.executable, str(Path(__file__).resolve()), "--rank-side",
                            "--n", str(args.n), "--runs", str(args.runs)], timeout=1800)
    lines = [ln[5:] for ln in run.stdout.splitlines() if ln.startswith("JSON ")]
    if run.returncode or not lines:
        print(run.stdout, run.stderr, file=sys.stderr)
        return 1
    for line in lines:
        for rank, wall, hops, events in json.loads(line):
            print(f"rank {rank}: wall {1e3 * wall:.1f} ms, hop waits "
                  f"{[(h, round(1e3 * w, 2)) for h, w in hops]} ms")
            for name, rows, start, end in events:
                print(f"    {name:42s} {f'rows {rows}' if rows else '':10s} "
                      f"{1e3 * start:8.2f} → {1e3 * end:8.2f}  ({1e3 * (end - start):.2f})")
        print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
