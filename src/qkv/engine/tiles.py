"""How the kernel cuts a problem into tiles, and the knobs for it (:class:`KernelConfig`).

The configuration lives in a context variable, read once at the start of each attention call and
passed explicitly to the worker threads — so tests and benchmarks change it for a block of code
without touching module globals::

    with qkv.engine.kernel_config(tile_q=8, tile_k=16, small=0, backend="numpy") as cfg:
        qkv.attention(q, k, v, mask=qkv.causal())

:class:`TileStats` counts what the kernel did (tiles computed, skipped, the path taken); pass one
as ``kernel_config(stats=...)``.
"""

from __future__ import annotations

import contextlib
import contextvars
import importlib.util
import os
import sys
import threading
from collections import Counter
from dataclasses import dataclass, field, fields, replace

from .masks import EMPTY, FULL, KIND_NAMES, PARTIAL

BACKENDS = ("auto", "compiled", "numpy")


@dataclass
class TileStats:
    """Counters filled by the kernel while a config holding them is active (thread-safe).

    ``tiles[kind]`` counts tiles by kind as the kernel visited them ("empty" tiles were skipped,
    "full" and "partial" ones computed), summed over every batch element, head and pass;
    ``paths`` counts calls by path ("tiled"/"small" × "compiled"/"numpy").
    """

    tiles: Counter = field(default_factory=Counter)
    paths: Counter = field(default_factory=Counter)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add_tile(self, kind: int) -> None:
        with self._lock:
            self.tiles[KIND_NAMES[kind]] += 1

    def add_path(self, name: str) -> None:
        with self._lock:
            self.paths[name] += 1

    @property
    def computed(self) -> int:
        return self.tiles["full"] + self.tiles["partial"]

    @property
    def skipped(self) -> int:
        return self.tiles["empty"]


@dataclass(frozen=True)
class KernelConfig:
    """Tile sizes and paths, measured against torch in one interleaved run (benchmarks/).

    - ``tile_q`` query rows per tile; ``tile_k`` keys per tile under a mask (smaller: less
      wasted in partial tiles); ``tile_k_unmasked`` keys per tile without one.
    - ``split_min``: partial tiles of masks that classify from index ranges split into quadrants
      down to this size, so the empty corners of a diagonal tile are skipped.
    - ``small``: problems with at most this many scores per head run all heads at once.
    - ``thread_min_work``: below this many multiply-adds, threads cost more than they save.
    - ``workers``: threads for tiles (None: ``QKV_NUM_THREADS`` or the usable cores).
    - ``backend``: "compiled" (Numba, the ``qkv[fast]`` extra), "numpy", or "auto" (compiled if
      Numba is installed). float64 always runs the NumPy step (it is the exactness dtype).
    - ``stats``: a :class:`TileStats` to fill, or None.
    """

    tile_q: int = 256
    tile_k: int = 512
    tile_k_unmasked: int = 1024
    split_min: int = 256
    small: int = 256 * 512
    thread_min_work: int = 1 << 22
    workers: int | None = None
    backend: str = "auto"
    stats: TileStats | None = None

    def __post_init__(self):
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name in ("tile_q", "tile_k", "tile_k_unmasked", "split_min") and (
                    not isinstance(value, int) or value < 1):
                raise ValueError(f"kernel_config: {f.name} must be a positive int, got {value!r}")
        if self.backend not in BACKENDS:
            raise ValueError(f"kernel_config: backend must be one of {BACKENDS}, "
                             f"got {self.backend!r}")
        if self.workers is not None and (not isinstance(self.workers, int) or self.workers < 1):
            raise ValueError(f"kernel_config: workers must be a positive int or None, "
                             f"got {self.workers!r}")

    def key_tile(self, masked: bool) -> int:
        return self.tile_k if masked else max(self.tile_k, self.tile_k_unmasked)

    def num_workers(self, work: float) -> int:
        if work < self.thread_min_work:
            return 1
        return self.workers or cpu_workers()

    def resolved_backend(self) -> str:
        """"compiled" or "numpy": what this config runs (float32/float16 problems)."""
        if self.backend == "auto":
            return "compiled" if has_numba() else "numpy"
        if self.backend == "compiled" and not has_numba():
            from .._install import install_hint

            raise ModuleNotFoundError(
                f"kernel_config(backend='compiled') needs Numba: {install_hint('fast')}",
                name="numba")
        return self.backend


_numba_found: bool | None = None  # find_spec's answer, looked up once per process


def has_numba() -> bool:
    """Whether Numba can be imported (without importing it: ``import qkv`` stays light)."""
    global _numba_found
    if "numba" in sys.modules:
        return sys.modules["numba"] is not None
    if _numba_found is None:  # a search of sys.path (~0.1 ms): once, not on every call
        _numba_found = importlib.util.find_spec("numba") is not None
    return _numba_found


def cpu_workers() -> int:
    """Threads for tiles: ``QKV_NUM_THREADS`` if set, else the cores this process may use."""
    env = os.environ.get("QKV_NUM_THREADS")
    if env:
        try:
            return max(1, int(env))
        except ValueError:
            raise ValueError(f"QKV_NUM_THREADS must be a positive int, got {env!r}") from None
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


_default = KernelConfig(backend=os.environ.get("QKV_BACKEND", "auto"))
_current: contextvars.ContextVar[KernelConfig] = contextvars.ContextVar("qkv_kernel_config",
                                                                         default=_default)


def current() -> KernelConfig:
    """The configuration in force in this context."""
    return _current.get()


@contextlib.contextmanager
def kernel_config(**changes):
    """Run a block with some of :class:`KernelConfig`'s fields changed; yields the config."""
    config = replace(current(), **changes)
    token = _current.set(config)
    try:
        yield config
    finally:
        _current.reset(token)


def blocks(n: int, size: int) -> list[tuple[int, int]]:
    """``[(start, stop), ...]`` cutting ``range(n)`` into pieces of ``size``."""
    return [(start, min(start + size, n)) for start in range(0, n, size)]


__all__ = ["EMPTY", "FULL", "PARTIAL", "KernelConfig", "TileStats", "blocks", "current",
           "kernel_config"]
