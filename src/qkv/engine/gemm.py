"""The tile GEMMs: ``out = a @ b`` or ``out += a @ b``, on MKL when it pays, else NumPy's.

The kernel's time is its two GEMMs per tile (``K Qᵀ`` and ``P V``); the rest is the step. NumPy's
wheels bring OpenBLAS, whose single-thread kernels on the kernel's tile shapes (512 × 64 · 64 ×
1024 and back) ran at 0.75–0.8 of Intel MKL's on an Intel Xeon with AVX-512 (measured:
``python benchmarks/tile_gemm.py``). So with the ``qkv[mkl]`` extra (Intel's ``mkl`` wheel)
installed on an Intel CPU, the tile GEMMs call MKL's ``cblas_?gemm`` through ctypes (which
releases the GIL for the call), *sequential*: qkv's own pool supplies the threads, as it does
for OpenBLAS held to one thread. MKL also accumulates in place (``beta = 1``), where NumPy needs
a temporary and an add. On other CPUs (AMD's, where MKL picks slower paths) or without the
extra, NumPy's matmul runs.

``KernelConfig(gemm=...)``/``QKV_GEMM``: "auto" (the rule above), "mkl" (MKL or a clear error),
"numpy". :func:`describe` says which runs and why.

Only plain 2-D float32/float64 operands with one unit stride (a tile, or a transposed tile)
take MKL; anything else (a broadcast, a strided view, float16, an empty tile) is NumPy's.
"""

from __future__ import annotations

import ctypes
import functools
import threading
from pathlib import Path

import numpy as np

GEMMS = ("auto", "mkl", "numpy")
_ROW_MAJOR, _NO_TRANS, _TRANS = 101, 111, 112
_SEQUENTIAL = 1  # MKL_THREADING_SEQUENTIAL

_lock = threading.Lock()
_mkl: tuple | None = None  # (sgemm, dgemm) once loaded
_why_not: str | None = None  # why MKL is not used (None: not looked yet, or loaded)
_looked = False


def _find_mkl_rt() -> Path | None:
    """libmkl_rt from the ``mkl`` wheel's files (it installs into the environment's lib/)."""
    try:
        from importlib import metadata

        files = metadata.files("mkl") or []
    except Exception:  # not installed
        return None
    for f in files:
        if f.name.startswith("libmkl_rt.so"):
            path = Path(f.locate()).resolve()
            if path.exists():
                return path
    return None


@functools.lru_cache(maxsize=1)
def _intel_cpu() -> bool:
    """Is this an Intel CPU? (read once: every call resolves the GEMM choice)"""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("vendor_id"):
                    return "GenuineIntel" in line
    except OSError:
        pass
    return False


def _load() -> None:
    """Load MKL once (thread-safe); sets ``_mkl`` or ``_why_not``."""
    global _mkl, _why_not, _looked
    if _looked:
        return
    with _lock:
        if _looked:
            return
        _looked = True
        path = _find_mkl_rt()
        if path is None:
            _why_not = "MKL is not installed (pip install 'qkv[mkl]')"
            return
        try:
            lib = ctypes.CDLL(str(path))
            lib.MKL_Set_Threading_Layer.argtypes = [ctypes.c_int]
            lib.MKL_Set_Threading_Layer.restype = ctypes.c_int
            layer = lib.MKL_Set_Threading_Layer(_SEQUENTIAL)
        except (OSError, AttributeError) as exc:
            _why_not = f"MKL did not load from {path}: {exc}"
            return
        if layer != _SEQUENTIAL:  # another library in this process chose MKL's threads first
            _why_not = (f"MKL's threading layer was already set to {layer} by another library; "
                        "qkv needs the sequential one (its own pool supplies the threads)")
            return
        p, i = ctypes.c_void_p, ctypes.c_int
        fns = []
        for name, real in (("cblas_sgemm", ctypes.c_float), ("cblas_dgemm", ctypes.c_double)):
            fn = getattr(lib, name)
            fn.argtypes = [i, i, i, i, i, i, real, p, i, p, i, real, p, i]
            fn.restype = None
            fns.append(fn)
        _mkl = tuple(fns)


def address(dtype) -> int | None:
    """The address of MKL's ``cblas_sgemm`` (float32) or ``cblas_dgemm`` (float64) — the
    C function a compiled loop calls (:mod:`.step.fused`), with MKL's 32-bit integers — or None
    when MKL is not loaded."""
    _load()
    if _mkl is None or np.dtype(dtype) not in (np.float32, np.float64):
        return None
    return ctypes.cast(_mkl[0 if np.dtype(dtype) == np.float32 else 1], ctypes.c_void_p).value


def mkl_available() -> bool:
    """Is MKL installed and loadable with its sequential threading layer?"""
    _load()
    return _mkl is not None


def resolve(choice: str) -> str:
    """"mkl" or "numpy" for a configured ``gemm`` choice (see the module doc)."""
    if choice not in GEMMS:
        raise ValueError(f"kernel_config: gemm must be one of {GEMMS}, got {choice!r}")
    if choice == "numpy":
        return "numpy"
    if choice == "mkl":
        if not mkl_available():
            from .._install import install_hint

            raise ModuleNotFoundError(
                f"kernel_config(gemm='mkl'): {_why_not or 'MKL is not available'}; "
                f"{install_hint('mkl')}", name="mkl")
        return "mkl"
    return "mkl" if _intel_cpu() and mkl_available() else "numpy"


def describe(choice: str = "auto") -> str:
    """One line: which GEMM the tiles run, and why."""
    used = resolve(choice)
    if used == "mkl":
        return "MKL (sequential, qkv's threads)"
    if choice == "numpy":
        return "NumPy's BLAS (asked for)"
    if not _intel_cpu():
        return "NumPy's BLAS (not an Intel CPU: MKL is not used)"
    return f"NumPy's BLAS ({_why_not})"


def _operand(x: np.ndarray) -> tuple[int, int] | None:
    """(transpose flag, leading dimension) of a 2-D operand MKL can read in place, else None."""
    rows, cols = x.shape
    size = x.itemsize
    s0, s1 = x.strides
    # a length-1 axis is never stepped along, and NumPy may give it any stride (0 for a row
    # sliced off a broadcast): read it as packed, so that one row takes MKL as any tile does
    s0 = cols * size if rows == 1 else s0
    s1 = size if cols == 1 else s1
    if s1 == size and s0 >= max(1, cols) * size and s0 % size == 0:
        return _NO_TRANS, s0 // size
    if s0 == size and s1 >= max(1, rows) * size and s1 % size == 0:
        return _TRANS, s1 // size
    return None


def matmul(a: np.ndarray, b: np.ndarray, out: np.ndarray | None = None, *,
           accumulate: bool = False, use: str = "numpy") -> np.ndarray:
    """``a @ b`` for a ``(M, K)`` and b ``(K, N)``: into ``out (M, N)`` if given (added to it
    with ``accumulate``), else a new array. ``use`` is :func:`resolve`'s answer."""
    if use == "mkl":
        done = _mkl_matmul(a, b, out, accumulate)
        if done is not None:
            return done
    if not accumulate:
        return np.matmul(a, b, out=out)
    out += a @ b
    return out


def _mkl_matmul(a, b, out, accumulate) -> np.ndarray | None:
    dtype = a.dtype
    if (dtype not in (np.float32, np.float64) or b.dtype != dtype or a.ndim != 2 or b.ndim != 2
            or a.shape[1] != b.shape[0] or 0 in a.shape or 0 in b.shape
            or not (a.flags.aligned and b.flags.aligned)):
        return None
    m, n = a.shape[0], b.shape[1]
    if out is None:
        out = np.empty((m, n), dtype=dtype)
    elif (out.dtype != dtype or out.shape != (m, n) or out.strides[1] != out.itemsize
          or out.strides[0] < n * out.itemsize or out.strides[0] % out.itemsize
          or not out.flags.aligned):
        return None
    op_a, op_b = _operand(a), _operand(b)
    if op_a is None or op_b is None:
        return None
    if _mkl is None:
        _load()
    fn = _mkl[0] if dtype == np.float32 else _mkl[1]
    fn(_ROW_MAJOR, op_a[0], op_b[0], m, n, a.shape[1], 1.0, a.ctypes.data, op_a[1],
       b.ctypes.data, op_b[1], 1.0 if accumulate else 0.0, out.ctypes.data,
       out.strides[0] // out.itemsize)
    return out


__all__ = ["GEMMS", "address", "describe", "matmul", "mkl_available", "resolve"]
