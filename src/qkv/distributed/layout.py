"""Which positions of a sequence each rank holds, and moving whole arrays to and from shards.

A sequence of N positions is cut into near-equal chunks (the first N mod C chunks are one longer,
so N need not divide by the number of ranks P):

    contiguous   C = P chunks;  rank r holds chunk r.
    zigzag       C = 2P chunks; rank r holds chunks r and 2P−1−r.

Under a causal mask the work of a query chunk grows with its position, so contiguous shards
leave rank P−1 with P times the work of rank 0; zigzag pairs an early chunk with a late one and
every rank does the same work (Brandon et al., 2023, "Striped Attention"; the zigzag pairing
is from Llama 3's context parallelism).

    positions(n, rank, size, layout)  the global positions rank ``rank`` holds, in order
    shard(x, comm, layout, axis)      this rank's part of a full array
    gather(x_local, comm, layout, axis)  the full array, on every rank
"""

from __future__ import annotations

import numpy as np

from ._mpi import communicator

__all__ = ["LAYOUTS", "check_layout", "gather", "positions", "shard", "shard_length"]

LAYOUTS = ("zigzag", "contiguous")


def check_layout(layout) -> str:
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be 'zigzag' or 'contiguous', got {layout!r}")
    return layout


def _chunk(n: int, chunks: int, c: int) -> tuple[int, int]:
    """[start, stop) of chunk c when n positions are cut into ``chunks`` near-equal chunks."""
    base, extra = divmod(n, chunks)
    start = c * base + min(c, extra)
    return start, start + base + (c < extra)


def _ranges(n: int, rank: int, size: int, layout: str) -> list[tuple[int, int]]:
    if layout == "contiguous":
        return [_chunk(n, size, rank)]
    return [_chunk(n, 2 * size, rank), _chunk(n, 2 * size, 2 * size - 1 - rank)]


def _check_rank(n, rank, size) -> None:
    for name, x in (("n", n), ("rank", rank), ("size", size)):
        if isinstance(x, bool) or not isinstance(x, int | np.integer) or x < 0:
            raise ValueError(f"{name} must be a non-negative int, got {x!r}")
    if not 0 <= rank < size:
        raise ValueError(f"rank must lie in [0, size={size}), got {rank}")


def positions(n: int, rank: int, size: int, layout: str = "zigzag") -> np.ndarray:
    """The global positions ``(n_local,)`` that rank ``rank`` of ``size`` holds, in order."""
    _check_rank(n, rank, size)
    check_layout(layout)
    return np.concatenate([np.arange(a, b) for a, b in _ranges(n, rank, size, layout)])


def shard_length(n: int, rank: int, size: int, layout: str = "zigzag") -> int:
    """How many of the ``n`` positions rank ``rank`` holds."""
    _check_rank(n, rank, size)
    return sum(b - a for a, b in _ranges(n, rank, size, check_layout(layout)))


def _axis(x: np.ndarray, axis, name: str) -> int:
    if isinstance(axis, bool) or not isinstance(axis, int | np.integer):
        raise TypeError(f"axis must be an int (the sequence axis, default -2), got {axis!r}")
    if not -x.ndim <= axis < x.ndim:
        raise ValueError(f"axis={axis} is out of range for {name} of shape {x.shape}")
    return int(axis) % x.ndim


def shard(x, comm=None, layout: str = "zigzag", axis: int = -2) -> np.ndarray:
    """This rank's part of the full array ``x`` along the sequence ``axis`` (a copy).

    ``x`` is the whole array, the same on every rank, e.g. q of shape ``(..., H, N, D)``; the
    result has ``shard_length(N, rank, size, layout)`` positions along ``axis``.
    """
    comm = communicator(comm)
    x = np.asarray(x)
    ax = _axis(x, axis, "x")
    check_layout(layout)
    ranges = _ranges(x.shape[ax], comm.Get_rank(), comm.Get_size(), layout)
    parts = [x[(slice(None),) * ax + (slice(a, b),)] for a, b in ranges]
    return np.ascontiguousarray(np.concatenate(parts, axis=ax))


def gather(x_local, comm=None, layout: str = "zigzag", axis: int = -2) -> np.ndarray:
    """The full array on every rank, from each rank's shard ``x_local`` (the inverse of shard).

    Collective: every rank of ``comm`` must call it. All shards need the same dtype and the same
    shape except along ``axis``, and their lengths must be those ``layout`` gives.
    """
    comm = communicator(comm)
    x = np.ascontiguousarray(x_local)
    ax = _axis(x, axis, "x_local")
    check_layout(layout)
    size = comm.Get_size()
    metas = comm.allgather((x.shape, x.dtype.str, ax))
    shapes = [m[0] for m in metas]
    rest = [s[:ax] + s[ax + 1:] for s in shapes]
    if any(m[1] != metas[0][1] for m in metas) or any(r != rest[0] for r in rest) or \
            any(m[2] != ax or len(m[0]) != x.ndim for m in metas):
        raise ValueError(
            f"gather: shards differ across ranks (shapes {shapes}, dtypes "
            f"{[m[1] for m in metas]}, axes {[m[2] for m in metas]}): every rank needs the same "
            "dtype and shape except along axis"
        )
    lengths = [s[ax] for s in shapes]
    n = sum(lengths)
    expected = [shard_length(n, r, size, layout) for r in range(size)]
    if lengths != expected:
        raise ValueError(
            f"gather: shard lengths along axis {axis} are {lengths}, but a {layout} layout of "
            f"{n} positions over {size} ranks has lengths {expected}; shard with the same layout"
        )
    moved = np.ascontiguousarray(np.moveaxis(x, ax, 0))  # (n_local, ...)
    row_bytes = int(np.prod(moved.shape[1:], dtype=np.int64)) * x.dtype.itemsize
    recv = np.empty((n, *moved.shape[1:]), dtype=x.dtype)
    # bytes, so that every dtype travels (MPI has no float16)
    comm.Allgatherv(moved.reshape(-1).view(np.uint8),
                    [recv.reshape(-1).view(np.uint8), [length * row_bytes for length in lengths]])
    full = np.empty_like(recv)
    start = 0
    for r, length in enumerate(lengths):  # rank r's rows go back to its global positions
        full[positions(n, r, size, layout)] = recv[start:start + length]
        start += length
    return np.ascontiguousarray(np.moveaxis(full, 0, ax))
