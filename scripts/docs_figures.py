"""The docs' figures and the commands printed next to them, in one place: what
``scripts/check_docs_figures.py`` re-runs and compares (and, with ``--update``, rewrites), and
what ``scripts/regenerate_artefacts.py`` (maintainers) writes into the repository.

Each :class:`Run` is one command exactly as a doc prints it, writing into ``out/`` (a folder of
the reader's choosing; here a temporary one). A figure is either a cell of the first Markdown
table after that command in the doc (so "the table under the command" is what is checked) or,
in prose, the first match of a pattern after the command (up to the next heading). Each output
format has one parser (scripts/docs_parsers.py); the runs' ``cells`` turn its result into the doc's
cells, formatted as the doc prints them. Figures are compared by kind:

- ``exact``: counts, accuracies, parameters, losses, errors — equal character for character
  (deterministic: the same command gives the same bits);
- ``memory``: tracemalloc peaks — equal, but for one unit of the last printed digit (the order
  of qkv's tile threads' allocations moves a peak by kilobytes);
- ``rss``: a process's resident set (the OS's pages, Numba's loaded code) — each number within
  ``RSS_TOLERANCE``, ``RSS_SPREAD_MB`` (the spread measured across this project's machines) or
  one unit of its last printed digit, whichever is larger; printed beside the machine it was
  measured on (:func:`notes`);
- ``bound``: a rounding error — within the bound float32 arithmetic allows, which the run
  prints beside it (``abs_tol``), never compared digit for digit: another CPU's BLAS rounds
  otherwise; the measured value is printed (:func:`notes`);
- ``timing``: seconds, rates and ratios of timings — each number within ``TIMING_TOLERANCE``
  as a ratio, and only with ``--timings`` (they mean something only on a quiet machine);
- ``slope``: a log-log slope fitted on timings — within ``SLOPE_TOLERANCE``, absolute;
- ``info``: what the run reports about its conditions (load average): never compared,
  rewritten with the timings by ``--update``.
"""

from __future__ import annotations

import itertools
import json
import os
import platform
import re
import shlex
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from docs_parsers import (
    parse_bench,
    parse_circuits,
    parse_gpt_effects,
    parse_gpt_vs_torch,
    parse_induction,
    parse_minilm,
    parse_recall,
    parse_ring_bench,
    parse_ring_demo,
    parse_ring_tcp,
    parse_train_bench,
)

ROOT = Path(__file__).resolve().parents[1]
TIMING_TOLERANCE = 0.30  # a timing may differ from the doc by this fraction (2 shared cores)
SLOPE_TOLERANCE = 0.15  # a time slope: its second decimal is noise on a shared machine
RSS_TOLERANCE = 0.05  # a resident set moves with the pages the OS and Numba happen to load
# ... and with the machine: on this project's two machines (the Intel one the docs were taken
# on, and an AMD EPYC with 1 MiB of L2 a core and AVX-512) the ring's engine started at 37 and
# 43 MB and peaked at 126 and 123 MB: other libraries' pages, not the code
RSS_SPREAD_MB = 10.0
MEMORY_SLOPE_TOLERANCE = 0.05  # a slope fitted on peaks that move by tens of kilobytes
TIMING_KINDS = ("timing", "slope", "info")  # compared only with --timings; --update rewrites


@dataclass
class Cell:
    """One figure: where it sits in the doc, what the run printed, how to compare (module doc).

    A table cell has ``row`` and ``column``; a figure in prose has ``prose``, a pattern whose
    group 1 is the figure, searched after the command (or after ``anchor``, text of the doc)
    up to the next heading."""
    row: str = ""
    column: str = ""
    measured: str = ""
    kind: str = "exact"  # exact | memory | rss | bound | timing | slope | info
    abs_tol: float = 0.0  # an exact figure derived from memory peaks (a slope): this far, stated;
    # for a ``bound``, the bound itself
    prose: str = ""
    anchor: str = ""
    doc: str = ""  # another doc than the run's, quoting the same figure (then ``anchor`` too)

    def where(self, doc: str) -> str:
        return f"{doc} [{self.row} | {self.column}]" if not self.prose else \
            f"{doc} [{self.prose!r}]"


@dataclass
class Output:
    """What a run left: its ``out/`` folder, its stdout and its wall time."""
    out: Path
    stdout: str
    seconds: float


@dataclass
class Run:
    name: str
    doc: str  # relative to the repository
    command: str  # as the doc prints it (continuation lines joined)
    minutes: float  # about, on 2 quiet cores
    cells: Callable[[Output], list[Cell]]  # the measured cells
    # out/NAME → repository path (or paths: the cost view ships a copy of docs' scaling.json)
    artefacts: dict[str, str | tuple[str, ...]] = field(default_factory=dict)
    timings_only: bool = False  # every figure of the run is a timing: run only with --timings
    long: bool = False  # far too slow for a routine check: run only with --long (or by name)
    benchmark: bool = False  # run without this machine's OPENBLAS_* overrides (slower kernels)

    def argv(self) -> tuple[list[str], dict[str, str]]:
        """(argv, environment assignments) of the command: ``qkv`` and ``python`` are this
        interpreter's, ``benchmarks/…`` this checkout's, leading ``NAME=value`` words go to the
        environment."""
        words = shlex.split(self.command)
        env = {}
        while words and re.fullmatch(r"[A-Z_][A-Z0-9_]*=\S*", words[0]):
            key, _, value = words.pop(0).partition("=")
            env[key] = value
        if words[0] == "qkv":
            words = [sys.executable, "-m", "qkv", *words[1:]]
        # the repository's scripts (benchmarks/…) from here: the command runs in a temporary folder
        return [sys.executable if w in ("python", "python3")
                else str(ROOT / w) if w.startswith("benchmarks/") else w for w in words], env


# -- reading the doc ---------------------------------------------------------------------------
def _text(doc: str) -> str:
    return (ROOT / doc).read_text(encoding="utf-8")


def _after(text: str, doc: str, command: str) -> int:
    """Where ``command`` ends in the doc's text (its words may be split by shell continuation
    lines)."""
    gap = r"(?:[ \t]*\\\n[ \t]*|[ \t]+)"
    m = re.search(gap.join(re.escape(w) for w in command.split()) + r"(?![\w/-])", text)
    if not m:
        raise LookupError(f"{doc} does not print the command {command!r}")
    return m.end()


def _table(text: str, at: int) -> tuple[list[str], dict[str, dict[str, tuple[int, int]]]]:
    """The first Markdown table after offset ``at``: (header, {row label: {column: span}}),
    each span the cell's text without its spaces and ``**`` emphasis."""
    lines, pos = [], at
    for line in text[at:].splitlines(keepends=True):
        if line.startswith("|"):
            lines.append((pos, line.rstrip("\n")))
        elif lines:
            break
        pos += len(line)
    if len(lines) < 3:
        raise LookupError("no table after the command")

    def spans(start: int, line: str) -> list[tuple[int, int]]:
        pipes = [i for i, ch in enumerate(line) if ch == "|"]
        out = []
        for a, b in itertools.pairwise(pipes):
            a += 1
            while a < b and line[a] == " ":
                a += 1
            while b > a and line[b - 1] == " ":
                b -= 1
            if line[a:b].startswith("**") and line[a:b].endswith("**") and b - a >= 4:
                a, b = a + 2, b - 2
            out.append((start + a, start + b))
        return out

    header = [text[a:b].replace("**", "") for a, b in spans(*lines[0])]
    rows = {}
    for start, line in lines[2:]:
        cells = spans(start, line)
        label = text[cells[0][0]:cells[0][1]].replace("**", "")
        rows[label] = dict(zip(header, cells, strict=False))
    return header, rows


def doc_table(doc: str, command: str) -> tuple[list[str], dict[str, list[str]]]:
    """(header, {row label: cells}) of the first Markdown table after ``command`` in ``doc``.
    Labels and cells lose their ``**`` emphasis and surrounding spaces."""
    text = _text(doc)
    header, rows = _table(text, _after(text, doc, command))
    return header, {label: [text[a:b].replace("**", "") for a, b in row.values()]
                    for label, row in rows.items()}


def _locate(text: str, doc: str, command: str, cell: Cell) -> tuple[int, int] | str:
    """The span of ``cell``'s figure in the doc's text, or why there is none."""
    if cell.anchor:
        at = text.find(cell.anchor)
        if at < 0:
            return f"{doc}: no text {cell.anchor!r}"
    else:
        at = _after(text, doc, command)
    if cell.prose:
        heading = re.compile(r"^#", re.M).search(text, at)
        m = re.compile(cell.prose).search(text, at, heading.start() if heading else len(text))
        return (m.start(1), m.end(1)) if m else \
            f"{doc}: no figure matching {cell.prose!r} after the command"
    header, rows = _table(text, at)
    if cell.row not in rows:
        return f"{doc}: no row {cell.row!r} in the table under the command"
    if cell.column not in rows[cell.row]:
        return f"{doc}: no column {cell.column!r} in {header}"
    return rows[cell.row][cell.column]


# -- comparing ---------------------------------------------------------------------------------
_QUANTITY = re.compile(r"(\d+) min (\d+) s\b"  # "4 min 21 s": one figure
                       r"|(\d[\d,]*(?:\.\d+)?(?:e[-+]?\d+)?)(?:\s*(min|ms|s)\b)?")


def _quantities(text: str) -> tuple[list[tuple[float, float]], str]:
    """The numbers of a figure, each with one unit of its last printed digit (in seconds for
    ``ms``/``s``/``min`` ones), and the text around them: "0.2614 (qkv / torch 3.17×)" →
    ([(0.2614, 1e-4), (3.17, 0.01)], "# (qkv / torch #×)"); "4 min 21 s" → ([(261, 1)], "#")."""
    numbers = []

    def one(m: re.Match) -> str:
        if m.group(1):
            numbers.append((60.0 * int(m.group(1)) + int(m.group(2)), 1.0))
            return "#"
        digits = m.group(3).replace(",", "")
        scale = {"ms": 1e-3, "min": 60.0}.get(m.group(4), 1.0)
        mantissa, _, exponent = digits.partition("e")
        unit = 10.0 ** (-len(mantissa.partition(".")[2]) + int(exponent or 0))
        numbers.append((float(digits) * scale, unit * scale))
        return "#"
    return numbers, _QUANTITY.sub(one, text)


def _differs(cell: Cell, printed: str) -> str:
    """Why ``printed`` (the doc) and ``cell.measured`` differ beyond the kind's tolerance, or
    ''. Memory, RSS and timings compare every number of the figure ("256 / 256 (45)"), the
    text around them equal. A timing the doc gives as a spread of runs, "6.8–8.5", passes when
    the measurement falls within it, widened by the tolerance."""
    measured = cell.measured
    if cell.kind == "exact":
        if cell.abs_tol:
            a, b = _quantities(printed)[0], _quantities(measured)[0]
            if len(a) == len(b) == 1 and abs(a[0][0] - b[0][0]) <= cell.abs_tol + 1e-9:
                return ""
        return "" if printed == measured else "differs"
    (doc_numbers, doc_text), (numbers, text) = _quantities(printed), _quantities(measured)
    spans, doc_iter = [], iter(doc_numbers)  # (low, high, unit) of each doc figure
    for part in re.findall(r"#–#|#", doc_text):
        (lo, unit), (hi, _) = (next(doc_iter), next(doc_iter)) if part == "#–#" else \
            ((v := next(doc_iter)), v)
        spans.append((lo, hi, unit))
    if doc_text == text:  # the measurement is a spread too ("12.0–13.5"): end by end
        spans = [(d, d, unit) for d, unit in doc_numbers]
    if (doc_text.replace("#–#", "#") != text and doc_text != text) or len(spans) != len(numbers):
        return "differs"
    for (lo, hi, unit), (m, _) in zip(spans, numbers, strict=True):
        off = max(lo - m, m - hi, 0.0)  # how far outside the doc's figure (or spread)
        if cell.kind == "memory" and off > unit + 1e-12:
            return "beyond one unit of the last digit"
        if cell.kind == "rss" and off > max(RSS_TOLERANCE * hi, RSS_SPREAD_MB, unit) + 1e-12:
            return f"beyond ±{RSS_TOLERANCE:.0%} or ±{RSS_SPREAD_MB:g} MB"
        if cell.kind == "slope" and off > SLOPE_TOLERANCE + 1e-9:
            return f"beyond ±{SLOPE_TOLERANCE}"
        if cell.kind == "timing" and off > max(TIMING_TOLERANCE * (hi if m > hi else lo),
                                               cell.abs_tol, 1e-12):
            return f"beyond ±{TIMING_TOLERANCE:.0%}"
    return ""


def compare(run: Run, output: Output, timings: bool) -> list[str]:
    """One line per figure that differs from the doc (empty: all equal)."""
    problems = []
    for cell in run.cells(output):
        if cell.kind == "info" or (cell.kind in TIMING_KINDS and not timings):
            continue
        if cell.kind == "bound":  # within what float32 allows, whatever the doc's digits
            if not float(cell.measured) <= cell.abs_tol:
                problems.append(f"{cell.where(cell.doc or run.doc)}: measured {cell.measured}, "
                                f"above the float32 bound {cell.abs_tol:.1e}")
            continue
        doc = cell.doc or run.doc
        text = _text(doc)
        span = _locate(text, doc, run.command, cell)
        if isinstance(span, str):
            problems.append(span)
            continue
        printed = text[span[0]:span[1]].replace("**", "")
        measured = cell.measured.replace("**", "")  # emphasis kept for --update only
        why = _differs(Cell(measured=measured, kind=cell.kind, abs_tol=cell.abs_tol), printed)
        if why:
            problems.append(f"{cell.where(doc)}: doc {printed}, measured {measured}"
                            + ("" if why == "differs" else f" ({why})"))
    return problems


def machine() -> str:
    """This machine in a few words: its CPU model, cores and L2 (a resident set depends on it)."""
    model, l2 = platform.processor() or platform.machine(), ""
    try:
        info = Path("/proc/cpuinfo").read_text()
        model = re.search(r"^model name\s*:\s*(.+)$", info, re.M).group(1).strip()
        l2 = Path("/sys/devices/system/cpu/cpu0/cache/index2/size").read_text().strip()
    except (OSError, AttributeError):
        pass
    return f"{model}, {os.cpu_count()} cores" + (f", {l2} L2 a core" if l2 else "")


def notes(run: Run, output: Output) -> list[str]:
    """What the check prints beside its verdict: each rounding error measured against its
    bound, and each resident set with the machine it was measured on."""
    lines = []
    for cell in run.cells(output):
        where = cell.where(cell.doc or run.doc)
        if cell.kind == "bound":
            lines.append(f"{where}: measured {cell.measured} ≤ float32 bound {cell.abs_tol:.1e}"
                         if float(cell.measured) <= cell.abs_tol else
                         f"{where}: measured {cell.measured} > float32 bound {cell.abs_tol:.1e}")
        elif cell.kind == "rss":
            lines.append(f"{where}: measured {cell.measured} on {machine()}")
    return lines


def update(run: Run, output: Output) -> list[str]:
    """Rewrite the run's timings (and the ``info`` beside them) in its doc with the measured
    ones; one line per figure changed. Exact figures are never rewritten: a difference there
    is a finding, not noise."""
    edits: dict[str, list] = {}
    lines = []
    for cell in run.cells(output):
        if cell.kind not in TIMING_KINDS:
            continue
        doc = cell.doc or run.doc
        text = _text(doc)
        span = _locate(text, doc, run.command, cell)
        if isinstance(span, str):  # compare() reports it
            continue
        old = text[span[0]:span[1]]
        if old != cell.measured:
            edits.setdefault(doc, []).append((span, cell.measured))
            lines.append(f"{cell.where(doc)}: {old} → {cell.measured}")
    for doc, changes in edits.items():
        text = _text(doc)
        for (a, b), new in sorted(changes, reverse=True):
            text = text[:a] + new + text[b:]
        (ROOT / doc).write_text(text, encoding="utf-8")
    return lines


# -- formatting as the docs print --------------------------------------------------------------
def _ms(seconds: float) -> str:
    """Three significant digits in ms: "0.99 ms", "29.2 ms", "540 ms"."""
    return f"{seconds * 1e3:.3g} ms"


def _s_or_ms(seconds: float) -> str:
    return f"{seconds:.2f} s" if seconds >= 1 else f"{seconds * 1e3:.1f} ms"


def _duration(seconds: float) -> str:
    """"43 s", "4 min 21 s" (a whole command's wall time)."""
    if seconds < 90:
        return f"{seconds:.0f} s"
    return f"{int(seconds // 60)} min {seconds % 60:.0f} s"


def _signed(x: float) -> str:
    return f"{x:+.4f}".replace("-", "−")


def _wall(anchor_command: str) -> Callable[[Output], Cell]:
    """The run's wall time in lesson.md's table of the three claims."""
    pattern = rf"`{re.escape(anchor_command)}`[^|]*\| ([^|\n]+?) \|"
    return lambda o: Cell(prose=pattern, anchor="| claim | command |",
                          measured=_duration(o.seconds), kind="timing")


# -- the runs ----------------------------------------------------------------------------------
SEQ2SEQ = ("qkv train seq2seq --seed 0 --json out/seq2seq.json --plot out/seq2seq.png "
           "--heatmap out/seq2seq-alignment.svg --save-dir out")


def seq2seq_cells(o: Output) -> list[Cell]:
    result = json.loads((o.out / "seq2seq.json").read_text())
    cells = [_wall("qkv train seq2seq")(o)]
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
FARBACK_RULES = {"latest block trade": "rule: sign of the latest block trade",
                 "latest type-0 trade": "rule: sign of the latest type-0 trade",
                 **{f"EMA λ={lam}": f"rule: sign of an EMA of signed size, λ = {lam}"
                    for lam in ("0.9", "0.99", "0.999")}}
FARBACK_PROGRESS_STEPS = (50, 100, 150, 200, 300, 600)  # the rows of lesson.md's reach table


def _chance(lags) -> str:
    """A "chance from" bucket as lesson.md writes it: "16–31", "1", or "never"."""
    return "never" if lags is None else (f"{lags[0]}–{lags[1]}" if lags[1] > lags[0]
                                         else str(lags[0]))


def _farback_rows(header: list[str], entries: dict[str, dict], rows: dict[str, str],
                  params: bool) -> list[Cell]:
    """One row per model or rule of a far-back table: [params,] accuracy per lag bucket, all,
    and the bucket where it falls to chance."""
    cells = []
    first = 2 if params else 1
    for key, row in rows.items():
        entry = entries[key]
        if params:
            cells.append(Cell(row, "params", f"{entry['parameters']:,}"))
        for column, lag in zip(header[first:-2], entry["by_lag"], strict=True):
            cells.append(Cell(row, column, f"{lag['accuracy']:.3f}"))
        cells.append(Cell(row, header[-2], f"{entry['accuracy']:.3f}"))
        cells.append(Cell(row, header[-1], _chance(entry["chance_from"])))
    return cells


def farback_cells(o: Output) -> list[Cell]:
    result = json.loads((o.out / "farback.json").read_text())
    header, _ = doc_table("docs/lesson.md", FARBACK)
    cells = [_wall("qkv train farback")(o)]
    cells += _farback_rows(header, result["models"], FARBACK_ROWS, params=True)
    rules = {name: {**rule, "parameters": 0} for name, rule in result["recency_rules"].items()}
    for cell in _farback_rows(header, rules, FARBACK_RULES, params=True):
        if cell.column != "params":
            cells.append(cell)
    # the reach table: where each model falls to chance at a few training steps
    for step in FARBACK_PROGRESS_STEPS:
        for j, kind in enumerate(FARBACK_ROWS):
            prog = result["models"][kind]["progress"]
            cells.append(Cell(prose=rf"\| step {step} \|(?: [^|]+ \|){{{j}}} ([^|]+?) \|",
                              anchor="| training step |",
                              measured=_chance(prog["chance_from"][prog["steps"].index(step)])))
    att = result["models"]["attention"]
    cells.append(Cell(prose=r"largest weight is on the event in ([\d,]+) of",
                      measured=f"{round(att['top_weight_on_event'] * result['held_out']):,}"))
    cells.append(Cell(prose=r"mean weight there ([\d.]+)",
                      measured=f"{att['mean_weight_on_event']:.2f}"))
    for kind, row in FARBACK_ROWS.items():
        run = result["models"][kind]
        cells.append(Cell(prose=rf"\| {re.escape(row)} \| ([\d.]+) s \|",
                          anchor="| cost (the run above) |",
                          measured=f"{run['train_seconds']:.0f}", kind="timing"))
        cells.append(Cell(prose=rf"\| {re.escape(row)} \| [\d.]+ s \| ([^|]+?) \|",
                          anchor="| cost (the run above) |", measured=f"{run['parameters']:,}"))
        cells.append(Cell(prose=rf"\| {re.escape(row)} \| [\d.]+ s \|(?: [^|]+ \|){{2}} "
                                r"([^|]+?) \|",
                          anchor="| cost (the run above) |", measured=_reach(run["progress"])))
    return cells


def _reach(progress: dict) -> str:
    """The first recorded training step from which no lag bucket was at chance ("never")."""
    steps = [s for i, s in enumerate(progress["steps"])
             if all(c is None for c in progress["chance_from"][i:])]
    return str(steps[0]) if steps else "never"


FARBACK_GRU = ("qkv train farback --seed 0 --gru-gate-bias 3 --json out/farback-gru-tuned.json "
               "--plot out/farback-gru-tuned.png")


def farback_gru_cells(o: Output) -> list[Cell]:
    """lesson.md's "A tuned recurrent model" table: accuracy by lag, in all, where it falls to
    chance, and the tuned GRU's cost."""
    result = json.loads((o.out / "farback-gru-tuned.json").read_text())
    header, _ = doc_table("docs/lesson.md", FARBACK_GRU)
    rows = {"attention": "attention", "gru": "GRU, update-gate bias +3",
            "recency": "recency (learned decay)"}
    cells = _farback_rows(header, result["models"], rows, params=False)
    gru = result["models"]["gru"]
    cells.append(Cell(prose=r"the tuned GRU: ([\d,]+) parameters",
                      measured=f"{gru['parameters']:,}"))
    cells.append(Cell(prose=r"at no lag at chance from step (\w+) on",
                      measured=_reach(gru["progress"])))
    cells.append(Cell(prose=r"trained in ([\d.]+) s", measured=f"{gru['train_seconds']:.0f}",
                      kind="timing"))
    return cells


FARBACK_LAG16 = "qkv train farback --seed 0 --min-lag 16 --json out/farback-lag16.json"


def farback_lag16_cells(o: Output) -> list[Cell]:
    """lesson.md's table of the models trained on far events only (lags 16–256)."""
    result = json.loads((o.out / "farback-lag16.json").read_text())
    header, _ = doc_table("docs/lesson.md", FARBACK_LAG16)
    cells = _farback_rows(header, result["models"], FARBACK_ROWS, params=False)
    for kind, row in (("recency", "recency"), ("gru", "GRU")):
        cells.append(Cell(prose=rf"final\s+training\s+loss\s+of\s+the\s+{row}\s+([\d.]+)",
                          measured=f"{result['models'][kind]['final_loss']:.3f}"))
    return cells


FARBACK_SSM_PROGRESS_STEPS = (50, 100, 200, 300, 400, 450, 600)
FARBACK_SSM = ("qkv train farback --seed 0 --kinds ssm --json out/farback-ssm.json "
               "--plot out/farback-ssm.png --save-dir out")


def farback_ssm_cells(o: Output) -> list[Cell]:
    """lesson.md §2's "A selective state-space model on the same task": its row of accuracy by
    lag, its state's size, its reach during training and its training time."""
    result = json.loads((o.out / "farback-ssm.json").read_text())
    header, _ = doc_table("docs/lesson.md", FARBACK_SSM)
    ssm = result["models"]["ssm"]
    cells = _farback_rows(header, result["models"],
                          {"ssm": "selective state-space model (Mamba block)"}, params=True)
    cells.append(Cell(prose=r"a selective state of ([\d,]+) numbers per series",
                      measured=f"{ssm['d_model'] * ssm['n_state']:,}"))
    cells.append(Cell(prose=r"at no lag at chance from step (\w+) on",
                      measured=_reach(ssm["progress"])))
    prog = ssm["progress"]
    for step in FARBACK_SSM_PROGRESS_STEPS:  # its reach table
        cells.append(Cell(prose=rf"\| step {step} \| ([^|]+?) \|",
                          anchor="| training step | state-space model |",
                          measured=_chance(prog["chance_from"][prog["steps"].index(step)])))
    cells.append(Cell(prose=r"in ([\d.]+) s of training", measured=f"{ssm['train_seconds']:.0f}",
                      kind="timing"))
    return cells


FARBACK_RNN = ("qkv train farback --seed 0 --kinds rnn --json out/farback-rnn.json "
               "--plot out/farback-rnn.png --save-dir out")


def farback_rnn_cells(o: Output) -> list[Cell]:
    """lesson.md §2's "The recurrent chain the lesson means: a plain RNN": its row of accuracy
    by lag, its units, how far it fades, its last bucket's interval and its training time."""
    result = json.loads((o.out / "farback-rnn.json").read_text())
    header, _ = doc_table("docs/lesson.md", FARBACK_RNN)
    rnn = result["models"]["rnn"]
    near, far = rnn["by_lag"][0], rnn["by_lag"][-1]
    cells = _farback_rows(header, result["models"], {"rnn": "plain RNN (tanh, no gates)"},
                          params=True)
    cells += [Cell(prose=r"With ([\d,]+) units its parameters", measured=str(rnn["d_model"])),
              Cell(prose=r"its parameters \(([\d,]+)\) are the GRU's budget",
                   measured=f"{rnn['parameters']:,}"),
              Cell(prose=r"right at lag 1 \(([\d.]+)\)", measured=f"{near['accuracy']:.3f}"),
              Cell(prose=r"lower with every doubling of the lag, to\s+([\d.]+)",
                   measured=f"{far['accuracy']:.3f}"),
              Cell(prose=r"its last bucket, ([\d.]+)–", measured=f"{far['interval'][0]:.3f}"),
              Cell(prose=r"its last bucket, [\d.]+–([\d.]+)",
                   measured=f"{far['interval'][1]:.3f}"),
              Cell(prose=r"the plain RNN's ([\d.]+) s, a busy machine",
                   measured=f"{rnn['train_seconds']:.0f}", kind="timing")]
    return cells


FROZEN = "python -m qkv.tasks.frozen_projections --json out/frozen-projections.json"
FROZEN_COLUMNS = ("error (MSE)", "right (of 63)", "largest weight on the neighbour",
                  "on itself", "mean weight on the neighbour")


def _three_digits(x: float) -> str:
    """An error as view 1 and lesson.md print it: 3 decimals from 0.1 up, else 3 significant
    digits (0.0147, 0.000512)."""
    return f"{x:.3f}" if x >= 0.1 else f"{x:.3g}"


def frozen_cells(o: Output) -> list[Cell]:
    """lesson.md §5's table: view 1's toy with the W's all learned, one frozen, one alone."""
    result = json.loads((o.out / "frozen-projections.json").read_text())
    cells = []
    for run in result["runs"]:
        values = (_three_digits(run["mse"]), str(run["right"]), str(run["top_on_neighbour"]),
                  str(run["top_on_self"]), f"{run['weight_on_neighbour']:.3f}")
        cells += [Cell(run["label"], column, value)
                  for column, value in zip(FROZEN_COLUMNS, values, strict=True)]
    return cells


MQAR = "qkv train mqar --seed 0 --json out/mqar.json --plot out/mqar.png --save-dir out"
MQAR_COLUMNS = {"attention": "attention", "ssm-small": "state-space, small state",
                "ssm-large": "state-space, large state"}


def mqar_cells(o: Output) -> list[Cell]:
    """lesson.md §4's table: parameters, state size and accuracy per (length, pairs) cell."""
    result = json.loads((o.out / "mqar.json").read_text())
    cells = [_wall("qkv train mqar")(o)]
    for kind, column in MQAR_COLUMNS.items():
        run = result["models"][kind]
        cells.append(Cell("parameters (the two mixers)", column,
                          f"{run['parameters']:,} ({run['mixer_parameters']:,})"))
        state = run["state_floats_per_layer"]
        cells.append(Cell("state per layer", column, "every token" if state is None else
                          f"{result['config']['d_model']} × {run['n_state']} = {state:,}"))
        for r in run["cells"]:
            cells.append(Cell(f"{r['length']}, {r['pairs']}", column, f"{r['accuracy']:.3f}"))
    return cells


MQAR_1600 = ("qkv train mqar --seed 0 --steps 1600 --generator uniform --json "
             "out/mqar-1600.json --plot out/mqar-1600.png")


def mqar_1600_cells(o: Output) -> list[Cell]:
    """lesson.md §4's shorter run: the three models after a third of the steps."""
    models = json.loads((o.out / "mqar-1600.json").read_text())["models"]
    return [Cell(f"{r['length']}, {r['pairs']}", f"{column}, 1,600 steps",
                 f"{r['accuracy']:.3f}")
            for kind, column in MQAR_COLUMNS.items() for r in models[kind]["cells"]]


MQAR_UNIFORM = ("qkv train mqar --seed 0 --generator uniform --json out/mqar-uniform.json "
                "--plot out/mqar-uniform.png")


def mqar_uniform_cells(o: Output) -> list[Cell]:
    """lesson.md §4's run on the first generator (the shipped run before Zoology's)."""
    models = json.loads((o.out / "mqar-uniform.json").read_text())["models"]
    return [Cell(f"{r['length']}, {r['pairs']}", f"{column}, first generator",
                 f"{r['accuracy']:.3f}")
            for kind, column in MQAR_COLUMNS.items() for r in models[kind]["cells"]]


MQAR_SELECTION = "python -m qkv.tasks.mqar_selection --json out/mqar-selection.json"
MQAR_SELECTION_COLUMNS = {"kept_pairs": ("kept per token, reading the pairs", "{:.3f}"),
                          "kept_after": ("kept per token, after the pairs", "{:.3f}"),
                          "half_life_pairs": ("half-life, reading the pairs", "{:.1f}"),
                          "half_life_after": ("half-life, after the pairs", "{:.1f}")}


def mqar_selection_cells(o: Output) -> list[Cell]:
    """lesson.md §4's "what selective selects" table: the shipped state-space models' share of
    the state kept per token, per layer, reading the pairs and after them."""
    result = json.loads((o.out / "mqar-selection.json").read_text())
    return [Cell(f"N = {r['n_state']}, layer {r['layer']}", column, fmt.format(r[key]))
            for r in result["rows"] for key, (column, fmt) in MQAR_SELECTION_COLUMNS.items()]


MQAR_COST = ("python -m qkv.tasks.scaling --methods 'qkv causal,selective scan' "
             "--json out/mqar-cost.json --plot out/mqar-cost.png")


def mqar_cost_cells(o: Output) -> list[Cell]:
    """lesson.md §4's cost table: time and peak memory per sequence, and their slopes."""
    result = json.loads((o.out / "mqar-cost.json").read_text())
    cells = []
    for method in ("qkv causal", "selective scan"):
        series = result["methods"][method]
        points = {p["n"]: p for p in series["points"]}
        cells += [Cell(method, "time n=1,024", _point_time(points, 1024), kind="timing"),
                  Cell(method, "time n=16,384", _point_time(points, 16384), kind="timing"),
                  Cell(method, "time slope", f"{series['time_slope']:.2f}", kind="slope"),
                  Cell(method, "memory n=1,024", _mib(points, 1024), kind="memory"),
                  Cell(method, "memory n=16,384", _mib(points, 16384), kind="memory"),
                  Cell(method, "memory slope", f"{series['memory_slope']:.2f}",
                       abs_tol=MEMORY_SLOPE_TOLERANCE)]
    return cells


RECALL = "qkv train recall --seed 0 --no-progress"


def recall_cells(o: Output) -> list[Cell]:
    header, _ = doc_table("docs/training.md", RECALL)
    result = parse_recall(o.stdout)
    return [*(Cell("held-out accuracy", column, result["held"].get(int(column), "(not printed)"))
              for column in header[1:] if column.isdigit()),
            Cell(prose=r"1,000\s+steps in ([\d.]+ s) of training time",
                 measured=f"{result['seconds']:.1f} s", kind="timing")]


SCALING_ROWS = {"naive": "naive", "qkv dense": "qkv dense", "qkv causal": "qkv causal",
                "qkv window": "qkv window", "ssm scan": "ssm scan"}


def _mib(points: dict, n: int) -> str:
    return f"{points[n]['peak_bytes'] / 2**20:.1f} MiB" if n in points else "—"


def _point_time(points: dict, n: int) -> str:
    return _s_or_ms(points[n]["seconds"]) if n in points else "—"


SCALING_MEMORY = "python -m qkv.tasks.scaling --memory-only --json out/scaling-memory.json"


def scaling_memory_cells(o: Output) -> list[Cell]:
    result = json.loads((o.out / "scaling-memory.json").read_text())
    cells = []
    for method, row in SCALING_ROWS.items():
        series = result["methods"][method]
        points = {p["n"]: p for p in series["points"]}
        slope = series["memory_slope"]
        cells += [Cell(row, "peak memory n=8,192", _mib(points, 8192), kind="memory"),
                  Cell(row, "n=65,536", _mib(points, 65536), kind="memory"),
                  # fitted on those peaks, so it moves with them (window: 0.62–0.66 seen)
                  Cell(row, "memory slope", "—" if slope is None else f"{slope:.2f}",
                       abs_tol=MEMORY_SLOPE_TOLERANCE)]
        if method == "qkv dense":  # the README quotes one point of the curve
            cells.append(Cell(doc="README.md", anchor="Nq = Nk = 32768, D = 64",
                              prose=r"the peak extra memory is ([\d.]+ MiB)",
                              measured=_mib(points, 32768), kind="memory"))
    return cells


SCALING = "python -m qkv.tasks.scaling --json out/scaling.json --plot out/scaling.png"


def scaling_time_cells(o: Output) -> list[Cell]:
    result = json.loads((o.out / "scaling.json").read_text())
    cells = [_wall("python -m qkv.tasks.scaling")(o)]
    for method, row in SCALING_ROWS.items():
        series = result["methods"][method]
        points = {p["n"]: p for p in series["points"]}
        slope = series["time_slope"]
        cells += [Cell(row, "time n=1,024", _point_time(points, 1024), kind="timing"),
                  Cell(row, "n=8,192", _point_time(points, 8192), kind="timing"),
                  Cell(row, "n=65,536", _point_time(points, 65536), kind="timing"),
                  Cell(row, "time slope", "—" if slope is None else f"{slope:.2f}",
                       kind="slope")]
    at_2048 = {m: {p["n"]: p for p in result["methods"][m]["points"]}.get(2048)
               for m in ("qkv dense", "ssm scan")}
    cells += [Cell(prose=pattern, kind="timing",
                   measured=f"{point['seconds'] * 1e3:.0f} ms" if point else "(not reached)")
              for pattern, point in ((r"\((\d+ ms) vs \d+ ms at n = 2,048", at_2048["qkv dense"]),
                                     (r"vs (\d+ ms) at n = 2,048", at_2048["ssm scan"]))]
    return cells


TRAIN_STEP = "python benchmarks/train.py --part step"


def train_step_cells(o: Output) -> list[Cell]:
    ours, theirs, ratio = parse_train_bench(o.stdout)["step"]
    return [Cell(prose=r"takes ([\d.]+×) torch's", measured=f"{ratio:.2f}×", kind="timing"),
            Cell(prose=r"\(([\d.]+ ms) against", measured=_ms(ours), kind="timing"),
            Cell(prose=r"against ([\d.]+ ms);", measured=_ms(theirs), kind="timing")]


DECODE = "python benchmarks/train.py --part decode"


def decode_cells(o: Output) -> list[Cell]:
    cells = []
    for n, (cached, full, ratio) in parse_train_bench(o.stdout)["decode"].items():
        cells += [Cell(str(n), "cached step", _ms(cached), kind="timing"),
                  Cell(str(n), "full causal forward", _ms(full), kind="timing"),
                  Cell(str(n), "ratio", f"{ratio:.0f}×", kind="timing")]
    return cells


TILE_BREAKDOWN = "env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python benchmarks/tile_breakdown.py"


def tile_breakdown_cells(o: Output) -> list[Cell]:
    """The first column ("run 1") of the table under the command; the second is a later run."""
    found = {key: re.search(pattern, o.stdout) for key, pattern in {
        "score": r"score GEMM\s+[\d.]+ ms\s+([\d.]+) GFLOP/s in the loop,\s+([\d.]+) alone",
        "pv": r"P·V GEMM\s+[\d.]+ ms\s+([\d.]+) GFLOP/s in the loop,\s+([\d.]+) alone",
        "step": r"tile step\s+[\d.]+ ms\s+([\d.]+) ns a score \((\d+)% of the loop\)",
        "qkv": r"qkv.attention, one worker:\s+([\d.]+) ms",
        "torch": r"torch SDPA, one thread:\s+([\d.]+) ms.*= ([\d.]+)\)"}.items()}
    missing = [key for key, m in found.items() if m is None]
    if missing:
        raise ValueError(f"tile_breakdown.py printed no {missing}: {o.stdout[-500:]}")
    g = {key: m.groups() for key, m in found.items()}
    column = "run 1"
    return [
        Cell("score GEMM in the loop / the same tile alone", column,
             f"{g['score'][0]} / {g['score'][1]} GFLOP/s", kind="timing"),
        Cell("P·V GEMM in the loop / alone", column, f"{g['pv'][0]} / {g['pv'][1]} GFLOP/s",
             kind="timing"),
        Cell("tile step", column, f"{g['step'][0]} ns a score, {g['step'][1]}% of the loop",
             kind="timing"),
        Cell("`qkv.attention` (one worker) / torch SDPA (one thread)", column,
             f"{g['qkv'][0]} / {g['torch'][0]} ms = {g['torch'][1]}×", kind="timing")]


MINILM = "python benchmarks/minilm.py"
MINILM_1 = "python benchmarks/minilm.py --torch-threads 1"


def minilm_cells(row: str) -> Callable[[Output], list[Cell]]:
    return lambda o: [Cell(row, "qkv / sentence-transformers", f"{parse_minilm(o.stdout):.2f}",
                           kind="timing")]


RING = "python benchmarks/ring.py --n 65536 --ranks 1,2,4 --layouts zigzag,contiguous"


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'s' if n != 1 else ''}"


def ring_cells(o: Output) -> list[Cell]:
    cells = []
    for (layout, ranks), r in parse_ring_bench(o.stdout).items():
        row = (f"single-process engine, {_plural(r['threads'], 'thread')}" if layout == "engine"
               else f"ring {layout}, {_plural(ranks, 'rank')} × {_plural(r['threads'], 'thread')}")
        peaks = " / ".join(f"{p:.0f}" for p in r["peaks"])
        cells += [Cell(row, "time", f"{r['seconds']:.2f} s", kind="timing"),
                  Cell(row, "GFLOP/s", f"{r['gflops']:.0f}", kind="timing"),
                  Cell(row, "peak MB per rank (start)", f"{peaks} ({r['start']:.0f})",
                       kind="rss")]
        if r["check"]:
            err = r["check"][0]
            cells.append(Cell(row, "check vs engine", "0.0" if err == 0 else f"{err:.1e}",
                              kind="bound", abs_tol=r["check"][1]))
    return cells


RING_1M = ("nice mpirun -n 4 --oversubscribe --allow-run-as-root -x OMP_NUM_THREADS=1 "
           "python -m qkv.distributed --n 1048576 --heads 1 --dim 64 --mask causal --json")


def ring_1m_cells(o: Output) -> list[Cell]:
    r = parse_ring_demo(o.stdout)
    flops = 4 * r["n"] ** 2 * r["dim"] * r["heads"] / 2  # causal
    per = r["per_rank"]
    return [
        Cell(prose=r"\*\*([\d.]+ s)\*\* \(", measured=f"{r['forward_s']:.1f} s", kind="timing"),
        Cell(prose=r"\*\* \(([\d.]+ min);", measured=f"{r['forward_s'] / 60:.1f} min",
             kind="timing"),
        Cell(prose=r"min; (\d+) GFLOP/s", measured=f"{flops / r['forward_s'] / 1e9:.0f}",
             kind="timing"),
        Cell(prose=r"GFLOP/s, counting 4·N²·D/2 for causal; (\d+ min \d+ s) for the",
             measured=_duration(o.seconds), kind="timing"),
        Cell(prose=r"computed its \d shards \(zigzag: none skipped\) for ([\d–]+ s)",
             measured=f"{min(p['compute_s'] for p in per):.0f}–"
                      f"{max(p['compute_s'] for p in per):.0f} s", kind="timing"),
        Cell(prose=r"waited at most ([\d.]+ ms) for", kind="info",
             measured=f"{max(p['wait_s'] for p in per) * 1e3:.0f} ms"),
        Cell(prose=r"computed its (\d) shards", measured=str(max(p["computed"] for p in per))),
        Cell(prose=r"\*\*peak (\d+ MB) per rank\*\*", kind="rss",
             measured=f"{max(p['peak_mb'] for p in per):.0f} MB"),
        Cell(prose=r"\(start\s+(\d+ MB);", kind="rss",
             measured=f"{max(p['start_mb'] for p in per):.0f} MB"),
        Cell(prose=r"(\d+) rows checked", measured=str(r["check_rows"])),
        Cell(prose=r"max error\s+([\d.e+-]+) \(bound", measured=f"{r['check_err']:.1e}"),
        Cell(prose=r"max error\s+[\d.e+-]+ \(bound ([\d.e+-]+)\)",
             measured=f"{r['check_bound']:.1e}"),
    ]


QKV_RING = "qkv ring --ranks 4"


def qkv_ring_cells(o: Output) -> list[Cell]:
    parse_ring_demo(o.stdout)  # it ran and printed its summary
    return [Cell(prose=r"~(\d+ s) on 2 cores", measured=f"{o.seconds:.0f} s", kind="timing")]


RING_TCP_1G = "python benchmarks/ring_tcp.py --rate 1gbit --n 1024,2048,4096,8192"
RING_TCP_100M = ("python benchmarks/ring_tcp.py --rate 100mbit "
                 "--n 4096,8192,12288,16384,24576,32768,40960,49152")
HIDDEN_MS = 0.5  # a wait below this is a hidden transfer: its size is noise, not a figure


def ring_tcp_1g_cells(o: Output) -> list[Cell]:
    cells = []
    for n, r in parse_ring_tcp(o.stdout).items():
        cells += [Cell(str(n), "T (ms)", f"{r['t']:.2f}", kind="timing"),
                  Cell(str(n), "C (ms)", f"{r['c_ms']:.2f}", kind="timing"),
                  Cell(str(n), "W (ms)", f"{r['w']:.2f}", kind="timing", abs_tol=HIDDEN_MS)]
    return cells


def ring_tcp_100m_cells(o: Output) -> list[Cell]:
    cells = []
    for n, r in parse_ring_tcp(o.stdout).items():
        cells += [Cell(str(n), "T (ms)", f"{r['t']:.0f}", kind="timing"),
                  Cell(str(n), "C (ms)", f"{r['c_ms']:.0f}", kind="timing"),
                  Cell(str(n), "W (ms)", f"{r['w']:.2f}" if r["w"] < 1 else f"{r['w']:.0f}",
                       kind="timing", abs_tol=HIDDEN_MS),
                  Cell(str(n), "max(0, T − C)", f"{r['gap']:.0f}", kind="timing",
                       abs_tol=HIDDEN_MS),
                  Cell(str(n), "c* = 4F/B", f"{r['c_star']:,}", kind="timing")]
    rows = parse_ring_tcp(o.stdout).values()
    for pattern, key, digits in ((r"measured B\s+\(([\d.–]+) MB/s", "b", 1),
                                 (r"and F \(([\d–]+) GFLOP/s", "f", 0)):
        low, high = min(r[key] for r in rows), max(r[key] for r in rows)
        cells.append(Cell(prose=pattern, kind="timing",
                          measured=f"{low:.{digits}f}–{high:.{digits}f}"))
    return cells


BENCH = "qkv bench --json out/bench.json"
BENCH_LOAD = "qkv bench --load --json out/bench-load.json"


def bench_cells(o: Output) -> list[Cell]:
    results = parse_bench(o.out / "bench.json")
    run = results.pop("_run")
    first = run.get("first_call_s") or {}  # not measured by --only / --quick

    def took(key: str, digits: int) -> str:
        return f"{first[key]:.{digits}f} s" if key in first else "(not measured)"
    cells = [Cell(prose=r"`import qkv` ([\d.]+ s)", kind="timing",
                  measured=took("import qkv (cold JIT)", 2)),
             Cell(prose=r"first\s+attention call ([\d.]+ s) with an empty", kind="timing",
                  measured=took("first attention (cold JIT)", 2)),
             Cell(prose=r"\(the compile, once per install\), ([\d.]+ s) with", kind="timing",
                  measured=took("first attention (JIT cache)", 2)),
             Cell(prose=r"and ([\d.]+ s) with the\s+prebuilt step", kind="timing",
                  measured=took("first attention (prebuilt)", 2)),
             Cell(prose=r"2048³ GEMM measured (\d+) GFLOP/s in the quiet run", kind="info",
                  measured=f"{run['square_gemm_gflops']:.0f}")]
    for name, r in results.items():
        s, peak = r["seconds"], r["peak_mib"]
        cells += [Cell(name, "qkv/torch", f"{s['qkv'] / s['torch']:.2f}", kind="timing"),
                  Cell(name, "GFLOP/s", f"{r['gflops']:.0f}", kind="timing"),
                  Cell(name, "of GEMM / of square",
                       f"{r['gemm_fraction']:.2f} / {r['square_fraction']:.2f}", kind="timing"),
                  # the pairs the kernel's tiles computed and the mask's minimum: counted, exact
                  Cell(name, "work / min", f"{r['work_done']:.3f} / {r['work_min']:.3f}"),
                  Cell(name, "cores", f"{r['cores_busy']:.2f}", kind="timing"),
                  Cell(name, "qkv MiB", f"{peak['qkv']:.0f}", kind="memory"),
                  # torch's RSS above a baseline depends on what its allocator kept from the
                  # cases before (forward+backward: 24 and 0 MiB in one run, 52 and 56 in the
                  # next): shown and refreshed by --update, not a figure to check
                  Cell(name, "torch MiB", f"{peak['torch']:.0f}", kind="info")]
    return cells


def bench_load_cells(o: Output) -> list[Cell]:
    results = parse_bench(o.out / "bench-load.json")
    run = results.pop("_run")
    return [Cell(prose=r"and (\d+) under `--load`", kind="info",
                 measured=f"{run['square_gemm_gflops']:.0f}"),
            *(Cell(name, "under load", f"{r['seconds']['qkv'] / r['seconds']['torch']:.2f}",
                   kind="timing") for name, r in results.items())]


GPT = "OMP_WAIT_POLICY=PASSIVE python benchmarks/gpt_vs_torch.py --json out/gpt-vs-torch.json"
GPT_300 = "OMP_WAIT_POLICY=PASSIVE python benchmarks/gpt_vs_torch.py --steps 300"


def gpt_cells(o: Output) -> list[Cell]:
    r = parse_gpt_vs_torch(o.stdout)
    cells = [Cell(prose=r"load average ([\d.]+) at the start", measured=r["load"][0],
                  kind="info"),
             Cell(prose=r"load average [\d.]+ at the start, ([\d.]+) at the end",
                  measured=r["load"][1], kind="info")]
    for step, (lq, lt, sq, st) in r["curve"].items():
        row = str(step)
        cells += [Cell(row, "qkv validation loss (240 windows)", lq), Cell(row, "torch", lt),
                  Cell(row, "qkv s/step so far", sq, kind="timing"),
                  Cell(row, "torch s/step so far", st, kind="timing")]
    (vq, vt, diff), (sq, st, ratio) = r["val"], r["seconds"]
    row = r"\| validation loss, all [\d,]+ validation characters \| "
    cells += [Cell(prose=row + r"\*\*([\d.]+)\*\*", measured=vq),
              Cell(prose=row + r"[^|]+ \| ([^|\n]+?) \|",
                   measured=f"**{vt}** (difference {_signed(float(diff))})"),
              Cell(prose=r"\| seconds per training step \| ([^|\n]+?) \|", measured=sq,
                   kind="timing"),
              Cell(prose=r"\| seconds per training step \| [^|]+ \| ([^|\n]+?) \|",
                   measured=f"{st} (qkv / torch {ratio}×)", kind="timing")]
    return cells


def gpt_300_cells(o: Output) -> list[Cell]:
    r = parse_gpt_vs_torch(o.stdout)
    (vq, vt, diff), (sq, st, ratio) = r["val"], r["seconds"]
    return [Cell(prose=r"load average at\s+([\d.]+) at its start", measured=r["load"][0],
                 kind="info"),
            Cell(prose=r"at its start and ([\d.]+) at its end", measured=r["load"][1],
                 kind="info"),
            Cell(prose=r"gave validation loss ([\d.]+) for both",
                 measured=vq if vq == vt else f"{vq} (qkv) and {vt} (torch)"),
            Cell(prose=r"for both \(difference ([−\d.]+)\)", measured=_signed(float(diff))),
            Cell(prose=r"and ([\d.]+) against [\d.]+\s+seconds per step", measured=sq,
                 kind="timing"),
            Cell(prose=r"against ([\d.]+)\s+seconds per step", measured=st, kind="timing"),
            Cell(prose=r"\*\*qkv / torch ([\d.]+×)\*\*", measured=f"{ratio}×", kind="timing")]


GPT_EFFECTS = 'qkv look --gpt "I will not" --ablate 0.1 --effects'
INDUCTION = ("qkv train induction --seed 0 --checkpoint out/induction.safetensors "
             "--save-weights out/induction-shakespeare.safetensors")


def gpt_effects_cells(o: Output) -> list[Cell]:
    r = parse_gpt_effects(o.stdout)
    before, after = r["switched"]
    cells = [Cell(prose=r"but lowers it from\s+\*\*([\d.]+%) →", measured=before),
             Cell(prose=r"but lowers it from\s+\*\*[\d.]+% → ([\d.]+%)\*\*", measured=after)]
    for head, (change, direct, total) in r["heads"].items():
        cells += [Cell(head, "change (points)", change), Cell(head, "direct push", direct),
                  Cell(head, "total effect", total)]
    return cells


CIRCUITS = "python -m qkv.tasks.circuits --sequences 1000"


def circuits_cells(o: Output) -> list[Cell]:
    """The induction head's circuit table (docs/gpt.md prints the change with a true minus)."""
    r = parse_circuits(o.stdout)
    columns = (f"{r['head']} induction", "second-copy score", "second-copy loss (nats)",
               "change")
    return [Cell(label, column, value.replace("-", "−")) for label, values in r["rows"].items()
            for column, value in zip(columns, values, strict=True) if value]


HEAD_SIZES = 'python -c "from qkv.explore.head_sizes import report; print(report())"'


def head_sizes_cells(o: Output) -> list[Cell]:
    """d_k = d_model / heads, per model, as docs/gpt.md's table prints it."""
    cells = []
    for m in re.finditer(r"^(.+?)\s+(\d+)\s+(\d+)\s+(\d+)\s+([\d,]+)\s+([\d,]+|–)$",
                         o.stdout, re.M):
        cells += [Cell(m.group(1), column, value) for column, value in zip(
            ("layers", "heads", "d_k", "d_model", "KV cache per token"), m.group(2, 3, 4, 5, 6),
            strict=True)]
    if not cells:
        raise ValueError(f"head sizes: no rows in its output:\n{o.stdout[-2000:]}")
    return cells


INDUCTION_STEPS = (250, 500, 750, 1000, 1250, 1500, 1600, 1700, 1800, 2000, 2500, 3000)


def induction_cells(o: Output) -> list[Cell]:
    r = parse_induction(o.stdout)
    cells = [Cell(prose=r"first reached \*\*([\d.]+) at step", measured=r["first"][0]),
             Cell(prose=r"first reached \*\*[\d.]+ at step (\d+)\*\*", measured=r["first"][1])]
    rows = ("held-out loss", "loss on the repeats", "induction score", "previous-token score")
    for step, (*exact, seconds) in r["curve"].items():
        if step not in INDUCTION_STEPS:  # the doc's table shows these evaluations of 60
            continue
        cells += [Cell(str(step), column, value) for column, value in zip(rows, exact, strict=True)]
        cells.append(Cell(str(step), "seconds", seconds, kind="timing"))
    return cells


GPT_REPEATS = ("qkv train induction --model gpt --steps 16000 --seed 0 --checkpoint "
               "out/gpt-repeats-run.safetensors --save-weights out/gpt-repeats.safetensors")
GPT_TEXT = ("qkv train induction --model gpt --data text --steps 10000 --seed 0 --checkpoint "
            "out/gpt-text-run.safetensors --save-weights out/gpt-text-long.safetensors")
GPT_TEXT_256 = ("qkv train induction --model gpt --data text --context 256 --batch 3 --steps "
                "10000 --seed 0 --checkpoint out/gpt-text-256-run.safetensors --save-weights "
                "out/gpt-text-256.safetensors")
OWN_HEADS = "python -m qkv.tasks.own_heads"
GPT_RUN_COLUMNS = ("loss on plain text", "loss on the repeats", "induction score",
                   "previous-token score")


def gpt_run_cells(command: str) -> Callable[[Output], list[Cell]]:
    """A GPT-recipe run of ``qkv train induction``: the evaluations the doc's table under
    ``command`` shows (every one printed is measured; the table picks some), and where the
    induction score first reached the threshold, if it did."""
    def cells(o: Output) -> list[Cell]:
        r = parse_induction(o.stdout)
        shown = set(doc_table("docs/gpt.md", command)[1])
        out = []
        for step, (_, repeat, score, previous, seconds) in r["curve"].items():
            if f"{step:,}" not in shown:
                continue
            values = (r["text"][step], repeat, score, previous)
            out += [Cell(f"{step:,}", column, value)
                    for column, value in zip(GPT_RUN_COLUMNS, values, strict=True)]
            out.append(Cell(f"{step:,}", "seconds", seconds, kind="timing"))
        if r["first"] is not None:
            out.append(Cell(prose=r"first reached \*\*([\d.]+) at step ([\d,]+)\*\*",
                            measured=r["first"][0]))
        return out
    return cells


def own_heads_cells(o: Output) -> list[Cell]:
    """docs/gpt.md's three tables of the GPT's own heads (each under its header line)."""
    from docs_parsers import parse_own_heads

    r = parse_own_heads(o.stdout)
    runs_at = "| run | steps | training characters | first induction head (≥ 0.3) |"
    copy_at = "| windows | the last 2 characters occurred before |"
    worth_at = "| model | heads switched off | induction heads |"
    cells = [Cell(name, column, value, anchor=runs_at) for name, values in r["runs"].items()
             for column, value in zip(("steps", "training characters",
                                       "first induction head (≥ 0.3)", "best score"), values,
                                      strict=True)]
    cells += [Cell(what, column, value, anchor=copy_at) for what, values in r["copy"].items()
              for column, value in zip(("the last 2 characters occurred before",
                                        "copying what followed is right", "news",
                                        "statistics right"), values, strict=True)]
    cells += [Cell(name, column, value, anchor=worth_at) for name, values in r["worth"].items()
              for column, value in zip(("heads switched off", "induction heads", "plain text",
                                        "news positions", "copy wrong", "repeated characters"),
                                       values, strict=True)]
    return cells


RUNS = [
    Run("recall", "docs/training.md", RECALL, 0.4, recall_cells),
    Run("scaling-memory", "docs/lesson.md", SCALING_MEMORY, 0.5, scaling_memory_cells),
    Run("farback", "docs/lesson.md", FARBACK, 1.0, farback_cells,
        {"farback.json": "docs/figures/farback.json", "farback.png": "docs/figures/farback.png",
         "farback-weights.png": "docs/figures/farback-weights.png",
         "farback-weights.html": "docs/figures/farback-weights.html",
         **{f"farback-{kind}.safetensors": f"src/qkv/tasks/data/farback-{kind}.safetensors"
            for kind in ("attention", "recency", "gru")}}),
    Run("seq2seq", "docs/lesson.md", SEQ2SEQ, 4.5, seq2seq_cells,
        {"seq2seq.json": "docs/figures/seq2seq.json", "seq2seq.png": "docs/figures/seq2seq.png",
         "seq2seq-alignment.svg": "docs/figures/seq2seq-alignment.svg",
         "seq2seq-fixed.safetensors": "src/qkv/tasks/data/seq2seq-fixed.safetensors",
         "seq2seq-attention.safetensors": "src/qkv/tasks/data/seq2seq-attention.safetensors"}),
    Run("farback-gru", "docs/lesson.md", FARBACK_GRU, 1.0, farback_gru_cells,
        {"farback-gru-tuned.json": ("docs/figures/farback-gru-tuned.json",
                                    "src/qkv/tasks/data/farback-gru-tuned.json"),
         "farback-gru-tuned.png": "docs/figures/farback-gru-tuned.png"}),
    Run("farback-lag16", "docs/lesson.md", FARBACK_LAG16, 1.5, farback_lag16_cells,
        {"farback-lag16.json": "docs/figures/farback-lag16.json"}),
    Run("farback-ssm", "docs/lesson.md", FARBACK_SSM, 3.0, farback_ssm_cells,
        {"farback-ssm.json": "docs/figures/farback-ssm.json",
         "farback-ssm.png": "docs/figures/farback-ssm.png",
         "farback-ssm.safetensors": "src/qkv/tasks/data/farback-ssm.safetensors"}),
    Run("farback-rnn", "docs/lesson.md", FARBACK_RNN, 1.0, farback_rnn_cells,
        {"farback-rnn.json": "docs/figures/farback-rnn.json",
         "farback-rnn.png": "docs/figures/farback-rnn.png",
         "farback-rnn.safetensors": "src/qkv/tasks/data/farback-rnn.safetensors"}),
    Run("frozen-projections", "docs/lesson.md", FROZEN, 3.0, frozen_cells,
        {"frozen-projections.json": ("docs/figures/frozen-projections.json",
                                     "src/qkv/tasks/data/frozen-projections.json")}),
    Run("mqar", "docs/lesson.md", MQAR, 30.0, mqar_cells,
        {"mqar.json": ("docs/figures/mqar.json", "src/qkv/tasks/data/mqar.json"),
         "mqar.png": "docs/figures/mqar.png",
         **{f"mqar-{kind}.safetensors": f"src/qkv/tasks/data/mqar-{kind}.safetensors"
            for kind in ("attention", "ssm-small", "ssm-large")}},
        long=True),  # exact figures, but half an hour on 2 busy cores
    Run("mqar-1600", "docs/lesson.md", MQAR_1600, 10.0, mqar_1600_cells,
        {"mqar-1600.json": "docs/figures/mqar-1600.json",
         "mqar-1600.png": "docs/figures/mqar-1600.png"}, long=True),
    Run("mqar-uniform", "docs/lesson.md", MQAR_UNIFORM, 30.0, mqar_uniform_cells,
        {"mqar-uniform.json": "docs/figures/mqar-uniform.json",
         "mqar-uniform.png": "docs/figures/mqar-uniform.png"}, long=True),
    Run("mqar-selection", "docs/lesson.md", MQAR_SELECTION, 0.3, mqar_selection_cells),
    Run("mqar-cost", "docs/lesson.md", MQAR_COST, 1.0, mqar_cost_cells,
        {"mqar-cost.json": "docs/figures/mqar-cost.json",
         "mqar-cost.png": "docs/figures/mqar-cost.png"}),
    Run("ring", "docs/distributed.md", RING, 1.5, ring_cells, benchmark=True),
    Run("scaling", "docs/lesson.md", SCALING, 1.5, scaling_time_cells,
        {"scaling.json": ("docs/figures/scaling.json", "src/qkv/tasks/data/scaling.json"),
         "scaling.png": "docs/figures/scaling.png"},
        timings_only=True),
    Run("train-step", "docs/training.md", TRAIN_STEP, 0.3, train_step_cells, timings_only=True,
        benchmark=True),
    Run("decode", "docs/training.md", DECODE, 0.2, decode_cells, timings_only=True,
        benchmark=True),
    Run("tile-breakdown", "benchmarks/README.md", TILE_BREAKDOWN, 0.3, tile_breakdown_cells,
        timings_only=True, benchmark=True),
    Run("minilm", "docs/minilm.md", MINILM, 1.0, minilm_cells("torch's default threads (2)"),
        timings_only=True, benchmark=True),
    Run("minilm-1", "docs/minilm.md", MINILM_1, 1.0, minilm_cells("`--torch-threads 1`"),
        timings_only=True, benchmark=True),
    Run("qkv-ring", "README.md", QKV_RING, 0.2, qkv_ring_cells, timings_only=True,
        benchmark=True),
    Run("ring-tcp", "docs/distributed.md", RING_TCP_1G, 0.2, ring_tcp_1g_cells,
        timings_only=True, benchmark=True),
    Run("ring-tcp-100m", "docs/distributed.md", RING_TCP_100M, 2.0, ring_tcp_100m_cells,
        timings_only=True, benchmark=True),
    Run("bench", "benchmarks/README.md", BENCH, 6.0, bench_cells, benchmark=True),
    Run("bench-load", "benchmarks/README.md", BENCH_LOAD, 7.5, bench_load_cells,
        timings_only=True, benchmark=True),
    Run("gpt-300", "docs/gpt.md", GPT_300, 2.0, gpt_300_cells, timings_only=True,
        benchmark=True),
    Run("gpt", "docs/gpt.md", GPT, 5.5, gpt_cells, long=True, benchmark=True),
    Run("gpt-effects", "docs/gpt.md", GPT_EFFECTS, 0.2, gpt_effects_cells),
    Run("circuits", "docs/gpt.md", CIRCUITS, 0.3, circuits_cells),
    Run("head-sizes", "docs/gpt.md", HEAD_SIZES, 0.1, head_sizes_cells),
    Run("induction", "docs/gpt.md", INDUCTION, 2.0, induction_cells,
        artefacts={"induction-shakespeare.safetensors":
                   "src/qkv/tasks/data/induction-shakespeare.safetensors"}),
    Run("own-heads", "docs/gpt.md", OWN_HEADS, 0.3, own_heads_cells),
    Run("gpt-repeats", "docs/gpt.md", GPT_REPEATS, 22.0, gpt_run_cells(GPT_REPEATS), long=True,
        artefacts={"gpt-repeats.safetensors": "src/qkv/tasks/data/gpt-repeats.safetensors"}),
    Run("gpt-text", "docs/gpt.md", GPT_TEXT, 10.0, gpt_run_cells(GPT_TEXT), long=True,
        artefacts={"gpt-text-long.safetensors": "src/qkv/tasks/data/gpt-text-long.safetensors"}),
    Run("gpt-text-256", "docs/gpt.md", GPT_TEXT_256, 18.0, gpt_run_cells(GPT_TEXT_256), long=True,
        artefacts={"gpt-text-256.safetensors": "src/qkv/tasks/data/gpt-text-256.safetensors"}),
    Run("ring-1m", "docs/distributed.md", RING_1M, 25.0, ring_1m_cells, long=True,
        benchmark=True),
]


def execute(run: Run, workdir: Path, timeout: float | None = None) -> Output:
    """Run ``run.command`` in ``workdir`` (its ``out/`` is created there).
    This checkout's ``src/`` comes first on the path, so the code checked is the code here;
    benchmarks run without this machine's OPENBLAS_* overrides, as the benchmarks README says."""
    argv, assigned = run.argv()
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "NO_COLOR": "1",
           "HF_HUB_OFFLINE": "1", **assigned}
    if run.benchmark:
        env.pop("OPENBLAS_CORETYPE", None)
        env.pop("OPENBLAS_L2_SIZE", None)
    out = workdir / "out"
    out.mkdir(parents=True, exist_ok=True)
    start = time.monotonic()
    done = subprocess.run(argv, cwd=workdir, env=env, capture_output=True, text=True,
                          timeout=timeout, stdin=subprocess.DEVNULL)
    seconds = time.monotonic() - start
    if done.returncode != 0:
        raise RuntimeError(f"`{run.command}` exited {done.returncode}:\n{done.stderr[-3000:]}")
    return Output(out, done.stdout, seconds)


def by_name(names: list[str] | None) -> list[Run]:
    if not names:
        return list(RUNS)
    known = {r.name: r for r in RUNS}
    unknown = [n for n in names if n not in known]
    if unknown:
        raise SystemExit(f"unknown run {', '.join(unknown)}; the runs are: {', '.join(known)}")
    return [known[n] for n in names]

