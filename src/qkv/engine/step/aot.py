"""The compiled tile step built ahead of time, so a fresh process's first call skips Numba.

A fresh process that runs :mod:`.compiled` through Numba's JIT pays for ``import numba`` and for
the compile (1.8 s with an empty cache) or the cache's load (0.57 s). ``qkv warm`` (run by
``scripts/install.sh``) builds the same three functions once with ``numba.pycc`` into a small
extension module in the per-user cache — ``$QKV_CACHE_DIR``, else ``~/.cache/qkv`` — and
:func:`load` imports it with no Numba at all.

The module's file name carries :func:`key`: a hash of the step's sources (:mod:`.compiled`,
:mod:`.aot_build`, this file), the Numba, llvmlite, NumPy and Python versions, and this CPU (the
build targets the host CPU, as the JIT does, so both vectorise alike and agree bitwise). A stale
module (other sources, versions or CPU) is never found; one whose bytes differ from the digest
the build wrote beside it (truncated, overwritten: opening it could kill the process) or that
cannot be imported is skipped with a one-line warning; either way the JIT runs instead.
:func:`.aot_build.build` (``qkv warm``) checks a new module against the JIT, bitwise, before
putting it in place.

The exported entry points take exactly the layouts the kernel passes (C-contiguous float32
tiles and state, C-contiguous bool masks, an accumulator of any strides: the kernel passes a
range of a query block's columns) and release the GIL like the JIT's; the wrappers below
check that, and hand anything else to the JIT (an extension module's argument unboxing checks
less than Numba's dispatcher does).
"""

from __future__ import annotations

import functools
import hashlib
import importlib.machinery
import importlib.metadata
import importlib.util
import os
import platform
import sys
import warnings
from pathlib import Path
from types import ModuleType

import numpy as np

NAME = "qkv_step"
EXPORTS = ("online_softmax", "online_softmax_ro", "probabilities", "probabilities_ro",
           "softmax_grad", "forward_run", "backward_run")


def cache_dir() -> Path:
    """Where the built step lives: ``$QKV_CACHE_DIR``, else ``~/.cache/qkv``."""
    env = os.environ.get("QKV_CACHE_DIR")
    return Path(env) if env else Path.home() / ".cache" / "qkv"


def _cpu() -> str:
    """This CPU's model and feature flags (the build targets them), read without llvmlite."""
    try:
        with open("/proc/cpuinfo") as f:
            lines = [line for line in f if line.startswith(("model name", "flags"))]
        return "".join(sorted(set(lines)))
    except OSError:
        return platform.processor() or platform.machine()


@functools.cache
def key() -> str:
    """16 hex digits naming one build: sources, versions and CPU."""
    here = Path(__file__).parent
    h = hashlib.sha256()
    for source in (here / "compiled.py", here / "fused.py", here / "aot_build.py",
                   Path(__file__)):
        h.update(source.read_bytes())
    for package in ("numba", "llvmlite", "numpy"):
        try:
            h.update(f"{package} {importlib.metadata.version(package)}\n".encode())
        except importlib.metadata.PackageNotFoundError:
            h.update(f"{package} absent\n".encode())
    h.update(f"{sys.version} {platform.machine()}\n{_cpu()}".encode())
    return h.hexdigest()[:16]


def path() -> Path:
    """The built module's file for this :func:`key`."""
    suffix = importlib.machinery.EXTENSION_SUFFIXES[0]
    return cache_dir() / f"{NAME}_{key()}{suffix}"


_loaded: dict[str, ModuleType | None] = {}


def digest(file: Path) -> str:
    """The SHA-256 of a file's bytes (the build writes the module's beside it, ``.sha256``)."""
    return hashlib.sha256(file.read_bytes()).hexdigest()


def _read(file: Path) -> str:
    try:
        return file.read_text().strip()
    except OSError:
        return "(none)"


def load() -> ModuleType | None:
    """The built module for this key, or None (absent, stale or unloadable: the JIT runs)."""
    file = path()
    if str(file) in _loaded:
        return _loaded[str(file)]
    module = None
    if file.exists():
        try:
            # dlopen of a truncated or overwritten library can kill the process (SIGBUS), so
            # its bytes are checked against the digest the build wrote before it is opened
            if digest(file) != _read(file.with_suffix(".sha256")):
                raise ImportError("its contents do not match the digest written by the build")
            spec = importlib.util.spec_from_file_location(f"{NAME}_{key()}", file)
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            missing = [name for name in EXPORTS if not hasattr(module, name)]
            if missing:
                raise ImportError(f"it lacks {', '.join(missing)}")
        except (ImportError, OSError) as exc:
            warnings.warn(f"qkv: the prebuilt tile step {file} cannot be loaded ({exc}); "
                          "using the JIT instead. Rebuild it with `qkv warm --force`.",
                          RuntimeWarning, stacklevel=2)
            module = None
    _loaded[str(file)] = module
    return module


# -- the wrappers: the kernel's calls, checked, on the built module ---------------------------
def _ok(*arrays, dtype=np.float32, contiguous=True) -> bool:
    return all(a.dtype == dtype and a.flags.writeable and a.flags.aligned
               and (a.flags.c_contiguous or not contiguous) for a in arrays)


def _mask_ok(block) -> bool:
    return block.dtype == np.bool_ and block.ndim == 3 and block.flags.c_contiguous


_NO_MASK = np.ones((1, 1, 1), dtype=bool)
_NO_ACC = np.zeros((1, 1, 1), dtype=np.float32)


def _mask_arg(allowed):
    return (_NO_MASK, False) if allowed is None else (np.ascontiguousarray(allowed), True)


def _jit() -> ModuleType:
    """The JIT step, for a call whose layout the built entry points do not take."""
    from . import compiled

    return compiled


def _floor(products: bool) -> np.float32:
    return np.float32(-63.0 if products else -126.0)  # compiled.PRODUCT_FLOOR, FLOOR


def online_softmax(s, allowed, m, row_sum, acc, products: bool = False) -> None:
    block, masked = _mask_arg(allowed)
    acc_arg = _NO_ACC if acc is None else acc
    if _module is None or not (_ok(s, m, row_sum) and _ok(acc_arg, contiguous=False)
            and s.ndim == acc_arg.ndim == 3
            and m.ndim == row_sum.ndim == 2 and _mask_ok(block)):
        return _jit().online_softmax(s, allowed, m, row_sum, acc, products)
    fn = _module.online_softmax if block.flags.writeable else _module.online_softmax_ro
    fn(s, block, masked, m, row_sum, acc_arg, acc is not None, _floor(products))


def probabilities(s, allowed, lse, products: bool = False) -> None:
    block, masked = _mask_arg(allowed)
    lse = np.ascontiguousarray(lse, dtype=np.float32)
    if _module is None or not (_ok(s) and s.ndim == 3 and lse.ndim == 2 and lse.flags.c_contiguous
            and _mask_ok(block)):
        return _jit().probabilities(s, allowed, lse, products)
    fn = _module.probabilities if block.flags.writeable else _module.probabilities_ro
    fn(s, block, masked, lse if lse.flags.writeable else lse.copy(), _floor(products))


def softmax_grad(dp, p, delta) -> None:
    delta = np.ascontiguousarray(delta, dtype=np.float32)
    if _module is None or not (_ok(dp, p) and dp.ndim == p.ndim == 3 and delta.ndim == 2
            and delta.flags.c_contiguous):
        return _jit().softmax_grad(dp, p, delta)
    _module.softmax_grad(dp, p, delta if delta.flags.writeable else delta.copy())


def forward_run(q, k, v, tiles, blocks, m, row_sum, acc, buf, products: bool, sgemm: int) -> None:
    """:func:`.fused.forward_run`, prebuilt: k and v read-only float32 rows (any row stride),
    everything else C-contiguous, as the kernel passes them; anything else goes to the JIT."""
    has_acc = acc is not None
    acc_arg = acc if has_acc else np.zeros((1, q.shape[0]), np.float32)
    if _module is None or not (
            _ok(q, m, row_sum, acc_arg, buf) and q.ndim == acc_arg.ndim == 2
            and m.ndim == row_sum.ndim == buf.ndim == 1
            and all(x.dtype == np.float32 and x.ndim == 2 and not x.flags.writeable
                    and x.flags.aligned for x in (k, v))
            and tiles.dtype == np.int64 and tiles.ndim == 2 and tiles.flags.c_contiguous
            and blocks.dtype == np.bool_ and blocks.ndim == 1 and blocks.flags.c_contiguous):
        from . import fused

        return fused.forward_run(q, k, v, tiles, blocks, m, row_sum, acc, buf, products, sgemm)
    _module.forward_run(q, k, v, tiles, blocks, m, row_sum, acc_arg, buf, has_acc,
                        _floor(products), sgemm)


def backward_run(q, k, v, dout, lse, delta, tiles, blocks, dk, dv, dq, psum, dsum, buf, scale,
                 with_dq: bool, sgemm: int) -> None:
    """:func:`.fused.backward_run`, prebuilt: k and v read-only float32 rows (any row stride),
    everything else C-contiguous, as the kernel passes them; anything else goes to the JIT."""
    if _module is None or not (
            _ok(q, dout, dk, dv, dq) and q.ndim == dout.ndim == dk.ndim == dv.ndim == dq.ndim == 2
            and _ok(lse, delta, psum, dsum, buf)
            and lse.ndim == delta.ndim == psum.ndim == dsum.ndim == buf.ndim == 1
            and all(x.dtype == np.float32 and x.ndim == 2 and not x.flags.writeable
                    and x.flags.aligned for x in (k, v))
            and tiles.dtype == np.int64 and tiles.ndim == 2 and tiles.flags.c_contiguous
            and blocks.dtype == np.bool_ and blocks.ndim == 1 and blocks.flags.c_contiguous):
        from . import fused

        return fused.backward_run(q, k, v, dout, lse, delta, tiles, blocks, dk, dv, dq, psum,
                                  dsum, buf, scale, with_dq, sgemm)
    _module.backward_run(q, k, v, dout, lse, delta, tiles, blocks, dk, dv, dq, psum, dsum, buf,
                         np.float32(scale), with_dq, _floor(True), sgemm)


_module: ModuleType | None = None


def available() -> bool:
    """Whether the built module for this key loads; the wrappers above then run it."""
    global _module
    _module = load()
    return _module is not None


def forget() -> None:
    """Look for the module again at the next :func:`available` (after a build or a test)."""
    _loaded.clear()
