"""Re-run the docs' commands and compare every figure with the doc (see scripts/docs_figures.py).

    python scripts/check_docs_figures.py                   # every exact figure (~15 min, 2 cores)
    python scripts/check_docs_figures.py recall farback    # some runs, by name
    python scripts/check_docs_figures.py --timings         # and the timings (a quiet machine)
    python scripts/check_docs_figures.py --timings --long  # and the very slow ones (~90 min more)
    python scripts/check_docs_figures.py --timings --update  # rewrite the docs' timings
    python scripts/check_docs_figures.py --list

Counts, accuracies, parameters, losses and memory must equal the doc exactly (a tracemalloc
peak within one unit of its last printed digit; a resident set, RSS, within ±5% or ±10 MB, the
spread across this project's machines, and printed with the machine it was measured on); a
rounding error (the ring's "check vs engine") within the float32 bound the run prints beside
it, and printed with it. Timings —
seconds, rates and ratios — are compared only with --timings, each within ±30% (the spread
two runs of `qkv bench` showed on this machine: up to 29% per case), or within the spread of
runs the doc gives ("6.8–8.5"), widened by 30%; time slopes within ±0.15. --update rewrites the
timings (and the load averages printed beside them) in the docs with this run's, and leaves
every exact figure alone: a difference there is a finding. Runs marked long (gpt-vs-torch's
2,000 steps, the 1,048,576-token ring, lesson.md's longer far-back runs, the GPT-recipe runs
of `qkv train induction`) run only with --long or by name.

Each command runs as the doc prints it, in a temporary folder (its out/): the repository's
files are never written, except the docs by --update. Each run prints its wall time. Exit status
1 when a figure differs, with one line each.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from docs_figures import RUNS, by_name, compare, execute, notes, update


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("runs", nargs="*", help="runs to check (default: all but the long ones;"
                        " see --list)")
    parser.add_argument("--timings", action="store_true",
                        help="also compare timings, within the stated tolerance (run on a quiet "
                             "machine), and run the runs that only have timings")
    parser.add_argument("--long", action="store_true",
                        help="also run the very slow runs (2–25 min each, ~90 min in all)")
    parser.add_argument("--update", action="store_true",
                        help="rewrite the docs' timings with this run's (implies --timings)")
    parser.add_argument("--keep", type=Path, metavar="DIR",
                        help="keep each run's out/ folder as DIR/RUN (e.g. to refresh "
                             "benchmarks/latest.json from DIR/bench/bench.json)")
    parser.add_argument("--list", action="store_true", help="list the runs and exit")
    args = parser.parse_args(argv)
    args.timings = args.timings or args.update
    if args.list:
        for run in RUNS:
            kind = " (long)" if run.long else " (timings only)" if run.timings_only else ""
            print(f"{run.name:15} {run.doc:22} ~{run.minutes:g} min{kind}  {run.command}")
        return 0
    if args.runs:
        runs = by_name(args.runs)
    else:
        runs = [r for r in RUNS if (args.long or not r.long)
                and (args.timings or not r.timings_only)]
    print(f"{len(runs)} runs, about {sum(r.minutes for r in runs):.0f} min on 2 quiet cores",
          flush=True)
    failed, begin = 0, time.monotonic()
    for run in runs:
        with tempfile.TemporaryDirectory(prefix=f"qkv-{run.name}-") as tmp:
            start = time.monotonic()
            try:
                output = execute(run, Path(tmp))
                problems = compare(run, output, args.timings or run.timings_only)
                noted = notes(run, output)  # (the cells may read out/: still here)
            except (RuntimeError, ValueError, OSError) as exc:  # the next runs still run
                print(f"{run.name}: FAILED ({time.monotonic() - start:.0f} s)  {run.command}\n"
                      f"  {exc}", flush=True)
                failed += 1
                continue
            changed = update(run, output) if args.update else []
            if args.keep and (Path(tmp) / "out").is_dir():
                shutil.copytree(Path(tmp) / "out", args.keep / run.name, dirs_exist_ok=True)
                (args.keep / run.name / "stdout.txt").write_text(output.stdout)
            if args.update:  # the timings now are this run's: only the exact figures can differ
                problems = compare(run, output, timings=False)  # (reads out/: still here)
        status = "ok" if not problems else f"{len(problems)} differ"
        print(f"{run.name}: {status} ({output.seconds:.0f} s)  {run.command}", flush=True)
        for line in problems:
            print(f"  {line}")
        for line in noted:
            print(f"  {line}")
        for line in changed:
            print(f"  updated {line}")
        failed += bool(problems)
    print(f"{time.monotonic() - begin:.0f} s in all")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
