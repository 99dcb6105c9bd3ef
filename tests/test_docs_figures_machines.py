"""Issue 51 item 15: the docs' figures checked on another machine. A rounding error is a bound,
not a figure: the ring's "check vs engine" passes within the float32 bound its run prints, and
the check prints the measured value; a resident set is compared within the spread stated
across this project's machines and printed with the machine it was measured on."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))

import docs_figures
from docs_figures import Cell, Output, by_name, compare, notes

# benchmarks/ring.py's output on the AMD EPYC of issue 51: the doc's table was taken on the
# Intel machine (engine peak 126 MB, start 37; zigzag 1 rank's check 3.2e-08)
RING_EPYC = """N=65536 H=8 D=64 mask=causal; 2 cores
engine      1 process × 2 threads:     2.70 s   203.6 GFLOP/s  peak 123 MB (start 43 MB)
ring zigzag     1 ranks × 2 threads:     2.80 s   196.3 GFLOP/s  peak MB per rank 203 \
(start 47)  wait s 0.00  check 4.5e-08 ≤ 1.9e-06  ×1.04 engine
"""


def _ring_problems(stdout: str) -> list[str]:
    (run,) = by_name(["ring"])
    return [p for p in compare(run, Output(Path("/nonexistent"), stdout, 60.0), timings=False)
            if "single-process engine" in p or "zigzag, 1 rank" in p]


def test_a_rounding_error_within_the_float32_bound_is_not_a_difference():
    assert _ring_problems(RING_EPYC) == []
    above = RING_EPYC.replace("check 4.5e-08 ≤ 1.9e-06", "check 4.5e-06 ≤ 1.9e-06")
    (problem,) = _ring_problems(above)
    assert "check vs engine" in problem and "above the float32 bound 1.9e-06" in problem


def test_the_check_prints_each_error_with_its_bound_and_each_rss_with_the_machine():
    (run,) = by_name(["ring"])
    lines = notes(run, Output(Path("/nonexistent"), RING_EPYC, 60.0))
    assert any("check vs engine" in x and "measured 4.5e-08 ≤ float32 bound 1.9e-06" in x
               for x in lines), lines
    rss = [x for x in lines if "peak MB per rank" in x]
    assert rss and all(f"on {docs_figures.machine()}" in x for x in rss), rss
    assert "cores" in docs_figures.machine()


def test_a_resident_set_is_compared_within_the_stated_spread_across_machines():
    differs = docs_figures._differs
    assert differs(Cell(measured="123 (43)", kind="rss"), "126 (37)") == ""  # the EPYC's
    assert differs(Cell(measured="140 (37)", kind="rss"), "126 (37)") != ""  # 14 MB: beyond
    assert docs_figures.RSS_SPREAD_MB == 10.0
    text = (Path(__file__).resolve().parents[1] / "scripts" / "check_docs_figures.py").read_text()
    assert "±10 MB" in text and "float32 bound" in text
