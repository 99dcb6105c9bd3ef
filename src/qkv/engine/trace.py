"""``qkv.explain``: every intermediate of softmax(QKᵀ/√d_k)V, for a person to read.

A :class:`Trace` is computed by the float64 reference (the formula written literally), so what a
person reads is the oracle itself. Its arrays keep full precision; only the text and HTML forms
(laid out by :mod:`qkv.render.trace`) round numbers (to 4 decimals) for display. Views (the
terminal viewer, the web explorer) render traces; they never compute attention their own way.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from . import reference
from .problem import prepare, require_v

__all__ = ["Trace", "explain"]

# explain() materialises every matrix; past this many weights, use attention_weights(rows=...).
MAX_WEIGHTS = 1_000_000


@dataclass(frozen=True)
class Trace:
    """Each step of attention for one call. Shapes, for inputs q (..., Hq, Nq, Dk):

    - ``q, k, v``: the inputs, float64; k and v ``(..., Hkv, Nk, D)``
    - ``scores``  ``(..., Hq, Nq, Nk)``: q · k, the raw dot products (Q Kᵀ)
    - ``scale``   float: the factor applied, 1/√Dk unless given
    - ``scaled``  ``(..., Hq, Nq, Nk)``: scores · scale (+ bias)
    - ``allowed`` ``(..., Hq, Nq, Nk)`` bool: True where the query may attend to the key
    - ``weights`` ``(..., Hq, Nq, Nk)``: softmax of ``scaled`` over allowed keys; rows sum to 1
      (rows with no allowed key are all 0)
    - ``output``  ``(..., Hq, Nq, Dv)``: weights @ v
    - ``lse``     ``(..., Hq, Nq)``: log Σ_j exp(scaled) over allowed keys (−inf: none allowed)

    2-D inputs (one head, as in the seeds) give 2-D arrays, without the head axis.
    """

    q: np.ndarray
    k: np.ndarray
    v: np.ndarray
    scores: np.ndarray
    scale: float
    scaled: np.ndarray
    allowed: np.ndarray
    weights: np.ndarray
    output: np.ndarray
    lse: np.ndarray
    mask: str | None = None
    has_bias: bool = False

    # -- machine-readable -------------------------------------------------------------------
    def to_dict(self) -> dict:
        """A JSON-safe dict (``json.dumps(..., allow_nan=False)`` works): arrays become nested
        lists; an lse of −inf (a row with no allowed key) becomes None."""

        def finite_or_none(x):
            if isinstance(x, list):
                return [finite_or_none(i) for i in x]
            return None if isinstance(x, float) and not math.isfinite(x) else x

        arrays = ("q", "k", "v", "scores", "scaled", "allowed", "weights", "output", "lse")
        d = {name: finite_or_none(getattr(self, name).tolist()) for name in arrays}
        d.update(scale=float(self.scale), mask=self.mask, has_bias=self.has_bias,
                 shape={"q": list(self.q.shape), "k": list(self.k.shape),
                        "v": list(self.v.shape)})
        return d

    # -- for people: laid out by qkv.render (imported lazily: the engine never needs it) -----
    def __str__(self) -> str:
        from ..render.trace import text

        return text(self)

    def _repr_html_(self) -> str:
        """Offline HTML for notebooks (see :func:`qkv.render.trace.html`)."""
        from ..render.trace import html
        return html(self)


def explain(q, k, v, mask=None, bias=None, scale=None) -> Trace:
    """A :class:`Trace` of every intermediate, computed by the float64 reference.

    Accepts the arguments of :func:`qkv.attention` (lists are fine: ``explain([[1, 0]], ...)``).
    For small inputs: past a million weights it asks you to pick rows with
    ``qkv.attention_weights(..., rows=...)`` instead.
    """
    require_v(v, "explain")
    p = prepare(q, k, v, mask, bias, scale)
    n_weights = p.batch_size * p.hq * p.nq * p.nk
    if n_weights > MAX_WEIGHTS:
        raise ValueError(
            f"explain is for small inputs: this call has {n_weights:,} weights (more than "
            f"{MAX_WEIGHTS:,}); use qkv.attention_weights(q, k, ..., rows=[...]) for a few rows"
        )
    steps = reference.intermediates(p)
    present = p.present
    return Trace(
        q=present(p.q.astype(np.float64)), k=present(p.k.astype(np.float64)),
        v=present(p.v.astype(np.float64)), scores=present(steps["scores"]), scale=p.scale,
        scaled=present(steps["scaled"]), allowed=present(steps["allowed"]),
        weights=present(steps["weights"]), output=present(steps["output"]),
        lse=present(steps["lse"], -2), mask=None if mask is None else repr(mask),
        has_bias=bias is not None,
    )
