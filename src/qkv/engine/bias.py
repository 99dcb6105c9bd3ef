"""Additive biases: terms added to the *scaled* scores before the softmax.

    weights = softmax(Q Kᵀ · scale + bias)

A bias is either a dense array broadcastable to ``(..., Hq, Nq, Nk)`` or a rule computed per tile,
like :func:`alibi`, so that no Nq × Nk array is ever needed. Masking is the job of
:mod:`qkv.masks`, not of ``-inf`` biases: a mask lets the kernel skip tiles, a bias cannot.

Like a mask, a bias is a rule that binds to a :class:`~qkv.masks.Layout`; the bound bias answers
``tile(qi, kj, b, h)`` (broadcastable to ``(tq, tk)``) and ``magnitude()``, an upper bound on
``|bias|`` used to refuse problems whose scores would overflow.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .masks.base import Layout, Mask, broadcasts_to, is_range

__all__ = ["Bias", "BoundBias", "alibi", "alibi_slopes", "as_bias", "relative_position_buckets"]


class Bias:
    """Base class of bias rules: ``bind(layout)`` gives a :class:`BoundBias`."""

    def bind(self, layout: Layout) -> BoundBias:
        raise NotImplementedError

    def check_finite(self) -> None:
        """Raise ValueError if the bias holds NaN or ±inf (rules are finite by construction)."""


class BoundBias:
    layout: Layout

    def tile(self, qi: np.ndarray, kj: np.ndarray, b: int, h: int) -> np.ndarray:
        """The bias on one tile, broadcastable to ``(len(qi), len(kj))``."""
        raise NotImplementedError

    def magnitude(self) -> float:
        """An upper bound on |bias| over the whole problem."""
        raise NotImplementedError

    def dense(self, qi: np.ndarray, kj: np.ndarray) -> np.ndarray:
        """``(*batch, heads, tq, tk)`` — every batch element and head, from :meth:`tile`."""
        layout = self.layout
        out = np.empty((layout.batch_size, layout.heads, len(qi), len(kj)))
        for b in range(layout.batch_size):
            for h in range(layout.heads):
                out[b, h] = self.tile(qi, kj, b, h)
        return out.reshape(*layout.batch_shape, layout.heads, len(qi), len(kj))


@dataclass(frozen=True, eq=False)
class _Dense(Bias):
    array: np.ndarray

    def bind(self, layout: Layout) -> BoundBias:
        full = (*layout.batch_shape, layout.heads, layout.nq, layout.nk)
        if not broadcasts_to(self.array.shape, full):
            raise ValueError(
                f"bias has shape {self.array.shape} but scores have shape {full} "
                "(..., Hq, Nq, Nk): bias must broadcast to them"
            )
        planes = np.broadcast_to(self.array, full).reshape(
            layout.batch_size, layout.heads, layout.nq, layout.nk)  # (B, H, Nq, Nk): not -1,
        # which cannot be inferred when Nq or Nk is 0
        return _BoundDense(layout, planes, self.array)

    def check_finite(self):
        if not np.isfinite(self.array).all():
            raise ValueError(
                "bias contains NaN or inf; use a mask (qkv.allow/deny/causal/...) to forbid "
                "pairs instead of -inf, or pass check_finite=False"
            )


@dataclass(frozen=True, eq=False)
class _BoundDense(BoundBias):
    layout: Layout
    planes: np.ndarray  # (B, H, Nq, Nk), a broadcast view: no copy
    array: np.ndarray

    def tile(self, qi, kj, b, h):
        plane = self.planes[b, h]  # (Nq, Nk)
        if is_range(qi) and is_range(kj):
            return plane[qi[0]: qi[-1] + 1, kj[0]: kj[-1] + 1]
        return plane[np.ix_(qi, kj)]

    def magnitude(self):
        finite = self.array[np.isfinite(self.array)] if self.array.size else self.array
        return float(np.abs(finite).max()) if finite.size else 0.0


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


@dataclass(frozen=True, eq=False)
class _ALiBi(Bias):
    """bias[b, h, i, j] = −slope[b, h] · |position(i) − j|, positions aligned bottom-right
    (per sequence with key_lengths/query_lengths, as the position masks)."""

    slopes: np.ndarray | None
    key_lengths: np.ndarray | None = None
    query_lengths: np.ndarray | None = None

    def bind(self, layout: Layout) -> BoundBias:
        slopes = alibi_slopes(layout.heads) if self.slopes is None else self.slopes
        target = (*layout.batch_shape, layout.heads)
        if slopes.shape[-1:] != (layout.heads,) or not broadcasts_to(slopes.shape, target):
            raise ValueError(
                f"bias: alibi slopes have shape {slopes.shape} but q has {layout.heads} heads "
                f"(batch dims {layout.batch_shape}): pass one slope per query head, shape "
                f"({layout.heads},), or per sequence and head, shaped like {target}"
            )
        per_sequence = np.broadcast_to(slopes, target).reshape(layout.batch_size,
                                                                      layout.heads)  # (B, H)
        # The same alignment as the position masks: reuse the mask's per-sequence offsets.
        from .masks.position import Window

        offsets = Window(self.key_lengths, self.query_lengths)._offsets(layout)
        return _BoundALiBi(layout, per_sequence, offsets)


@dataclass(frozen=True, eq=False)
class _BoundALiBi(BoundBias):
    layout: Layout
    slopes: np.ndarray  # (B or 1, H)
    offsets: np.ndarray | None  # (B,) per-sequence alignment, or None: Nk − Nq

    def tile(self, qi, kj, b, h):
        offset = self.layout.offset if self.offsets is None else int(self.offsets[b])
        distance = np.abs((qi + offset)[:, None] - kj[None, :])  # (tq, tk)
        return -self.slopes[b if len(self.slopes) > 1 else 0, h] * distance

    def magnitude(self):
        longest = max(self.layout.nq, self.layout.nk)
        if self.offsets is not None and self.offsets.size:
            longest += int(np.abs(self.offsets).max())
        return float(np.abs(self.slopes).max(initial=0.0)) * longest


def alibi(slopes=None, *, key_lengths=None, query_lengths=None) -> Bias:
    """ALiBi (Press et al., 2022): a linear penalty on query–key distance, computed per tile.

    ``slopes`` has one entry per query head — or shape ``(..., H)`` shaped like the batch dims
    for per-sequence slopes; by default the paper's geometric slopes for the number of heads of
    q. With ``causal()`` this is exactly ALiBi's ``slope · (j − i)``. ``key_lengths`` and
    ``query_lengths`` align each sequence of a padded batch by its own lengths, as
    ``qkv.causal(key_lengths=...)`` does.
    """
    from .masks.position import _lengths

    klen, qlen = _lengths(key_lengths, query_lengths, "alibi")
    if slopes is None:
        return _ALiBi(None, klen, qlen)
    arr = np.asarray(slopes)
    if arr.dtype.kind not in "iuf":
        raise TypeError(
            f"alibi: slopes must be real numbers (one per query head), got {slopes!r} "
            f"(dtype {arr.dtype})"
        )
    arr = arr.astype(np.float64)
    if arr.ndim < 1 or not np.isfinite(arr).all():
        raise ValueError(f"alibi: slopes must be a finite array (..., H), got {slopes!r}")
    return _ALiBi(arr, klen, qlen)


def as_bias(bias) -> Bias | None:
    """Accept None, a Bias rule, or an array-like of real numbers."""
    if bias is None or isinstance(bias, Bias):
        return bias
    if isinstance(bias, Mask):
        raise TypeError("bias got a mask; pass masks as mask=, biases (floats) as bias=")
    if isinstance(bias, str):
        raise TypeError(f"bias must be an array of numbers or qkv.alibi(), got the string {bias!r}")
    try:
        arr = np.asarray(bias)
    except ValueError:
        raise ValueError("bias is ragged: pass a rectangular array (..., Nq, Nk)") from None
    if arr.dtype == bool:
        raise TypeError(
            "bias is a bool array; a bias is added to the scores. For a mask use "
            "mask=qkv.allow(array) (True = may attend) or mask=qkv.deny(array) (True = masked out)"
        )
    if arr.dtype.kind not in "iuf":
        raise TypeError(f"bias must hold real numbers, got dtype {arr.dtype}")
    if arr.ndim < 2:
        raise ValueError(f"bias needs shape (..., Nq, Nk), got shape {arr.shape}")
    return _Dense(arr)


def relative_position_buckets(nq: int, nk: int, num_buckets: int = 32, max_distance: int = 128,
                              *, bidirectional: bool = True) -> np.ndarray:
    """T5's relative-position buckets ``(nq, nk)`` (Raffel et al., 2020), for a learnable bias.

    Offsets ``j − i`` (query i aligned bottom-right, as the masks) map to ``num_buckets``
    buckets: exact for small distances, logarithmic up to ``max_distance``; with
    ``bidirectional`` half the buckets are for keys after the query. A learnable bias is then
    ``table[:, buckets]`` for a ``(H, num_buckets)`` table, and the gradient of the table is
    ``np.add.at`` of ``attention_backward(..., return_dbias=True)``'s dbias over the buckets::

        bias = table[:, buckets]                                    # (H, Nq, Nk)
        *_, dbias = qkv.attention_backward(..., bias=bias, return_dbias=True)
        dtable = np.zeros_like(table)
        np.add.at(dtable, (slice(None), buckets), dbias)
    """
    for name, x in (("nq", nq), ("nk", nk), ("num_buckets", num_buckets),
                    ("max_distance", max_distance)):
        if isinstance(x, bool) or not isinstance(x, int | np.integer) or x < (
                0 if name in ("nq", "nk") else 2):
            raise ValueError(f"relative_position_buckets: {name} must be an int"
                             f"{' ≥ 0' if name in ('nq', 'nk') else ' ≥ 2'}, got {x!r}")
    relative = np.arange(nk)[None, :] - (np.arange(nq) + nk - nq)[:, None]  # j − position(i)
    buckets = np.zeros((nq, nk), dtype=np.int64)
    if bidirectional:
        num_buckets //= 2
        buckets += (relative > 0) * num_buckets
        distance = np.abs(relative)
    else:
        distance = -np.minimum(relative, 0)
    max_exact = num_buckets // 2
    small = distance < max_exact
    with np.errstate(divide="ignore"):
        large = max_exact + (np.log(np.maximum(distance, 1) / max_exact)
                             / math.log(max_distance / max_exact)
                             * (num_buckets - max_exact)).astype(np.int64)
    large = np.minimum(large, num_buckets - 1)
    return buckets + np.where(small, distance, large)
