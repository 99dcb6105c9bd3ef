"""Additive biases: terms added to the *scaled* scores before the softmax.

    weights = softmax(Q Kᵀ · scale + bias)

A bias is either a dense array broadcastable to ``(..., Hq, Nq, Nk)`` or a rule computed per tile,
like :func:`alibi`, so that no Nq × Nk array is ever needed. Masking is the job of
:mod:`qkv.masks`, not of ``-inf`` biases: a mask lets the kernel skip tiles, a bias cannot.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .masks import Layout, broadcasts_to

__all__ = ["Bias", "alibi", "alibi_slopes", "as_bias"]


class Bias:
    """Base class. Bound to a :class:`~qkv.masks.Layout`, it yields the bias of a tile.

    ``tile(qi, kj, where)`` returns an array broadcastable to ``(tq, tk)`` for ``where=(b, h)``,
    or to ``(*batch, heads, tq, tk)`` for ``where=None``, for global query positions ``qi`` and
    key positions ``kj``.
    """

    def bind(self, layout: Layout) -> Bias:
        raise NotImplementedError

    def tile(self, qi: np.ndarray, kj: np.ndarray, where) -> np.ndarray:
        raise NotImplementedError

    def check_finite(self) -> None:
        """Raise ValueError if the bias holds NaN or ±inf (rules are finite by construction)."""


@dataclass
class _Dense(Bias):
    array: np.ndarray
    view: np.ndarray | None = None

    def bind(self, layout: Layout) -> Bias:
        full = (*layout.batch_shape, layout.heads, layout.nq, layout.nk)
        if not broadcasts_to(self.array.shape, full):
            raise ValueError(
                f"bias has shape {self.array.shape} but scores have shape {full} "
                "(..., Hq, Nq, Nk): bias must broadcast to them"
            )
        return _Dense(self.array, np.broadcast_to(self.array, full))

    def tile(self, qi, kj, where):
        if where is None:
            return self.view[..., qi[:, None], kj[None, :]]
        b, h = where
        plane = self.view[b][h]  # (Nq, Nk)
        return plane[qi[0]: qi[-1] + 1, kj[0]: kj[-1] + 1] if _contiguous(qi, kj) \
            else plane[np.ix_(qi, kj)]

    def check_finite(self):
        if not np.isfinite(self.array).all():
            raise ValueError(
                "bias contains NaN or inf; use a mask (qkv.allow/deny/causal/...) to forbid "
                "pairs instead of -inf, or pass check_finite=False"
            )


def _contiguous(*idx: np.ndarray) -> bool:
    return all(len(i) and int(i[-1]) - int(i[0]) + 1 == len(i) for i in idx)


def alibi_slopes(n_heads: int) -> np.ndarray:
    """The ALiBi paper's head slopes: a geometric sequence starting at 2^(−8/n).

    For n not a power of two, the paper takes the slopes of the closest smaller power of two and
    interleaves the odd-indexed slopes of the next power of two (Press et al., 2022).
    """
    if isinstance(n_heads, bool) or not isinstance(n_heads, int | np.integer) or n_heads < 1:
        raise ValueError(f"alibi_slopes: n_heads must be a positive int, got {n_heads!r}")

    def power_of_two(n: int) -> list[float]:
        start = 2.0 ** (-8.0 / n)
        return [start ** (i + 1) for i in range(n)]

    if math.log2(n_heads).is_integer():
        return np.array(power_of_two(n_heads))
    closest = 2 ** math.floor(math.log2(n_heads))
    extra = power_of_two(2 * closest)[0::2][: n_heads - closest]
    return np.array(power_of_two(closest) + extra)


@dataclass
class _ALiBi(Bias):
    """bias[h, i, j] = −slope[h] · |position(i) − j|, positions aligned bottom-right."""

    slopes: np.ndarray | None
    bound_slopes: np.ndarray | None = None
    offset: int = 0

    def bind(self, layout: Layout) -> Bias:
        slopes = alibi_slopes(layout.heads) if self.slopes is None else self.slopes
        if slopes.shape != (layout.heads,):
            raise ValueError(
                f"bias: alibi slopes have shape {slopes.shape} but q has {layout.heads} heads: "
                f"pass one slope per query head, shape ({layout.heads},)"
            )
        return _ALiBi(self.slopes, slopes, layout.nk - layout.nq)

    def tile(self, qi, kj, where):
        distance = np.abs((qi + self.offset)[:, None] - kj[None, :])  # (tq, tk)
        if where is None:
            return -self.bound_slopes[:, None, None] * distance  # (H, tq, tk)
        return -self.bound_slopes[where[1]] * distance


def alibi(slopes=None) -> Bias:
    """ALiBi (Press et al., 2022): a linear penalty on query–key distance, computed per tile.

    ``slopes`` has one entry per query head; by default the paper's geometric slopes for the
    number of heads of q. With ``causal()`` this is exactly ALiBi's ``slope · (j − i)``.
    """
    if slopes is None:
        return _ALiBi(None)
    arr = np.asarray(slopes, dtype=np.float64)
    if arr.ndim != 1 or not np.isfinite(arr).all():
        raise ValueError(f"alibi: slopes must be a finite 1-D array (one per head), got {slopes!r}")
    return _ALiBi(arr)


def as_bias(bias) -> Bias | None:
    """Accept None, a Bias rule, or an array-like of floats."""
    if bias is None or isinstance(bias, Bias):
        return bias
    from .masks import Mask

    if isinstance(bias, Mask):
        raise TypeError("bias got a mask; pass masks as mask=, biases (floats) as bias=")
    arr = np.asarray(bias)
    if arr.dtype == bool:
        raise TypeError(
            "bias is a bool array; a bias is added to the scores. For a mask use "
            "mask=qkv.allow(array) (True = may attend) or mask=qkv.deny(array) (True = masked out)"
        )
    if not (np.issubdtype(arr.dtype, np.floating) or np.issubdtype(arr.dtype, np.integer)):
        raise TypeError(f"bias must hold real numbers, got dtype {arr.dtype}")
    if arr.ndim < 2:
        raise ValueError(f"bias needs shape (..., Nq, Nk), got shape {arr.shape}")
    return _Dense(arr)
