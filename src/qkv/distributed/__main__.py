"""Ring attention demo: a long sequence across MPI ranks, checked against the single-process engine.

    mpirun -n 4 python -m qkv.distributed --n 65536 --heads 1 --dim 64 --mask causal

Every rank builds its own shard of q, k and v from the seed (the full arrays never exist on any
rank: row block b of each array comes from its own generator, seeded (seed, array, b)), runs
``ring_attention``, and reports its time, its peak memory and how many kv shards it computed or
skipped. Rank 0 then checks a sample of rows against the single-process engine (the engine's
kernel run on those query rows against all N keys, at their global positions) and prints the
largest error beside its float32 bound. Each rank prints one progress line per ring step on
stderr (``--quiet``: none).

As root, OpenMPI needs ``--allow-run-as-root``; with more ranks than cores add
``--oversubscribe``. Pin the BLAS to one thread per rank with ``-x OMP_NUM_THREADS=1``.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import time

import numpy as np

BLOCK = 4096  # rows per generator block


def rows(seed: int, which: int, pos: np.ndarray, heads: int, dim: int) -> np.ndarray:
    """Rows ``pos`` (global positions) of the seeded array ``which``: shape (1, heads, len, dim)."""
    out = np.empty((1, heads, len(pos), dim), dtype=np.float32)
    blocks = pos // BLOCK
    for b in np.unique(blocks):
        gen = np.random.default_rng([seed, which, int(b)])
        block = gen.standard_normal((heads, BLOCK, dim), dtype=np.float32)
        sel = blocks == b
        out[0, :, sel] = np.moveaxis(block[:, pos[sel] % BLOCK], 1, 0)
    return out


def make_mask(args):
    import qkv

    if args.mask == "none":
        return None
    if args.mask == "causal":
        return qkv.causal()
    return qkv.window(args.window)


def peak_mb() -> float:
    """This process's peak resident memory so far (Linux reports ru_maxrss in KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


DEFAULT_N = 16384  # a few seconds on 2 cores; the docs' long runs pass --n


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The demo's options: the one definition, shared by ``qkv ring`` (which forwards them)."""
    parser.add_argument("--n", type=int, default=DEFAULT_N,
                        help=f"sequence length N (default {DEFAULT_N})")
    parser.add_argument("--heads", type=int, default=1, help="heads H (default 1)")
    parser.add_argument("--dim", type=int, default=64, help="head dimension D (default 64)")
    parser.add_argument("--mask", choices=("causal", "none", "window"), default="causal",
                        help="the mask (default causal)")
    parser.add_argument("--window", type=int, default=4096,
                        help="keys before each query for --mask window (default 4096)")
    parser.add_argument("--layout", choices=("zigzag", "contiguous"), default="zigzag",
                        help="how the sequence is cut into shards (default zigzag: balanced "
                             "causal work)")
    parser.add_argument("--seed", type=int, default=0, help="seed of q, k, v (default 0)")
    parser.add_argument("--check", type=int, default=32,
                        help="rows checked against the single-process engine (default 32; 0: none)")
    parser.add_argument("--backward", action="store_true", help="also time the ring backward")
    parser.add_argument("--quiet", action="store_true",
                        help="no progress lines (one per ring step and rank, on stderr)")
    parser.add_argument("--json", action="store_true",
                        help="also print the figures as one JSON line (for benchmarks/ring.py)")


def check_arguments(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    for name in ("n", "heads", "dim", "window"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be ≥ 1, got {getattr(args, name)}")
    if args.check < 0:
        parser.error(f"--check must be ≥ 0, got {args.check}")


def forwarded(args: argparse.Namespace) -> list[str]:
    """``args``' demo options as a command line again (what ``qkv ring`` passes to each rank)."""
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    argv = []
    for action in parser._actions:
        if not action.option_strings or action.dest == "help":
            continue
        value = getattr(args, action.dest)
        if action.nargs == 0:  # a flag
            argv += [action.option_strings[0]] if value else []
        else:
            argv += [action.option_strings[0], str(value)]
    return argv


def parse(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m qkv.distributed", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(parser)
    args = parser.parse_args(argv)
    check_arguments(parser, args)
    return args


def main(argv=None) -> int:
    args = parse(argv)
    from . import _mpi

    try:
        MPI = _mpi.mpi()
    except ModuleNotFoundError as exc:
        print(exc, file=sys.stderr)
        return 2
    from .layout import positions
    from .ring import ring_attention, ring_attention_backward

    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    local = comm.Split_type(MPI.COMM_TYPE_SHARED).Get_size()  # ranks sharing this host
    os.environ.setdefault("QKV_NUM_THREADS",
                          str(max(1, len(os.sched_getaffinity(0)) // local)))
    mask = make_mask(args)
    base = peak_mb()

    pos = positions(args.n, rank, size, args.layout)
    q, k, v = (rows(args.seed, i, pos, args.heads, args.dim) for i in range(3))
    comm.Barrier()
    stats = {}
    start = time.perf_counter()
    progress = None if args.quiet else Progress(rank, size, "forward")
    out, lse = ring_attention(q, k, v, mask=mask, layout=args.layout, return_lse=True,
                              stats=stats, progress=progress)
    elapsed = time.perf_counter() - start
    comm.Barrier()
    wall = time.perf_counter() - start
    back = None
    if args.backward:
        dout = rows(args.seed, 3, pos, args.heads, args.dim)
        comm.Barrier()
        start = time.perf_counter()
        ring_attention_backward(q, k, v, out, lse, dout, mask=mask, layout=args.layout,
                                progress=None if args.quiet else Progress(rank, size, "backward"))
        comm.Barrier()
        back = time.perf_counter() - start
    peak = peak_mb()
    report = comm.gather((rank, len(pos), elapsed, stats, peak, base), root=0)

    # The check: sampled rows, against the engine on all N keys (root builds k and v whole).
    sample = np.random.default_rng(args.seed + 1).choice(args.n, min(args.check, args.n),
                                                         replace=False)
    mine = np.isin(pos, sample)
    got = comm.gather((pos[mine], out[..., mine, :]), root=0)
    if rank != 0:
        return 0

    summary = {
        "n": args.n, "heads": args.heads, "dim": args.dim, "mask": args.mask,
        "layout": args.layout, "ranks": size, "threads": int(os.environ["QKV_NUM_THREADS"]),
        "forward_s": wall, "backward_s": back,
        "per_rank": [{"rank": r, "rows": n_rows, "time_s": t, "compute_s": st["compute_s"],
                      "wait_s": st["wait_s"], "computed": len(st["computed"]),
                      "skipped": len(st["skipped"]), "peak_mb": pk, "start_mb": b}
                     for r, n_rows, t, st, pk, b in report],
    }
    kv_mb = 2 * (args.n / size) * args.heads * args.dim * 4 / 2**20
    print(f"ring attention: N={args.n} H={args.heads} D={args.dim} mask={args.mask} "
          f"layout={args.layout} ranks={size} threads/rank={summary['threads']}")
    print(f"forward: {wall:.2f} s wall" + (f", backward: {back:.2f} s wall" if back else ""))
    print("rank  rows    time_s  compute_s  wait_s  computed  skipped  peak_MB  (start_MB)")
    for row in summary["per_rank"]:
        print("{rank:4d}  {rows:6d}  {time_s:6.2f}  {compute_s:9.2f}  {wait_s:6.3f}  "
              "{computed:8d}  {skipped:7d}  {peak_mb:7.0f}  ({start_mb:.0f})".format(**row))
    print(f"one kv shard (k and v): {kv_mb:.1f} MB; a rank holds q, out, lse and two kv buffers")
    ok = True
    if args.check:
        err, bound = check(args, mask, got)
        ok = err <= bound
        summary.update(check_rows=len(sample), check_err=err, check_bound=bound)
        print(f"check: {len(sample)} rows against the single-process engine: max |error| "
              f"{err:.2e} (bound {bound:.2e}) {'ok' if ok else 'FAILED'}")
    if args.json:
        print("JSON " + json.dumps(summary), flush=True)
    return 0 if ok else 1


class Progress:
    """``progress(step, src)`` for the ring: one line per step on stderr, with the time so far."""

    def __init__(self, rank: int, size: int, what: str):
        self.rank, self.size, self.what = rank, size, what
        self.start = time.perf_counter()

    def __call__(self, step: int, src: int) -> None:
        sys.stderr.write(f"rank {self.rank}: {self.what} step {step + 1}/{self.size} done (kv "
                         f"shard of rank {src}), {time.perf_counter() - self.start:.1f} s\n")
        sys.stderr.flush()  # one write per line: the ranks share the terminal


def check(args, mask, got) -> tuple[float, float]:
    """Max |ring − engine| over the sampled rows, and its float32 bound."""
    from ..engine import forward, prepare

    rows_pos = np.concatenate([g[0] for g in got])
    ring_rows = np.concatenate([g[1] for g in got], axis=-2)
    order = np.argsort(rows_pos)
    rows_pos, ring_rows = rows_pos[order], ring_rows[..., order, :]
    all_keys = np.arange(args.n)
    k_full, v_full = (rows(args.seed, i, all_keys, args.heads, args.dim) for i in (1, 2))
    q_rows = rows(args.seed, 0, rows_pos, args.heads, args.dim)
    p = prepare(q_rows, k_full, v_full, mask, positions=(rows_pos, all_keys, args.n, args.n))
    engine, _ = forward(p)  # the engine on these query rows against all N keys
    err = float(np.abs(engine.astype(np.float64) - ring_rows).max())
    # first-order float32 bound (tests/helpers.py:output_atol), doubled: both sides err
    s_bound = args.dim * np.abs(q_rows).max() * np.abs(k_full).max() / np.sqrt(args.dim)
    bound = float(2 * 8 * 2.0**-24 * (1 + s_bound) * np.abs(v_full).max())
    return err, bound


if __name__ == "__main__":
    sys.exit(main())
