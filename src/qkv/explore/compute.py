"""Validated requests → qkv calls → JSON-safe answers. No attention is computed here by hand:
every weight comes from ``qkv.explain`` (the float64 reference), every mask from ``qkv.masks``.
"""

from __future__ import annotations

import math

import numpy as np

import qkv

from .schemas import (
    MAX_SCALE_DK,
    SEED_KEYS,
    SEED_QUERIES,
    SEED_VALUES,
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
    """
    scaled = np.atleast_2d(trace.scaled)  # (Nq, Nk)
    allowed = np.atleast_2d(trace.allowed)
    top = np.where(allowed, scaled, -np.inf).max(axis=-1, keepdims=True)  # (Nq, 1)
    shifted = (top > 700).ravel()
    base = np.where(shifted[:, None], top, 0.0)
    base = np.where(np.isfinite(base), base, 0.0)
    exps = np.where(allowed, np.exp(np.where(allowed, scaled - base, 0.0)), 0.0)  # (Nq, Nk)
    sums = exps.sum(axis=-1)
    return {"exp": exps.tolist(), "sum": sums.tolist(), "shifted": shifted.tolist()}


def is_seed_example(req: TraceRequest) -> bool:
    """Are these the lesson's worked example's inputs, at its scale 1/√2 and with no mask?"""
    default_scale = req.scale is None or req.scale == 1 / math.sqrt(2)
    no_mask = req.mask is None or not (req.mask.presets or req.mask.overrides)
    return (req.queries == SEED_QUERIES and req.keys == SEED_KEYS and req.values == SEED_VALUES
            and default_scale and no_mask)


def seed_by_hand(trace: qkv.Trace) -> dict:
    """The lesson's hand computation of its worked examples, from qkv's numbers rounded as the
    lesson rounds them (3 decimals): Σ of the rounded e^x (4.668, where the exact sum is 4.669),
    and the rounded weights times V ((1.219, 0.779), where the exact output is
    (1.2202, 0.7798))."""
    exp_rounded = np.round(np.exp(trace.scaled[0]), 3)  # (Nk,)
    weights_rounded = np.round(trace.weights[0], 3)  # (Nk,)
    return {"exp_rounded": exp_rounded.tolist(), "sum": float(exp_rounded.sum()),
            "weights_rounded": weights_rounded.tolist(),
            "output": (weights_rounded @ trace.v).tolist()}


def vectors_trace(req: TraceRequest) -> dict:
    """View 2: the trace of the user's own queries, keys and values."""
    q = np.asarray(req.queries, dtype=np.float64)
    k = np.asarray(req.keys, dtype=np.float64)
    v = np.asarray(req.values, dtype=np.float64)
    mask = build_mask(req.mask, len(q), len(k))
    trace = qkv.explain(q, k, v, mask=mask, scale=req.scale)
    return {"trace": trace.to_dict(), "row_sums": _row_sums(trace), "d_k": q.shape[1],
            "exp": exp_step(trace), "seed": seed_by_hand(trace) if is_seed_example(req) else None}


def gradient_share(weights: np.ndarray) -> list[float]:
    """∂w_j/∂score_j = w_j (1 − w_j) for each key: how much gradient reaches key j's score
    through softmax (the Jacobian's diagonal). It vanishes as w_j → 0 or 1.

    1 − w_j is computed as the sum of the other weights (equal in exact arithmetic): float64
    rounds a weight of 1 − 1.8e-35 to 1, and 1 − w_j would then be 0, printing "0, 1.8e-35"
    for two keys whose gradients are equal (w₀w₁ = w₁w₀)."""
    w = np.asarray(weights, dtype=np.float64)  # (Nk,)
    rest = np.array([np.delete(w, j).sum() for j in range(len(w))])  # (Nk,) 1 − w_j
    return (w * rest).tolist()


# A gradient w(1 − w) below this has "nearly vanished": the key's score barely learns. (At the
# lesson's [8, 0] unscaled it is 3.4e-4; at [1, 0] it is 0.197.)
VANISHED = 1e-3


def _num(x: float) -> str:
    """A weight or gradient as the page writes it: 3 decimals, or 1.2e-5 when that is 0.000."""
    if x == 0:
        return "0 (too small for float64)"
    return f"{x:.1e}" if abs(x) < 5e-4 else f"{x:.3f}"


def scale_sentences(ex: dict) -> dict:
    """The scale view's heading and summary, written from its numbers (``ex`` is the
    "example" answer): how far apart the scores are in standard deviations of q · k (√d_k at
    the reference d_k), and what the key falling behind keeps — weight and gradient — without
    and with the scale. Words follow the numbers: "vanished" only below :data:`VANISHED`."""
    scores = ex["scores"]
    spread = math.sqrt(ex["reference_d_k"])  # std of q · k for N(0, 1) entries
    top = sorted(scores, reverse=True)
    gap = (top[0] - top[1]) / spread
    count = {2: "Two", 3: "Three"}.get(len(scores), str(len(scores)))
    listed = ", ".join(f"{x:g}" for x in scores)
    if gap == 0:
        apart = "the top two are equal"
    else:
        apart = (f"the top two are {gap:.3g} standard deviation{'' if gap == 1 else 's'} apart "
                 f"(one standard deviation of q · k at d_k = {ex['reference_d_k']} is "
                 f"√{ex['reference_d_k']} = {spread:g})")
    heading = f"{count} keys, scores [{listed}] at d_k = {ex['reference_d_k']}: {apart}"

    j = min(range(len(scores)), key=lambda i: ex["unscaled_weights"][i])  # falls behind most
    uw, ug = ex["unscaled_weights"][j], ex["unscaled_gradient"][j]
    sw, sg = ex["weights"][j], ex["gradient"][j]
    tau, d_k = ex["temperature"], ex["d_k"]
    divided = "√d_k" if tau == 1 else "τ·√d_k"
    parts = []
    if d_k == 1:
        parts.append("At d_k = 1, √d_k = 1: dividing by it changes nothing, so both rows are "
                     "the same.")
    if ug < VANISHED:
        parts.append(f"Unscaled, key {j} gets weight {_num(uw)} and gradient {_num(ug)}: its "
                     "gradient has nearly vanished (softmax is close to a hard argmax).")
    else:
        parts.append(f"Unscaled, key {j} still gets weight {_num(uw)} and gradient {_num(ug)}: "
                     f"at d_k = {d_k} the raw scores are not far enough apart for its gradient "
                     "to vanish.")
    if d_k > 1:
        if sg < VANISHED:
            why = (f"τ = {tau:g} below 1 sharpens the softmax again" if tau < 1 else
                   "these scores are so far apart that even the scaled softmax is nearly hard")
            parts.append(f"Divided by {divided} it gets only {_num(sw)} and gradient {_num(sg)}: "
                         f"{why}.")
        else:
            helped = " — the scale is what keeps it learning" if ug < VANISHED else ""
            parts.append(f"Divided by {divided} it keeps weight {_num(sw)} and gradient "
                         f"{_num(sg)}{helped}.")
    return {"heading": heading, "summary": " ".join(parts)}


TASK_SHARE = 0.01  # view 3's task: the lower key's unscaled weight below 1%


def lowest_unscaled_weight(scores, reference_d_k: int, temperature: float,
                           d_ks: np.ndarray) -> np.ndarray:
    """The smallest unscaled weight, ``min_j softmax(scores · √(d_k/reference_d_k) / τ)_j``,
    at each d_k of ``d_ks`` ``(M,)``, by qkv.explain: one 1-d query ``[[1]]`` against the
    grown scores as 1-d keys, every d_k a batch row."""
    grown = np.sqrt(np.asarray(d_ks, np.float64) / reference_d_k)  # (M,)
    keys = np.asarray(scores, np.float64)[None, :, None] * grown[:, None, None]  # (M, Nk, 1)
    query = np.ones((len(grown), 1, 1))  # (M, 1, 1)
    w = qkv.explain(query, keys, keys, scale=1.0 / temperature).weights[:, 0]  # (M, Nk)
    return w.min(axis=-1)


def scale_task(req: ScaleRequest) -> dict:
    """View 3's task over its whole domain (every d_k from 1 to MAX_SCALE_DK): the smallest d_k
    whose unscaled softmax leaves the lower key under :data:`TASK_SHARE` (None: none does), and
    the lower key's weight at d_k − 1. The page's ✓ is this, not the d_k values it has seen."""
    d_ks = np.arange(1, MAX_SCALE_DK + 1)
    lowest = lowest_unscaled_weight(req.scores, req.reference_d_k, req.temperature, d_ks)
    below = np.flatnonzero(lowest < TASK_SHARE)
    return {"share": TASK_SHARE, "max_d_k": MAX_SCALE_DK,
            "smallest_d_k": int(d_ks[below[0]]) if below.size else None,
            "weight_at_max": float(lowest[-1]),
            "previous_weight": float(lowest[req.d_k - 2]) if req.d_k > 1 else None}


def scale_view(req: ScaleRequest) -> dict:
    """View 3: softmax of scores that grow with d_k, with and without 1/(τ·√d_k), and random
    vectors.

    ``scores`` are given at ``reference_d_k`` (the lesson's [8, 0] at d_k = 64: a key one standard
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

    example = {
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
    }
    example.update(scale_sentences(example))
    example["task"] = scale_task(req)
    # "a hard argmax": the key falling behind keeps less than VANISHED of gradient
    j = int(np.argmin(example["unscaled_weights"]))
    example["hard"] = {"key": j, "vanished": VANISHED,
                       "unscaled": example["unscaled_gradient"][j] < VANISHED,
                       "scaled": example["gradient"][j] < VANISHED}

    rng = np.random.default_rng(req.seed)
    q = rng.standard_normal((SCALE_QUERIES, req.d_k))
    k = rng.standard_normal((req.n_keys, req.d_k))
    raw = qkv.explain(q, k, k, scale=1.0 / req.temperature)
    divided = qkv.explain(q, k, k, scale=scale)
    raw_max = raw.weights.max(axis=-1)  # (SCALE_QUERIES,)
    # the query shown: the one whose largest unscaled weight is nearest the mean of them all,
    # so its bars show the peak the mean describes
    shown = int(np.argmin(np.abs(raw_max - raw_max.mean())))
    return {
        "example": example,
        "random": {
            "d_k": req.d_k,
            "n_queries": SCALE_QUERIES,
            "n_keys": req.n_keys,
            "seed": req.seed,
            "scale": scale,
            "raw_std": float(raw.scaled.std()),
            "scaled_std": float(divided.scaled.std()),
            "sqrt_d_k": math.sqrt(req.d_k),
            "raw_mean_max_weight": float(raw_max.mean()),
            "scaled_mean_max_weight": float(divided.weights.max(axis=-1).mean()),
            "raw_max_weights": raw_max.tolist(),
            "scaled_max_weights": divided.weights.max(axis=-1).tolist(),
            "query": shown,
            "raw_scores": raw.scaled[shown].tolist(),
            "raw_weights": raw.weights[shown].tolist(),
            "scaled_scores": divided.scaled[shown].tolist(),
            "scaled_weights": divided.weights[shown].tolist(),
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
