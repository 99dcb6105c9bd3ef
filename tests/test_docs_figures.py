"""The docs' figures re-measured by the commands printed next to them (scripts/docs_figures.py):
the runs that fit in CI here; ``python scripts/check_docs_figures.py`` runs them all."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
from docs_figures import RUNS, by_name, compare, doc_table, execute

CI_RUNS = ["recall", "scaling-memory"]  # about a minute together; the others take minutes


@pytest.mark.parametrize("run", RUNS, ids=lambda r: r.name)
def test_every_run_is_printed_in_its_doc_above_a_table(run):
    header, rows = doc_table(run.doc, run.command)
    assert len(header) >= 2 and rows, (run.doc, run.command)


def test_the_docs_commands_write_into_their_own_folder():
    """No documented command writes over the package's files or the shipped figures."""
    for run in RUNS:
        assert "docs/figures" not in run.command and "src/qkv" not in run.command, run.command
    root = Path(__file__).resolve().parents[1]
    for doc in [root / "README.md", *(root / "docs").glob("*.md")]:
        for line in doc.read_text(encoding="utf-8").splitlines():
            if line.lstrip().startswith(("qkv ", "python -m qkv", "$ qkv")):
                assert "docs/figures" not in line and "src/qkv" not in line, (doc.name, line)


@pytest.mark.slow
@pytest.mark.parametrize("name", CI_RUNS)
def test_the_docs_figures_are_what_the_command_prints(name, tmp_path):
    (run,) = by_name([name])
    out, stdout = execute(run, tmp_path, timeout=600)
    problems = compare(run, out, stdout, timings=False)
    assert not problems, "\n".join(problems)
