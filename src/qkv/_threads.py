"""Running independent tiles on all cores.

NumPy releases the GIL inside BLAS and ufunc loops, so a pool of Python threads, each running
whole tiles, keeps every core busy. While it runs, the BLAS is held to one thread: BLAS's own
threads on small tile GEMMs cost more in synchronisation than they gain, and two levels of
threads would oversubscribe the cores. That needs ``threadpoolctl`` (the ``qkv[fast]`` extra);
without it the pool still runs and the BLAS keeps its own setting.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor

_pool: ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()
_controller = None


def num_workers() -> int:
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


def _get_pool(n: int) -> ThreadPoolExecutor:
    global _pool
    with _pool_lock:
        if _pool is None or _pool._max_workers < n:
            _pool = ThreadPoolExecutor(max_workers=n, thread_name_prefix="qkv")
        return _pool


@contextlib.contextmanager
def single_threaded_blas():
    global _controller
    try:
        from threadpoolctl import ThreadpoolController
    except ImportError:
        yield
        return
    if _controller is None:
        _controller = ThreadpoolController()
    with _controller.limit(limits=1, user_api="blas"):
        yield


def run(worker: Callable[[int, object], None], items: Sequence, workers: int) -> None:
    """Call ``worker(worker_id, item)`` for every item, on up to ``workers`` threads.

    Items are handed out in order from a shared queue, so put the costliest first. ``worker_id``
    lets a worker keep private scratch buffers. Exceptions propagate to the caller.
    """
    workers = max(1, min(workers, len(items)))
    if workers == 1:
        for item in items:
            worker(0, item)
        return
    lock = threading.Lock()
    queue = iter(items)

    def drain(worker_id: int) -> None:
        while True:
            with lock:
                item = next(queue, None)
            if item is None:
                return
            worker(worker_id, item)

    pool = _get_pool(workers)
    with single_threaded_blas():
        futures = [pool.submit(drain, i) for i in range(workers)]
        for f in futures:
            f.result()
