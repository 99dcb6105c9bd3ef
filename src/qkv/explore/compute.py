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


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def _preset_sentence(preset) -> str:
    """One preset in words, e.g. window(2, 0) → "each token sees itself and the 2 tokens
    before it"."""
    if isinstance(preset, CausalPreset):
        return "each token sees itself and the tokens before it (causal)"
    if isinstance(preset, WindowPreset):
        around = [_plural(preset.before, "token") + " before it" if preset.before else "",
                  _plural(preset.after, "token") + " after it" if preset.after else ""]
        around = [a for a in around if a]
        return ("each token sees only itself" if not around else
                "each token sees itself and the " + " and the ".join(around)) + \
            f" (a window of {preset.before} before, {preset.after} after)"
    if isinstance(preset, PrefixPreset):
        return (f"every token sees the first {_plural(preset.n, 'token')}; after them, each "
                "token also sees itself and the tokens before it (prefix)")
    if isinstance(preset, PaddingPreset):
        said = (f"only the first {_plural(preset.key_length, 'token')} are real keys; the rest "
                "are padding and get no attention")
        if preset.query_length is not None:
            said += (f", and only the first {_plural(preset.query_length, 'token')} ask as "
                     "queries (padded query rows get no keys)")
        return said + " (padding)"
    if isinstance(preset, DocumentsPreset):
        docs = " ".join(str(i) for i in preset.ids)
        return f"a token sees only tokens of its own document (document ids: {docs})"
    raise TypeError(f"unknown mask preset {preset!r}")  # unreachable: pydantic checked the kind


def describe_mask(spec: MaskSpec | None, tokens: list[str] | None = None) -> str:
    """The mask a spec builds, as sentences for a learner (the repr is for programmers)."""
    if spec is None or (not spec.presets and not spec.overrides):
        return "No mask: every token may attend to every token."
    name = (lambda i: f"“{tokens[i]}” ({i})") if tokens else (lambda i: str(i))
    parts = [_preset_sentence(p) for p in spec.presets]
    if len(parts) == 1:
        text = parts[0][0].upper() + parts[0][1:] + "."
    elif parts:
        text = "A token may attend to another only when all of these hold: " + \
            "; ".join(parts) + "."
    else:
        text = "Every token may attend to every token"
    cells = {(c.i, c.j): c.allowed for c in spec.overrides}
    denied = [f"{name(i)} → {name(j)}" for (i, j), ok in cells.items() if not ok]
    allowed = [f"{name(i)} → {name(j)}" for (i, j), ok in cells.items() if ok]
    if not parts:
        text += ", except " if denied else "."
        text += ("the clicked " + ("pair " if len(denied) == 1 else "pairs ")
                 + ", ".join(denied) + ".") if denied else ""
        return text
    if denied:
        text += " Clicked to masked: " + ", ".join(denied) + "."
    if allowed:
        text += " Clicked to allowed: " + ", ".join(allowed) + "."
    return text


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


def exp_step(trace: qkv.Trace) -> dict:
    """The softmax's middle step, read off qkv's trace: e^scaled for each allowed pair and each
    row's sum Σ_j e^scaled = e^lse (so weights = e^scaled / sum).

    When a row's scores are too large for e^x (past e^700), the row is shown shifted by its
    largest score, as softmax itself computes it: e^(scaled − max) — the weights are the same.
    ``seed_sum`` adds the exponentials rounded to 3 decimals, as the seed does by hand (it
    prints 4.668 where the unrounded sum is 4.669).
    """
    scaled = np.atleast_2d(trace.scaled)  # (Nq, Nk)
    allowed = np.atleast_2d(trace.allowed)
    top = np.where(allowed, scaled, -np.inf).max(axis=-1, keepdims=True)  # (Nq, 1)
    shifted = (top > 700).ravel()
    base = np.where(shifted[:, None], top, 0.0)
    base = np.where(np.isfinite(base), base, 0.0)
    exps = np.where(allowed, np.exp(np.where(allowed, scaled - base, 0.0)), 0.0)  # (Nq, Nk)
    sums = exps.sum(axis=-1)
    return {"exp": exps.tolist(), "sum": sums.tolist(), "shifted": shifted.tolist(),
            "seed_sum": np.round(exps, 3).sum(axis=-1).tolist()}


def vectors_trace(req: TraceRequest) -> dict:
    """View 2: the trace of the user's own queries, keys and values."""
    q = np.asarray(req.queries, dtype=np.float64)
    k = np.asarray(req.keys, dtype=np.float64)
    v = np.asarray(req.values, dtype=np.float64)
    mask = build_mask(req.mask, len(q), len(k))
    trace = qkv.explain(q, k, v, mask=mask, scale=req.scale)
    return {"trace": trace.to_dict(), "row_sums": _row_sums(trace), "d_k": q.shape[1],
            "exp": exp_step(trace)}


def gradient_share(weights: np.ndarray) -> list[float]:
    """∂w_j/∂score_j = w_j (1 − w_j) for each key: how much gradient reaches key j's score
    through softmax (the Jacobian's diagonal). It vanishes as w_j → 0 or 1."""
    w = np.asarray(weights, dtype=np.float64)
    return (w * (1.0 - w)).tolist()


def scale_view(req: ScaleRequest) -> dict:
    """View 3: softmax of scores that grow with d_k, with and without 1/(τ·√d_k), and random
    vectors.

    ``scores`` are given at ``reference_d_k`` (the seed's [8, 0] at d_k = 64: a key one standard
    deviation, 8 = √64, above another). Dot products of random vectors spread like √d_k, so at
    another d_k the raw scores are ``scores · √(d_k / reference_d_k)``: unscaled, softmax gets
    harder as d_k grows; divided by √d_k, it stays the same. They are laid out as one 1-d query
    ``[[1]]`` against 1-d keys ``[[s0], [s1], ...]``, so ``q · k`` is exactly the raw scores and
    qkv's softmax does the rest.
    """
    scale = 1.0 / (req.temperature * math.sqrt(req.d_k))
    grown = math.sqrt(req.d_k / req.reference_d_k)
    keys = np.asarray(req.scores, dtype=np.float64)[:, None] * grown  # (Nk, 1)
    query = np.ones((1, 1))
    scaled = qkv.explain(query, keys, keys, scale=scale)
    unscaled = qkv.explain(query, keys, keys, scale=1.0 / req.temperature)

    rng = np.random.default_rng(req.seed)
    q = rng.standard_normal((SCALE_QUERIES, req.d_k))
    k = rng.standard_normal((req.n_keys, req.d_k))
    raw = qkv.explain(q, k, k, scale=1.0 / req.temperature)
    divided = qkv.explain(q, k, k, scale=scale)
    return {
        "example": {
            "scores": req.scores,
            "reference_d_k": req.reference_d_k,
            "raw_scores": keys[:, 0].tolist(),
            "scale": scale,
            "d_k": req.d_k,
            "temperature": req.temperature,
            "scaled": scaled.scaled[0].tolist(),
            "weights": scaled.weights[0].tolist(),
            "unscaled_weights": unscaled.weights[0].tolist(),
            "gradient": gradient_share(scaled.weights[0]),
            "unscaled_gradient": gradient_share(unscaled.weights[0]),
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
    """View 4: the token grid under a mask; rows renormalise, fully masked rows are zero."""
    n = len(req.tokens)
    q, k, v = mask_vectors(n, req.seed, req.uniform)
    trace = qkv.explain(q, k, v, mask=build_mask(req.mask, n, n))
    empty = [i for i in range(n) if not trace.allowed[i].any()]
    return {"tokens": req.tokens, "trace": trace.to_dict(), "row_sums": _row_sums(trace),
            "fully_masked_rows": empty, "description": describe_mask(req.mask, req.tokens)}
