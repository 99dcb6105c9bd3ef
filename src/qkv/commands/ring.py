"""Run the ring-attention demo on several MPI ranks: ``mpirun`` launched for you.

    qkv ring --ranks 2 --n 16384 --backward

is ``mpirun -n 2 python -m qkv.distributed --n 16384 --backward ...`` with the flags this machine
needs: ``--allow-run-as-root`` when run as root, ``--oversubscribe`` when ranks exceed cores (else
``--bind-to none``), and one BLAS thread per rank. The demo's options are defined once, in
``qkv.distributed.__main__``, and forwarded as given. Each rank builds its shard from the seed,
runs ring attention, prints one progress line per ring step, and rank 0 checks a sample of rows
against the single-process engine. Needs the [mpi] extra and OpenMPI. See docs/distributed.md.
"""

from __future__ import annotations

import argparse

HELP = "exact ring attention across MPI ranks (launches mpirun)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from ..distributed.__main__ import add_arguments as demo_arguments

    parser.add_argument("--ranks", type=int, default=4, help="MPI ranks (default 4)")
    parser.add_argument("--dry-run", action="store_true", help="print the mpirun command only")
    demo_arguments(parser)


def command(args: argparse.Namespace) -> list[str]:
    import os
    import shutil
    import sys

    from ..distributed.__main__ import forwarded

    cores = len(os.sched_getaffinity(0))
    cmd = [shutil.which("mpirun") or "mpirun", "-n", str(args.ranks)]
    if os.geteuid() == 0:
        cmd.append("--allow-run-as-root")
    if args.ranks > cores:
        cmd.append("--oversubscribe")
    elif args.ranks < cores:  # OpenMPI would bind each rank to one core: let its threads spread
        cmd += ["--bind-to", "none"]
    return [*cmd, "-x", "OMP_NUM_THREADS=1", sys.executable, "-m", "qkv.distributed",
            *forwarded(args)]


def missing() -> str | None:
    """What is missing to launch (mpi4py, mpirun) and how to install it, or None."""
    import importlib.util
    import shutil

    from ..distributed._mpi import INSTALL

    if importlib.util.find_spec("mpi4py") is None:
        return f"qkv ring: mpi4py is not installed. {INSTALL}"
    if shutil.which("mpirun") is None:
        return f"qkv ring: mpirun not found. {INSTALL}"
    return None


def run(args: argparse.Namespace) -> int:
    import shlex
    import subprocess
    import sys

    from ..distributed.__main__ import check_arguments

    if args.ranks < 1:
        print(f"qkv ring: --ranks must be ≥ 1, got {args.ranks}", file=sys.stderr)
        return 2
    check_arguments(argparse.ArgumentParser(prog="qkv ring"), args)
    cmd = command(args)
    print(shlex.join(cmd), flush=True)
    if args.dry_run:
        return 0
    problem = missing()
    if problem:
        print(problem, file=sys.stderr)
        return 2
    return subprocess.run(cmd).returncode
