"""Position masks: a rule on (query position, key position), aligned bottom-right.

    causal()                  key j ≤ position(i)
    window(before, after=0)   position(i) − before ≤ j ≤ position(i) + after
    prefix(n)                 j < n, or the causal rule

Query i stands at position ``i + (Nk − Nq)``, so when Nq != Nk the last query sees the last key —
what decoding with a KV cache needs. A tile is classified from the range of key offsets
``d = j − position(i)`` it spans, without looking at its pairs.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .base import EMPTY, FULL, PARTIAL, BoundMask, Layout, Mask, check_bound, span


@dataclass(frozen=True, repr=False, eq=False)
class Window(Mask):
    """Key j allowed iff position(i) − before ≤ j ≤ position(i) + after (None: unbounded)."""

    before: int | None
    after: int | None
    name: str = "window"

    def bind(self, layout: Layout) -> BoundMask:
        return _BoundWindow(layout, self.before, self.after)

    def __repr__(self):
        if self.name == "causal":
            return "causal()"
        return f"window({self.before}, after={self.after})"


@dataclass(frozen=True, eq=False)
class _BoundWindow(BoundMask):
    layout: Layout
    before: int | None
    after: int | None
    cheap = True

    def block(self, qi, kj, b, h):
        qpos = (qi + self.layout.offset)[:, None]  # (tq, 1)
        kpos = kj[None, :]  # (1, tk)
        # Compare against shifted query positions rather than forming the (tq, tk) matrix of
        # offsets: one bool pass per bound instead of an int64 matrix and two passes.
        ok = None
        if self.after is not None:
            ok = kpos <= qpos + self.after
        if self.before is not None:
            lower = kpos >= qpos - self.before
            ok = lower if ok is None else np.logical_and(ok, lower, out=ok)
        if ok is None:
            ok = np.ones((len(qi), len(kj)), dtype=bool)
        return ok

    def classify(self, qi, kj, b, h):
        dmin, dmax = _offsets(qi, kj, self.layout.offset)
        lo = -np.inf if self.before is None else -self.before
        hi = np.inf if self.after is None else self.after
        if dmax < lo or dmin > hi:
            return EMPTY
        if dmin >= lo and dmax <= hi:
            return FULL
        return PARTIAL


@dataclass(frozen=True, repr=False, eq=False)
class Prefix(Mask):
    """Prefix-LM: every query sees keys 0..n−1, and the causal rule applies to the rest."""

    n: int

    def bind(self, layout: Layout) -> BoundMask:
        return _BoundPrefix(layout, self.n)

    def __repr__(self):
        return f"prefix({self.n})"


@dataclass(frozen=True, eq=False)
class _BoundPrefix(BoundMask):
    layout: Layout
    n: int
    cheap = True

    def block(self, qi, kj, b, h):
        qpos = (qi + self.layout.offset)[:, None]
        return (kj[None, :] < self.n) | (kj[None, :] <= qpos)

    def classify(self, qi, kj, b, h):
        dmin, dmax = _offsets(qi, kj, self.layout.offset)
        klo, khi = span(kj)
        if khi < self.n or dmax <= 0:
            return FULL
        if klo >= self.n and dmin > 0:
            return EMPTY
        return PARTIAL


def _offsets(qi, kj, offset: int) -> tuple[int, int]:
    """The range [dmin, dmax] of key offsets j − position(i) over a tile."""
    qlo, qhi = span(qi)
    klo, khi = span(kj)
    return klo - (qhi + offset), khi - (qlo + offset)


def causal() -> Mask:
    """Query position i sees keys 0..i (bottom-right aligned when Nq != Nk)."""
    return Window(None, 0, "causal")


def window(before: int | None, after: int | None = 0) -> Mask:
    """Sliding window: query position i sees keys i − before … i + after (inclusive).

    ``window(w - 1)`` is the causal sliding window of w keys used by local-attention models;
    ``window(w, w)`` is a symmetric band. ``None`` means unbounded on that side:
    ``window(None, 0)`` is ``causal()``, ``window(0, None)`` sees the query's own position and
    everything after it.
    """
    return Window(check_bound(before, "before", "window", allow_none=True),
                  check_bound(after, "after", "window", allow_none=True))


def prefix(n: int) -> Mask:
    """Prefix-LM: every query sees the first ``n`` keys; beyond them, the causal rule."""
    return Prefix(check_bound(n, "n", "prefix"))
