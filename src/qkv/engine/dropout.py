"""Dropout on the attention weights, seeded and reproducible tile by tile.

    out = (P ∘ Z / (1 − rate)) V,   Z_bhij ~ Bernoulli(1 − rate)

Z is not stored: each pair's keep-or-drop is a hash of (seed, batch element, head, global query
position, global key position) — a counter-based generator, like FlashAttention's Philox — so
the forward, the backward and the float64 reference all draw the same Z for a pair, whatever the
tiling, thread count or path. The lse (the softmax's normaliser) is that of the weights before
dropout, as in FlashAttention.
"""

from __future__ import annotations

import numpy as np

from .masks import Layout

_M1, _M2 = np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB)
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)


def _mix(x: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser: a bijection of uint64 whose output bits look independent."""
    x = x ^ (x >> np.uint64(30))
    x = x * _M1
    x = x ^ (x >> np.uint64(27))
    x = x * _M2
    return x ^ (x >> np.uint64(31))


def check(rate, seed) -> tuple[float, int]:
    if isinstance(rate, bool) or not isinstance(rate, int | float | np.integer | np.floating) \
            or not 0 <= float(rate) < 1:
        raise ValueError(f"dropout must be a rate in [0, 1), got {rate!r}")
    if float(rate) > 0 and (isinstance(seed, bool) or not isinstance(seed, int | np.integer)):
        raise ValueError(
            f"dropout_seed must be an int when dropout > 0 (the backward needs the same mask), "
            f"got {seed!r}")
    return float(rate), int(seed or 0) % 2**64


def scales(rate: float, seed: int, layout: Layout, b: np.ndarray | int, h: np.ndarray | int,
           qi: np.ndarray, kj: np.ndarray) -> np.ndarray:
    """Z / (1 − rate) for every pair: 0 or 1/(1 − rate), broadcast over ``b`` and ``h`` arrays,
    shaped ``(..., len(kj), len(qi))`` — transposed, keys × queries, as the kernel's tiles."""
    b, h = np.asarray(b, np.uint64), np.asarray(h, np.uint64)
    plane = b * np.uint64(layout.heads) + h  # (...)
    counter = ((plane[..., None, None] * np.uint64(layout.nq) + qi.astype(np.uint64)[None, :])
               * np.uint64(layout.nk) + kj.astype(np.uint64)[:, None])  # (..., tk, tq)
    with np.errstate(over="ignore"):  # uint64 arithmetic wraps by design
        bits = _mix(counter ^ _mix(np.uint64(seed) * _GOLDEN + _GOLDEN))
    uniform = (bits >> np.uint64(40)).astype(np.float64) * 2.0**-24  # [0, 1)
    return np.where(uniform >= rate, 1.0 / (1.0 - rate), 0.0)
