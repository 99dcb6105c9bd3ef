"""The docs' figures re-measured by the commands printed next to them (scripts/docs_figures.py):
each output format's parser on a real output of its command, the comparison's tolerances,
``--update``'s rewrite, and the runs that fit in CI; ``python scripts/check_docs_figures.py``
runs them all."""

from __future__ import annotations

import json
import re
import shutil
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
import docs_figures
import docs_parsers
from docs_figures import RUNS, Cell, Output, by_name, compare, doc_table, execute, update

# The exact figures CI re-measures (scaling-memory: ~52 s, one warm-up call per method).
# recall's table is already re-measured by tests/test_train.py (the same command), and farback's
# equals the shipped JSON (test_the_tables_are_the_shipped_json_of_their_commands);
# `python scripts/check_docs_figures.py recall farback` re-runs both — kept out of CI for its
# 15-minute budget.
CI_RUNS = ["scaling-memory"]

# Real outputs of the benchmarks (short sizes: `--rounds 1`, `--n 4096`, `--steps 20`, …),
# trimmed to the lines the parsers read.
TRAIN_STEP = ("recall training step (batch 128, 32 pairs, d=64): qkv 100.03 ms, torch 16.97 ms, "
              "ratio 5.89×\n")
DECODE = """decoding one token at cache length n (2 blocks, d=64, 4 heads):
  n=  256: cached step    2.30 ms   full causal forward    93.04 ms   ratio   40.5×
  n= 1024: cached step    3.12 ms   full causal forward   146.89 ms   ratio   47.1×
  n= 4096: cached step    5.49 ms   full causal forward   453.21 ms   ratio   82.6×
"""
TILE_BREAKDOWN = """one head, N=2048, D=64, float32, one thread, tiles 512 queries × 1024 keys
  score GEMM    8.68 ms   61.9 GFLOP/s in the loop,  68.6 alone
  tile step     3.63 ms   0.87 ns a score (17% of the loop)
  P·V GEMM      8.78 ms   61.2 GFLOP/s in the loop,  61.2 alone
  the loop     21.33 ms   50.3 GFLOP/s
  qkv.attention, one worker:  19.14 ms
  torch SDPA, one thread:     21.22 ms  ( 50.6 GFLOP/s; qkv / torch = 0.90)
"""
MINILM = """64 sentences, 21.4 tokens on average (min 19, max 24); 2 cores, torch 2.13.0+cpu
qkv                       47.0 sentences/s   (best of 1: 1.36 s; rounds 1.36)
sentence-transformers     21.7 sentences/s   (best of 1: 2.95 s; rounds 2.95)
ratio qkv / sentence-transformers = 2.17
max |embedding difference| = 1.42e-07
"""
RING = """N=4096 H=1 D=64 mask=causal; 2 cores; 0.00 TFLOP (4·N²·D, halved by causal)
engine   1 process × 2 threads:     2.48 s     0.9 GFLOP/s  peak 167 MB (start 37 MB)
ring zigzag     1 ranks × 2 threads:     1.68 s     1.3 GFLOP/s  peak MB per rank 184 (start 47) \
 wait s 0.00  check 1.2e-07 ≤ 7.8e-04  ×0.68 engine
ring zigzag     2 ranks × 1 threads:     3.72 s     0.6 GFLOP/s  peak MB per rank 177/177 \
(start 45)  wait s 0.00/0.00  check 1.2e-07 ≤ 7.8e-04  ×1.50 engine
"""
RING_DEMO = """ring attention: N=4096 H=1 D=64 mask=causal layout=zigzag ranks=2 threads/rank=1
forward: 2.83 s wall
JSON """ + json.dumps({
    "n": 4096, "heads": 1, "dim": 64, "mask": "causal", "layout": "zigzag", "ranks": 2,
    "threads": 1, "forward_s": 2.8286679560005723, "backward_s": None,
    "per_rank": [{"rank": r, "rows": 2048, "time_s": 2.83, "compute_s": c, "wait_s": 1e-4,
                  "computed": 2, "skipped": 0, "peak_mb": pk, "start_mb": 45.3}
                 for r, c, pk in ((0, 2.662556464998488, 177.078125),
                                  (1, 2.779776427996694, 177.1875))],
    "check_rows": 32, "check_err": 1.1920928955078125e-07,
    "check_bound": 0.0007843157335056389}) + "\n"
RING_TCP = "\n".join([  # a real output (its lines are wider than ours)
    "2 ranks in 2 network namespaces, TCP only, links 1gbit; causal zigzag, D=64, float32, "
    "forward; per step (C) and transfer (T, W), the rank that waited most",
    "     N      c   shard_KB   T_ms   C_ms   W_ms  hops  other_ms  max(0,T-C)  F_GFLOP/s  "
    "B_MB/s  C≥T  c*=4F/B",
    "  1024    512       256   0.68   3.44   0.53     1      4.84        0.00        9.8   "
    "384.3  yes      102", ""])
GPT = """qkv GPT(n_layer=4, …, 811,520 parameters); torch 2.13.0+cpu with 2 threads; 20 steps \
each, interleaved every 10; load average 4.7
step    20: validation loss (fixed 240 windows) qkv 3.1820  torch 3.1820  ·  s/step so far qkv \
0.2816  torch 1.0857

                                   qkv     torch
   validation loss (all val)    3.2127    3.2127   difference -0.0000
            seconds per step    0.2816    1.0857   qkv / torch 0.26×
load average at the end: 4.7 (on 2 cores)
"""

GPT_EFFECTS = """switched off L0H1 (zeroed, T = 1): the most likely next character stays '␣': \
76.5% → 51.7%
   ␣  76.50% →  51.73%
each head switched off alone (zero): the fall in p('␣') = 76.5% at T = 1, in percentage points
  head   change (points)   direct push   total effect
  L0H0             -18.2         +0.04          +0.74
  L3H3              +5.2         -0.32          -0.15
  L0 (all its attention) -75.1
"""
INDUCTION = """step 250: loss 3.3964 (held out), 3.5639 on the repeats · induction 0.048 · \
previous-token 0.103 · 13.3 s
step 300: loss 3.3816 (held out), 3.5549 on the repeats · induction 0.055 · previous-token 0.151 \
· 15.6 s
the induction score first reached 0.384 at step 1700; the loss on the repeats fell most between \
steps 1750 and 1800 (2.4643 → 2.1658); training time 85.0 s
"""

GPT_RUN = """step 5000: loss 2.6120 (held out), 2.8945 on the repeats, 1.8920 on plain text · \
induction 0.230 · previous-token 0.727 · 301.2 s
the induction score first reached 0.431 at step 5100; the loss on the repeats fell most between \
steps 5000 and 5100 (2.8945 → 2.4722); training time 900.0 s
"""
GPT_TEXT_RUN = """step 100: loss 3.3200 (held out), 3.8000 on the repeats, 2.7000 on plain text · \
induction 0.041 · previous-token 0.059 · 7.5 s
the induction score never reached the threshold; the loss on the repeats fell most between \
steps 100 and 200 (3.8226 → 3.7124); training time 345.1 s
"""
OWN_HEADS = """run                 steps   characters  first induction ≥ 0.3       best score
attention-only      3,000     4.61 M  step 1,700 (2.61 M chars)   0.783 at step 3,000
gpt-repeats        16,000    12.29 M  step 5,100 (3.92 M chars)   0.823 at step 8,400
gpt-text           10,000     7.68 M  never                       0.040 at step 300
gpt-text-256           20     0.02 M  never                       0.020 at step 10

copy rule (the last 2 characters seen earlier in the window) as % of all positions:
what                          found   right    news  statistics right
plain text, 64 characters      15.8     4.6    1.89       36.5
plain text, 256 characters     42.0    13.6    5.72       37.0
plain text, 1024 characters    69.6    23.9   10.19       37.1
plain text, 4096 characters    87.1    30.7   13.06       37.1
text with repeats, 64 characters  27.4    19.7   15.40       27.0

heads switched off (mean): its induction heads, or else its best-scoring head;
loss in nats per character (with → without):
model        heads     ind. plain text     news           copy wrong     repeats
gpt-repeats  L3H2      yes  1.741 → 1.709  0.878 → 1.928  2.461 → 2.134  0.309 → 3.705
gpt-text     L3H3      no   1.655 → 1.679  1.771 → 1.760  2.054 → 2.071  6.011 → 6.025
gpt-text-256 L2H2      no   3.187 → 3.187  3.464 → 3.464  3.311 → 3.311  4.020 → 4.020
"""


def test_the_gpt_runs_and_the_own_heads_report_parse():
    run = docs_parsers.parse_induction(GPT_RUN)
    assert run["curve"][5000] == ("2.6120", "2.8945", "0.230", "0.727", "301.2")
    assert run["text"] == {5000: "1.8920"} and run["first"] == ("0.431", "5100")
    text = docs_parsers.parse_induction(GPT_TEXT_RUN)
    assert text["first"] is None and text["text"] == {100: "2.7000"}
    with pytest.raises(ValueError, match="qkv train induction"):
        docs_parsers.parse_induction("step 1: nothing")
    r = docs_parsers.parse_own_heads(OWN_HEADS)
    assert list(r["runs"]) == ["attention-only", "gpt-repeats", "gpt-text", "gpt-text-256"]
    assert r["runs"]["attention-only"][2] == "step 1,700 (2.61 M chars)"
    assert r["copy"]["plain text, 64 characters"] == ("15.8", "4.6", "1.89", "36.5")
    assert len(r["copy"]) == 5 and set(r["worth"]) == {"gpt-repeats", "gpt-text", "gpt-text-256"}
    assert all(len(v) == 6 and v[1] in ("yes", "no") for v in r["worth"].values())
    with pytest.raises(ValueError, match="a table is missing"):
        docs_parsers.parse_own_heads(OWN_HEADS.split("copy rule")[0])


def test_each_parser_reads_a_real_output_of_its_command():
    effects = docs_parsers.parse_gpt_effects(GPT_EFFECTS)
    assert effects["switched"] == ("76.5%", "51.7%")
    assert effects["heads"] == {"L0H0": ("-18.2", "+0.04", "+0.74"),
                                "L3H3": ("+5.2", "-0.32", "-0.15")}
    ind = docs_parsers.parse_induction(INDUCTION)
    assert ind["curve"][250] == ("3.3964", "3.5639", "0.048", "0.103", "13.3")
    assert ind["first"] == ("0.384", "1700") and 300 in ind["curve"]
    assert docs_parsers.parse_train_bench(TRAIN_STEP)["step"] == pytest.approx((0.10003, 0.01697,
                                                                                5.89))
    decode = docs_parsers.parse_train_bench(DECODE)["decode"]
    assert list(decode) == [256, 1024, 4096] and decode[4096] == pytest.approx(
        (0.00549, 0.45321, 82.6))
    assert docs_parsers.parse_minilm(MINILM) == 2.17
    ring = docs_parsers.parse_ring_bench(RING)
    assert ring[("engine", 1)]["peaks"] == [167.0] and ring[("engine", 1)]["check"] is None
    assert ring[("zigzag", 2)]["peaks"] == [177.0, 177.0] and ring[("zigzag", 2)]["start"] == 45
    assert ring[("zigzag", 1)]["check"] == (1.2e-07, 7.8e-04)
    assert docs_parsers.parse_ring_demo(RING_DEMO)["check_rows"] == 32
    assert docs_parsers.parse_ring_demo(RING_DEMO.replace("JSON", "XXXX"))["forward_s"] == 2.83
    row = docs_parsers.parse_ring_tcp(RING_TCP)[1024]
    assert (row["c_star"], row["w"], row["gap"]) == (102, 0.53, 0.0)
    gpt = docs_parsers.parse_gpt_vs_torch(GPT)
    assert gpt["curve"] == {20: ("3.1820", "3.1820", "0.2816", "1.0857")}
    assert gpt["val"] == ("3.2127", "3.2127", "-0.0000") and gpt["load"] == ("4.7", "4.7")
    with pytest.raises(ValueError, match=r"benchmarks/minilm\.py"):
        docs_parsers.parse_minilm("Traceback: no ratio printed")


@pytest.mark.parametrize(("name", "stdout", "misplaced"), [
    ("train-step", TRAIN_STEP, 0), ("decode", DECODE, 0), ("minilm", MINILM, 0),
    ("minilm-1", MINILM, 0), ("ring", RING, 0), ("qkv-ring", RING_DEMO, 0),
    ("ring-1m", RING_DEMO, 0), ("ring-tcp", RING_TCP, 0),
    ("ring-tcp-100m", RING_TCP, 5),  # N = 1024 is not a row of the 100 Mbit table
    ("gpt-300", GPT, 0), ("gpt", GPT, 4),  # the table has no step 20
    ("gpt-effects", GPT_EFFECTS, 0), ("induction", INDUCTION, 0),
    ("tile-breakdown", TILE_BREAKDOWN, 0)])
def test_every_figure_a_run_measures_has_its_place_in_the_doc(name, stdout, misplaced):
    """Each cell finds its table cell or prose figure (the values differ: short runs)."""
    (run,) = by_name([name])
    problems = compare(run, Output(Path("/nonexistent"), stdout, 12.0), timings=True)
    lost = [p for p in problems if ": no " in p]
    assert len(lost) == misplaced, lost


def test_the_bench_runs_read_qkv_bench_json(tmp_path):
    for name in ("bench.json", "bench-load.json"):
        shutil.copy(Path(__file__).resolve().parents[1] / "benchmarks/latest.json",
                    tmp_path / name)
    for name in ("bench", "bench-load"):
        (run,) = by_name([name])
        output = Output(tmp_path, "", 60.0)
        # latest.json is the table's quiet run: its columns equal the doc's exactly
        problems = compare(run, output, timings=True)
        if name == "bench":
            assert problems == [], problems
        else:  # the quiet run against the "under load" column: only ratios may differ
            assert all("under load" in p or "2048³" in p for p in problems), problems


@pytest.mark.parametrize(("kind", "doc", "measured", "equal"), [
    ("exact", "0.9965", "0.9965", True), ("exact", "0.9965", "0.9966", False),
    ("memory", "22.1 MiB", "22.2 MiB", True), ("memory", "22.1 MiB", "22.3 MiB", False),
    ("memory", "22.1 MiB", "22.1 KiB", False),
    ("rss", "256 / 256 (45)", "266 / 250 (47)", True),
    ("rss", "256 / 256 (45)", "280 / 256 (45)", False),
    ("rss", "0", "1", True), ("rss", "256 / 256 (45)", "256 (45)", False),
    ("timing", "165.4 ms", "0.21 s", True), ("timing", "165.4 ms", "0.22 s", False),
    ("timing", "4 min 21 s", "5 min 30 s", True), ("timing", "4 min 21 s", "6 min 0 s", False),
    ("timing", "6.8–8.5", "10.9", True), ("timing", "6.8–8.5", "11.2", False),
    ("timing", "6.8–8.5", "4.9", True), ("timing", "6.8–8.5", "4.7", False),
    ("timing", "12.0–13.5", "11.0–14.0", True), ("timing", "0.2614 (qkv / torch 3.17×)",
                                                 "0.2614 (qkv / torch 4.17×)", False),
    ("slope", "2.00", "1.86", True), ("slope", "2.00", "1.84", False),
])
def test_each_kind_of_figure_is_compared_within_its_stated_tolerance(kind, doc, measured, equal):
    assert (docs_figures._differs(Cell(measured=measured, kind=kind), doc) == "") is equal


def test_update_rewrites_the_timings_and_nothing_else(tmp_path, monkeypatch):
    (run,) = by_name(["decode"])
    (tmp_path / "docs").mkdir()
    shutil.copy(docs_figures.ROOT / run.doc, tmp_path / run.doc)
    monkeypatch.setattr(docs_figures, "ROOT", tmp_path)
    before = (tmp_path / run.doc).read_text(encoding="utf-8")
    changed = update(run, Output(tmp_path, DECODE, 5.0))
    after = (tmp_path / run.doc).read_text(encoding="utf-8")
    assert len(changed) == 9 and "| 4096 | 5.49 ms | 453 ms | 83× |" in after
    assert len(after.splitlines()) == len(before.splitlines())
    assert compare(run, Output(tmp_path, DECODE, 5.0), timings=True) == []
    (recall,) = by_name(["recall"])  # exact figures are never rewritten
    stdout = "step 100: held-out accuracy 0.5000\ntraining time 20.0 s\n"
    shutil.copy(Path(__file__).resolve().parents[1] / recall.doc, tmp_path / recall.doc)
    update(recall, Output(tmp_path, stdout, 25.0))
    text = (tmp_path / recall.doc).read_text(encoding="utf-8")
    assert "| 0.0080 |" in text and "1,000\nsteps in 20.0 s of training time" in text


def test_every_run_is_printed_in_its_doc():
    for run in RUNS:
        text = docs_figures._text(run.doc)
        assert docs_figures._after(text, run.doc, run.command) > 0
        assert not (run.long and run.timings_only), run.name


@pytest.mark.parametrize("run", [r for r in RUNS if r.name in CI_RUNS], ids=lambda r: r.name)
def test_the_ci_runs_print_a_table(run):
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
    problems = compare(run, execute(run, tmp_path, timeout=600), timings=False)
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("name", ["farback", "farback-gru", "farback-lag16", "farback-ssm",
                                  "seq2seq", "scaling", "mqar", "mqar-1600", "mqar-uniform",
                                  "mqar-cost"])
def test_the_tables_are_the_shipped_json_of_their_commands(name, tmp_path):
    """docs/figures/*.json are the outputs of the commands above lesson.md's tables (written by
    scripts/regenerate_artefacts.py): every figure parsed from them equals the doc's."""
    for path in (Path(__file__).resolve().parents[1] / "docs/figures").glob("*.json"):
        shutil.copy(path, tmp_path)
    (run,) = by_name([name])
    # The JSON holds no wall time: the run's is the doc's own (so only the JSON's figures count).
    anchor = re.escape(run.command.split(" --")[0])
    wall = re.search(rf"`{anchor}`[^|]*\| (?:(\d+) min )?(\d+) s \|",
                     (Path(__file__).resolve().parents[1] / run.doc).read_text())
    seconds = 60 * int(wall.group(1) or 0) + int(wall.group(2)) if wall else 0.0
    timed = name in ("scaling", "mqar-cost")  # their timings are the shipped JSON's, unmoved
    assert compare(run, Output(tmp_path, "", seconds), timings=timed) == []


def test_the_check_lists_every_run_and_marks_the_long_and_timing_only_ones(capsys):
    import check_docs_figures
    assert check_docs_figures.main(["--list"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in lines] == [r.name for r in RUNS]
    assert {line.split()[0] for line in lines if "(long)" in line} == \
        {"gpt", "ring-1m", "mqar", "mqar-1600", "mqar-uniform", "gpt-repeats", "gpt-text",
         "gpt-text-256"}
    with pytest.raises(SystemExit, match="unknown run nope"):
        check_docs_figures.main(["nope"])
