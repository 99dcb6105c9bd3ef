"""The tiled forward's loop over one query block, compiled whole: GEMMs and steps in one call.

For each key tile of a query block the forward runs three things (see :mod:`qkv.engine.kernel`)::

    Sᵀ   = K_j Q_iᵀ                  score GEMM             (tk, tr)
    online_softmax(Sᵀ, …, accᵀ)      the step               (:func:`.compiled.online_softmax_plane`)
    accᵀ += V_jᵀ Pᵀ                  P·V GEMM               (Dv, tr)

Driven from Python, every tile pays the interpreter, and hands the GIL between the workers
three times: a worker back from a GEMM waits for the other's Python. :func:`forward_run` runs
the whole loop in one compiled call without the GIL, calling the BLAS's ``cblas_sgemm``
through its address (MKL's or NumPy's OpenBLAS's, from :func:`qkv.engine.gemm.address`).
Measured interleaved in one process (``python benchmarks/fused_loop.py``, two runs, MKL on an
Intel Xeon): on one worker 0.89–0.96 of the Python loop's time, on two 0.81–0.92, where the
GIL was shared.

The tiles come planned (:meth:`qkv.engine.tiles.TilePlan.table`): rows ``(r0, r1, k0, k1,
partial, offset)``, and a PARTIAL tile's allowed block, transposed ``(tk, tr)``, at ``offset`` in
one packed bool array. The step is the same inlined code as :func:`.compiled.online_softmax`'s,
so the two paths give the same bits.
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.extending import intrinsic

from .compiled import FLAGS, FLOOR, PRODUCT_FLOOR, online_softmax_plane, wide_vectors

ROW_MAJOR, NO_TRANS, TRANS = 101, 111, 112  # CBLAS's enums
F32 = np.float32


@intrinsic
def _sgemm(typingctx, address, trans_a, trans_b, m, n, k, a, lda, b, ldb, beta, c, ldc):
    """``C ← A B + beta C`` (row-major, A (m, k) and B (k, n) each transposed or not as
    CBLAS's enums say) by calling an ILP64 ``cblas_sgemm`` at ``address``: the enums as C ints,
    sizes and strides as 64-bit ints (:func:`qkv.engine.gemm.address` finds MKL's or NumPy's)."""
    i64 = types.int64
    sig = types.void(i64, i64, i64, i64, i64, i64, i64, i64, i64, i64, types.float32, i64, i64)

    def codegen(context, builder, signature, args):
        i32, i64, f32 = ir.IntType(32), ir.IntType(64), ir.FloatType()
        ptr = ir.IntType(8).as_pointer()
        fn_type = ir.FunctionType(ir.VoidType(), [i32, i32, i32, i64, i64, i64, f32, ptr, i64,
                                                  ptr, i64, f32, ptr, i64])
        address, ta, tb, m, n, k, a, lda, b, ldb, beta, c, ldc = args
        fn = builder.inttoptr(address, fn_type.as_pointer())

        def enum(x):
            return builder.trunc(x, i32)

        def pointer(x):
            return builder.inttoptr(x, ptr)

        builder.call(fn, [ir.Constant(i32, ROW_MAJOR), enum(ta), enum(tb), m, n, k,
                          ir.Constant(f32, 1.0), pointer(a), lda, pointer(b), ldb, beta,
                          pointer(c), ldc])
        return context.get_dummy_value()

    return sig, codegen


@njit(nogil=True, fastmath=FLAGS, cache=True)
def _forward_run(q, k, v, tiles, blocks, m, row_sum, acc, buf, has_acc, floor, sgemm):
    wide_vectors()  # the step inlined below is element-wise (see compiled.WIDE)
    tq, dk = q.shape
    dv, ldc = acc.shape  # accᵀ's rows may be wider than tq (padded: see kernel.forward)
    # rows' strides in elements; a head of one key may have any stride (the BLAS wants ≥ D)
    ldk, ldv = max(k.strides[0] // 4, dk), max(v.strides[0] // 4, v.shape[1])
    m_new = np.empty(tq, dtype=np.float32)
    m_ref = np.empty(tq, dtype=np.float32)
    alpha = np.empty(tq, dtype=np.float32)
    no_block = blocks[:1].reshape((1, 1))
    for t in range(tiles.shape[0]):
        r0, r1, k0, k1, partial, offset = tiles[t]
        rows, keys = r1 - r0, k1 - k0
        s = buf[: keys * rows].reshape((keys, rows))
        # Sᵀ (tk, tr) = K_j (tk, Dk) · Q_iᵀ: beta 0, so the buffer's old contents are never read
        _sgemm(sgemm, NO_TRANS, TRANS, keys, rows, dk, k[k0:k1].ctypes.data, ldk,
               q[r0:r1].ctypes.data, dk, F32(0.0), s.ctypes.data, rows)
        ok = blocks[offset: offset + keys * rows].reshape((keys, rows)) if partial else no_block
        online_softmax_plane(s, ok, partial != 0, m[r0:r1], row_sum[r0:r1], acc[:, r0:r1],
                             has_acc, floor, m_new, m_ref, alpha)
        if has_acc:  # accᵀ (Dv, tr) += V_jᵀ (Dv, tk) · Pᵀ (tk, tr)
            _sgemm(sgemm, TRANS, NO_TRANS, dv, rows, keys, v[k0:k1].ctypes.data, ldv,
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
    caller's flags vary, a broadcast view is read-only: one signature, built ahead of time) —
    the caller checks the strides: the GEMMs are handed pointers and row strides."""
    has_acc = acc is not None
    _forward_run(q, k, v, tiles, blocks, m, row_sum,
                 acc if has_acc else np.zeros((1, q.shape[0]), np.float32), buf, has_acc,
                 PRODUCT_FLOOR if products else FLOOR, sgemm)
