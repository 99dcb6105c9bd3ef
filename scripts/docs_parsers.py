"""One parser per output format of the commands the docs print (scripts/docs_figures.py turns
their results into the docs' cells). Each takes the command's stdout (or its JSON file) and
returns the figures as numbers, or raises ValueError naming the command when a line it needs is
missing — a changed output format fails loudly, never as a silently unchecked figure."""

from __future__ import annotations

import json
import re
from pathlib import Path


def _search(pattern: str, stdout: str, what: str) -> re.Match:
    m = re.search(pattern, stdout, re.M)
    if not m:
        raise ValueError(f"{what}: no line matching {pattern!r} in its output:\n{stdout[-2000:]}")
    return m


def parse_recall(stdout: str) -> dict:
    """``qkv train recall --no-progress``: {"held": {step: "0.9965"}, "seconds": training time}."""
    held = {int(m.group(1)): m.group(2) for m in
            re.finditer(r"^step (\d+): held-out accuracy ([\d.]+)", stdout, re.M)}
    seconds = float(_search(r"training time ([\d.]+) s", stdout, "qkv train recall").group(1))
    return {"held": held, "seconds": seconds}


def parse_train_bench(stdout: str) -> dict:
    """``benchmarks/train.py``: {"step": (qkv s, torch s, ratio) if run, "decode": {n: (cached
    s, full s, full / cached)}}."""
    result: dict = {"decode": {}}
    m = re.search(r"qkv ([\d.]+) ms, torch ([\d.]+) ms, ratio ([\d.]+)×", stdout)
    if m:
        result["step"] = (float(m.group(1)) / 1e3, float(m.group(2)) / 1e3, float(m.group(3)))
    for m in re.finditer(r"n=\s*(\d+): cached step\s+([\d.]+) ms\s+full causal forward\s+"
                         r"([\d.]+) ms\s+ratio\s+([\d.]+)×", stdout):
        result["decode"][int(m.group(1))] = (float(m.group(2)) / 1e3, float(m.group(3)) / 1e3,
                                             float(m.group(4)))
    if "step" not in result and not result["decode"]:
        raise ValueError(f"benchmarks/train.py printed no figure:\n{stdout[-2000:]}")
    return result


def parse_minilm(stdout: str) -> float:
    """``benchmarks/minilm.py``: qkv's throughput over sentence-transformers'."""
    return float(_search(r"^ratio qkv / sentence-transformers = ([\d.]+)", stdout,
                         "benchmarks/minilm.py").group(1))


def parse_ring_bench(stdout: str) -> dict:
    """``benchmarks/ring.py``: {("engine", 1) or (layout, ranks): {"threads", "seconds",
    "gflops", "peaks" (MB per rank), "start" (MB), "check" (error, bound) or None}}."""
    rows = {}
    m = re.search(r"^engine\s+1 process × (\d+) threads:\s+([\d.]+) s\s+([\d.]+) GFLOP/s\s+"
                  r"peak ([\d.]+) MB \(start ([\d.]+) MB\)", stdout, re.M)
    if m:
        rows[("engine", 1)] = {"threads": int(m.group(1)), "seconds": float(m.group(2)),
                               "gflops": float(m.group(3)), "peaks": [float(m.group(4))],
                               "start": float(m.group(5)), "check": None}
    for m in re.finditer(r"^ring (\w+)\s+(\d+) ranks × (\d+) threads:\s+([\d.]+) s\s+"
                         r"([\d.]+) GFLOP/s\s+peak MB per rank ([\d/]+) \(start ([\d.]+)\).*?"
                         r"check ([\d.e+-]+) ≤ ([\d.e+-]+)", stdout, re.M):
        rows[(m.group(1), int(m.group(2)))] = {
            "threads": int(m.group(3)), "seconds": float(m.group(4)),
            "gflops": float(m.group(5)), "peaks": [float(x) for x in m.group(6).split("/")],
            "start": float(m.group(7)), "check": (float(m.group(8)), float(m.group(9)))}
    if not rows:
        raise ValueError(f"benchmarks/ring.py printed no run:\n{stdout[-2000:]}")
    return rows


def parse_ring_demo(stdout: str) -> dict:
    """``python -m qkv.distributed`` / ``qkv ring``: its JSON line when ``--json`` was given,
    else {"forward_s"} from the human summary."""
    lines = [ln for ln in stdout.splitlines() if ln.startswith("JSON ")]
    if lines:
        return json.loads(lines[-1][5:])
    return {"forward_s": float(_search(r"^forward: ([\d.]+) s wall", stdout,
                                       "the ring demo").group(1))}


def parse_ring_tcp(stdout: str) -> dict:
    """``benchmarks/ring_tcp.py``: {N: {"c", "kb", "t", "c_ms", "w", "gap", "f", "b",
    "c_star"}} (milliseconds, GFLOP/s, MB/s, as printed). Columns are read by their header's
    names, so a column added to the table (``hops``, ``other_ms``) moves none of these."""
    names = {"N": "n", "c": "c", "shard_KB": "kb", "T_ms": "t", "C_ms": "c_ms", "W_ms": "w",
             "max(0,T-C)": "gap", "F_GFLOP/s": "f", "B_MB/s": "b", "c*=4F/B": "c_star"}
    rows, header = {}, None
    for line in stdout.splitlines():
        cells = line.split()
        if cells[:1] == ["N"] and "T_ms" in cells:
            header = cells
            missing = sorted(set(names) - set(header))
            if missing:
                raise ValueError(f"benchmarks/ring_tcp.py's table lacks columns {missing}")
        elif header and len(cells) == len(header) and cells[0].isdigit():
            row = dict(zip(header, cells, strict=True))
            values = {key: float(row[col]) for col, key in names.items()}
            n = int(values.pop("n"))
            rows[n] = {k: int(v) if k in ("c", "kb", "c_star") else v for k, v in values.items()}
    if not rows:
        raise ValueError(f"benchmarks/ring_tcp.py printed no row:\n{stdout[-2000:]}")
    return rows


def parse_gpt_vs_torch(stdout: str) -> dict:
    """``benchmarks/gpt_vs_torch.py``: {"curve": {step: (qkv loss, torch loss, qkv s/step, torch
    s/step)}, "val": (qkv, torch, difference), "seconds": (qkv, torch, ratio), "load":
    (start, end)} as printed."""
    curve = {int(m.group(1)): m.group(2, 3, 4, 5) for m in re.finditer(
        r"^step\s+(\d+): validation loss .*? qkv ([\d.]+)\s+torch ([\d.]+)\s+·\s+s/step so far "
        r"qkv ([\d.]+)\s+torch ([\d.]+)", stdout, re.M)}
    val = _search(r"validation loss \(all val\)\s+([\d.]+)\s+([\d.]+)\s+difference ([-+][\d.]+)",
                  stdout, "benchmarks/gpt_vs_torch.py").groups()
    sec = _search(r"seconds per step\s+([\d.]+)\s+([\d.]+)\s+qkv / torch ([\d.]+)×",
                  stdout, "benchmarks/gpt_vs_torch.py").groups()
    load = (_search(r"; load average ([\d.]+|unknown)", stdout, "gpt_vs_torch").group(1),
            _search(r"^load average at the end: ([\d.]+|unknown)", stdout,
                    "gpt_vs_torch").group(1))
    return {"curve": curve, "val": val, "seconds": sec, "load": load}


def parse_bench(path: Path) -> dict:
    """``qkv bench --json PATH``: {case name: result} plus "_run" (the header's figures)."""
    data = json.loads(path.read_text(encoding="utf-8"))
    return {"_run": data, **{r["case"]["name"]: r for r in data["results"]}}


def parse_gpt_effects(stdout: str) -> dict:
    """``qkv look --gpt PROMPT --ablate L.H --effects``: {"switched": (before, after) as
    printed ("76.5%"), "heads": {"L0H1": (change, direct, total)}} as printed."""
    # the terminal may wrap the sentence anywhere: any whitespace between its words
    switched = _search(r"switched off [^\n]*?[\s\S]*?the\s+most\s+likely\s+next\s+character"
                       r"[\s\S]*?([\d.]+%)\s+→\s+(?:'[^']+'\s+)?([\d.]+%)", stdout,
                       "qkv look --gpt --ablate")
    heads = {m.group(1): m.group(2, 3, 4) for m in re.finditer(
        r"^\s+(L\d+H\d+)\s+([-+][\d.]+)\s+([-+][\d.]+)\s+([-+][\d.]+)\s*$", stdout, re.M)}
    if not heads:
        raise ValueError("qkv look --gpt --effects printed no head rows")
    return {"switched": switched.groups(), "heads": heads}


def parse_circuits(stdout: str) -> dict:
    """``python -m qkv.tasks.circuits``: {"head": "L1H0", "rows": {label: (induction,
    second-copy score, second-copy loss, change or "")}} as printed."""
    head = _search(r"induction head (L\d+H\d+)", stdout, "python -m qkv.tasks.circuits")
    rows = {m.group(1).strip(): (*m.group(2, 3, 4), m.group(5) or "") for m in re.finditer(
        r"^(intact|L\d+H\d+ (?:out of .+?|off))\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)"
        r"(?:\s+([-+][\d.]+))?\s*$", stdout, re.M)}
    if "intact" not in rows:
        raise ValueError(f"python -m qkv.tasks.circuits printed no table:\n{stdout[-2000:]}")
    return {"head": head.group(1), "rows": rows}


def parse_induction(stdout: str) -> dict:
    """``qkv train induction``: {"curve": {step: (held-out loss, loss on the repeats,
    induction, previous-token, seconds)}, "text": {step: loss on plain text} (runs that print
    it), "first": (score, step), or None when the score never reached the threshold} as
    printed."""
    lines = list(re.finditer(
        r"^step (\d+): loss ([\d.]+) \(held out\), ([\d.]+) on the repeats"
        r"(?:, ([\d.]+) on plain text)? · induction "
        r"([\d.]+) · previous-token ([\d.]+) · ([\d.]+) s", stdout, re.M))
    curve = {int(m.group(1)): m.group(2, 3, 5, 6, 7) for m in lines}
    text = {int(m.group(1)): m.group(4) for m in lines if m.group(4)}
    first = re.search(r"first reached ([\d.]+) at step (\d+)", stdout, re.M)
    if first is None:  # a run that grew none says so
        _search(r"the induction score never reached the threshold", stdout,
                "qkv train induction")
    return {"curve": curve, "text": text, "first": first.groups() if first else None}


def parse_own_heads(stdout: str) -> dict:
    """``python -m qkv.tasks.own_heads``: {"runs": {name: (steps, characters, first, best)},
    "copy": {what: (found, right, news, statistics right)}, "worth": {model: (heads,
    induction heads "yes"/"no", plain, news, copy wrong, repeats)}} as printed (each loss a
    pair "a → b")."""
    runs = {m.group(1): m.group(2, 3, 4, 5) for m in re.finditer(
        r"^(attention-only|gpt-[\w-]+)\s+([\d,]+)\s+([\d.]+ M)\s+"
        r"(step [\d,]+ \([\d.]+ M chars\)|never)\s+([\d.]+ at step [\d,]+)$", stdout, re.M)}
    copy = {m.group(1): m.group(2, 3, 4, 5) for m in re.finditer(
        r"^((?:plain text|text with repeats), \d+ characters)\s+([\d.]+)\s+([\d.]+)\s+"
        r"([\d.]+)\s+([\d.]+)$", stdout, re.M)}
    worth = {m.group(1): (m.group(2).strip(), *m.group(3, 4, 5, 6, 7)) for m in re.finditer(
        r"^(gpt-[\w-]+)\s+((?:L\d+H\d+ ?)+?)\s+(yes|no)\s+([\d.]+ → [\d.]+)\s+"
        r"([\d.]+ → [\d.]+)\s+([\d.]+ → [\d.]+)\s+([\d.]+ → [\d.]+)$", stdout, re.M)}
    if not runs or not copy or not worth:
        raise ValueError(f"python -m qkv.tasks.own_heads: a table is missing from its output:\n"
                         f"{stdout[-2000:]}")
    return {"runs": runs, "copy": copy, "worth": worth}
