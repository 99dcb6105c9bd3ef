"""Run the ring-attention demo on several MPI ranks: ``mpirun`` launched for you.

    qkv ring --ranks 4 --n 262144 --heads 1 --dim 64 --mask causal

is ``mpirun -n 4 python -m qkv.distributed --n 262144 ...`` with the flags this machine needs:
``--allow-run-as-root`` when run as root, ``--oversubscribe`` when ranks exceed cores, and one
BLAS thread per rank. Each rank builds its shard from the seed, runs ring attention, and rank 0
checks a sample of rows against the single-process engine. Needs the [mpi] extra and OpenMPI:
pip install 'qkv[mpi]' and apt-get install openmpi-bin libopenmpi-dev. See docs/distributed.md.
"""

from __future__ import annotations

import argparse

HELP = "exact ring attention across MPI ranks (launches mpirun)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--ranks", type=int, default=4, help="MPI ranks (default 4)")
    parser.add_argument("--n", type=int, default=65536, help="sequence length (default 65536)")
    parser.add_argument("--heads", type=int, default=1)
    parser.add_argument("--dim", type=int, default=64)
    parser.add_argument("--mask", choices=("causal", "none", "window"), default="causal")
    parser.add_argument("--layout", choices=("zigzag", "contiguous"), default="zigzag")
    parser.add_argument("--backward", action="store_true", help="also time the backward")
    parser.add_argument("--dry-run", action="store_true", help="print the mpirun command only")


def command(args: argparse.Namespace) -> list[str]:
    import os
    import shutil
    import sys

    cores = len(os.sched_getaffinity(0))
    cmd = [shutil.which("mpirun") or "mpirun", "-n", str(args.ranks)]
    if os.geteuid() == 0:
        cmd.append("--allow-run-as-root")
    if args.ranks > cores:
        cmd.append("--oversubscribe")
    elif args.ranks < cores:  # OpenMPI would bind each rank to one core: let its threads spread
        cmd += ["--bind-to", "none"]
    cmd += ["-x", "OMP_NUM_THREADS=1", sys.executable, "-m", "qkv.distributed",
            "--n", str(args.n), "--heads", str(args.heads), "--dim", str(args.dim),
            "--mask", args.mask, "--layout", args.layout]
    return cmd + (["--backward"] if args.backward else [])


def run(args: argparse.Namespace) -> int:
    import shlex
    import shutil
    import subprocess
    import sys

    if args.ranks < 1:
        print(f"qkv ring: --ranks must be ≥ 1, got {args.ranks}", file=sys.stderr)
        return 2
    cmd = command(args)
    print(shlex.join(cmd), flush=True)
    if args.dry_run:
        return 0
    if shutil.which("mpirun") is None:
        print("qkv ring: mpirun not found: apt-get install openmpi-bin libopenmpi-dev, and "
              "pip install 'qkv[mpi]'", file=sys.stderr)
        return 2
    return subprocess.run(cmd).returncode
