"""``quiesce``: the logic that keeps one peer's leftover threads out of the next one's timing
(``qkv bench``). Timings are not tested; what it decides from the threads' states is."""

import json
import threading

import pytest

from qkv.commands import _quiesce as q
from qkv.commands.bench import Isolation

ME = 1


def stat_line(tid, name, state, utime, stime):
    """A /proc/…/stat line, with the fields quiesce reads in their places."""
    rest = " ".join(["1"] * 10)  # fields 4–13
    return f"{tid} ({name}) {state} {rest} {utime} {stime} 0 0 20 0 3"


def test_parse_stat_counts_fields_from_the_last_parenthesis():
    assert q.parse_stat(stat_line(7, "python", "S", 12, 3)) == ("python", "S", 15)
    # a thread may name itself with spaces and parentheses
    assert q.parse_stat(stat_line(8, "a (b) c)", "R", 1, 1)) == ("a (b) c)", "R", 2)


def test_thread_stats_reads_this_process():
    stats = q.thread_stats()
    me = threading.get_native_id()
    assert me in stats and stats[me][1] == "R"  # the reading thread is running
    assert q.thread_stats("/nonexistent") == {}


def test_busy_threads():
    before = {ME: ("main", "R", 100), 2: ("blas", "S", 50), 3: ("omp", "S", 10)}
    assert q.busy_threads(before, {**before, ME: ("main", "R", 200)}, ME) == []  # the caller
    assert q.busy_threads(before, {**before, 2: ("blas", "S", 51)}, ME) == ["blas (2)"]  # ran
    assert q.busy_threads(before, {**before, 3: ("omp", "R", 10)}, ME) == ["omp (3)"]  # runnable
    assert q.busy_threads(before, {**before, 4: ("new", "S", 0)}, ME) == ["new (4)"]  # new
    assert q.busy_threads(before, {ME: before[ME]}, ME) == []  # threads that ended


class FakeProcess:
    """Snapshots in turn; the clock moves only when quiesce sleeps."""

    def __init__(self, snapshots):
        self.snapshots, self.now, self.sleeps = list(snapshots), 0.0, []

    def read(self):
        return self.snapshots.pop(0) if len(self.snapshots) > 1 else self.snapshots[0]

    def sleep(self, seconds):
        self.sleeps.append(seconds)
        self.now += seconds

    def quiesce(self, **kwargs):
        return q.quiesce(read=self.read, sleep=self.sleep, clock=lambda: self.now, me=ME,
                         **kwargs)


def spinning(ticks):
    return {ME: ("main", "R", 0), 2: ("blas", "R", ticks)}


def asleep(ticks):
    return {ME: ("main", "R", 0), 2: ("blas", "S", ticks)}


def test_quiesce_waits_until_a_whole_interval_is_quiet():
    fake = FakeProcess([spinning(0), spinning(5), asleep(8), asleep(8)])
    quiet = fake.quiesce(interval=0.05, timeout=2.0)
    # ran in the 1st and 2nd intervals (5, then 8 ticks), asleep and unchanged in the 3rd
    assert quiet.settled and quiet.busy == [] and len(fake.sleeps) == 3
    assert quiet.waited == pytest.approx(0.15)


def test_quiesce_returns_after_one_interval_when_already_quiet():
    fake = FakeProcess([asleep(3)])
    quiet = fake.quiesce(interval=0.05, timeout=2.0)
    assert quiet.settled and fake.sleeps == [0.05]


def test_quiesce_gives_up_at_the_timeout_and_names_the_busy_threads():
    fake = FakeProcess([spinning(t) for t in range(0, 1000, 5)])
    quiet = fake.quiesce(interval=0.1, timeout=0.5)
    assert not quiet.settled and quiet.busy == ["blas (2)"]
    assert quiet.waited == pytest.approx(0.5) and len(fake.sleeps) == 5


def test_quiesce_rejects_bad_arguments():
    with pytest.raises(ValueError, match="interval must be > 0"):
        q.quiesce(interval=0)
    with pytest.raises(ValueError, match="timeout ≥ 0"):
        q.quiesce(timeout=-1)


def test_quiesce_waits_for_a_real_spinning_thread():
    done, stop = threading.Event(), threading.Event()

    def spin():
        while not stop.is_set():  # busy until told, then asleep for good
            pass
        done.set()

    thread = threading.Thread(target=spin, name="spinner")
    thread.start()
    try:
        quiet = q.quiesce(interval=0.05, timeout=0.3)
        assert not quiet.settled and any(f"({thread.native_id})" in b for b in quiet.busy)
    finally:
        stop.set()
    thread.join()
    assert done.is_set() and q.quiesce(interval=0.05, timeout=5).settled


def test_isolation_reports_how_runs_were_kept_apart():
    iso = Isolation("quiesce", interval_s=0.05, timeout_s=2.0)
    iso.add(q.Quiet(True, 0.05))
    iso.add(q.Quiet(False, 2.0, ["blas (2)"]))
    assert "wait until no other thread of this process has run for 50 ms" in iso.describe()
    assert iso.summary() == ("Isolation: 2 timed runs; waited median 1025 ms, max 2000 ms; "
                             "1 timed out (still busy: blas (2)).")
    record = json.loads(json.dumps(iso.to_json()))
    assert record["method"] == "quiesce" and record["runs"] == 2 and record["timed_out"] == 1
    assert record["still_busy"] == ["blas (2)"]
    none = Isolation("none")
    assert "Isolation: none" in none.describe() and none.summary() == ""


@pytest.mark.slow
def test_bench_says_how_it_isolated_its_runs(tmp_path, capsys):
    from qkv.commands import bench

    out = tmp_path / "bench.json"
    assert bench.main(["--quick", "--only", "small", "--peers", "naive", "--keep-blas-env",
                       "--json", str(out)]) == 0
    lines = capsys.readouterr().out.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("case "))
    assert lines[header - 1].startswith("Isolation: before each timed run, wait until")
    assert lines[-1].startswith("Isolation: 9 timed runs;")  # 3 rounds of qkv, naive, probe
    isolation = json.loads(out.read_text())["isolation"]
    assert isolation["method"] == "quiesce" and isolation["runs"] == 9
