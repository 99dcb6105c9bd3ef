"""Masks given explicitly: a bool array (``allow`` / ``deny``) or a rule ``fn(i, j)``."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from .base import BoundMask, Layout, Mask, broadcasts_to, is_range


@dataclass(frozen=True, repr=False, eq=False)
class Explicit(Mask):
    """A user's bool array broadcastable to (..., Hq, Nq, Nk); ``deny`` flips its polarity."""

    array: np.ndarray
    deny: bool

    def _hint(self):
        lead = self.array.shape[:-2]
        return (lead[:-1], lead[-1]) if lead else ((), 1)

    def bind(self, layout: Layout) -> BoundMask:
        full = (*layout.batch_shape, layout.heads, layout.nq, layout.nk)
        if not broadcasts_to(self.array.shape, full):
            raise ValueError(
                f"mask: {'deny' if self.deny else 'allow'}() array has shape {self.array.shape} "
                f"but scores have shape {full} (..., Hq, Nq, Nk): it must broadcast to them"
            )
        lead = self.array.shape[:-2]
        # Flatten the batch dims the array has; keep size-1 dims so it is not copied.
        batch_dep = any(n != 1 for n in lead[:-1])
        head_dep = bool(lead) and lead[-1] != 1
        shape = ((layout.batch_size if batch_dep else 1), (layout.heads if head_dep else 1),
                 layout.nq, layout.nk)
        lead_full = (*(layout.batch_shape if batch_dep else (1,) * len(layout.batch_shape)),
                     shape[1], layout.nq, layout.nk)
        planes = np.broadcast_to(self.array, lead_full).reshape(shape)
        return _BoundExplicit(layout, planes, self.deny, batch_dep, head_dep)

    def __repr__(self):
        return f"{'deny' if self.deny else 'allow'}(array of shape {self.array.shape})"


@dataclass(frozen=True, eq=False)
class _BoundExplicit(BoundMask):
    layout: Layout
    planes: np.ndarray  # (B or 1, H or 1, Nq, Nk)
    deny: bool
    batch_dependent: bool
    head_dependent: bool

    def block(self, qi, kj, b, h):
        plane = self.planes[b if self.batch_dependent else 0, h if self.head_dependent else 0]
        rows = plane[qi[0]: qi[-1] + 1] if is_range(qi) else plane[qi]
        block = rows[:, kj[0]: kj[-1] + 1] if is_range(kj) else rows[:, kj]
        return ~block if self.deny else block


def _bool_array(array, fn: str) -> np.ndarray:
    arr = np.asarray(array)
    if arr.dtype != bool:
        raise TypeError(
            f"{fn}() needs a bool array, got dtype {arr.dtype}; for additive float masks "
            "(0 / -inf) pass them as bias= instead"
        )
    if arr.ndim < 2:
        raise ValueError(f"{fn}() needs an array of shape (..., Nq, Nk), got shape {arr.shape}")
    return arr


def allow(array) -> Mask:
    """An explicit bool array where **True means may attend** (broadcast to (..., Hq, Nq, Nk))."""
    return Explicit(_bool_array(array, "allow"), deny=False)


def deny(array) -> Mask:
    """An explicit bool array where **True means masked out**, as in
    ``torch.nn.MultiheadAttention``'s ``attn_mask``/``key_padding_mask`` (the opposite of
    ``torch.nn.functional.scaled_dot_product_attention``'s bool ``attn_mask``)."""
    return Explicit(_bool_array(array, "deny"), deny=True)


@dataclass(frozen=True, repr=False, eq=False)
class Predicate(Mask):
    fn: Callable

    def bind(self, layout: Layout) -> BoundMask:
        return _BoundPredicate(layout, self.fn)

    def __repr__(self):
        return f"predicate({getattr(self.fn, '__name__', 'fn')})"


@dataclass(frozen=True, eq=False)
class _BoundPredicate(BoundMask):
    layout: Layout
    fn: Callable

    def block(self, qi, kj, b, h):
        result = np.asarray(self.fn(qi[:, None], kj[None, :]))
        if result.dtype != bool:
            raise TypeError(
                f"predicate: fn(q_idx, k_idx) must return bools, got dtype {result.dtype}"
            )
        if not broadcasts_to(result.shape, (len(qi), len(kj))):
            raise ValueError(
                f"predicate: fn(q_idx, k_idx) returned shape {result.shape}, which does not "
                f"broadcast to the tile's grid ({len(qi)}, {len(kj)}); write it elementwise on "
                "the index arrays q_idx (tq, 1) and k_idx (1, tk)"
            )
        return result


def predicate(fn: Callable) -> Mask:
    """A mask from a rule ``fn(q_idx, k_idx) -> bool array``, vectorised over index grids.

    ``q_idx`` has shape ``(tq, 1)`` and ``k_idx`` ``(1, tk)`` (query and key indices); the kernel
    calls it once per tile, so a custom mask costs O(tile²) memory, never O(Nq·Nk).
    Example: ``predicate(lambda i, j: (i - j) % 2 == 0)``.
    """
    if not callable(fn):
        raise TypeError(f"predicate() needs a callable fn(q_idx, k_idx), got {type(fn).__name__}")
    return Predicate(fn)
