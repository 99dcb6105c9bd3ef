"""Build the compiled tile step ahead of time, so that a fresh process's first call is fast.

    qkv warm [--force] [--check]

Without it, the first ``qkv.attention`` call of a fresh process imports Numba and compiles the
tile step (seconds with an empty cache) or loads it from Numba's cache. ``qkv warm`` builds the
step once with ``numba.pycc`` into ``$QKV_CACHE_DIR`` (default ``~/.cache/qkv``), keyed by qkv's
source and the Numba, NumPy and Python versions and this CPU, and checks it bitwise against the
JIT before installing it. Run again, it does nothing while the build is current (``--force``
rebuilds). ``scripts/install.sh`` runs it. Without Numba there is nothing to build: qkv then
runs its NumPy step.
"""

from __future__ import annotations

import argparse
import sys
import time

HELP = "build the compiled tile step ahead of time (fast first call in a fresh process)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--force", action="store_true", help="rebuild even if current")
    parser.add_argument("--check", action="store_true",
                        help="only say whether a current build is there (exit 1 if not)")


def run(args: argparse.Namespace) -> int:
    from qkv.engine.step import aot
    from qkv.engine.tiles import has_numba

    if args.check:
        ok = aot.available()
        print(f"qkv warm: {aot.path()} {'loads' if ok else 'is absent, stale or broken'}")
        return 0 if ok else 1
    if not has_numba():
        print("qkv warm: Numba is not installed, so qkv runs its NumPy step: nothing to build "
              "(pip install 'qkv[fast]' for the compiled step)")
        return 0
    import numpy as np

    from qkv.engine import gemm
    from qkv.engine.step import aot_build

    start = time.perf_counter()
    # the fused loop is checked with the BLAS it will call (the GEMM choice "auto" resolves to)
    sgemm = gemm.address(np.float32, gemm.resolve("auto"))
    try:
        path, built = aot_build.build(force=args.force, sgemm=sgemm)
    except Exception as exc:  # a compiler missing, a failed check: the JIT still runs
        print(f"qkv warm: could not build the tile step ({type(exc).__name__}: {exc}); "
              "qkv will compile it on first use instead", file=sys.stderr)
        return 1
    seconds = time.perf_counter() - start
    print(f"qkv warm: {'built' if built else 'already current:'} {path}"
          + (f" in {seconds:.1f} s (checked bitwise against the JIT"
             + ("" if sgemm else "; the fused tile loop, which needs an ILP64 BLAS, unchecked")
             + ")"
             if built else ""))
    return 0
