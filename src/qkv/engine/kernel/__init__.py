"""The kernels: FlashAttention-2's forward and backward, the weights on demand — one module a path.

Forward (FlashAttention-2, Algorithm 1), for each query tile Q_i of one (batch, head)::

    m = −∞, ℓ = 0, accᵀ = 0                                  (per query)
    for each key tile K_j, V_j the mask does not classify EMPTY:
        Sᵀ  = K_j Q_iᵀ · scale (+ bias)                       the tile's scores   (tk, tq)
        m, ℓ, accᵀ, Pᵀ = online_softmax(Sᵀ, allowed, m, ℓ, accᵀ)  step: P = exp(S − m_new)
        accᵀ += V_jᵀ Pᵀ                                       (Dv, tq), i.e. acc += P V_j
    out = (accᵀ / ℓ)ᵀ,   lse = m + log ℓ                      (ℓ = 0: no key → 0, −∞)

so no Nq × Nk array ever exists. Tiles are stored transposed, keys × queries, and so is the
accumulator (see :mod:`.step` for why). The element-wise half of each tile is the *tile step*
(:mod:`.step`, NumPy or compiled); the GEMMs stay with the BLAS. The same step serves the
backward (weights recomputed from lse), ``attention_weights``, small problems (all heads at
once, as one batch of rows) and ring attention (which calls :func:`forward` per kv shard).

Tiles are planned before they are touched (:class:`.tiles.TilePlan`): the bound mask classifies
each as EMPTY (skipped), FULL (no mask arithmetic) or PARTIAL (its block applied), once per batch
element and head only if the mask depends on them; partial tiles split where that skips work,
and runs of FULL tiles merge into wider ones.

One module a path, each taking its operands through :mod:`qkv.engine.operands` (the one place
that says what a path reads of q, k, v and dout, and copies what it cannot read):

- :mod:`.forward`   the tiled forward (and a paged cache's sequences), Python loop or fused;
- :mod:`.small`     problems whose scores per head fit in one tile: all heads at once, both ways;
- :mod:`.decode`    a paged decode step with the query heads of a kv head stacked;
- :mod:`.fused`     which problems the compiled tile loop takes, and its operands;
- :mod:`.weights`   the exact weights on demand;
- :mod:`.backward`  FlashAttention-2's backward;
- :mod:`.lse_checks` whether an lse belongs to the backward's q, k, mask and bias;
- :mod:`.common`    what the paths share: the tile's scores, the GEMM with bad rows kept out, the
  pool, the final division.
"""

from .backward import backward
from .common import BLAS_HOLD_MIN, apply_score_mod
from .forward import ACC_PAD, forward, forward_pages, has_work
from .small import SIDE_BY_SIDE_BELOW
from .weights import weights

__all__ = ["ACC_PAD", "BLAS_HOLD_MIN", "SIDE_BY_SIDE_BELOW", "apply_score_mod", "backward",
           "forward", "forward_pages", "has_work", "weights"]
