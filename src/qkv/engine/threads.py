"""Running independent work items on all cores.

NumPy releases the GIL inside BLAS and ufunc loops, and the compiled tile step releases it
entirely, so a pool of Python threads, each running whole tiles, keeps every core busy. While it
runs, the BLAS is held to one thread: BLAS's own threads on small tile GEMMs cost more in
synchronisation than they gain, and two levels of threads would oversubscribe the cores. That
needs ``threadpoolctl`` (the ``qkv[fast]`` extra); without it the pool still runs and the BLAS
keeps its own setting.

A work item that itself calls qkv (a mask predicate that runs attention, say) runs that inner
call on its own thread: waiting on the pool from inside the pool would deadlock it.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import os
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor

_pool: ThreadPoolExecutor | None = None
_pool_size = 0
_pool_lock = threading.Lock()
_controller = None
_local = threading.local()  # .inside: this thread is running a work item


def _get_pool(n: int, cpus: set[int] | None = None) -> ThreadPoolExecutor:
    """The pool, with at least ``n`` threads. Its threads start on ``cpus`` (the caller's cores
    before :class:`_Places` pinned it): a thread inherits its creator's affinity, and the pool
    creates its threads lazily, from a caller that may be pinned to one core for its call — a
    thread that then never ran an item would keep that one core for good."""
    global _pool, _pool_size
    with _pool_lock:
        if _pool is None or _pool_size < n:
            _pool = ThreadPoolExecutor(max_workers=n, thread_name_prefix="qkv",
                                       initializer=_start_on, initargs=(cpus,))
            _pool_size = n
        return _pool


def _start_on(cpus: set[int] | None) -> None:
    """A pool thread's first act: leave the one core it may have inherited (see _get_pool)."""
    if cpus:
        try:
            os.sched_setaffinity(0, cpus)
        except OSError:
            pass


_blas_users = 0
_blas_lock = threading.Lock()
_blas_limit = None


@contextlib.contextmanager
def single_threaded_blas():
    """Hold the BLAS to one thread while any caller is inside (a no-op without threadpoolctl).

    The BLAS's thread count is process-wide, so concurrent callers share one limit, counted:
    the first to enter sets it, the last to leave restores it. (Nested, independent limits
    would restore in the wrong order and could leave the BLAS on one thread for good.)
    """
    global _controller, _blas_users, _blas_limit
    try:
        from threadpoolctl import ThreadpoolController
    except ImportError:
        yield
        return
    with _blas_lock:
        if _controller is None:
            _controller = ThreadpoolController()
        if _blas_users == 0:
            with _blas_control():
                _blas_limit = _controller.limit(limits=1, user_api="blas")
        _blas_users += 1
    try:
        yield
    finally:
        with _blas_lock:
            _blas_users -= 1
            if _blas_users == 0:
                with _blas_control():  # perhaps another thread than the one that set it
                    _blas_limit.restore_original_limits()
                _blas_limit = None


@contextlib.contextmanager
def _blas_control():
    """Let this thread change OpenBLAS's thread count, and no thread afterwards in particular.

    threadpoolctl ≥ 3.8 hands OpenBLAS's (process-wide) thread count to the first thread that
    sets it and silently ignores every other thread's limit until that thread lets go, which
    only its ``with threadpool_limits(...)`` blocks do. Our limit is shared by threads (set by
    the first caller in, restored by the last out, under ``_blas_lock``), so each change takes
    control first and gives it back after — else a request thread of the explorer or a batch
    thread of ``MiniLM.encode`` would run its GEMMs on threaded BLAS, rounding differently.
    """
    try:
        from threadpoolctl import OpenBLASController
        release = OpenBLASController.clear_controlling_thread
    except (ImportError, AttributeError):  # threadpoolctl < 3.8: any thread may set it
        yield
        return
    release(force=True)
    try:
        yield
    finally:
        release(force=True)


def blas_held() -> bool:
    """Is NumPy's BLAS held to one thread now (some caller inside :func:`single_threaded_blas`)?"""
    return _blas_users > 0


def one_blas_thread(fn: Callable) -> Callable:
    """Decorator: run ``fn`` inside :func:`single_threaded_blas`.

    For what a user looks at (a model's weights in the explorer, a notebook, a test): OpenBLAS's
    threaded kernels round float32 products differently from its one-thread kernels, and the
    thread count is process-wide, so without this a look's numbers would change in the last bits
    with whether a concurrent caller (another request to the explorer) held the BLAS to one
    thread. The same bits wherever and however often it runs.
    """
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        with single_threaded_blas():
            return fn(*args, **kwargs)
    return wrapper


def run(worker: Callable[[int, object], None], items: Sequence, workers: int, *,
        hold_blas: bool = True, pin: bool = True) -> None:
    """Call ``worker(worker_id, item)`` for every item, on up to ``workers`` threads: the
    caller's own (worker 0) and ``workers − 1`` of the pool.

    Items are handed out in order from a shared queue, so put the costliest first. ``worker_id``
    lets a worker keep private scratch buffers. Exceptions propagate to the caller (the first one
    raised; the other threads stop taking items). With ``hold_blas`` the BLAS runs one thread
    even when the items run on one: the kernel's GEMMs are tile-sized, and BLAS threads on them
    cost more than they give — on a busy machine, 10–30× more (measured: 13 ms instead of
    0.4 ms for a 256 × 64 × 1024 product under a competing load). Holding it costs ~30 µs, so
    tiny calls pass ``hold_blas=False``, as do items whose GEMMs run on MKL (:mod:`.gemm`).
    With ``pin`` (Linux) each worker keeps one core for the call (:class:`_Places`).
    """
    workers = max(1, min(workers, len(items)))
    if workers == 1 or getattr(_local, "inside", False):
        with single_threaded_blas() if hold_blas else contextlib.nullcontext():
            for item in items:
                worker(0, item)
        return
    lock = threading.Lock()
    queue = iter(items)
    failed = threading.Event()

    def drain(worker_id: int) -> None:
        _local.inside = True
        places.take(worker_id)
        try:
            while not failed.is_set():
                with lock:
                    item = next(queue, None)
                if item is None:
                    return
                try:
                    worker(worker_id, item)
                except BaseException:
                    failed.set()
                    raise
        finally:
            _local.inside = False
            places.leave(worker_id)

    # The caller is worker 0 and the pool lends workers − 1 helpers: one thread fewer to wake,
    # and the caller, already running, starts on the first item at once (measured on a loaded
    # 2-vCPU machine, N=512: a sleeping pool thread took 0.15–7 ms to start its first item, the
    # caller 0.1–0.15 ms). A helper that has not started when the items run out is cancelled.
    # The BLAS's thread count is set before the caller is pinned and restored after: OpenBLAS
    # (re)creates its server threads inside that call when they are down (after a fork, say),
    # and a thread inherits its creator's affinity — made by a pinned caller, they kept its one
    # core for good (NumPy's and SciPy's OpenBLAS, seen in the full suite).
    with single_threaded_blas() if hold_blas else contextlib.nullcontext():
        places = _Places.here() if pin else _Places([], 0, None)
        pool = _get_pool(workers - 1, places.caller_mask or set(_allowed_cpus()))
        helpers = [pool.submit(drain, i) for i in range(1, workers)]
        error = None
        try:
            drain(0)
        except BaseException as exc:  # the helpers still hold items: wait for them first
            error = exc
        finally:
            places.release()
        for f in helpers:
            if f.cancel():  # never started (the pool busy with another caller): nothing left
                continue
            exc = f.exception()
            error = error or exc
        if error is not None:
            raise error


class _Places:
    """One core per worker for the length of a call (Linux; elsewhere nothing is pinned).

    Why: the workers hand the GIL to each other between their C calls, and a thread woken by
    another is often placed on the waker's core; on a 2-vCPU VM the scheduler then left both
    workers sharing one core for most of a 50 ms call (measured: runs alternated between 40 ms
    at 1.65 cores busy and 55–65 ms at 1.1–1.3, the two threads' CPUs read from /proc; pinned,
    39–43 ms every run). So the caller keeps the core it is on, pinned until the call ends (its
    own affinity is restored then), and helper i takes the i-th core after it among the
    process's allowed ones; each thread gets its mask back when it is done. Beside a busy core
    the shared queue still balances: a worker pinned next to another process takes fewer items.
    Only one call at a time pins: two callers (an explorer's concurrent requests, say) that
    started on the same core would otherwise both stay there, so a call that starts while
    another is pinned leaves its threads to the scheduler.
    """

    _active = 0  # calls pinned now
    _lock = threading.Lock()

    def __init__(self, cpus: list[int], start: int, caller_mask: set[int] | None):
        self.cpus, self.start, self.caller_mask = cpus, start, caller_mask

    @classmethod
    def here(cls) -> _Places:
        cpus, cpu = _allowed_cpus(), _current_cpu()
        if cpu is None or len(cpus) < 2 or cpu not in cpus:
            return cls([], 0, None)
        with cls._lock:
            if cls._active:
                return cls([], 0, None)
            cls._active += 1
        try:
            os.sched_setaffinity(0, {cpu})
        except OSError:
            with cls._lock:
                cls._active -= 1
            return cls([], 0, None)
        return cls(cpus, cpus.index(cpu), set(cpus))

    def take(self, worker_id: int) -> None:
        if worker_id == 0 or not self.cpus:
            return
        try:
            os.sched_setaffinity(0, {self.cpus[(self.start + worker_id) % len(self.cpus)]})
        except OSError:
            pass

    def leave(self, worker_id: int) -> None:
        """A helper done with this call's items: back to every allowed core."""
        if worker_id == 0 or not self.cpus:
            return
        try:
            os.sched_setaffinity(0, self.cpus)
        except OSError:
            pass

    def release(self) -> None:
        """The caller done with its items: its own mask back, and the next call may pin."""
        if self.caller_mask is None:
            return
        try:
            os.sched_setaffinity(0, self.caller_mask)
        except OSError:
            pass
        with _Places._lock:
            _Places._active -= 1
        self.caller_mask = None


def _allowed_cpus() -> list[int]:
    try:
        return sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return []


_sched_getcpu = None


def _current_cpu() -> int | None:
    """The CPU this thread runs on now (glibc's sched_getcpu, ~1 µs), or None if unknown."""
    global _sched_getcpu
    if _sched_getcpu is None:
        try:
            _sched_getcpu = ctypes.CDLL(None).sched_getcpu
            _sched_getcpu.restype = ctypes.c_int
        except (OSError, AttributeError):
            _sched_getcpu = False
    if not _sched_getcpu:
        return None
    cpu = _sched_getcpu()
    return cpu if cpu >= 0 else None
