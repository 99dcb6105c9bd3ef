"""The docs' figures and the commands printed next to them, in one place: what
``scripts/check_docs_figures.py`` re-runs and compares, and what
``scripts/regenerate_artefacts.py`` (maintainers) writes into the repository.

Each :class:`Run` is one command exactly as a doc prints it, writing into ``out/`` (a folder of
the reader's choosing; here a temporary one). The figures it is compared with are the first
Markdown table after that command in the doc, so "the table under the command" is what is
checked. Cells are compared as the doc prints them:

- counts, accuracies and parameters must be equal, character for character (they are
  deterministic: the same command gives the same bits); memory too, except that a peak may move
  by one unit of its last printed digit (the order of qkv's tile threads' allocations moves it
  by kilobytes);
- timings (and slopes fitted on timings) are compared only with ``--timings``, within
  ``TIMING_TOLERANCE`` (as a ratio), and only mean something on a quiet machine.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TIMING_TOLERANCE = 0.30  # a timing may differ from the doc by this fraction (2 shared cores)
MEMORY_SLOPE_TOLERANCE = 0.05  # a slope fitted on peaks that move by tens of kilobytes


@dataclass
class Cell:
    """One figure: where it sits in the doc's table, what the run printed, how to compare."""
    row: str
    column: str
    measured: str
    timing: bool = False
    memory: bool = False  # "4.6 MiB": may differ by one unit of the last printed digit
    abs_tol: float = 0.0  # a figure derived from such peaks (a slope): this far, stated


@dataclass
class Run:
    name: str
    doc: str  # relative to the repository
    command: str  # as the doc prints it (continuation lines joined)
    minutes: float  # about, on 2 quiet cores
    cells: Callable[[Path, str], list[Cell]]  # (out folder, stdout) → the measured cells
    # out/NAME → repository path (or paths: the cost view ships a copy of docs' scaling.json)
    artefacts: dict[str, str | tuple[str, ...]] = field(default_factory=dict)
    timings_only: bool = False  # every figure of the run is a timing

    def argv(self) -> list[str]:
        words = shlex.split(self.command)
        if words[0] == "qkv":
            return [sys.executable, "-m", "qkv", *words[1:]]
        if words[0] in ("python", "python3"):
            return [sys.executable, *words[1:]]
        return words


# -- reading the doc ---------------------------------------------------------------------------
def doc_table(doc: str, command: str) -> tuple[list[str], dict[str, list[str]]]:
    """(header, {row label: cells}) of the first Markdown table after ``command`` in ``doc``.
    Labels and cells lose their ``**`` emphasis and surrounding spaces."""
    text = (ROOT / doc).read_text(encoding="utf-8")
    flat = re.sub(r"\s*\\\n\s*", " ", text)  # shell continuation lines joined
    at = flat.find(command)
    if at < 0:
        raise LookupError(f"{doc} does not print the command {command!r}")
    lines = flat[at:].splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("|"))
    table = []
    for line in lines[start:]:
        if not line.startswith("|"):
            break
        table.append([c.strip().replace("**", "") for c in line.strip().strip("|").split("|")])
    header, rows = table[0], table[2:]
    return header, {row[0]: row for row in rows}


def compare(run: Run, out: Path, stdout: str, timings: bool) -> list[str]:
    """One line per figure that differs from the doc (empty: all equal)."""
    header, rows = doc_table(run.doc, run.command)
    problems = []
    for cell in run.cells(out, stdout):
        if cell.timing and not timings:
            continue
        if cell.row not in rows:
            problems.append(f"{run.doc}: no row {cell.row!r} in the table under the command")
            continue
        try:
            printed = rows[cell.row][header.index(cell.column)]
        except ValueError:
            problems.append(f"{run.doc}: no column {cell.column!r} in {header}")
            continue
        where = f"{run.doc} [{cell.row} | {cell.column}]"
        if cell.timing:
            doc_value, value = _number(printed), _number(cell.measured)
            if doc_value is None or value is None:
                if printed != cell.measured:
                    problems.append(f"{where}: doc {printed}, measured {cell.measured}")
            elif abs(value / doc_value - 1) > TIMING_TOLERANCE:
                problems.append(f"{where}: doc {printed}, measured {cell.measured} "
                                f"(beyond ±{TIMING_TOLERANCE:.0%})")
        elif cell.memory and _within_last_digit(printed, cell.measured):
            continue
        elif cell.abs_tol and _number(printed) is not None and _number(cell.measured) is not None \
                and abs(_number(printed) - _number(cell.measured)) <= cell.abs_tol + 1e-9:
            continue
        elif printed != cell.measured:
            problems.append(f"{where}: doc {printed}, measured {cell.measured}")
    return problems


def _within_last_digit(printed: str, measured: str) -> bool:
    """"22.1 MiB" vs "22.2 MiB": equal but for one unit of the last printed digit (the order
    in which qkv's tile threads allocate moves a peak by kilobytes, which may cross a rounding
    boundary). Anything else — another unit, another figure — is a difference."""
    a, b = (re.fullmatch(r"([\d.]+)( MiB)?", t) for t in (printed, measured))
    if not (a and b) or a.group(2) != b.group(2):
        return False
    decimals = len(a.group(1).partition(".")[2])
    return abs(float(a.group(1)) - float(b.group(1))) <= 10 ** -decimals + 1e-9


def _number(text: str) -> float | None:
    """A timing cell as seconds ("165.4 ms", "10.22 s") or a plain number ("2.00")."""
    m = re.fullmatch(r"([\d.,]+)\s*(ms|s)?", text.strip())
    if not m:
        return None
    value = float(m.group(1).replace(",", ""))
    return value / 1000 if m.group(2) == "ms" else value


# -- the runs ----------------------------------------------------------------------------------
SEQ2SEQ = ("qkv train seq2seq --seed 0 --json out/seq2seq.json --plot out/seq2seq.png "
           "--heatmap out/seq2seq-alignment.svg --save-dir out")


def seq2seq_cells(out: Path, stdout: str) -> list[Cell]:
    result = json.loads((out / "seq2seq.json").read_text())
    cells = []
    for kind in ("fixed", "attention"):
        for b in result["models"][kind]["buckets"]:
            row = f"{b['lengths'][0]}–{b['lengths'][1]}"
            cells += [Cell(row, f"{kind}: token accuracy", f"{b['token_accuracy']:.3f}"),
                      Cell(row, f"{kind}: exact match", f"{b['exact_match']:.3f}")]
    return cells


FARBACK = ("qkv train farback --seed 0 --json out/farback.json --plot out/farback.png "
           "--weights-plot out/farback-weights.png --heatmap out/farback-weights.html "
           "--save-dir out")
FARBACK_ROWS = {"attention": "attention", "recency": "recency (learned decay)", "gru": "GRU"}


def farback_cells(out: Path, stdout: str) -> list[Cell]:
    result = json.loads((out / "farback.json").read_text())
    header, _ = doc_table("docs/seeds.md", FARBACK)
    cells = []
    for kind, row in FARBACK_ROWS.items():
        model = result["models"][kind]
        cells.append(Cell(row, "params", f"{model['parameters']:,}"))
        for column, lag in zip(header[2:-1], model["by_lag"], strict=True):
            cells.append(Cell(row, column, f"{lag['accuracy']:.3f}"))
        cells.append(Cell(row, "all", f"{model['accuracy']:.3f}"))
    rules = result["recency_rules"]
    all_column = header[-1]
    cells.append(Cell("rule: sign of the latest block trade", all_column,
                      f"{rules['latest block trade']['accuracy']:.3f}"))
    cells.append(Cell("rule: sign of the latest type-0 trade", all_column,
                      f"{rules['latest type-0 trade']['accuracy']:.3f}"))
    cells.append(Cell("rule: sign of an EMA of signed size, λ = 0.9 / 0.99 / 0.999", all_column,
                      " / ".join(f"{rules[f'EMA λ={lam}']['accuracy']:.3f}"
                                 for lam in ("0.9", "0.99", "0.999"))))
    return cells


RECALL = "qkv train recall --seed 0 --no-progress"


def recall_cells(out: Path, stdout: str) -> list[Cell]:
    header, _ = doc_table("docs/training.md", RECALL)
    held = {int(m.group(1)): m.group(2) for m in
            re.finditer(r"^step (\d+): held-out accuracy ([\d.]+)", stdout, re.M)}
    return [Cell("held-out accuracy", column, held.get(int(column), "(not printed)"))
            for column in header[1:] if column.isdigit()]


SCALING_ROWS = {"naive": "naive", "qkv dense": "qkv dense", "qkv causal": "qkv causal",
                "qkv window": "qkv window", "ssm scan": "ssm scan"}


def _mib(points: dict, n: int) -> str:
    return f"{points[n]['peak_bytes'] / 2**20:.1f} MiB" if n in points else "—"


def _ms(points: dict, n: int) -> str:
    if n not in points:
        return "—"
    seconds = points[n]["seconds"]
    return f"{seconds:.2f} s" if seconds >= 1 else f"{seconds * 1e3:.1f} ms"


SCALING_MEMORY = "python -m qkv.tasks.scaling --memory-only --json out/scaling-memory.json"


def scaling_memory_cells(out: Path, stdout: str) -> list[Cell]:
    result = json.loads((out / "scaling-memory.json").read_text())
    cells = []
    for method, row in SCALING_ROWS.items():
        series = result["methods"][method]
        points = {p["n"]: p for p in series["points"]}
        slope = series["memory_slope"]
        cells += [Cell(row, "peak memory n=8,192", _mib(points, 8192), memory=True),
                  Cell(row, "n=65,536", _mib(points, 65536), memory=True),
                  # fitted on those peaks, so it moves with them (window: 0.62–0.66 seen)
                  Cell(row, "memory slope", "—" if slope is None else f"{slope:.2f}",
                       abs_tol=MEMORY_SLOPE_TOLERANCE)]
    return cells


SCALING = "python -m qkv.tasks.scaling --json out/scaling.json --plot out/scaling.png"


def scaling_time_cells(out: Path, stdout: str) -> list[Cell]:
    result = json.loads((out / "scaling.json").read_text())
    cells = []
    for method, row in SCALING_ROWS.items():
        series = result["methods"][method]
        points = {p["n"]: p for p in series["points"]}
        slope = series["time_slope"]
        cells += [Cell(row, "time n=1,024", _ms(points, 1024), timing=True),
                  Cell(row, "n=8,192", _ms(points, 8192), timing=True),
                  Cell(row, "n=65,536", _ms(points, 65536), timing=True),
                  Cell(row, "time slope", "—" if slope is None else f"{slope:.2f}",
                       timing=True)]
    return cells


RUNS = [
    Run("recall", "docs/training.md", RECALL, 0.4, recall_cells),
    Run("scaling-memory", "docs/seeds.md", SCALING_MEMORY, 0.5, scaling_memory_cells),
    Run("farback", "docs/seeds.md", FARBACK, 1.0, farback_cells,
        {"farback.json": "docs/figures/farback.json", "farback.png": "docs/figures/farback.png",
         "farback-weights.png": "docs/figures/farback-weights.png",
         "farback-weights.html": "docs/figures/farback-weights.html",
         **{f"farback-{kind}.safetensors": f"src/qkv/tasks/data/farback-{kind}.safetensors"
            for kind in ("attention", "recency", "gru")}}),
    Run("seq2seq", "docs/seeds.md", SEQ2SEQ, 4.5, seq2seq_cells,
        {"seq2seq.json": "docs/figures/seq2seq.json", "seq2seq.png": "docs/figures/seq2seq.png",
         "seq2seq-alignment.svg": "docs/figures/seq2seq-alignment.svg",
         "seq2seq-fixed.safetensors": "src/qkv/tasks/data/seq2seq-fixed.safetensors",
         "seq2seq-attention.safetensors": "src/qkv/tasks/data/seq2seq-attention.safetensors"}),
    Run("scaling", "docs/seeds.md", SCALING, 1.5, scaling_time_cells,
        {"scaling.json": ("docs/figures/scaling.json", "src/qkv/tasks/data/scaling.json"),
         "scaling.png": "docs/figures/scaling.png"},
        timings_only=True),
]


def execute(run: Run, workdir: Path, timeout: float | None = None) -> tuple[Path, str]:
    """Run ``run.command`` in ``workdir`` (its ``out/`` is created there); (out, stdout).
    This checkout's ``src/`` comes first on the path, so the code checked is the code here."""
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "NO_COLOR": "1",
           "HF_HUB_OFFLINE": "1"}
    out = workdir / "out"
    out.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(run.argv(), cwd=workdir, env=env, capture_output=True, text=True,
                          timeout=timeout, stdin=subprocess.DEVNULL)
    if done.returncode != 0:
        raise RuntimeError(f"`{run.command}` exited {done.returncode}:\n{done.stderr[-3000:]}")
    return out, done.stdout


def by_name(names: list[str] | None) -> list[Run]:
    if not names:
        return list(RUNS)
    known = {r.name: r for r in RUNS}
    unknown = [n for n in names if n not in known]
    if unknown:
        raise SystemExit(f"unknown run {', '.join(unknown)}; the runs are: {', '.join(known)}")
    return [known[n] for n in names]

