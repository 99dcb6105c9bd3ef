"""The tile GEMMs: ``out = a @ b`` or ``out += a @ b``, called on a BLAS's ``cblas_?gemm``.

The kernel's time is its two GEMMs per tile (``K Qᵀ`` and ``P V``); the rest is the step. Two
BLASes can run them, each through its ILP64 ``cblas_?gemm`` (64-bit sizes), called through
ctypes (which releases the GIL for the call) or from the compiled tile loop (:mod:`.step.fused`,
which takes the same function's address), so the two loops give the same bits:

- "numpy": the BLAS NumPy was built with (its wheels' OpenBLAS, ``scipy_cblas_?gemm64_``),
  held to one thread while qkv's pool runs (:mod:`.threads`);
- "mkl": Intel's MKL, with the ``qkv[mkl]`` extra (``cblas_?gemm_64``), loaded *sequential*:
  qkv's own pool supplies the threads.

Calling the BLAS directly accumulates in place (``beta = 1``), where ``np.matmul`` needs a
temporary and an add. "auto" picks MKL on an Intel CPU when the extra is installed (OpenBLAS's
single-thread kernels on the tile shapes ran at 0.75–0.8 of MKL's on an Intel Xeon with
AVX-512), else NumPy's: on an AMD EPYC (Zen 4) OpenBLAS's ran at 92–98 GFLOP/s a core in the
loop against MKL's 87–95 (``QKV_GEMM=numpy python benchmarks/tile_breakdown.py``, then
``QKV_GEMM=mkl``).

``KernelConfig(gemm=...)``/``QKV_GEMM``: "auto" (the rule above), "mkl" (MKL or a clear error),
"numpy". :func:`describe` says which runs and why.

Only plain 2-D float32/float64 operands with one unit stride (a tile, or a transposed tile)
take the direct call; anything else (a broadcast, a strided view, float16, an empty tile), or a
NumPy whose BLAS exports no ILP64 ``cblas_?gemm``, runs ``np.matmul``.
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
_mkl: tuple | None = None  # (sgemm, dgemm) ctypes functions once loaded
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
        fns = _ilp64(lib, "cblas_sgemm_64", "cblas_dgemm_64")
        if fns is None:
            _why_not = f"MKL at {path} has no ILP64 cblas_sgemm_64 (MKL ≥ 2024 has)"
            return
        _mkl = fns


def _ilp64(lib, sgemm: str, dgemm: str) -> tuple | None:
    """ctypes functions ``(sgemm, dgemm)`` of a BLAS's ILP64 CBLAS interface (the enums C ints,
    sizes and strides 64-bit), or None if ``lib`` lacks them."""
    p, e, i = ctypes.c_void_p, ctypes.c_int, ctypes.c_int64
    fns = []
    for name, real in ((sgemm, ctypes.c_float), (dgemm, ctypes.c_double)):
        fn = getattr(lib, name, None)
        if fn is None:
            return None
        fn.argtypes = [e, e, e, i, i, i, real, p, i, p, i, real, p, i]
        fn.restype = None
        fns.append(fn)
    return tuple(fns)


@functools.lru_cache(maxsize=1)
def _numpy_blas() -> tuple | None:
    """NumPy's BLAS's ILP64 ``(sgemm, dgemm)``, or None (a NumPy built against another BLAS)."""
    # dlsym on NumPy's extension module searches the libraries it was linked with: its BLAS
    try:
        core = getattr(np, "_core", None) or np.core  # NumPy 2 / NumPy 1.x
        lib = ctypes.CDLL(core._multiarray_umath.__file__)
    except (OSError, AttributeError):
        return None
    for prefix, suffix in (("scipy_", "64_"), ("", "64_")):
        fns = _ilp64(lib, f"{prefix}cblas_sgemm{suffix}", f"{prefix}cblas_dgemm{suffix}")
        if fns is not None:
            return fns
    return None


def _functions(use: str) -> tuple | None:
    if use == "mkl":
        _load()
        return _mkl
    return _numpy_blas() if use == "numpy" else None


def address(dtype, use: str) -> int | None:
    """The address of the ILP64 ``cblas_sgemm`` (float32) or ``cblas_dgemm`` (float64) that
    :func:`matmul` calls for ``use`` ("mkl" or "numpy"): the C function a compiled loop calls
    (:mod:`.step.fused`). None when that BLAS is not loaded or exports none."""
    fns = _functions(use)
    if fns is None or np.dtype(dtype) not in (np.float32, np.float64):
        return None
    return ctypes.cast(fns[0 if np.dtype(dtype) == np.float32 else 1], ctypes.c_void_p).value


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
    """(transpose flag, leading dimension) of a 2-D operand a BLAS can read in place, else
    None."""
    rows, cols = x.shape
    size = x.itemsize
    s0, s1 = x.strides
    # a length-1 axis is never stepped along, and NumPy may give it any stride (0 for a row
    # sliced off a broadcast): read it as packed, so that one row takes the BLAS as any tile does
    s0 = cols * size if rows == 1 else s0
    s1 = size if cols == 1 else s1
    if s1 == size and s0 >= max(1, cols) * size and s0 % size == 0:
        return _NO_TRANS, s0 // size
    if s0 == size and s1 >= max(1, rows) * size and s1 % size == 0:
        return _TRANS, s1 // size
    return None


def matmul(a: np.ndarray, b: np.ndarray, out: np.ndarray | None = None, *,
           accumulate: bool = False, alpha: float = 1.0, use: str = "numpy") -> np.ndarray:
    """``alpha · a @ b`` for a ``(M, K)`` and b ``(K, N)``: into ``out (M, N)`` if given (added
    to it with ``accumulate``), else a new array. ``use`` is :func:`resolve`'s answer."""
    fns = _functions(use)
    if fns is not None:
        done = _blas_matmul(fns, a, b, out, accumulate, alpha)
        if done is not None:
            return done
    if not accumulate and alpha == 1:
        return np.matmul(a, b, out=out)
    product = np.matmul(a, b)
    if alpha != 1:
        product *= product.dtype.type(alpha)
    if out is None:
        return product
    if accumulate:
        out += product
    else:
        out[...] = product
    return out


def _blas_matmul(fns, a, b, out, accumulate, alpha=1.0) -> np.ndarray | None:
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
    fn = fns[0] if dtype == np.float32 else fns[1]
    fn(_ROW_MAJOR, op_a[0], op_b[0], m, n, a.shape[1], alpha, a.ctypes.data, op_a[1],
       b.ctypes.data, op_b[1], 1.0 if accumulate else 0.0, out.ctypes.data,
       out.strides[0] // out.itemsize)
    return out


__all__ = ["GEMMS", "address", "describe", "matmul", "mkl_available", "resolve"]
