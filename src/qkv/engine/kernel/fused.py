"""Which problems the compiled tile loop (:mod:`..step.fused`) takes, and the operands it is
handed: through :mod:`..operands`, k and v as rows the BLAS can read (a copy, counted, where the
caller's layout has none), q and dout as C-contiguous blocks made by the caller's path."""

from __future__ import annotations

import numpy as np

from .. import gemm, operands
from .. import step as steps
from ..problem import Problem
from .decode import decode_group


def fused_loop(p: Problem, step, use: str, with_values: bool, direction: str = "forward",
               stats=None):
    """``(run, heads, sgemm)`` for the compiled loop over a query block's tiles
    (:mod:`..step.fused`: the Python loop of :func:`.forward.forward_tiled_work` — or with
    ``direction="backward"`` of :func:`.backward.backward_tiled`'s work item — GEMMs and steps
    in one call without the GIL), when this problem's tiles are only GEMMs and steps: the
    compiled step, a BLAS whose ILP64 ``cblas_sgemm`` :func:`..gemm.address` finds (MKL's or
    NumPy's OpenBLAS), float32 arithmetic, scores as the GEMM makes them (no bias, softcap or
    score_mod), no dropout, k and v checked finite (no row to keep out of a GEMM), whole heads
    (no paged cache). Else None, and the Python loop runs.

    ``heads(b, hk)`` gives a kv head's ``(k, v)`` rows (v may be k when only lse is wanted):
    rows the BLAS reads in place (:func:`..operands.compute_rows`: the caller's k and v, or
    one copy of each, counted in ``stats.copies``). The caller hands the loop its queries (and
    dout) as C-contiguous blocks (:func:`..operands.scaled_rows`)."""
    run = steps.fused_loop(step, direction)
    if (run is None or p.compute != np.float32 or p.bias is not None
            or p.softcap is not None or p.score_mod is not None or p.dropout
            or not p.checked_finite or p.pages is not None or decode_group(p)
            or 0 in (p.dk, p.dv)):
        return None
    sgemm = gemm.address(np.float32, use)
    if sgemm is None:
        return None
    k_all = operands.read_only(operands.compute_rows(p.flat(p.k), p.compute, "k", stats))
    v_all = (operands.read_only(operands.compute_rows(p.flat(p.v), p.compute, "v", stats))
             if with_values else k_all)
    return run, lambda b, hk: (k_all[b, hk], v_all[b, hk]), sgemm
