"""The tile step compiled with Numba: each function is one fused pass per row, without the GIL.

Same contract as :mod:`.numpy_step` (see the package doc), for float32 tiles ``(P, T, R)``:
the loops run down the key rows and across each row of queries, so every inner loop is an
element-wise update of contiguous memory. The exponential is
written out rather than called: Numba's ``math.exp`` is a scalar libm call that stops LLVM from
vectorising the loop, so ``2^x`` (x ≤ 0) is split as ``2^n · 2^f`` with ``n = round(x)`` and
``f ∈ [−½, ½]``; ``2^f`` is a degree-6 polynomial (relative error ≈ 2e-8 before rounding, below
float32's 6e-8) and ``2^n`` is built from its exponent bits. Everything else is compares,
selects and fused multiply-adds, so each row loop vectorises. ``exp2`` and ``wide_vectors`` are
part of the engine's internal surface: :mod:`qkv.nn._compiled` calls them from its own compiled
loops (the GELU).

The fast-math flags allow reassociating sums (vectorised reductions) but not ``nnan``/``ninf``:
−inf marks masked pairs and empty rows, and must compare as −inf.
"""

from __future__ import annotations

import math
import os

# Numba colours its messages through colorama, whose exit hook then writes a terminal reset code
# to stdout under a pseudo-terminal (as mpirun gives its ranks): keep qkv's output plain.
os.environ.setdefault("NUMBA_DISABLE_ERROR_MESSAGE_HIGHLIGHTING", "1")

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.extending import intrinsic

FLAGS = {"nsz", "arcp", "contract", "afn", "reassoc"}
F = np.float32
LOG2E = F(math.log2(math.e))
NEG_INF = F(-np.inf)
POS_INF = F(np.inf)
FLOOR = F(-126.0)  # 2^x below 2^-126 would be subnormal: flushed to 0
# The tiled kernel flushes weights below 2^-63 too (the step's ``floor``; see the package doc):
# their products with v could be subnormal, and a large GEMM that meets subnormal products runs
# 4–80× slower on Intel CPUs (benchmarks/subnormal_gemm.py).
PRODUCT_FLOOR = F(-63.0)
CEIL = F(128.0)  # 2^x from 2^128 on is float32's inf (an lse that is too small: see backward)
HALF = F(0.5)
ZERO = F(0.0)
ONE = F(1.0)
# 2^f on [-1/2, 1/2]: a least-squares fit of (2^f − 1)/2^f on Chebyshev points (relative
# error 2.2e-9 in exact arithmetic; tests/test_step.py checks the float32 result against exp2).
C1, C2, C3, C4, C5, C6 = (F(c) for c in (
    0.6931472055878307, 0.240226484615996, 0.055503290116591136,
    0.009618373276631441, 0.0013399857834314522, 0.00015370715491896332))


@intrinsic
def _float32_from_bits(typingctx, bits):
    """Reinterpret an int32's bits as a float32 (LLVM ``bitcast``: free, vectorisable)."""
    sig = types.float32(types.int32)

    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], context.get_value_type(types.float32))

    return sig, codegen


@intrinsic
def _maxnum(typingctx, a, b):
    """LLVM's ``maxnum``: a max that LLVM vectorises as a reduction (Python's ``max`` and a
    compare-and-select are not, without the ``nnan`` flag — measured 17 µs vs 160 µs per
    256 × 1024 tile)."""
    sig = types.float32(types.float32, types.float32)

    def codegen(context, builder, signature, args):
        f32 = ir.FloatType()
        fn = builder.module.declare_intrinsic("llvm.maxnum", [f32],
                                              ir.FunctionType(f32, [f32, f32]))
        return builder.call(fn, args)

    return sig, codegen


# LLVM's function attribute for the vector width its loop vectoriser may use. On CPUs with
# AVX-512 LLVM prefers 256-bit vectors by default (older parts slowed their clock for 512-bit
# ones); the step is a few fused multiply-adds per score on data in cache, so full-width vectors
# take 0.69–0.84× the time per score (benchmarks/wide_vectors.py; the gradient step, which only
# streams memory, about the same). Set on qkv's own compiled functions only —
# Numba's process-wide switch (NUMBA_CPU_FEATURES) would change its users' code too. A hint:
# CPUs without 512-bit registers ignore it. The step's loops are element-wise per query (no sum
# across a vector), so the width changes their speed, never their bits.
WIDE = '"prefer-vector-width"="512"'


@intrinsic
def wide_vectors(typingctx):
    """Mark the calling compiled function for full-width vectors (see :data:`WIDE`). Call it
    first in a function whose loops are element-wise: a reduction across a vector would sum in
    another order at another width."""

    def codegen(context, builder, signature, args):
        # llvmlite's attribute set accepts only the attributes it knows and has no key="value"
        # ones; LLVM's text form takes this one as written, so it is added past that check
        set.add(builder.function.attributes, WIDE)
        return context.get_dummy_value()

    return types.none(), codegen


@njit(inline="always", fastmath=FLAGS)
def _exp2_above(x, floor):
    """2^x in float32 for x ≥ ``floor`` (≥ −126), exactly 0 below it (and for x = −inf), inf
    from 2^128 on; NaN for NaN — a NaN score in an allowed slot (check_finite=False) makes its
    row NaN, as in the NumPy step, rather than a weight of 0 that would drop the key silently."""
    # clamped to [floor, CEIL]: past CEIL the exponent bits below would wrap to a finite number
    xc = -_maxnum(-_maxnum(x, floor), -CEIL)
    n = np.floor(xc + HALF)  # np.floor stays a float (math.floor's int would not vectorise)
    f = xc - n
    p = ONE + f * (C1 + f * (C2 + f * (C3 + f * (C4 + f * (C5 + f * C6)))))
    scale = _float32_from_bits(np.int32((np.int32(n) + 127) << 23))
    if x >= floor:
        return p * scale
    return ZERO if x < floor else x


@njit(inline="always", fastmath=FLAGS)
def _exp2_nonpositive(x, floor):
    """:func:`_exp2_above` for x ≤ 0 (an online-softmax weight: a score minus its max), −inf or
    NaN — the same bits on that domain in fewer instructions: no clamp at 2^128, and one compare
    both clamps at ``floor`` and zeroes below it (a select that keeps NaN, where ``_maxnum``
    maps it to ``floor``): the step's exponential pass 0.80–0.87× as long on a cache-warm tile
    (``python benchmarks/step_parts.py``, four runs). A masked slot's stale score may give any
    x: its result is selected away."""
    below = x < floor  # False for NaN: its weight stays NaN
    xc = floor if below else x
    n = np.floor(xc + HALF)
    f = xc - n
    p = ONE + f * (C1 + f * (C2 + f * (C3 + f * (C4 + f * (C5 + f * C6)))))
    # the exponent from a NaN n would be undefined (LLVM's fptosi): _maxnum makes it floor
    scale = _float32_from_bits(np.int32((np.int32(_maxnum(n, floor)) + 127) << 23))
    return ZERO if below else p * scale


@njit(inline="always", fastmath=FLAGS)
def exp2(x):
    """2^x in float32; exactly 0 below 2^-126, where it would be subnormal (see
    :func:`_exp2_above`)."""
    return _exp2_above(x, FLOOR)


@njit(inline="always", fastmath=FLAGS)
def online_softmax_plane(tile, ok, masked, m_g, sum_g, acc_g, has_acc, floor, m_new, m_ref,
                         alpha):
    """One plane of :func:`online_softmax`: ``tile (T, R)``, ``ok (T, R)`` (read if
    ``masked``), ``m_g``, ``sum_g (R,)``, ``acc_g (Dv, R)`` (if ``has_acc``); ``m_new``,
    ``m_ref`` and ``alpha`` are scratch of at least R. Inlined into its callers (this module's
    entry point and :mod:`.fused`'s tile loop)."""
    keys, queries = tile.shape
    # 1. each query's max over its allowed keys: an element-wise max down the key rows
    for i in range(queries):
        m_new[i] = m_g[i]
    for j in range(keys):
        row = tile[j]
        if masked:
            ok_j = ok[j]
            for i in range(queries):
                m_new[i] = _maxnum(m_new[i], row[i] if ok_j[i] else NEG_INF)
        else:
            for i in range(queries):
                m_new[i] = _maxnum(m_new[i], row[i])
    # 2. rescale what came before; a query with nothing allowed yet keeps m = −inf
    for i in range(queries):
        a = exp2((m_g[i] - m_new[i]) * LOG2E) if m_new[i] != NEG_INF else ONE
        alpha[i] = a
        sum_g[i] *= a
        m_g[i] = m_new[i]
        # a row whose allowed scores are all −inf subtracts +inf: −inf − inf = −inf → 0
        # (−inf − (−inf) would be NaN); a NaN score still makes a NaN weight
        m_ref[i] = m_new[i] if m_new[i] != NEG_INF else POS_INF
    # 3. p = 2^((s − m_new)·log2 e), masked pairs and −inf rows exactly 0; sums per query
    for j in range(keys):
        row = tile[j]
        if masked:
            ok_j = ok[j]
            for i in range(queries):
                p = _exp2_nonpositive((row[i] - m_ref[i]) * LOG2E, floor) if ok_j[i] else ZERO
                row[i] = p
                sum_g[i] += p
        else:
            for i in range(queries):
                p = _exp2_nonpositive((row[i] - m_ref[i]) * LOG2E, floor)
                row[i] = p
                sum_g[i] += p
    if has_acc:  # (Dv, R): each of its rows scaled query by query
        for d in range(acc_g.shape[0]):
            acc_d = acc_g[d]
            for i in range(queries):
                acc_d[i] *= alpha[i]


@njit(nogil=True, fastmath=FLAGS, cache=True)
def _online_softmax(s, allowed, masked, m, row_sum, acc, has_acc, floor):
    wide_vectors()
    planes, _, queries = s.shape
    m_new = np.empty(queries, dtype=np.float32)
    m_ref = np.empty(queries, dtype=np.float32)
    alpha = np.empty(queries, dtype=np.float32)
    for g in range(planes):
        online_softmax_plane(s[g], allowed[g if masked else 0], masked, m[g], row_sum[g],
                             acc[g if has_acc else 0], has_acc, floor, m_new, m_ref, alpha)


@njit(inline="always", fastmath=FLAGS)
def probabilities_plane(tile, ok, masked, ref, floor):
    """One plane of :func:`probabilities`: ``tile (T, R)``, ``ok (T, R)`` (read if ``masked``),
    ``ref (R,)`` the lse. Inlined into its callers (this module's entry point and
    :mod:`.fused`'s backward loop)."""
    keys, queries = tile.shape
    for j in range(keys):
        row = tile[j]
        if masked:
            ok_j = ok[j]
            for i in range(queries):
                # a query with no allowed key has lse = −inf: its weights are 0
                x = (row[i] - ref[i]) * LOG2E
                row[i] = _exp2_above(x, floor) if ok_j[i] and ref[i] != NEG_INF else ZERO
        else:
            for i in range(queries):
                x = (row[i] - ref[i]) * LOG2E
                row[i] = _exp2_above(x, floor) if ref[i] != NEG_INF else ZERO


@njit(inline="always", fastmath=FLAGS)
def softmax_grad_plane(grad, prob, d):
    """One plane of :func:`softmax_grad`: ``grad``, ``prob (T, R)``, ``d (R,)``. Inlined into
    its callers (this module's entry point and :mod:`.fused`'s backward loop)."""
    keys, queries = grad.shape
    for j in range(keys):
        grad_j, prob_j = grad[j], prob[j]
        for i in range(queries):
            pj = prob_j[i]
            grad_j[i] = pj * (grad_j[i] - d[i]) if pj != ZERO else ZERO


@njit(nogil=True, fastmath=FLAGS, cache=True)
def _probabilities(s, allowed, masked, lse, floor):
    wide_vectors()
    for g in range(s.shape[0]):
        probabilities_plane(s[g], allowed[g if masked else 0], masked, lse[g], floor)


@njit(nogil=True, fastmath=FLAGS, cache=True)
def _softmax_grad(dp, p, delta):
    wide_vectors()
    for g in range(dp.shape[0]):
        softmax_grad_plane(dp[g], p[g], delta[g])


_NO_MASK = np.ones((1, 1, 1), dtype=bool)
_NO_ACC = np.zeros((1, 1, 1), dtype=np.float32)


def _mask_arg(allowed):
    return (_NO_MASK, False) if allowed is None else (np.ascontiguousarray(allowed), True)


def _floor(products: bool):
    return PRODUCT_FLOOR if products else FLOOR


def online_softmax(s, allowed, m, row_sum, acc, products: bool = False) -> None:
    block, masked = _mask_arg(allowed)
    _online_softmax(s, block, masked, m, row_sum, _NO_ACC if acc is None else acc,
                    acc is not None, _floor(products))


def probabilities(s, allowed, lse, products: bool = False) -> None:
    block, masked = _mask_arg(allowed)
    _probabilities(s, block, masked, np.ascontiguousarray(lse, dtype=np.float32),
                   _floor(products))


def softmax_grad(dp, p, delta) -> None:
    _softmax_grad(dp, p, np.ascontiguousarray(delta, dtype=np.float32))
