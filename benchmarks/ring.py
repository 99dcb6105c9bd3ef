"""Ring attention on 1, 2 and 4 ranks beside the single-process engine, same inputs.

    python benchmarks/ring.py                    # N = 65536, causal, H = 1, D = 64
    python benchmarks/ring.py --n 262144 --ranks 4 --no-engine

Each configuration runs in its own processes so that its peak memory is its own: the engine as
``python benchmarks/ring.py --engine-only`` (qkv.attention on the full arrays, all cores),
the ring as ``mpirun -n P python -m qkv.distributed --json`` (one thread per rank, ranks
oversubscribed past the cores). Inputs come from the same seeded generators (rows of
qkv.distributed.__main__), so every run computes the same attention; the demo checks a sample
of rows against the engine. Prints time, per-rank peak memory (RSS) and the ratio to the engine.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import time


def engine_only(args) -> None:
    """The single-process engine on the full arrays; prints one JSON line."""
    import numpy as np

    import qkv
    from qkv.distributed.__main__ import rows

    start_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    pos = np.arange(args.n)
    q, k, v = (rows(args.seed, i, pos, args.heads, args.dim) for i in range(3))
    mask = qkv.causal() if args.mask == "causal" else None
    start = time.perf_counter()
    qkv.attention(q, k, v, mask=mask, return_lse=True)
    elapsed = time.perf_counter() - start
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print("JSON " + json.dumps({"forward_s": elapsed, "peak_mb": peak, "start_mb": start_mb,
                                "threads": os.environ.get("QKV_NUM_THREADS")}), flush=True)


def last_json(text: str) -> dict:
    lines = [ln for ln in text.splitlines() if ln.startswith("JSON ")]
    if not lines:
        raise RuntimeError(f"no JSON line in the output:\n{text}")
    return json.loads(lines[-1][5:])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=65536)
    parser.add_argument("--heads", type=int, default=1)
    parser.add_argument("--dim", type=int, default=64)
    parser.add_argument("--mask", choices=("causal", "none"), default="causal")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--ranks", default="1,2,4", help="comma-separated rank counts")
    parser.add_argument("--layouts", default="zigzag", help="e.g. zigzag,contiguous")
    parser.add_argument("--no-engine", action="store_true", help="skip the single-process run")
    parser.add_argument("--timeout", type=float, default=3600)
    parser.add_argument("--engine-only", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.engine_only:
        engine_only(args)
        return 0

    cores = len(os.sched_getaffinity(0))
    common = ["--n", str(args.n), "--heads", str(args.heads), "--dim", str(args.dim),
              "--mask", args.mask, "--seed", str(args.seed)]
    flops = 4 * args.n**2 * args.dim * args.heads * (0.5 if args.mask == "causal" else 1)
    print(f"N={args.n} H={args.heads} D={args.dim} mask={args.mask}; {cores} cores; "
          f"{flops / 1e12:.2f} TFLOP (4·N²·D, halved by causal)")
    engine = None
    if not args.no_engine:
        env = dict(os.environ, QKV_NUM_THREADS=str(cores))
        run = subprocess.run([sys.executable, __file__, "--engine-only", *common],
                             capture_output=True, text=True, timeout=args.timeout, env=env)
        engine = last_json(run.stdout + run.stderr)
        print(f"engine   1 process × {cores} threads: {engine['forward_s']:8.2f} s  "
              f"{flops / engine['forward_s'] / 1e9:6.1f} GFLOP/s  peak {engine['peak_mb']:.0f} MB "
              f"(start {engine['start_mb']:.0f} MB)")
    mpirun = [shutil.which("mpirun") or "mpirun", "--oversubscribe"]
    if os.geteuid() == 0:
        mpirun.append("--allow-run-as-root")
    for layout in args.layouts.split(","):
        for p in (int(x) for x in args.ranks.split(",")):
            threads = max(1, cores // p)
            # OpenMPI binds each rank to one core when ranks ≤ cores: unbind threaded ranks
            bind = ["--bind-to", "none"] if threads > 1 else []
            cmd = [*mpirun, *bind, "-n", str(p), "-x", "OMP_NUM_THREADS=1", "-x",
                   f"QKV_NUM_THREADS={threads}", sys.executable, "-m", "qkv.distributed",
                   *common, "--layout", layout, "--json"]
            run = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout)
            res = last_json(run.stdout + run.stderr)
            per = res["per_rank"]
            peaks = "/".join(f"{r['peak_mb']:.0f}" for r in per)
            waits = "/".join(f"{r['wait_s']:.2f}" for r in per)
            ratio = f"  ×{res['forward_s'] / engine['forward_s']:.2f} engine" if engine else ""
            print(f"ring {layout:10s} {p} ranks × {threads} threads: {res['forward_s']:8.2f} s  "
                  f"{flops / res['forward_s'] / 1e9:6.1f} GFLOP/s  peak MB per rank {peaks} "
                  f"(start {per[0]['start_mb']:.0f})  wait s {waits}  check "
                  f"{res['check_err']:.1e} ≤ {res['check_bound']:.1e}{ratio}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
