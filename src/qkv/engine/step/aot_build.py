"""Build the ahead-of-time tile step of :mod:`.aot` with ``numba.pycc`` (``qkv warm``).

``numba.pycc`` is pending deprecation in Numba (since 0.57) but present in 0.68; its
announced successor is not released. The exported entry points are trampolines that call the
JIT's own dispatchers, so the code inside is compiled with the JIT's fastmath flags, for the host
CPU (``target_cpu``) as the JIT does; pycc's Python wrappers would hold the GIL, so its flags are
swapped for ones that release it during the compile. The result is checked bitwise against the
JIT before it is installed.
"""

from __future__ import annotations

import importlib.util
import itertools
import os
import shutil
import tempfile
import warnings
from pathlib import Path

import numpy as np

from . import aot, backward_scratch, fused
from . import compiled as jit

_online, _probs, _grad = jit._online_softmax, jit._probabilities, jit._softmax_grad
_forward = fused._forward_run
_backward = fused._backward_run


def _call_online_softmax(s, allowed, masked, m, row_sum, acc, has_acc, floor):
    _online(s, allowed, masked, m, row_sum, acc, has_acc, floor)


def _call_probabilities(s, allowed, masked, lse, floor):
    _probs(s, allowed, masked, lse, floor)


def _call_softmax_grad(dp, p, delta):
    _grad(dp, p, delta)


def _call_forward_run(q, k, v, tiles, blocks, m, row_sum, acc, buf, has_acc, floor, sgemm):
    _forward(q, k, v, tiles, blocks, m, row_sum, acc, buf, has_acc, floor, sgemm)


def _call_backward_run(q, k, v, dout, lse, delta, tiles, blocks, dk, dv, dq, psum, dsum, buf,
                       scale, with_dq, floor, sgemm):
    _backward(q, k, v, dout, lse, delta, tiles, blocks, dk, dv, dq, psum, dsum, buf, scale,
              with_dq, floor, sgemm)


def build(force: bool = False, sgemm: int | None = None) -> tuple[Path, bool]:
    """Build the module for this key into :func:`.aot.cache_dir` unless it is there and loads
    (``force``: rebuild anyway). Returns (path, whether it was built). Raises RuntimeError,
    installing nothing, if the build differs from the JIT. ``sgemm``: the address of
    ``cblas_sgemm`` (:func:`qkv.engine.gemm.address`) to check the fused loop with; without it
    that one function goes unchecked — it runs only with that address."""
    target = aot.path()
    aot.forget()
    if not force and target.exists() and aot.load() is not None:
        return target, False
    target.parent.mkdir(parents=True, exist_ok=True)
    name = target.name.split(".")[0]
    with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
        built = _compile(Path(tmp), name)
        mismatch = check_against_jit(built, sgemm)
        if mismatch:
            raise RuntimeError(f"qkv warm: the prebuilt step differs from the JIT ({mismatch}); "
                               "nothing installed, the JIT will run")
        for stale in target.parent.glob(f"{aot.NAME}_*"):
            if stale.name.split(".")[0] != target.name.split(".")[0]:
                stale.unlink()  # other keys: never loaded again
        ready, sums = Path(tmp) / "ready", Path(tmp) / "sums"
        shutil.copyfile(built, ready)
        sums.write_text(aot.digest(ready) + "\n")
        # each replace is atomic; between the two a loader sees a mismatch and runs the JIT
        os.replace(ready, target)
        os.replace(sums, target.with_suffix(".sha256"))
    aot.forget()
    return target, True


def _compile(out_dir: Path, module_name: str) -> Path:
    import llvmlite.binding as llvm
    from numba import types

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # pycc's pending-deprecation notice
        from numba.pycc import CC
        from numba.pycc import compiler as pycc_compiler

        cc = CC(module_name)
    cc.output_dir = str(out_dir)
    cc.verbose = False
    cc.target_cpu = llvm.get_host_cpu_name()  # as the JIT: the same vectors, the same sums
    f3, f2 = types.Array(types.float32, 3, "C"), types.Array(types.float32, 2, "C")
    strided = types.Array(types.float32, 3, "A")  # the accumulator: a range of its columns
    for suffix, mask in (("", types.Array(types.bool_, 3, "C")),
                         ("_ro", types.Array(types.bool_, 3, "C", readonly=True))):
        cc.export(f"online_softmax{suffix}",
                  types.void(f3, mask, types.bool_, f2, f2, strided, types.bool_,
                             types.float32))(_call_online_softmax)
        cc.export(f"probabilities{suffix}",
                  types.void(f3, mask, types.bool_, f2, types.float32))(_call_probabilities)
    cc.export("softmax_grad", types.void(f3, f3, f2))(_call_softmax_grad)
    f1, f2a = types.Array(types.float32, 1, "C"), types.Array(types.float32, 2, "A", readonly=True)
    cc.export("forward_run",
              types.void(f2, f2a, f2a, types.Array(types.int64, 2, "C"),
                         types.Array(types.bool_, 1, "C"), f1, f1, f2, f1, types.bool_,
                         types.float32, types.int64))(_call_forward_run)
    i2, b1 = types.Array(types.int64, 2, "C"), types.Array(types.bool_, 1, "C")
    cc.export("backward_run",
              types.void(f2, f2a, f2a, f2, f1, f1, i2, b1, f2, f2, f2, f1, f1, f1, types.float32,
                         types.bool_, types.float32, types.int64))(_call_backward_run)

    plain = pycc_compiler.Flags

    class Flags(plain):  # pycc's wrappers would hold the GIL; the JIT's release it
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.release_gil = True

    pycc_compiler.Flags = Flags
    try:
        cc.compile()
    finally:
        pycc_compiler.Flags = plain
    return next(out_dir.glob(f"{module_name}.*"))


def _import(file: Path):
    spec = importlib.util.spec_from_file_location(file.name.split(".")[0], file)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _columns(a: np.ndarray) -> np.ndarray:
    """A copy of ``a`` as a strided view: the middle columns of a wider array."""
    wide = np.full((*a.shape[:-1], a.shape[-1] + 3), np.nan, a.dtype)
    wide[..., 1:-2] = a
    return wide[..., 1:-2]


def check_against_jit(file: Path, sgemm: int | None = None) -> str:
    """'' when the module at ``file`` gives the JIT's bits on tiles that reach every branch
    (masked or not, −inf rows, rows with nothing allowed, an accumulator, readonly masks);
    otherwise which function and tile differ."""
    module = _import(file)
    rng = np.random.default_rng(0)
    for planes, keys, queries in ((1, 256, 128), (3, 17, 33)):
        s = (rng.standard_normal((planes, keys, queries)) * 4).astype(np.float32)
        s[:, :, 2] *= 25  # weights from 1 down past 2^-126: both floors flush some
        s[:, :, 0] = -np.inf  # a query whose scores are all −inf
        allowed = rng.random((planes, keys, queries)) < 0.7
        allowed[:, :, 1] = False  # a query with nothing allowed
        readonly = allowed.copy()
        readonly.flags.writeable = False
        m0 = rng.standard_normal((planes, queries)).astype(np.float32)
        sum0 = rng.random((planes, queries)).astype(np.float32)
        acc0 = rng.standard_normal((planes, 8, queries)).astype(np.float32)  # (P, Dv, R)
        for (name, mask), products in itertools.product(
                (("online_softmax", allowed), ("online_softmax_ro", readonly),
                 ("online_softmax", None)), (False, True)):
            # the accumulator as the kernel passes it: a range of a wider block's columns
            ours, theirs = ([*(x.copy() for x in (s, m0, sum0)), _columns(acc0)]
                            for _ in range(2))
            block, masked = aot._mask_arg(mask)
            getattr(module, name)(ours[0], block, masked, ours[1], ours[2], ours[3], True,
                                  aot._floor(products))
            jit.online_softmax(*theirs[:1], mask, *theirs[1:], products)
            if not all(np.array_equal(a, b, equal_nan=True) for a, b in zip(ours, theirs,
                                                                             strict=True)):
                return f"{name}, tile {s.shape}"
        lse = m0 + np.float32(3)
        lse[:, 2] = -np.inf  # a query with no allowed key
        for (name, mask), products in itertools.product(
                (("probabilities", allowed), ("probabilities_ro", readonly),
                 ("probabilities", None)), (False, True)):
            ours, theirs = s.copy(), s.copy()
            block, masked = aot._mask_arg(mask)
            getattr(module, name)(ours, block, masked, lse, aot._floor(products))
            jit.probabilities(theirs, mask, lse, products)
            if not np.array_equal(ours, theirs, equal_nan=True):
                return f"{name}, tile {s.shape}"
        p = np.where(allowed, rng.random(s.shape), 0).astype(np.float32)
        ours, theirs = s.copy(), s.copy()
        module.softmax_grad(ours, p, m0)
        jit.softmax_grad(theirs, p, m0)
        if not np.array_equal(ours, theirs, equal_nan=True):
            return f"softmax_grad, tile {s.shape}"
    if sgemm is not None:
        return _check_forward_run(module, sgemm) or _check_backward_run(module, sgemm)
    return ""


def _check_forward_run(module, sgemm: int) -> str:
    """'' when the module's fused loop gives the JIT's bits on one query block's tiles: FULL and
    PARTIAL ones (a query with nothing allowed), a split of the rows, strided read-only k and v,
    with and without an accumulator; else what differs."""
    rng = np.random.default_rng(1)
    tq, nk, d = 40, 100, 16
    q = rng.standard_normal((tq, d)).astype(np.float32)
    k, v = (rng.standard_normal((nk, 2, d)).astype(np.float32)[:, 0] for _ in range(2))
    k.flags.writeable = v.flags.writeable = False  # rows 2·d apart, as a (B, N, H, D) head's
    tiles = np.array([(0, tq, 0, 48, 0, 0), (0, 24, 48, 80, 1, 0), (24, tq, 48, 80, 1, 24 * 32),
                      (0, tq, 80, nk, 1, 24 * 32 + 16 * 32)], dtype=np.int64)
    blocks = rng.random(24 * 32 + 16 * 32 + 20 * tq) < 0.6
    blocks[24 * 32 + 16 * 32:].reshape(20, tq)[:, 3] = False  # query 3: nothing in that tile
    for has_acc, products in itertools.product((True, False), (True, False)):
        state = [np.full(tq, -np.inf, np.float32), np.zeros(tq, np.float32),
                 np.zeros((d, tq + 7) if has_acc else (1, tq), np.float32)]  # rows padded
        ours, theirs = ([x.copy() for x in state] for _ in range(2))
        floor = aot._floor(products)
        for fn, (m, row_sum, acc) in ((module.forward_run, ours), (_forward, theirs)):
            fn(q, k, v, tiles, blocks, m, row_sum, acc, np.empty(48 * tq, np.float32), has_acc,
               floor, sgemm)
        if not all(np.array_equal(a, b, equal_nan=True) for a, b in zip(ours, theirs,
                                                                         strict=True)):
            return f"forward_run, accumulator {has_acc}, products {products}"
    return ""


def _check_backward_run(module, sgemm: int) -> str:
    """'' when the module's backward loop gives the JIT's bits on one head's tiles (FULL and
    PARTIAL, a query with nothing allowed in one, strided read-only k and v), with and without
    dQ; else what differs."""
    rng = np.random.default_rng(2)
    nq, nk, d = 40, 100, 16
    q, dout = (rng.standard_normal((nq, d)).astype(np.float32) for _ in range(2))
    k, v = (rng.standard_normal((nk, 2, d)).astype(np.float32)[:, 0] for _ in range(2))
    k.flags.writeable = v.flags.writeable = False
    lse = (np.log(nk) + rng.random(nq)).astype(np.float32)
    delta = rng.standard_normal(nq).astype(np.float32)
    tiles = np.array([(0, 24, 0, 48, 0, 0), (24, nq, 0, 48, 1, 0), (0, nq, 48, nk, 1, 16 * 48)],
                     dtype=np.int64)
    blocks = rng.random(16 * 48 + 52 * nq) < 0.6
    blocks[: 16 * 48].reshape(48, 16)[:, 3] = False  # a query with nothing in that tile
    size = backward_scratch(tiles)
    for with_dq in (True, False):
        state = [np.zeros((nk, d), np.float32), np.zeros((nk, d), np.float32),
                 np.zeros((nq, d), np.float32), np.zeros(nq, np.float32), np.zeros(nq, np.float32)]
        ours, theirs = ([x.copy() for x in state] for _ in range(2))
        for fn, (dk, dv, dq, psum, dsum) in ((module.backward_run, ours), (_backward, theirs)):
            fn(q, k, v, dout, lse, delta, tiles, blocks, dk, dv, dq, psum, dsum,
               np.empty(size, np.float32), np.float32(0.25), with_dq, aot._floor(True), sgemm)
        if not all(np.array_equal(a, b, equal_nan=True) for a, b in zip(ours, theirs,
                                                                         strict=True)):
            return f"backward_run, dq {with_dq}"
    return ""
