"""Validated requests → qkv calls → JSON-safe answers. No attention is computed here by hand:
every weight comes from ``qkv.explain`` (the float64 reference), every mask from ``qkv.masks``.
"""

from __future__ import annotations

import math

import numpy as np

import qkv

from .schemas import (
    CausalPreset,
    DocumentsPreset,
    MaskRequest,
    MaskSpec,
    PaddingPreset,
    PrefixPreset,
    ScaleRequest,
    TraceRequest,
    WindowPreset,
)

MASK_DIMS = 4  # dimensions of the random vectors behind the mask view's token grid
SCALE_QUERIES = 64  # random queries used to measure the score spread in the scale view


def build_mask(spec: MaskSpec | None, nq: int, nk: int) -> qkv.masks.Mask | None:
    """The qkv mask a spec describes: presets joined with ``&``, then clicked cells.

    A cell clicked to "denied" is removed with ``& qkv.deny(...)``; a cell clicked to "allowed"
    is added with ``| qkv.allow(...)``. The last click on a cell wins.
    """
    if spec is None:
        return None
    mask = None
    for preset in spec.presets:
        part = _preset_mask(preset)
        mask = part if mask is None else mask & part
    cells = {(c.i, c.j): c.allowed for c in spec.overrides}
    denied = np.zeros((nq, nk), dtype=bool)
    allowed = np.zeros((nq, nk), dtype=bool)
    for (i, j), ok in cells.items():
        (allowed if ok else denied)[i, j] = True
    if denied.any():
        mask = qkv.deny(denied) if mask is None else mask & qkv.deny(denied)
    if allowed.any() and mask is not None:  # with no mask every cell is allowed already
        mask = mask | qkv.allow(allowed)
    return mask


def _preset_mask(preset) -> qkv.masks.Mask:
    if isinstance(preset, CausalPreset):
        return qkv.causal()
    if isinstance(preset, WindowPreset):
        return qkv.window(preset.before, preset.after)
    if isinstance(preset, PrefixPreset):
        return qkv.prefix(preset.n)
    if isinstance(preset, PaddingPreset):
        return qkv.padding(preset.key_length, preset.query_length)
    if isinstance(preset, DocumentsPreset):
        return qkv.documents(np.asarray(preset.ids, dtype=np.int64))
    raise TypeError(f"unknown mask preset {preset!r}")  # unreachable: pydantic checked the kind


def _row_sums(trace: qkv.Trace) -> list[float]:
    """Each query's total weight, read off the engine's weights (1, or 0 if fully masked)."""
    return trace.weights.sum(axis=-1).tolist()


def vectors_trace(req: TraceRequest) -> dict:
    """View 1: the trace of the user's own queries, keys and values."""
    q = np.asarray(req.queries, dtype=np.float64)
    k = np.asarray(req.keys, dtype=np.float64)
    v = np.asarray(req.values, dtype=np.float64)
    mask = build_mask(req.mask, len(q), len(k))
    trace = qkv.explain(q, k, v, mask=mask, scale=req.scale)
    return {"trace": trace.to_dict(), "row_sums": _row_sums(trace), "d_k": q.shape[1]}


def scale_view(req: ScaleRequest) -> dict:
    """View 2: softmax of fixed scores as the scale 1/(τ·√d_k) changes, and random vectors.

    The scores are laid out as one 1-d query ``[[1]]`` against 1-d keys ``[[s0], [s1], ...]``,
    so ``q · k`` is exactly the given scores and qkv's softmax does the rest.
    """
    scale = 1.0 / (req.temperature * math.sqrt(req.d_k))
    keys = np.asarray(req.scores, dtype=np.float64)[:, None]  # (Nk, 1)
    query = np.ones((1, 1))
    scaled = qkv.explain(query, keys, keys, scale=scale)
    unscaled = qkv.explain(query, keys, keys, scale=1.0)

    rng = np.random.default_rng(req.seed)
    q = rng.standard_normal((SCALE_QUERIES, req.d_k))
    k = rng.standard_normal((req.n_keys, req.d_k))
    raw = qkv.explain(q, k, k, scale=1.0 / req.temperature)
    divided = qkv.explain(q, k, k, scale=scale)
    return {
        "example": {
            "scores": req.scores,
            "scale": scale,
            "d_k": req.d_k,
            "temperature": req.temperature,
            "scaled": scaled.scaled[0].tolist(),
            "weights": scaled.weights[0].tolist(),
            "unscaled_weights": unscaled.weights[0].tolist(),
        },
        "random": {
            "d_k": req.d_k,
            "n_queries": SCALE_QUERIES,
            "n_keys": req.n_keys,
            "seed": req.seed,
            "scale": scale,
            "raw_std": float(raw.scaled.std()),
            "scaled_std": float(divided.scaled.std()),
            "sqrt_d_k": math.sqrt(req.d_k),
            "raw_mean_max_weight": float(raw.weights.max(axis=-1).mean()),
            "scaled_mean_max_weight": float(divided.weights.max(axis=-1).mean()),
            "raw_scores": raw.scaled[0].tolist(),
            "raw_weights": raw.weights[0].tolist(),
            "scaled_scores": divided.scaled[0].tolist(),
            "scaled_weights": divided.weights[0].tolist(),
        },
    }


def mask_vectors(n: int, seed: int, uniform: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The mask view's q, k, v: seeded standard normals (or zeros, for equal scores)."""
    if uniform:
        zeros = np.zeros((n, MASK_DIMS))
        return zeros, zeros, np.eye(n, MASK_DIMS)
    rng = np.random.default_rng(seed)
    q, k, v = rng.standard_normal((3, n, MASK_DIMS))
    return q, k, v


def mask_view(req: MaskRequest) -> dict:
    """View 3: the token grid under a mask; rows renormalise, fully masked rows are zero."""
    n = len(req.tokens)
    q, k, v = mask_vectors(n, req.seed, req.uniform)
    trace = qkv.explain(q, k, v, mask=build_mask(req.mask, n, n))
    empty = [i for i in range(n) if not trace.allowed[i].any()]
    return {"tokens": req.tokens, "trace": trace.to_dict(), "row_sums": _row_sums(trace),
            "fully_masked_rows": empty}
