"""Wait until this process's other threads are asleep, so a timing gets the cores to itself.

A BLAS or OpenMP call leaves its worker threads spinning for a while after it returns (OpenBLAS
polls for new work; torch's OpenMP threads spin before they block), and whatever is timed next
shares the cores with them: measured here, qkv's dense N=2048 took 59 ms alone and 85 ms right
after a NumPy 2048² GEMM. :func:`quiesce` reads every thread's state and CPU time from
``/proc/self/task/*/stat`` and returns once, over one whole ``interval``, no thread but the
caller has run (its CPU time did not move) and none is runnable (state ``R``) — or when
``timeout`` passes, saying which threads were still busy. Other processes are not its business:
``qkv bench --load`` adds one on purpose.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

TASKS = "/proc/self/task"


@dataclass
class Quiet:
    """What one :func:`quiesce` saw."""

    settled: bool  # False: the timeout passed with threads still busy
    waited: float  # seconds spent waiting
    busy: list[str] = field(default_factory=list)  # "name (tid)" of the threads still busy


def thread_stats(tasks: str = TASKS) -> dict[int, tuple[str, str, int]]:
    """Each thread of this process: tid → (name, state letter, user + system CPU ticks)."""
    stats = {}
    try:
        tids = os.listdir(tasks)
    except OSError:
        return stats
    for tid in tids:
        try:
            with open(f"{tasks}/{tid}/stat") as f:
                line = f.read()
        except OSError:  # the thread ended between the listing and the read
            continue
        stats[int(tid)] = parse_stat(line)
    return stats


def parse_stat(line: str) -> tuple[str, str, int]:
    """``/proc/…/stat`` → (name, state, utime + stime). The name sits in parentheses and may
    itself hold spaces and parentheses, so the fields are counted from the last ')'."""
    name = line[line.index("(") + 1: line.rindex(")")]
    fields = line[line.rindex(")") + 2:].split()  # fields[0] is field 3 of proc(5), the state
    return name, fields[0], int(fields[11]) + int(fields[12])  # fields 14 and 15: utime, stime


def busy_threads(before: dict, after: dict, me: int) -> list[str]:
    """Threads other than ``me`` that ran between two snapshots, are runnable now, or are new."""
    busy = []
    for tid, (name, state, ticks) in sorted(after.items()):
        if tid == me:
            continue
        ran = tid not in before or before[tid][2] != ticks
        if ran or state == "R":
            busy.append(f"{name} ({tid})")
    return busy


def quiesce(interval: float = 0.05, timeout: float = 2.0, *,
            read: Callable[[], dict] = thread_stats, sleep: Callable[[float], None] = time.sleep,
            clock: Callable[[], float] = time.perf_counter, me: int | None = None) -> Quiet:
    """Block until no other thread of this process has run for ``interval`` seconds, or
    ``timeout`` seconds have passed (``Quiet.settled`` is then False). ``read``, ``sleep``,
    ``clock`` and ``me`` (the caller's tid) are the test's handles."""
    if interval <= 0 or timeout < 0:
        raise ValueError(f"quiesce: interval must be > 0 and timeout ≥ 0, got interval="
                         f"{interval!r}, timeout={timeout!r}")
    me = threading.get_native_id() if me is None else me
    start = clock()
    before = read()
    while True:
        sleep(interval)
        after = read()
        busy = busy_threads(before, after, me)
        waited = clock() - start
        if not busy:
            return Quiet(True, waited)
        if waited >= timeout:
            return Quiet(False, waited, busy)
        before = after
