"""What every view draws: weights ``(layers, heads, Nq, Nk)`` with query and key labels.

:func:`as_heads` accepts the shapes people have — one matrix ``(Nq, Nk)``, one layer's heads
``(H, Nq, Nk)``, a model's ``(L, H, Nq, Nk)``, or a :class:`qkv.Trace` (any batch dims, which are
flattened into "layers") — and checks them once, so the renderers can trust their input.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..engine.trace import Trace


@dataclass(frozen=True)
class Heads:
    """Attention weights to draw.

    - ``weights``  ``(L, H, Nq, Nk)`` float64 in [0, 1]
    - ``queries``  Nq labels, ``keys`` Nk labels
    - ``title``    a heading; ``rows_name`` names axis 0 ("layer" or "batch")
    - ``trace``    the :class:`qkv.Trace` it came from, if any (the neuron view reads it)
    - ``allowed``  ``(L, H, Nq, Nk)`` bool, False where a mask removed the pair (from a Trace);
      views draw those cells as "masked", never as a zero weight
    """

    weights: np.ndarray
    queries: list[str]
    keys: list[str]
    title: str = "attention weights"
    rows_name: str = "layer"
    trace: Trace | None = None
    allowed: np.ndarray | None = None

    def head_allowed(self, layer: int, head: int) -> np.ndarray | None:
        """One head's ``(Nq, Nk)`` allowed pairs, or None when nothing is masked."""
        if self.allowed is None:
            return None
        return self.allowed[layer, head]

    @property
    def n_layers(self) -> int:
        return self.weights.shape[0]

    @property
    def n_heads(self) -> int:
        return self.weights.shape[1]

    def head(self, layer: int, head: int) -> np.ndarray:
        """One head's ``(Nq, Nk)`` matrix, with the indices checked."""
        for name, value, size in (("layer", layer, self.n_layers), ("head", head, self.n_heads)):
            if isinstance(value, bool) or not isinstance(value, int | np.integer):
                raise TypeError(f"{name} must be an int, got {value!r}")
            if not 0 <= value < size:
                raise ValueError(f"{name} must lie in [0, {size}), got {value}")
        return self.weights[layer, head]

    def label(self, layer: int, head: int) -> str:
        if self.n_layers == 1 and self.rows_name != "layer":
            return f"head {head}"
        return f"{self.rows_name} {layer} · head {head}"


def _labels(tokens, n: int, prefix: str, name: str) -> list[str]:
    if tokens is None:
        return [f"{prefix}{i}" for i in range(n)]
    labels = [str(t) for t in tokens]
    if len(labels) != n:
        raise ValueError(f"{name} has {len(labels)} labels but the weights have {n} "
                         f"{'queries' if prefix == 'q' else 'keys'}")
    return labels


def as_heads(weights, tokens=None, *, title: str | None = None, allowed=None) -> Heads:
    """Heads from an array ``(Nq, Nk)``, ``(H, Nq, Nk)``, ``(L, H, Nq, Nk)`` or a Trace.

    ``tokens``: labels for the keys (and the queries too, when Nq == Nk), or a pair
    ``(query_labels, key_labels)``; default ``q0, q1, …`` and ``k0, k1, …``.
    ``allowed``: bool, broadcastable to the weights' shape, False where a mask removed the
    pair (e.g. a causal model's future keys); a Trace carries its own.
    """
    trace = weights if isinstance(weights, Trace) else None
    if trace is not None and trace.weights.size == 0:
        nq, nk = trace.weights.shape[-2:]
        raise ValueError(f"show: this trace's weights have shape {trace.weights.shape} "
                         f"({nq} quer{'y' if nq == 1 else 'ies'} × {nk} "
                         f"key{'' if nk == 1 else 's'}): there is no weight to draw; "
                         "print(trace) shows its steps")
    if trace is not None:
        arr = np.asarray(trace.weights, dtype=np.float64)
        lead = arr.shape[:-3] if arr.ndim > 2 else ()
        rows_name = "batch"
        arr = arr.reshape(max(math.prod(lead), 1), *([1] if arr.ndim == 2 else [arr.shape[-3]]),
                          *arr.shape[-2:])
    else:
        arr = np.asarray(weights)
        if arr.dtype == bool or not (np.issubdtype(arr.dtype, np.floating)
                                     or np.issubdtype(arr.dtype, np.integer)):
            raise TypeError(f"weights must be an array of real numbers, got dtype {arr.dtype}")
        arr = arr.astype(np.float64)
        if not 2 <= arr.ndim <= 4:
            raise ValueError(
                f"weights has shape {arr.shape}; expected (Nq, Nk), (heads, Nq, Nk) or "
                "(layers, heads, Nq, Nk)")
        arr = arr.reshape((1,) * (4 - arr.ndim) + arr.shape)
        rows_name = "layer"
    if 0 in arr.shape:
        raise ValueError(f"weights has shape {arr.shape}: nothing to show")
    if not np.isfinite(arr).all():
        raise ValueError("weights contains NaN or inf; attention weights lie in [0, 1]")
    if arr.min() < -1e-6 or arr.max() > 1 + 1e-6:
        raise ValueError(f"weights range over [{arr.min():.4g}, {arr.max():.4g}]; attention "
                         "weights lie in [0, 1] (pass softmax outputs, not scores)")
    nq, nk = arr.shape[-2:]
    if isinstance(tokens, tuple) and len(tokens) == 2 and not isinstance(tokens[0], str):
        queries = _labels(tokens[0], nq, "q", "tokens[0] (queries)")
        keys = _labels(tokens[1], nk, "k", "tokens[1] (keys)")
    else:
        keys = _labels(tokens, nk, "k", "tokens")
        if tokens is not None and nq != nk:
            raise ValueError(f"tokens labels the {nk} keys but there are {nq} queries; pass "
                             "tokens=(query_labels, key_labels)")
        queries = keys if tokens is not None else _labels(None, nq, "q", "tokens")
    if allowed is not None:
        if trace is not None:
            raise ValueError("allowed: a Trace carries its own mask; pass allowed= only with "
                             "an array of weights")
        given = np.asarray(allowed)
        if given.dtype != bool:
            raise TypeError(f"allowed must be a bool array (True = may attend), got dtype "
                            f"{given.dtype}")
        try:
            given = np.broadcast_to(given.reshape((1,) * (4 - given.ndim) + given.shape)
                                    if given.ndim <= 4 else given, arr.shape)
        except ValueError:
            raise ValueError(f"allowed has shape {np.shape(allowed)}, which does not broadcast "
                             f"to the weights' shape {arr.shape}") from None
        allowed = None if given.all() else np.array(given)
    elif trace is not None and not np.asarray(trace.allowed).all():
        allowed = np.asarray(trace.allowed, dtype=bool).reshape(arr.shape)
    return Heads(np.clip(arr, 0.0, 1.0), queries, keys, title or "attention weights",
                 rows_name, trace, allowed)
