"""Running batches of sentences on all cores: one batch per thread, one BLAS thread each.

Encoding is a chain of GEMMs on small batches (64 sentences × ~20 tokens). Letting the BLAS
split each GEMM across cores costs a thread synchronisation per product — NumPy's stacked
``(B, N, d) @ (d, k)`` makes one BLAS call, and one synchronisation, per sentence — and on a
busy machine every synchronisation waits for a descheduled thread: measured on the shared
2-core box, default OpenBLAS threading made ``encode`` 2–3× slower than one BLAS thread. So, as
qkv's attention kernel does for its tiles, the BLAS is held to one thread and the parallelism
is across batches instead (NumPy releases the GIL inside BLAS and ufunc loops).

Needs ``threadpoolctl`` (in the ``model`` extra); without it, batches run one after another
with the BLAS's own threading.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

from ..engine.tiles import cpu_workers as num_workers

T = TypeVar("T")
R = TypeVar("R")


@contextlib.contextmanager
def one_blas_thread() -> Iterator[bool]:
    """Hold the BLAS to one thread inside the block; yields whether that was possible."""
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:
        yield False
        return
    with threadpool_limits(limits=1, user_api="blas"):
        yield True


def map_batches(fn: Callable[[T], R], items: Sequence[T], workers: int | None = None) -> list[R]:
    """``[fn(item) for item in items]``, on up to ``workers`` threads (default: the cores)."""
    with one_blas_thread() as limited:
        workers = min(len(items), workers or num_workers()) if limited else 1
        if workers <= 1:
            return [fn(item) for item in items]
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="qkv-minilm") as pool:
            return list(pool.map(fn, items))
