"""The operand contract: what the kernel's paths read of q, k, v and dout, and what they make of
the rest. Every path takes its array operands through this module; none reads strides itself.

What a caller may pass (after :func:`qkv.engine.problem.prepare`: float16/32/64, batch dims
broadcast): **any memory layout** — C or Fortran order, transposed or head-split views, reversed
(negative strides), strided slices, broadcast views (zero strides), unaligned buffers, read-only
arrays. Nothing is ever written into an operand.

What each path needs, and what it is given:

============================  ==========  =========================================  ==========
path                          operand     needs                                      otherwise
============================  ==========  =========================================  ==========
every tiled path              q           ``q · scale`` in the compute dtype,        always a
(forward, weights, backward,              C-contiguous (the GEMM's B, the fused      copy (a
decode)                                   loop's rows)                               tile/head)
tiled, Python loop            k, v        the compute dtype, any strides             float16:
                                          (:func:`qkv.engine.gemm.matmul` describes  one copy
                                          each tile to the BLAS, or falls back to    per call
                                          ``np.matmul``)
fused loop (forward and       k, v        float32 rows: unit stride along D,         one C copy
backward, both BLASes)                    aligned, non-overlapping, forward          per call,
                                          (:func:`gemm_rows`)                        counted
fused backward                dout        C-contiguous, compute dtype                a copy per
                                                                                     head
small (all heads at once)     q, k, v     any strides (``np.matmul``)                —
paged decode                  k, v        the pool's rows gathered per tile          —
============================  ==========  =========================================  ==========

The fused loop (:mod:`.step.fused`) also reads every operand's row stride from its own strides
and raises on one it cannot hand to the BLAS — a second line behind this contract, so that a
layout it was not told of is an error, never a wrong answer (a column-major q read as
row-major was one: issue 48).

Copies this module makes because of a caller's layout are counted in ``TileStats.copies``
(operand name → bytes), so tests and benchmarks can see what a layout costs.
"""

from __future__ import annotations

import numpy as np

__all__ = ["compute_rows", "gemm_rows", "read_only", "scaled_rows"]


def scaled_rows(x: np.ndarray, scale, dtype) -> np.ndarray:
    """``x · scale`` as a new C-contiguous array in ``dtype``, whatever x's layout: a block of
    queries as every tiled path multiplies it (the GEMM's operand, the fused loop's rows).
    ``np.multiply`` alone keeps a Fortran-ordered input Fortran-ordered (order "K")."""
    dtype = np.dtype(dtype)
    out = np.empty(x.shape, dtype=dtype)  # C order, whatever x's
    np.multiply(x, dtype.type(scale), out=out, dtype=dtype)
    return out


def gemm_rows(x: np.ndarray) -> bool:
    """Can x's rows (last axis) be handed to a BLAS call as a pointer and a row stride: unit
    stride along them, aligned, rows that neither overlap nor run backwards (a length-1 axis may
    have any stride: NumPy leaves it 0 in a broadcast view)?"""
    row = x.strides[-2] if x.ndim > 1 else 0
    return ((x.strides[-1] == x.itemsize or x.shape[-1] <= 1) and x.flags.aligned
            and row % x.itemsize == 0
            and (row >= x.shape[-1] * x.itemsize or x.shape[-2] <= 1))


def compute_rows(x: np.ndarray, dtype, name: str, stats=None) -> np.ndarray:
    """``x`` in ``dtype`` with rows a BLAS call can take (:func:`gemm_rows`): x itself when it
    has them, else one C-contiguous copy — counted in ``stats.copies[name]`` (bytes) when it is
    the layout, not the dtype, that made it (a float16 input is converted anyway)."""
    if x.dtype == dtype and gemm_rows(x):
        return x
    rows = np.ascontiguousarray(x, dtype=dtype)
    if stats is not None and x.dtype == dtype:
        stats.add_copy(name, rows.nbytes)
    return rows


def read_only(x: np.ndarray) -> np.ndarray:
    """A read-only view of x: the fused loop is built for one signature (a broadcast view is
    read-only, so every k and v is handed over as one)."""
    view = x.view()
    view.flags.writeable = False
    return view
