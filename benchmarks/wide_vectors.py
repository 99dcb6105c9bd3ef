"""The compiled tile step with LLVM's default vector width for this CPU against full-width
vectors (:data:`qkv.engine.step.compiled.WIDE`): each step function on one warm tile, one
thread, both compiled here from the step's own source — the default one with
:func:`~qkv.engine.step.compiled.wide_vectors` swapped for a no-op — and checked bitwise equal.

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python benchmarks/wide_vectors.py

On a CPU without 512-bit registers both columns are the same code. Best of ``--rounds``.
"""

from __future__ import annotations

import argparse
import time
import types

import numpy as np
from numba import njit

from qkv.engine.step import compiled


@njit(inline="always")
def _default_width():
    return None


def _recompiled(dispatcher, wide: bool):
    """The step function ``dispatcher`` compiled anew, with or without its width hint."""
    fn = dispatcher.py_func
    scope = dict(fn.__globals__, wide_vectors=compiled.wide_vectors if wide else _default_width)
    clone = types.FunctionType(fn.__code__, scope, fn.__name__, fn.__defaults__, fn.__closure__)
    return njit(nogil=True, fastmath=compiled.FLAGS)(clone)


def _registers(fn) -> str:
    asm = next(iter(fn.inspect_asm().values()))
    return "zmm" if "zmm" in asm else "ymm" if "ymm" in asm else "xmm"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keys", type=int, default=1024)
    parser.add_argument("--queries", type=int, default=512)
    parser.add_argument("--rounds", type=int, default=50)
    args = parser.parse_args(argv)
    tk, tq = args.keys, args.queries
    rng = np.random.default_rng(0)
    scores = (rng.standard_normal((1, tk, tq)) * 3).astype(np.float32)
    allowed = rng.random((1, tk, tq)) < 0.7
    lse = (np.log(np.exp(scores.astype(np.float64)).sum(1))).astype(np.float32)  # (1, tq)
    floor = compiled.PRODUCT_FLOOR

    def cases(fn):
        """(name, setup → args, the arrays it writes) for one compiled step function."""
        name = fn.py_func.__name__
        if name == "_online_softmax":
            def run(masked):
                m = np.full((1, tq), -np.inf, np.float32)
                row_sum, acc = np.zeros((1, tq), np.float32), np.ones((1, tq, 64), np.float32)
                s = scores.copy()
                return (s, allowed, masked, m, row_sum, acc, True, floor), (s, m, row_sum, acc)
        elif name == "_probabilities":
            def run(masked):
                s = scores.copy()
                return (s, allowed, masked, lse, floor), (s,)
        else:
            def run(masked):
                dp = scores.copy()
                p = np.exp(scores - scores.max()).astype(np.float32)
                return (dp, p, lse), (dp,)
        return name, run

    print(f"one tile of {tk} keys × {tq} queries, float32, one thread, best of {args.rounds}")
    for dispatcher in (compiled._online_softmax, compiled._probabilities,
                       compiled._softmax_grad):
        versions = {wide: _recompiled(dispatcher, wide) for wide in (False, True)}
        name, make = cases(dispatcher)
        for masked in ((False, True) if name != "_softmax_grad" else (False,)):
            best, outputs = {}, {}
            for wide, fn in versions.items():
                call, written = make(masked)
                fn(*call)
                outputs[wide] = [a.copy() for a in written]
                times = []
                for _ in range(args.rounds):
                    call, _ = make(masked)
                    t0 = time.perf_counter()
                    fn(*call)
                    times.append(time.perf_counter() - t0)
                best[wide] = min(times)
            same = all(np.array_equal(a, b, equal_nan=True)
                       for a, b in zip(outputs[False], outputs[True], strict=True))
            label = f"{name[1:]}{' (masked)' if masked else ''}"
            print(f"  {label:28s} default {best[False] / (tk * tq) * 1e9:.3f} ns a score "
                  f"({_registers(versions[False])}), wide {best[True] / (tk * tq) * 1e9:.3f} "
                  f"({_registers(versions[True])}): {best[True] / best[False]:.2f}×, "
                  f"{'bitwise equal' if same else 'OUTPUTS DIFFER'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
