"""Re-run the docs' commands and compare every figure with the doc (see scripts/docs_figures.py).

    python scripts/check_docs_figures.py                 # every exact figure (~7 min on 2 cores)
    python scripts/check_docs_figures.py recall farback  # some runs
    python scripts/check_docs_figures.py --timings       # and the timings, ±30% (quiet machine)
    python scripts/check_docs_figures.py --list

Counts, accuracies, parameters and memory must equal the doc exactly; timings are compared only
with --timings. Each command runs as the doc prints it, in a temporary folder (its out/): the
repository's files are never written. Exit status 1 when a figure differs, with one line each.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from docs_figures import RUNS, by_name, compare, execute


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("runs", nargs="*", help="runs to check (default: all)")
    parser.add_argument("--timings", action="store_true",
                        help="also compare timings, within the stated tolerance (run on a quiet "
                             "machine), and run the runs that only have timings")
    parser.add_argument("--list", action="store_true", help="list the runs and exit")
    args = parser.parse_args(argv)
    if args.list:
        for run in RUNS:
            print(f"{run.name:15} {run.doc:18} ~{run.minutes:g} min"
                  f"{' (timings only)' if run.timings_only else ''}  {run.command}")
        return 0
    runs = [r for r in by_name(args.runs) if args.timings or args.runs or not r.timings_only]
    failed = 0
    for run in runs:
        start = time.monotonic()
        with tempfile.TemporaryDirectory(prefix=f"qkv-{run.name}-") as tmp:
            out, stdout = execute(run, Path(tmp))
            problems = compare(run, out, stdout, args.timings or run.timings_only)
        took = time.monotonic() - start
        status = "ok" if not problems else f"{len(problems)} differ"
        print(f"{run.name}: {status} ({took:.0f} s)  {run.command}", flush=True)
        for line in problems:
            print(f"  {line}")
        failed += bool(problems)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
