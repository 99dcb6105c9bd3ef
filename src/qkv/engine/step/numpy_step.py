"""The tile step in NumPy: a few whole-tile passes each (see the package doc for the contract).

Tiles are ``(P, T, R)``: reductions over the keys run down axis -2, across contiguous rows of
queries.
"""

from __future__ import annotations

import math

import numpy as np

LOG2E = math.log2(math.e)
# Below these exponents exp2 would return a subnormal number: flushed to 0 instead. With
# ``products`` (the tiled kernel), below half the exponent range, so that a weight times a value
# stays a normal number too (subnormal products slow a large GEMM 4–80×; see compiled.py).
EXP2_FLOOR = {np.dtype(np.float32): -126.0, np.dtype(np.float64): -1022.0}
PRODUCT_FLOOR = {np.dtype(np.float32): -63.0, np.dtype(np.float64): -511.0}


def _exp_from(s: np.ndarray, ref: np.ndarray, allowed: np.ndarray | None,
              products: bool = False) -> None:
    """s ← exp(s − ref) in place, ref ``(P, R)`` per query; masked pairs and would-be
    subnormals (with ``products``: weights below :data:`PRODUCT_FLOOR`) exactly 0. Queries whose
    ``ref`` is −inf (nothing allowed) give 0 everywhere."""
    c = s.dtype.type
    floor = (PRODUCT_FLOOR if products else EXP2_FLOOR)[s.dtype]
    if allowed is not None:
        # Excluded before any arithmetic: a NaN or a huge stale score in a masked slot is gone.
        np.copyto(s, -np.inf, where=~allowed)
    # −inf rows (nothing allowed): every entry → −inf, so 0. A NaN max (the caller's NaN score
    # in an allowed slot, check_finite=False) stays NaN, and so does its row: never "no key".
    finite_ref = np.where(ref == -np.inf, c(np.inf), ref)
    s -= finite_ref[..., None, :]
    s *= c(LOG2E)  # exp(x) = 2^(x·log2 e): NumPy's exp2 is ~2× faster than its exp
    if s.size and s.min() < floor:  # only then can a weight fall below 2^floor (NaN-safe)
        np.copyto(s, -np.inf, where=s < floor)
    np.exp2(s, out=s)


def online_softmax(s, allowed, m, row_sum, acc, products: bool = False) -> None:
    tile_max = (s.max(axis=-2, initial=-np.inf, where=allowed) if allowed is not None
                else s.max(axis=-2, initial=-np.inf))
    m_new = np.maximum(m, tile_max)  # (P, R)
    seen = m_new > -np.inf
    alpha = np.exp(np.subtract(m, m_new, out=np.zeros_like(m), where=seen))  # m = −inf → 0
    _exp_from(s, m_new, allowed, products)
    row_sum *= alpha
    row_sum += s.sum(axis=-2)
    if acc is not None:
        acc *= alpha[..., None, :]  # (P, Dv, R): one column per query
    m[...] = m_new


def probabilities(s, allowed, lse, products: bool = False) -> None:
    _exp_from(s, lse, allowed, products)


def softmax_grad(dp, p, delta) -> None:
    dp -= delta[..., None, :]
    dp *= p
    np.copyto(dp, 0, where=p == 0)  # inf·0 from a masked slot's stale value must not be NaN
