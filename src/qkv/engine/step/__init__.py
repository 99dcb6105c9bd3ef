"""The tile step: the element-wise half of FlashAttention's recurrence, in two implementations.

Every path of the kernel (forward, weights, backward, small problems, ring attention) computes a
tile's scores with a GEMM and then calls these three functions on it. A tile is stored
*transposed*, keys down and queries across — ``s (P, T, R)``: P planes (heads or batch elements;
1 for a plain tile) of T keys by R queries, in natural units (``scale · q·k + bias``). The GEMM
``K Qᵀ`` that makes it is the BLAS's fastest orientation here (measured 25% faster than
``Q Kᵀ``), and each query's max and sum become element-wise updates across a row of queries,
which vectorise without horizontal reductions. Per-query state has shape ``(P, R)``.

``online_softmax(s, allowed, m, row_sum, acc, products=False)``
    FlashAttention-2 Algorithm 1's update. With the running max ``m``, the running sum
    ``row_sum`` (the paper's ℓ) and the accumulator ``acc (P, Dv, R)`` (or None) — transposed
    like the tile, one column per query, so that the caller's ``accᵀ += Vᵀ Pᵀ`` reads the tile
    untransposed (MKL runs it 13–17% faster than ``acc += P V`` from the transposed tile:
    ``python benchmarks/tile_layout.py``)::

        m_new = max(m, max over the tile's allowed keys of s)
        p     = exp(s − m_new)   (masked pairs: exactly 0, never exponentiated)
        ℓ     = exp(m − m_new) · ℓ + Σ_keys p
        acc   = exp(m − m_new) · acc          (the caller then adds v_tileᵀ @ p)

    ``s`` is overwritten with ``p``; ``m`` and ``row_sum`` are updated in place.

``probabilities(s, allowed, lse, products=False)``
    The weights recomputed from the final ``lse (P, R)``: ``s ← exp(s − lse)``, masked pairs 0
    (the backward's P, and ``attention_weights``).

``softmax_grad(dp, p, delta)``
    The softmax's backward: ``dp ← p ∘ (dp − delta)`` with ``delta (P, R)``, and exactly 0
    wherever p is 0 — so a huge dP against a masked (stale) value cannot make inf·0 = NaN.

``allowed`` is the tile's ``(P, T, R)`` bool block (transposed like ``s``), or None for a FULL
tile. Weights that would be subnormal (below the dtype's smallest normal number, 2^-126 in
float32) are flushed to 0: they would slow every later operation by an order of magnitude, and
the absolute error is < 1.2e-38. With ``products=True`` (the tiled kernel passes it to
``online_softmax`` and ``probabilities``) weights below 2^-63 (2^-511 in float64: half the
exponent range) are flushed too: times a value they could make subnormal products, which slow a
large P·V GEMM 4–80× on Intel CPUs (``python benchmarks/subnormal_gemm.py``), while such a
weight moves an output by < 2^-63 · Σ|v|, 39 binary orders below float32's rounding. The
small path (all heads at once), whose GEMMs are small, keeps 2^-126 — and with it the bits of
every model trained on it.

:mod:`.numpy_step` is the reference implementation (several NumPy passes); :mod:`.compiled`
fuses each function into one pass over the tile with Numba, without the GIL (the ``qkv[fast]``
extra). Both give the same results within the dtype's rounding; the tests run both.
:mod:`.aot` is :mod:`.compiled` built ahead of time (``qkv warm``), bitwise equal to it, so that
a fresh process's first call imports no Numba; ``QKV_AOT=0`` turns it off. :mod:`.fused` runs
the forward's whole loop over a query block's tiles — GEMMs (the BLAS's ``cblas_sgemm``,
called through its address) and this step — as one compiled call (:func:`fused_loop` finds the
one that goes with a step module; the prebuilt module carries it too), and the backward's
loop over a work item's tiles likewise (:func:`.fused.backward_run`).
"""

from __future__ import annotations

import os
from types import ModuleType

_aot: bool | None = None  # whether the prebuilt step loaded (looked up once per process)


def per_query(step: ModuleType) -> bool:
    """Whether a step module from :func:`get` runs each query's update on its own, down the
    keys in order (the compiled step and its prebuilt build): laid out any way — the small
    path lays every head's queries side by side in one row — each query gets the same bits.
    NumPy's reductions choose their order by the array's shape, so the NumPy step does not."""
    return step.__name__.rsplit(".", 1)[-1] in ("aot", "compiled")


def fused_loop(step: ModuleType, direction: str = "forward"):
    """The tile loop compiled whole — the forward's (:func:`.fused.forward_run`) or, for
    ``direction="backward"``, the backward's (:func:`.fused.backward_run`) — that goes with a
    step module from :func:`get`: the prebuilt one beside the prebuilt step, the JIT's beside
    the JIT; None beside the NumPy step."""
    name = step.__name__.rsplit(".", 1)[-1]
    if name == "aot":
        return getattr(step, f"{direction}_run")
    if name == "compiled":
        from . import fused

        return getattr(fused, f"{direction}_run")
    return None


def backward_scratch(tiles) -> int:
    """Float32 elements of scratch :func:`.fused.backward_run` needs for ``tiles`` (its
    ``(T, 6)`` table): two tiles (P and dS) and a row of sums for the largest tile."""
    rows, keys = tiles[:, 1] - tiles[:, 0], tiles[:, 3] - tiles[:, 2]
    return int((2 * rows * keys + rows).max(initial=1))


def get(backend: str) -> ModuleType:
    """The step module for a resolved backend name ("compiled" or "numpy"). "compiled" is the
    prebuilt module of :mod:`.aot` when ``qkv warm`` left one for this build, else the JIT."""
    global _aot
    if backend == "compiled":
        from . import aot

        if _aot is None:
            _aot = os.environ.get("QKV_AOT", "1") != "0" and aot.available()
        if _aot:
            return aot
        from . import compiled

        return compiled
    from . import numpy_step

    return numpy_step
