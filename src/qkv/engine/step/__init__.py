"""The tile step: the element-wise half of FlashAttention's recurrence, in two implementations.

Every path of the kernel (forward, weights, backward, small problems, ring attention) computes a
tile's scores with a GEMM and then calls these three functions on the ``(R, T)`` score tile —
R query rows by T keys, row-major, in natural units (``scale · q·k + bias``):

``online_softmax(s, allowed, m, row_sum, acc)``
    FlashAttention-2 Algorithm 1's update. With the running max ``m (R,)``, running sum
    ``row_sum (R,)`` (the paper's ℓ) and accumulator ``acc (R, Dv)`` (or None)::

        m_new = max(m, rowmax(s over allowed))
        p     = exp(s − m_new)   (masked pairs: exactly 0, never exponentiated)
        ℓ     = exp(m − m_new) · ℓ + rowsum(p)
        acc   = exp(m − m_new) · acc          (the caller then adds p @ v_tile)

    ``s`` is overwritten with ``p``; ``m`` and ``l`` are updated in place.

``probabilities(s, allowed, lse)``
    The weights recomputed from the final ``lse (R,)``: ``s ← exp(s − lse)``, masked pairs 0
    (the backward's P, and ``attention_weights``).

``softmax_grad(dp, p, delta)``
    The softmax's backward: ``dp ← p ∘ (dp − delta)`` with ``delta (R,)``, and exactly 0
    wherever p is 0 — so a huge dP against a masked (stale) value cannot make inf·0 = NaN.

``allowed`` is the tile's ``(R, T)`` bool block, or None for a FULL tile. Weights that would be
subnormal (below the dtype's smallest normal number, 2^-126 in float32) are flushed to 0: they
would slow every later operation by an order of magnitude, and the absolute error is < 1.2e-38.

:mod:`.numpy_step` is the reference implementation (several NumPy passes); :mod:`.compiled`
fuses each function into one pass over the tile with Numba, without the GIL (the ``qkv[fast]``
extra). Both give the same results within the dtype's rounding; the tests run both.
"""

from __future__ import annotations

from types import ModuleType


def get(backend: str) -> ModuleType:
    """The step module for a resolved backend name ("compiled" or "numpy")."""
    if backend == "compiled":
        from . import compiled

        return compiled
    from . import numpy_step

    return numpy_step
