"""The tiled loops compiled whole: GEMMs and steps in one call, without the GIL.

For each key tile of a query block the forward runs three things (see :mod:`qkv.engine.kernel`)::

    Sᵀ   = K_j Q_iᵀ                  score GEMM             (tk, tr)
    online_softmax(Sᵀ, …, accᵀ)      the step               (:func:`.compiled.online_softmax_plane`)
    accᵀ += V_jᵀ Pᵀ                  P·V GEMM               (Dv, tr)

and the backward, for each tile of a work item's key tile (FlashAttention-2's backward)::

    Pᵀ   = exp(K_j Q_iᵀ − lse_i)     score GEMM, step       (:func:`.compiled.probabilities_plane`)
    dV_j += Pᵀ dO_i                  GEMM                   (tk, Dv)
    dSᵀ  = Pᵀ ∘ (V_j dO_iᵀ − Δ_i)    GEMM, step             (:func:`.compiled.softmax_grad_plane`)
    dK_j += dSᵀ Q_i,  dQ_i += dS K_j · scale                two GEMMs

Driven from Python, every tile pays the interpreter, and hands the GIL between the workers at
each call (three a forward tile, seven a backward one): a worker back from a GEMM waits for the
other's Python. :func:`forward_run` runs a query block's whole loop in one compiled call, and
:func:`backward_run` a work item's loop for one query head, calling the BLAS's
``cblas_sgemm`` through its address (MKL's or NumPy's OpenBLAS's, from
:func:`qkv.engine.gemm.address`). Measured interleaved in one process
(``python benchmarks/fused_loop.py``): the forward on one worker 0.89–0.96 of the Python loop's
time, on two 0.81–0.92, where the GIL was shared (MKL on an Intel Xeon); the backward 0.88–0.92
on one worker and 0.73–0.79 on two (OpenBLAS on an AMD EPYC).

The tiles come planned (:meth:`qkv.engine.tiles.TilePlan.table`): rows ``(r0, r1, k0, k1,
partial, offset)``, and a PARTIAL tile's allowed block, transposed ``(tk, tr)``, at ``offset`` in
one packed bool array. The steps are the same inlined code as :mod:`.compiled`'s entry points,
and each GEMM describes its operands to the BLAS as :func:`qkv.engine.gemm.matmul` does, so the
compiled and Python loops give the same bits (tests/test_fused.py).
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.extending import intrinsic

from .compiled import (
    FLAGS,
    FLOOR,
    PRODUCT_FLOOR,
    online_softmax_plane,
    probabilities_plane,
    softmax_grad_plane,
    wide_vectors,
)

ROW_MAJOR, NO_TRANS, TRANS = 101, 111, 112  # CBLAS's enums
F32 = np.float32
ONE = F32(1.0)


@intrinsic
def _sgemm(typingctx, address, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc):
    """``C ← alpha A B + beta C`` (row-major, A (m, k) and B (k, n) each transposed or not as
    CBLAS's enums say) by calling an ILP64 ``cblas_sgemm`` at ``address``: the enums as C ints,
    sizes and strides as 64-bit ints (:func:`qkv.engine.gemm.address` finds MKL's or NumPy's)."""
    i64 = types.int64
    f32 = types.float32
    sig = types.void(i64, i64, i64, i64, i64, i64, f32, i64, i64, i64, i64, f32, i64, i64)

    def codegen(context, builder, signature, args):
        i32, i64, f32 = ir.IntType(32), ir.IntType(64), ir.FloatType()
        ptr = ir.IntType(8).as_pointer()
        fn_type = ir.FunctionType(ir.VoidType(), [i32, i32, i32, i64, i64, i64, f32, ptr, i64,
                                                  ptr, i64, f32, ptr, i64])
        address, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc = args
        fn = builder.inttoptr(address, fn_type.as_pointer())

        def enum(x):
            return builder.trunc(x, i32)

        def pointer(x):
            return builder.inttoptr(x, ptr)

        builder.call(fn, [ir.Constant(i32, ROW_MAJOR), enum(ta), enum(tb), m, n, k,
                          alpha, pointer(a), lda, pointer(b), ldb, beta,
                          pointer(c), ldc])
        return context.get_dummy_value()

    return sig, codegen


@njit(inline="always")
def _rows(x):
    """The row stride, in elements, of a 2-D float32 operand handed to the BLAS as a pointer and
    a row stride: its rows must be unit-stride, aligned to the element, not overlapping and not
    running backwards (a length-1 axis may have any stride: NumPy leaves 0 or anything there).
    Anything else raises — the loop never reads an operand in a layout it was not told of (a
    column-major q read as row-major was a silently wrong answer: issue 48). The kernel hands
    every operand through :mod:`qkv.engine.operands`, which copies what does not fit."""
    rows, cols = x.shape
    s0, s1 = x.strides
    if cols > 1 and s1 != 4:
        raise ValueError("the fused loop's operand has rows that are not contiguous")
    if rows <= 1:
        return max(cols, 1)
    if s0 % 4 != 0 or s0 < 4 * max(cols, 1):
        raise ValueError("the fused loop's operand has overlapping or reversed rows")
    return s0 // 4


@njit(nogil=True, fastmath=FLAGS, cache=True)
def _forward_run(q, k, v, tiles, blocks, m, row_sum, acc, buf, has_acc, floor, sgemm):
    wide_vectors()  # the step inlined below is element-wise (see compiled.WIDE)
    tq, dk = q.shape
    dv = acc.shape[0]  # accᵀ's rows may be wider than tq (padded: see kernel.forward)
    # every operand's row stride from its own strides, checked (see _rows)
    ldq, ldk, ldv, ldc = _rows(q), _rows(k), _rows(v), _rows(acc)
    m_new = np.empty(tq, dtype=np.float32)
    m_ref = np.empty(tq, dtype=np.float32)
    alpha = np.empty(tq, dtype=np.float32)
    no_block = blocks[:1].reshape((1, 1))
    for t in range(tiles.shape[0]):
        r0, r1, k0, k1, partial, offset = tiles[t]
        rows, keys = r1 - r0, k1 - k0
        s = buf[: keys * rows].reshape((keys, rows))
        # Sᵀ (tk, tr) = K_j (tk, Dk) · Q_iᵀ: beta 0, so the buffer's old contents are never read
        _sgemm(sgemm, NO_TRANS, TRANS, keys, rows, dk, ONE, k[k0:k1].ctypes.data, ldk,
               q[r0:r1].ctypes.data, ldq, F32(0.0), s.ctypes.data, rows)
        ok = blocks[offset: offset + keys * rows].reshape((keys, rows)) if partial else no_block
        online_softmax_plane(s, ok, partial != 0, m[r0:r1], row_sum[r0:r1], acc[:, r0:r1],
                             has_acc, floor, m_new, m_ref, alpha)
        if has_acc:  # accᵀ (Dv, tr) += V_jᵀ (Dv, tk) · Pᵀ (tk, tr)
            _sgemm(sgemm, TRANS, NO_TRANS, dv, rows, keys, ONE, v[k0:k1].ctypes.data, ldv,
                   s.ctypes.data, rows, F32(1.0), acc[:, r0:r1].ctypes.data, ldc)


def forward_run(q, k, v, tiles, blocks, m, row_sum, acc, buf, products: bool, sgemm: int) -> None:
    """The forward's loop over one query block's planned tiles, in place.

    ``q (tq, Dk)`` the block's queries, scaled; ``k (Nk, Dk)``, ``v (Nk, Dv)`` the head's keys
    and values; ``tiles (T, 6)`` int64 and ``blocks`` (bool, at least one element) the plan;
    ``m``, ``row_sum (tq,)`` and ``acc (Dv, ≥ tq)`` (or None: lse only; its columns past tq
    are never touched) the running state as the
    step keeps it; ``buf`` float32 scratch of at least the largest tile's size; ``products``
    as the step's; ``sgemm`` the address of ``cblas_sgemm``. q, acc, m, row_sum, buf, tiles
    and blocks C-contiguous; k and v float32 rows of unit stride, read-only views (the
    caller's flags vary, a broadcast view is read-only: one signature, built ahead of time).
    The GEMMs are handed pointers and row strides, read from each operand's own strides and
    checked: an operand whose rows are not unit-stride raises ValueError, never a wrong answer
    (:mod:`qkv.engine.operands` hands the loop only what it takes)."""
    has_acc = acc is not None
    _forward_run(q, k, v, tiles, blocks, m, row_sum,
                 acc if has_acc else np.zeros((1, q.shape[0]), np.float32), buf, has_acc,
                 PRODUCT_FLOOR if products else FLOOR, sgemm)


# -- the backward ------------------------------------------------------------------------------
@njit(inline="always")
def _operand(rows, cols, s0, s1):
    """(CBLAS transpose enum, leading dimension) for a ``(rows, cols)`` operand with element
    strides ``(s0, s1)``, read as :func:`qkv.engine.gemm._operand` reads it — a length-1 axis
    as packed — so that each call describes its operands as the Python loop's does (a BLAS may
    pick its kernel, and its order of sums, by the description)."""
    if rows == 1:
        s0 = cols
    if cols == 1:
        s1 = 1
    if s1 == 1 and s0 >= max(1, cols):
        return NO_TRANS, s0
    return TRANS, s1


@njit(inline="always")
def _gemm(sgemm, m, n, kk, alpha, a, as0, as1, b, bs0, bs1, beta, c, ldc):
    """``C (m, n) ← alpha A (m, kk) B (kk, n) + beta C``, each operand a pointer and element
    strides."""
    ta, lda = _operand(m, kk, as0, as1)
    tb, ldb = _operand(kk, n, bs0, bs1)
    _sgemm(sgemm, ta, tb, m, n, kk, alpha, a, lda, b, ldb, beta, c, ldc)


# Without fast-math, so that it rounds as NumPy's loop does: ``into += tile.sum(axis=0)`` adds
# the rows in order (NumPy's pairwise sum runs along a contiguous axis only — not for a
# one-query tile, whose sums then differ in the last bits; they feed the lse checks, not the
# gradients).
@njit(nogil=True, cache=True)
def _add_column_sums(tile, into, tmp):
    keys, queries = tile.shape
    for i in range(queries):
        tmp[i] = tile[0, i]
    for j in range(1, keys):
        for i in range(queries):
            tmp[i] += tile[j, i]
    for i in range(queries):
        into[i] += tmp[i]


@njit(nogil=True, fastmath=FLAGS, cache=True)
def _backward_run(q, k, v, dout, lse, delta, tiles, blocks, dk, dv, dq, psum, dsum, buf, scale,
                  with_dq, floor, sgemm):
    wide_vectors()  # the steps inlined below are element-wise (see compiled.WIDE)
    dk_cols, dv_cols = q.shape[1], dout.shape[1]
    # every operand's row stride from its own strides, checked (see _rows)
    ks0, vs0, ldq, ldo = _rows(k), _rows(v), _rows(q), _rows(dout)
    ld_dk, ld_dv, ld_dq = _rows(dk), _rows(dv), _rows(dq)
    no_block = blocks[:1].reshape((1, 1))
    for t in range(tiles.shape[0]):
        r0, r1, k0, k1, partial, offset = tiles[t]
        rows, keys = r1 - r0, k1 - k0
        s = buf[: keys * rows].reshape((keys, rows))
        dp = buf[keys * rows: 2 * keys * rows].reshape((keys, rows))
        col = buf[2 * keys * rows: 2 * keys * rows + rows]
        q_i, do_i = q[r0:r1].ctypes.data, dout[r0:r1].ctypes.data
        k_j, v_j = k[k0:k1].ctypes.data, v[k0:k1].ctypes.data
        # Sᵀ (tk, tr) = K_j · (Q_i · scale)ᵀ, then Pᵀ = exp(Sᵀ − lse) recomputed in place
        _gemm(sgemm, keys, rows, dk_cols, ONE, k_j, ks0, 1, q_i, 1, ldq, F32(0.0),
              s.ctypes.data, rows)
        ok = blocks[offset: offset + keys * rows].reshape((keys, rows)) if partial else no_block
        probabilities_plane(s, ok, partial != 0, lse[r0:r1], floor)
        _add_column_sums(s, psum[r0:r1], col)
        # dV_j (tk, Dv) += Pᵀ dO_i
        _gemm(sgemm, keys, dv_cols, rows, ONE, s.ctypes.data, rows, 1, do_i, ldo, 1, ONE,
              dv[k0:k1].ctypes.data, ld_dv)
        # dPᵀ (tk, tr) = V_j dO_iᵀ, then dSᵀ = Pᵀ ∘ (dPᵀ − Δ_i) in place
        _gemm(sgemm, keys, rows, dv_cols, ONE, v_j, vs0, 1, do_i, 1, ldo, F32(0.0),
              dp.ctypes.data, rows)
        softmax_grad_plane(dp, s, delta[r0:r1])
        _add_column_sums(dp, dsum[r0:r1], col)
        # dK_j (tk, Dk) += dSᵀ (Q_i · scale)
        _gemm(sgemm, keys, dk_cols, rows, ONE, dp.ctypes.data, rows, 1, q_i, ldq, 1, ONE,
              dk[k0:k1].ctypes.data, ld_dk)
        if with_dq:  # dQ_i (tr, Dk) += (dS K_j) · scale: the scale as the GEMM's alpha
            _gemm(sgemm, rows, dk_cols, keys, scale, dp.ctypes.data, 1, rows, k_j, ks0, 1, ONE,
                  dq[r0:r1].ctypes.data, ld_dq)


def backward_run(q, k, v, dout, lse, delta, tiles, blocks, dk, dv, dq, psum, dsum, buf,
                 scale, with_dq: bool, sgemm: int) -> None:
    """The backward's loop over one query head's planned tiles against one work item's keys
    (the Python loop of :func:`qkv.engine.kernel.backward.backward_tiled`), in place: for each tile

        Pᵀ = exp(K_j Q_iᵀ − lse_i),  dV_j += Pᵀ dO_i,  dSᵀ = Pᵀ ∘ (V_j dO_iᵀ − Δ_i),
        dK_j += dSᵀ Q_i,  dQ_i += dS K_j · scale (``with_dq``),

    and Σ_j P, Σ_j dS per query row into ``psum``, ``dsum``.

    ``q (Nq, Dk)`` the head's queries times scale, ``dout (Nq, Dv)``, ``lse``, ``delta (Nq,)``;
    ``k (Nk, Dk)``, ``v (Nk, Dv)`` the kv head's rows (read-only views, rows of unit stride,
    any row stride); ``tiles (T, 6)`` int64 rows ``(r0, r1, k0, k1, partial, offset)`` in the
    head's query and key rows, ``blocks`` their PARTIAL blocks (:meth:`.TilePlan.table`);
    ``dk (Nk, Dk)``, ``dv (Nk, Dv)``, ``dq (Nq, Dk)`` added into; ``buf`` float32 scratch of
    :func:`qkv.engine.step.backward_scratch` elements; ``scale`` float32; ``sgemm`` the address of
    ``cblas_sgemm`` (:func:`qkv.engine.gemm.address`). Everything but k and v C-contiguous;
    every 2-D operand's row stride is read from its strides and checked, as the forward's."""
    _backward_run(q, k, v, dout, lse, delta, tiles, blocks, dk, dv, dq, psum, dsum, buf,
                  F32(scale), with_dq, PRODUCT_FLOOR, sgemm)
