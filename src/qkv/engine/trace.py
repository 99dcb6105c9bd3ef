"""``qkv.explain``: every intermediate of softmax(QKᵀ/√d_k)V, for a person to read.

A :class:`Trace` is computed by the float64 reference (the formula written literally), so what a
person reads is the oracle itself. Its arrays keep full precision; only the text and HTML forms
round numbers (to 4 decimals) for display. Views (the terminal viewer, the web explorer, the
notebook widgets) render traces; they never compute attention their own way.

The engine does not lay traces out, and never imports the views layer. The layout is passed in
through one small hook, :func:`set_layout` (``text(trace) -> str``, ``html(trace) -> str``):
``qkv/__init__.py``, the package's composition root, passes :mod:`qkv.render.trace`'s, loaded on
first use. Without a layout, ``str(trace)`` is a one-line summary and ``_repr_html_`` returns
None (a notebook then shows the repr). A hook rather than a mixin the views layer installs on the
class: the class stays the engine's own (no patched class attributes), and which layout is in use
never depends on which modules happen to have been imported.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from . import reference
from .masks import uses_positions
from .problem import prepare, require_v

__all__ = ["Trace", "explain", "set_layout"]

# The views layer's layout of a trace: {"text": fn, "html": fn}, set by set_layout.
_layout: dict[str, Callable[[Trace], str]] = {}


def set_layout(text: Callable[[Trace], str], html: Callable[[Trace], str]) -> None:
    """Pass in how a :class:`Trace` is laid out for people: ``text(trace)`` gives ``str(trace)``,
    ``html(trace)`` gives ``trace._repr_html_()``. Called once by ``qkv/__init__.py`` with
    :mod:`qkv.render.trace`'s functions; call it again to lay traces out your own way."""
    for name, fn in (("text", text), ("html", html)):
        if not callable(fn):
            raise TypeError(f"set_layout: {name} must be a function trace -> str, "
                            f"got {type(fn).__name__}")
    _layout.update(text=text, html=html)

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
    - ``row_max`` ``(..., Hq, Nq)``: each row's largest allowed scaled score m (0: none allowed)
    - ``exp``     ``(..., Hq, Nq, Nk)``: e^(scaled − m), softmax's middle step (0 where masked)
    - ``exp_sum`` ``(..., Hq, Nq)``: Σ_j exp, so weights = exp / exp_sum and lse = m + log exp_sum

    2-D inputs (one head, as in the lesson) give 2-D arrays, without the head axis.
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
    row_max: np.ndarray
    exp: np.ndarray
    exp_sum: np.ndarray
    mask: str | None = None
    positional: bool = False  # the mask has a position rule (causal, window, prefix)
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

    # -- for people: laid out by the views layer, passed in with set_layout ----------------
    def __str__(self) -> str:
        if "text" in _layout:
            return _layout["text"](self)
        nq, nk = self.weights.shape[-2:]
        return f"<qkv Trace: {nq} queries × {nk} keys (no layout set: see set_layout)>"

    def _repr_html_(self) -> str | None:
        """Offline HTML for notebooks (the layout passed to :func:`set_layout`)."""
        return _layout["html"](self) if "html" in _layout else None


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
        lse=present(steps["lse"], -2), row_max=present(steps["row_max"], -2),
        exp=present(steps["exp"]), exp_sum=present(steps["exp_sum"], -2),
        mask=None if mask is None else repr(mask), positional=uses_positions(mask),
        has_bias=bias is not None,
    )
