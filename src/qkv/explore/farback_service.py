"""The far-back view: the shipped models of :mod:`qkv.tasks.farback` (attention, recency, GRU)
reading one series, and their accuracy by lag on the held-out set.

A series is generated from a seed by the task's own sampler, then optionally edited: the event
(the one type-0 block trade) moved to another lag or given the other sign, and the distractor
blocks (large trades of other types) replaced by blocks at the lags the learner placed. The
answer is always the event's sign, so every edit keeps the task's rule.

Imported lazily by the app: an install without the checkpoints answers 503 with a message.
"""

from __future__ import annotations

import copy
import threading
from functools import lru_cache

import numpy as np

from .errors import InputError
from .shipped import Unavailable, load_once

_lock = threading.Lock()
_models: dict[str, object] = {}
_curves: dict[str, dict] = {}
SMALL_SIZE = (0.1, 1.0)  # the sampler's small trades
BLOCK_SIZE = (3.0, 8.0)  # its distractor blocks
BIG = 3.0  # a trade of size ≥ this is a block trade
SWEEPS = 32  # sweeps kept (:func:`sweep`): a few kilobytes each


class FarbackUnavailable(Unavailable):
    """The far-back checkpoints are missing or unreadable (HTTP 503)."""


def load(kind: str):
    """``qkv.tasks.farback.load_pretrained(kind)``, loaded once; FarbackUnavailable if absent."""

    def loader():
        from qkv.tasks import farback

        return farback.load_pretrained(kind)

    return load_once(_models, kind, "the far-back view (its shipped checkpoints)", loader,
                     FarbackUnavailable)


def models() -> dict:
    from qkv.tasks import farback

    return {kind: load(kind) for kind in farback.KINDS}


def make_series(seed: int, event_lag: int | None = None, event_sign: int | None = None,
                distractor_lags: list[int] | None = None):
    """One series ``(types, sizes, signs, lag)`` of the shipped config's window: sampled from
    ``seed``, then edited. ``distractor_lags`` replaces every block of another type (they become
    small trades) with blocks at those lags; lags count back from the end (1 = the last step)."""
    from qkv.tasks import farback

    config = load("attention").config
    W = config.window
    s = farback.sample(config, np.random.default_rng([seed, 0xFA4B]), 1)
    types, sizes, signs = s.types[0].copy(), s.sizes[0].copy(), s.signs[0].copy()
    lag = int(s.lag[0])
    rng = np.random.default_rng([seed, 0xED17])  # the edits' own draws, stable per seed
    for name, lags in (("Event lag", [event_lag] if event_lag is not None else []),
                       ("Distractor lags", distractor_lags or [])):
        bad = [v for v in lags if not 1 <= v <= W]
        if bad:
            raise InputError(f"{name}: lags run from 1 (the last step) to {W} (the oldest), "
                             f"got {', '.join(map(str, bad[:3]))}")
    if event_lag is not None and event_lag != lag:
        old, new = W - lag, W - event_lag
        sign = signs[old]
        # the step the event leaves becomes a small trade of another type
        types[old], sizes[old] = int(rng.integers(1, config.n_types)), rng.uniform(*SMALL_SIZE)
        types[new], sizes[new], signs[new] = 0, rng.uniform(3.0, 5.0), sign  # the sampler's
        lag = event_lag
    if event_sign is not None:
        signs[W - lag] = float(event_sign)
    if distractor_lags is not None:
        if lag in distractor_lags:
            raise InputError(f"Distractor lags: {lag} is the event's lag; a distractor must be "
                             "at another step")
        if len(set(distractor_lags)) != len(distractor_lags):
            raise InputError("Distractor lags: each lag may be typed once")
        blocks = (sizes >= BIG) & (types != 0)
        sizes[blocks] = rng.uniform(*SMALL_SIZE, int(blocks.sum()))
        for d in distractor_lags:
            i = W - d
            if types[i] == 0:  # a small type-0 trade becomes a block of another type
                types[i] = int(rng.integers(1, config.n_types))
            sizes[i] = rng.uniform(*BLOCK_SIZE)
    return types, sizes, signs, lag


def answers(ms: dict, x: np.ndarray) -> dict[str, np.ndarray]:
    """Each model's P(sign = +) ``(B,)`` for the series ``x`` ``(B, W, d_in)``, through
    :func:`qkv.tasks.farback.p_plus`."""
    from qkv.tasks import farback

    return {kind: farback.p_plus(model, x) for kind, model in ms.items()}


def sweep(seed: int, event_sign=None, distractor_lags=None) -> dict:
    """The same series with the event moved to every lag 1 … window, as the page's lag slider
    would move it (:func:`make_series` with ``event_lag`` = that lag, and a distractor on that
    step taken over by the event), once with the event's sign and once with it flipped: each
    model's P(+), whether it is right, and whether it *reads* the event there — right for both
    signs (a model that answers the same whatever the event's sign is right for one of them by
    luck, not by reading it).

    A copy of an answer kept for the last SWEEPS inputs: the sweep does not depend on the lag
    shown, and running the three models over its 2 × window series takes seconds (the GRU most
    of them), which every step of the lag slider would otherwise wait for again."""
    lags = None if distractor_lags is None else tuple(distractor_lags)
    return copy.deepcopy(_sweep(seed, event_sign, lags))


@lru_cache(maxsize=SWEEPS)
def _sweep(seed: int, event_sign, distractor_lags: tuple[int, ...] | None) -> dict:
    """:func:`sweep`'s answer, computed; the cache's copy, never handed out to be edited."""
    from qkv.tasks import farback

    ms = models()
    config = ms["attention"].config
    W = config.window

    def at_every_lag(sign):
        return [make_series(seed, L, sign, None if distractor_lags is None else
                            [d for d in distractor_lags if d != L]) for L in range(1, W + 1)]

    rows = at_every_lag(event_sign)
    truth = np.array([r[2][W - r[3]] for r in rows])  # (W,) ±1: the event's sign at each lag
    flipped = at_every_lag(-int(truth[0]))  # the sign is the same at every lag
    both = rows + flipped
    x = farback.features(np.stack([r[0] for r in both]), np.stack([r[1] for r in both]),
                         np.stack([r[2] for r in both]), config.n_types)  # (2W, W, d_in)
    out = {"lags": list(range(1, W + 1)), "truth": [int(v) for v in truth], "models": {}}
    for kind, p in answers(ms, x).items():
        right = (p[:W] > 0.5) == (truth > 0)
        right_flipped = (p[W:] > 0.5) == (truth < 0)
        out["models"][kind] = {"p_plus": p[:W].tolist(), "correct": right.tolist(),
                               "p_plus_flipped": p[W:].tolist(),
                               "reads": (right & right_flipped).tolist()}
    return out


def read(seed: int, event_lag=None, event_sign=None, distractor_lags=None) -> dict:
    """Each model's prediction for the series, the truth, the attention model's weights, and
    every model's answer with the event at each lag of the window (:func:`sweep`)."""
    ms = models()
    config = ms["attention"].config
    types, sizes, signs, lag = make_series(seed, event_lag, event_sign, distractor_lags)
    W = config.window
    from qkv.tasks import farback

    x = farback.features(types[None], sizes[None], signs[None], config.n_types)  # (1, W, d_in)
    truth = int(signs[W - lag])
    out = {"seed": seed, "window": W, "trained_lags": [config.min_lag, W],
           "types": types.tolist(), "sizes": sizes.tolist(), "signs": [int(v) for v in signs],
           "event": {"lag": lag, "sign": truth, "size": float(sizes[W - lag])},
           "distractor_lags": [int(W - i) for i in
                               np.flatnonzero((sizes >= BIG) & (types != 0))[::-1]],
           "models": {}}
    for kind, p in answers(ms, x).items():
        prediction = 1 if p[0] > 0.5 else -1  # argmax of the two logits
        out["models"][kind] = {"prediction": prediction, "p_plus": float(p[0]),
                               "correct": prediction == truth}
    w = ms["attention"].weights(x)[0].astype(np.float64)  # (W,)
    out["weights"] = w.tolist()
    top = int(np.argmax(w))
    dis = [W - d for d in out["distractor_lags"]]
    out["attention"] = {"top_lag": W - top, "weight_on_event": float(w[W - lag]),
                        "weight_on_distractors": float(w[dis].sum()) if dis else 0.0,
                        "max_distractor_weight": float(w[dis].max()) if dis else 0.0}
    out["sweep"] = sweep(seed, event_sign, distractor_lags)
    # the lag shown: its own one-series forward, so the sweep and the answer agree to the bit
    # (a batch of W series may round differently in float32)
    for kind, answer in out["models"].items():
        one = out["sweep"]["models"][kind]
        flipped_right = (one["p_plus_flipped"][lag - 1] > 0.5) == (truth < 0)
        one["p_plus"][lag - 1], one["correct"][lag - 1] = answer["p_plus"], answer["correct"]
        one["reads"][lag - 1] = bool(answer["correct"] and flipped_right)
    return out


def _run(metrics: dict, config) -> dict:
    """One model's shipped run, as the view reads it."""
    return {"parameters": metrics["parameters"], "units": metrics.get("d_model", config.d_model),
            "steps": config.steps,
            "train_seconds": metrics["train_seconds"], "accuracy": metrics["accuracy"],
            "by_lag": metrics["by_lag"], "chance_from": metrics["chance_from"],
            "progress": {k: metrics["progress"][k]
                         for k in ("per_bucket", "steps", "accuracy", "chance_from")}}


def curves() -> dict:
    """Accuracy by lag of the three shipped models, as their training run measured it on its
    held-out set (the checkpoints' metrics, written by ``qkv train farback``), of the plain RNN
    (``farback.RNN_COMMAND``, the same held-out set) and the tuned GRU's run
    (:func:`qkv.tasks.farback.tuned_gru_run`)."""
    from qkv.tasks import farback

    ms = {**models(), "rnn": load("rnn")}
    config = ms["attention"].config
    with _lock:
        if "shipped" not in _curves:
            tuned = load_once(_models, "gru-tuned", "the far-back view (the tuned GRU's run)",
                              farback.tuned_gru_run, FarbackUnavailable)
            att = ms["attention"].metrics
            per = att["by_lag"][0]["cases"]
            _curves["shipped"] = {
                "held_out": sum(r["cases"] for r in att["by_lag"]), "per_bucket": per,
                "window": config.window, "command": farback.SHIPPED_COMMAND,
                "rnn_command": farback.RNN_COMMAND,
                "models": {kind: _run(m.metrics, config) for kind, m in ms.items()},
                "gru_tuned": {**_run(tuned["run"], farback.FarbackConfig(**tuned["config"])),
                              "gate_bias": tuned["config"]["gru_gate_bias"],
                              "command": tuned["command"]},
                "top_weight_on_event": att["top_weight_on_event"],
                "mean_weight_on_event": att["mean_weight_on_event"]}
        return _curves["shipped"]
