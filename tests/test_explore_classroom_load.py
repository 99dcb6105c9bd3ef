"""A short run of the classroom load test (benchmarks/classroom.py) in CI: a few learners on
the light views and the cost view (whose live timings and recall answers wait in the queue),
with the misbehaving client, on loopback only. The full run's figures are in docs/explore.md.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).parents[1] / "benchmarks" / "classroom.py"


def test_a_short_classroom_serves_every_learner_their_own_answers(tmp_path):
    out = tmp_path / "room.json"
    run = subprocess.run([sys.executable, str(BENCH), "--learners", "4", "--seconds", "6",
                          "--think", "0.3", "--views", "vectors,cost",
                          "--json", str(out)],
                         capture_output=True, text=True, timeout=240)
    assert run.returncode == 0, run.stdout + run.stderr
    figures = json.loads(out.read_text())
    rows = {r["endpoint"]: r for r in figures["endpoints"]}
    # the vectors view's drag, then the cost view's first step (its grid, and the recall
    # answers and curves, which wait in the queue) are reached even on a busy machine
    for path in ("/api/trace", "/api/cost", "/api/cost/recall", "/api/cost/recall/curves"):
        assert path in rows and rows[path]["n"] > 0, (path, run.stdout)
    # well-behaved learners: every request answered, 200 only (no 5xx, no 409, no refusal)
    assert all(r["errors"] == 0 and r["not_200"] == {} for r in rows.values()), run.stdout
    assert figures["own_answers"]["checked"] > 10 and figures["own_answers"]["wrong"] == []
    assert figures["unfinished"] == 0 and figures["task_failures"] == []
    assert figures["queue"]["served"] > 0
    bad = figures["misbehaving"]
    assert set(bad["huge body"]) == {"413"} and set(bad["slow body"]) == {"408"}, bad
    assert set(bad["wrong code"]) <= {"403", "429"}, bad
    assert "500" not in bad["burst"], bad
    assert not any("Traceback" in line or "ERROR" in line for line in figures["server_log"])
    assert "RSS" in run.stdout and "own answers" in run.stdout
