"""The training progress bars fit the terminal: at 80 and 60 columns the line is whole (one line,
no cut), and it keeps the step count, the loss and the accuracy."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

import pytest
from rich.console import Console
from rich.text import Text

from qkv.commands.train import _experiment_progress, _recall_progress

ROOT = Path(__file__).resolve().parents[1]


def _render(progress, width: int) -> list[str]:
    out = io.StringIO()
    Console(file=out, width=width, color_system=None).print(progress.get_renderable())
    return out.getvalue().splitlines()


@pytest.mark.parametrize("width", [200, 120, 80, 60, 40])
def test_recall_progress_is_one_whole_line(width):
    console = Console(file=io.StringIO(), width=width)
    progress = _recall_progress(console, 10000, disable=False)
    # the widest values: a 5-digit step, a large loss, full accuracies
    progress.add_task("train", total=10000, completed=9999, loss=12.3456, acc=1.0,
                      held="0.9995")
    lines = _render(progress, width)
    assert len(lines) == 1, lines
    line = lines[0]
    assert Text(line).cell_len <= width - 1, (width, line)
    assert "9999/10000" in line and "loss 12.3456" in line and "acc 1.000" in line, line
    if width >= 60:
        assert "held" in line and "0.9995" in line and "step" in line, line
    if width >= 80:
        assert "━" in line, line  # a bar


@pytest.mark.parametrize("width", [120, 80, 60])
def test_experiment_progress_is_one_whole_line_per_model(width):
    console = Console(file=io.StringIO(), width=width)
    progress = _experiment_progress(console, 1200, disable=False)
    for kind in ("fixed", "attention"):
        progress.add_task(kind, total=1200, completed=1199, loss=12.3456)
    lines = _render(progress, width)
    assert len(lines) == 2, lines
    for line, kind in zip(lines, ("fixed", "attention"), strict=True):
        assert Text(line).cell_len <= width - 1, (width, line)
        assert kind in line and "1199/1200" in line and "loss 12.3456" in line, line


@pytest.mark.parametrize("columns", [80, 60])
def test_cli_progress_piped_at_the_terminal_width(tmp_path, columns):
    """`COLUMNS=80 qkv train recall … | cat`: the bar's last state is one whole line."""
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "COLUMNS": str(columns)}
    env.pop("NO_COLOR", None)
    done = subprocess.run(
        [sys.executable, "-m", "qkv", "train", "recall", "--keys", "16", "--values", "16",
         "--pairs", "6", "--d-model", "16", "--steps", "20", "--eval-every", "10",
         "--held-out", "50", "--checkpoint", str(tmp_path / "r.safetensors")],
        capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    bar = [line for line in done.stdout.splitlines() if "loss" in line]
    assert len(bar) == 1, done.stdout
    assert len(bar[0]) <= columns - 1, bar[0]
    assert "20/20" in bar[0] and "acc" in bar[0] and "held" in bar[0], bar[0]
    assert all(len(line) <= columns for line in done.stdout.splitlines()), done.stdout
