"""Was the machine busy while something was timed? The CPU time other processes took meanwhile.

Live timings (the cost view's growth plot) are taken one at a time in this server, but other
programs on the machine still take cores, and a timing taken then is slower than the machine
can do. :class:`OtherWork` reads the machine's busy CPU time (Linux ``/proc/stat``) and this
process's own (``os.times``) before and after, so the page can say so. Elsewhere it measures
nothing and says that.
"""

from __future__ import annotations

import os
import time

BUSY_CORES = 0.5  # other processes' average cores above which a timing is said to be disturbed


def _machine_busy_seconds() -> float | None:
    """CPU seconds all cores spent not idle since boot, or None where /proc/stat is absent."""
    try:
        with open("/proc/stat") as f:
            fields = [int(x) for x in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def _own_seconds() -> float:
    t = os.times()
    return t.user + t.system


class OtherWork:
    """``with OtherWork() as other: ...`` then ``other.cores``: the average number of cores
    other processes kept busy meanwhile (None if not measurable here)."""

    cores: float | None = None

    def __enter__(self) -> OtherWork:
        self._start = (time.perf_counter(), _machine_busy_seconds(), _own_seconds())
        return self

    def __exit__(self, *exc) -> None:
        wall0, machine0, own0 = self._start
        wall, machine = time.perf_counter() - wall0, _machine_busy_seconds()
        if machine is None or machine0 is None or wall <= 0:
            return
        self.cores = max(0.0, (machine - machine0) - (_own_seconds() - own0)) / wall

    def said(self) -> str | None:
        """A sentence for the page when the machine was busy (or unmeasured), else None."""
        if self.cores is None:
            return ("Whether other programs were busy while these were timed is not measured "
                    "on this system.")
        if self.cores <= BUSY_CORES:
            return None
        return (f"The machine was busy: other programs kept {self.cores:.1f} of its "
                f"{os.cpu_count()} cores working while these were timed, so the live times may "
                "be slower than it can do alone.")
