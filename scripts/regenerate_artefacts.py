"""Maintainers: regenerate the artefacts the repository ships — the seq2seq and far-back
checkpoints and the scaling results in src/qkv/tasks/data/, and the figures in docs/figures/ —
with the docs' own commands.

    python scripts/regenerate_artefacts.py seq2seq farback    # then update the docs' tables
    python scripts/regenerate_artefacts.py --all              # scaling too (a quiet machine)

Each run is the command the doc prints (scripts/docs_figures.py), run in a temporary folder;
its outputs are then copied over the shipped files. Users never need this: the docs' commands
write to a folder of their choosing. Afterwards `python scripts/check_docs_figures.py` must
pass (update the tables it names), and the seq2seq tests re-score the shipped checkpoints.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from docs_figures import ROOT, RUNS, by_name, execute


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    names = [r.name for r in RUNS if r.artefacts]
    parser.add_argument("runs", nargs="*", help=f"what to regenerate: {', '.join(names)}")
    parser.add_argument("--all", action="store_true", help="every run that ships artefacts")
    args = parser.parse_args(argv)
    if not args.runs and not args.all:
        parser.error(f"name the runs to regenerate ({', '.join(names)}) or pass --all")
    runs = [r for r in (RUNS if args.all else by_name(args.runs)) if r.artefacts]
    for run in runs:
        with tempfile.TemporaryDirectory(prefix=f"qkv-{run.name}-") as tmp:
            print(f"{run.name}: {run.command}", flush=True)
            output = execute(run, Path(tmp))
            print(output.stdout)
            out = output.out
            for name, targets in run.artefacts.items():
                for target in (targets,) if isinstance(targets, str) else targets:
                    shutil.copyfile(out / name, ROOT / target)
                    print(f"  {target}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
