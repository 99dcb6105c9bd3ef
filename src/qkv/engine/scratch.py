"""The workers' score-tile buffers, and the few kept between calls.

Each worker of a tiled call needs one ``(tk, tq)`` buffer per dtype for its tiles' scores (2 MiB
at the default 512 × 1024 float32 tiles). Allocated afresh per call, such buffers can cost more
than their GEMMs: glibc may hand them back to the system when the call ends, and the next call
then faults every page in again — measured ~8.4 MiB of faults a call and 19–28% of the time at
H=8, N=1000, D=80 (``benchmarks/page_faults.py``). So a call takes its buffers from a small
pool and gives them back when it ends.

What the pool holds between calls is bounded: at most :func:`~qkv.engine.tiles.cpu_workers`
buffers (one per worker of a call on all cores), each at most ``KEEP_MAX_BYTES``; concurrent
calls beyond that allocate their own and drop them. :func:`release_scratch` empties it —
measurements of a call's peak memory call it first, so that the peak counts the tiles as a
fresh process's call allocates them.
"""

from __future__ import annotations

import threading

import numpy as np

from .tiles import cpu_workers

KEEP_MAX_BYTES = 4 << 20  # a float64 tile at the default sizes; larger ones are not kept

_kept: list[np.ndarray] = []  # flat buffers, free for the next call
_lock = threading.Lock()


def release_scratch() -> int:
    """Free the tile buffers kept between calls; returns the bytes freed."""
    with _lock:
        freed = sum(buf.nbytes for buf in _kept)
        _kept.clear()
    return freed


def kept_bytes() -> int:
    """Bytes of tile buffers held between calls (at most ``cpu_workers() × KEEP_MAX_BYTES``)."""
    with _lock:
        return sum(buf.nbytes for buf in _kept)


def _take(size: int, dtype: np.dtype) -> np.ndarray:
    """The smallest free flat buffer of ``dtype`` with at least ``size`` elements (a small tile
    must not take the buffer a large one needs), or a new one."""
    with _lock:
        fits = [i for i, buf in enumerate(_kept) if buf.dtype == dtype and buf.size >= size]
        if fits:
            return _kept.pop(min(fits, key=lambda i: _kept[i].size))
    return np.empty(size, dtype=dtype)


def _give_back(buffers) -> None:
    limit = cpu_workers()  # an affinity syscall: once per call, not per buffer under the lock
    with _lock:
        for buf in buffers:
            if buf.nbytes <= KEEP_MAX_BYTES and len(_kept) < limit:
                _kept.append(buf)


class Scratch:
    """One call's tile buffers, one per (worker, dtype); a context manager that returns them
    to the pool when the call ends::

        with Scratch() as scratch:
            s = scratch.tile(worker_id, tk, tq, np.float32)  # (tk, tq), contents undefined
    """

    def __init__(self):
        self._buffers: dict[tuple[int, np.dtype], np.ndarray] = {}

    def tile(self, worker_id: int, rows: int, cols: int, dtype) -> np.ndarray:
        key = (worker_id, np.dtype(dtype))
        buf = self._buffers.get(key)
        if buf is None or buf.size < rows * cols:
            buf = self._buffers[key] = _take(rows * cols, key[1])
        return buf[: rows * cols].reshape(rows, cols)

    def __enter__(self) -> Scratch:
        return self

    def __exit__(self, *exc) -> None:
        _give_back(self._buffers.values())
        self._buffers.clear()
