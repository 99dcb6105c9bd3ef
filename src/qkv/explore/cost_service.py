"""The cost view's growth plot: time against n for dense, causal, windowed attention and a
linear state-space scan — small n timed live (within a time budget), large n read from the
shipped ``qkv bench scaling`` results — and what the n² buys: recall (MQAR), the shipped
attention and selective state-space models' held-out accuracy and their live answers.

Timing is what this view shows, so it is measured here with :func:`qkv.tasks.scaling.measure`
on :mod:`qkv.tasks.scaling`'s own calls; the slopes are :func:`qkv.tasks.scaling.slope`.
"""

from __future__ import annotations

import threading
import time

import numpy as np

from qkv.tasks import scaling

from .errors import InputError
from .machine_busy import OtherWork
from .shipped import Unavailable, load_once

METHODS = ("qkv dense", "qkv causal", "qkv window", "ssm scan")  # naive: in docs/lesson.md
LIVE_MIN_N = 64
LIVE_FIT_FROM = 512  # the window (256) is dense below this: O(n·w) shows from here on ...


def live_fit_from(max_n: int) -> int:
    """... but a slope needs points: with a smaller max_n, fit the last three (n ≥ max_n / 4)."""
    return min(LIVE_FIT_FROM, max_n // 4)
def warm_sizes() -> list[int]:
    """One n for each path the live timings take, called once before anything is timed: the
    small path (all of a head's scores at once) and the tiled one (past ``config.small``
    scores a head), whose first call compiles its loops (2.7 s at n = 512, once)."""
    from qkv import engine

    sizes = [LIVE_MIN_N << i for i in range(16)]
    return [LIVE_MIN_N, next(n for n in sizes if n * n > engine.current().small)]


_timing = threading.Lock()  # one live measurement at a time: two would time each other
_warm = False


def live(max_n: int, budget: float, repeats: int, seed: int = 0) -> dict:
    """Time each method at n = LIVE_MIN_N, 2·LIVE_MIN_N, … max_n (interleaved, smallest n
    first), best of ``repeats`` calls, until ``budget`` seconds are spent: a method stops
    growing when its next point, extrapolated from its last two, would not fit."""
    ns = [n for n in (LIVE_MIN_N << i for i in range(16)) if n <= max_n]
    rng = np.random.default_rng(seed)
    points = {m: [] for m in METHODS}
    stopped = dict.fromkeys(METHODS)
    d, dtype = 64, np.float32
    # one at a time (two would time each other), and whether other programs were busy
    with _timing, OtherWork() as other:
        global _warm
        if not _warm:  # the first calls compile kernels: not part of anyone's O(n²)
            for n in warm_sizes():  # each path once: a first visit drew n = 512's compile
                warm = scaling.make_inputs(n, d, dtype, np.random.default_rng(seed))
                for m in METHODS:
                    scaling.call(m, warm)()
            _warm = True
        t0 = time.perf_counter()
        for n in ns:
            inputs = scaling.make_inputs(n, d, dtype, rng)
            for m in METHODS:
                if stopped[m]:
                    continue
                left = budget - (time.perf_counter() - t0)
                if len(points[m]) >= 2:
                    (n1, s1), (n2, s2) = ((p["n"], p["seconds"]) for p in points[m][-2:])
                    growth = max(np.log(max(s2, 1e-9) / max(s1, 1e-9)) / np.log(n2 / n1), 1.0)
                    guess = s2 * (n / n2) ** growth * repeats
                else:
                    guess = 0.0
                if guess > left or left <= 0:
                    stopped[m] = f"n = {n} would not fit in the {budget:g} s budget"
                    continue
                seconds, _ = scaling.measure(scaling.call(m, inputs), repeats, memory=False)
                points[m].append({"n": n, "seconds": seconds, "source": "live"})
    return {"d": d, "dtype": "float32", "window": scaling.WINDOW, "state": scaling.STATE,
            "budget_seconds": budget, "repeats": repeats, "fit_from": live_fit_from(max_n),
            "methods": [_fitted(m, points[m], live_fit_from(max_n), stopped[m])
                        for m in METHODS], "busy": other.said()}


def shipped() -> dict:
    """The shipped ``qkv bench scaling`` results, the four methods of this view, each point
    marked as shipped, slopes refitted here on the same n ≥ fit_from as the command."""
    data = scaling.shipped()
    fit_from = data["config"]["fit_from"]
    methods = []
    for m in METHODS:
        pts = [{"n": p["n"], "seconds": p["seconds"], "source": "shipped"}
               for p in data["methods"][m]["points"]]
        methods.append(_fitted(m, pts, fit_from, data["methods"][m]["stopped"]))
    return {"command": scaling.SHIPPED_COMMAND, "d": data["config"]["d"],
            "dtype": data["config"]["dtype"], "window": data["config"]["window"],
            "repeats": data["config"]["repeats"], "fit_from": fit_from, "methods": methods}


def _fitted(method: str, points: list[dict], fit_from: int, stopped) -> dict:
    fit = [p for p in points if p["n"] >= fit_from]
    return {"method": method, "points": points, "stopped": stopped,
            "slope": scaling.slope([p["n"] for p in fit], [p["seconds"] for p in fit])}


# -- what the n² buys: recall (MQAR), the shipped attention and state-space models ------------
class RecallUnavailable(Unavailable):
    """The MQAR checkpoints or their results are missing or unreadable (HTTP 503)."""


_recall_models: dict[str, object] = {}


def recall_model(kind: str):
    """``qkv.tasks.mqar.load_pretrained(kind)``, loaded once."""

    def loader():
        from qkv.tasks import mqar

        return mqar.load_pretrained(kind)

    return load_once(_recall_models, kind, "the recall models of view 6 (their shipped "
                     "checkpoints)", loader, RecallUnavailable)


def recall_curves() -> dict:
    """The shipped MQAR run's held-out accuracy per (length, pairs) for the three models, read
    from the JSON the run wrote (:data:`qkv.tasks.mqar.SHIPPED`), with the sizes the page's
    sentences need (state floats per layer, parameters)."""
    from qkv.tasks import mqar

    try:
        data = mqar.shipped()
    except (OSError, ValueError) as exc:
        raise RecallUnavailable(f"the shipped MQAR results cannot be read: {exc}") from exc
    c = data["config"]
    models = []
    for kind in mqar.KINDS:
        run = data["models"][kind]
        models.append({"kind": kind, "n_state": run["n_state"], "parameters": run["parameters"],
                       "mixer_parameters": run["mixer_parameters"],
                       "state_floats_per_layer": run["state_floats_per_layer"],
                       "train_seconds": run["train_seconds"],
                       "cells": [{k: r[k] for k in ("length", "pairs", "answers", "correct",
                                                    "accuracy")} for r in run["cells"]]})
    return {"command": mqar.SHIPPED_COMMAND, "per_cell": data["per_cell"],
            "n_keys": c["n_keys"], "n_values": c["n_values"], "d_model": c["d_model"],
            # a run written before the field existed drew with the first generator
            "generator": c.get("generator", "uniform"), "steps": c["steps"],
            "train_lengths": c["train_lengths"], "eval_lengths": c["eval_lengths"],
            "models": models}


def recall_example(seed: int, n_pairs: int) -> tuple[list[list[int]], list[int]]:
    """``n_pairs`` random pairs ``[[key, value]]`` (distinct keys, numbered from 1) and every
    key asked once in random order, drawn from ``seed`` by the task's own sampler."""
    from qkv.tasks import mqar

    config = recall_model("attention").config
    if not 1 <= n_pairs <= config.n_keys:
        raise InputError(f"pairs: choose 1 to {config.n_keys} pairs (there are "
                         f"{config.n_keys} keys), not {n_pairs}")
    b = mqar.sample(config, np.random.default_rng([seed, 0xC057]), 1, 4 * n_pairs, n_pairs)
    tok, tgt = b.tokens[0], b.target[0]
    pairs = [[int(tok[2 * i]), int(tok[2 * i + 1]) - config.n_keys] for i in range(n_pairs)]
    asked = [int(tok[j]) for j in np.flatnonzero(tgt >= 0)]
    return pairs, asked


def recall_answers(pairs: list[list[int]], asked: list[int]) -> dict:
    """The three shipped models' answers at every asked key of the sequence built from
    ``pairs`` and ``asked`` by :func:`qkv.tasks.mqar.encode` (keys must be distinct, and only
    stored keys may be asked: then every question has one right answer)."""
    from qkv.tasks import mqar

    config = recall_model("attention").config
    keys = [k for k, _ in pairs]
    for k, v in pairs:
        if not 1 <= k <= config.n_keys:
            raise InputError(f"pairs (key:value): a key must be a number from 1 to "
                             f"{config.n_keys}, not {k}")
        if not 1 <= v <= config.n_values:
            raise InputError(f"pairs (key:value): a value must be a number from 1 to "
                             f"{config.n_values}, not {v}")
    dup = next((k for k in keys if keys.count(k) > 1), None)
    if dup is not None:
        raise InputError(f"pairs (key:value): key {dup} is stored twice; each key holds one value")
    missing = next((k for k in asked if k not in keys), None)
    if missing is not None:
        # named as the control is labelled: "asked keys"
        raise InputError(f"asked keys: key {missing} is asked but no pair stores it")
    batch = mqar.encode(config, [tuple(p) for p in pairs], asked)
    out = []
    from qkv.engine.threads import single_threaded_blas

    with single_threaded_blas():
        for kind in mqar.KINDS:
            model = recall_model(kind)
            rows = mqar.answers(model, batch)
            for r in rows:
                r["correct"] = r["answer"] == r["expected"]
            out.append({"kind": kind, "n_state": config.n_state(kind), "answers": rows,
                        "correct": sum(r["correct"] for r in rows), "total": len(rows),
                        "selection": None if kind == "attention" else
                        recall_selection(model, batch)})
    return {"pairs": pairs, "asked": asked, "length": int(batch.tokens.shape[1]),
            "n_keys": config.n_keys, "n_values": config.n_values,
            "tokens": recall_tokens(config, batch), "models": out}


def recall_tokens(config, batch) -> list[dict]:
    """What each position of a one-sequence batch holds, as the page labels it: a stored
    ``key`` or ``value`` (numbered from 1), an ``asked`` key, or a ``blank``."""
    P = int(batch.pairs[0])
    out = []
    for t, tok in enumerate(batch.tokens[0].tolist()):
        role = ("key" if t % 2 == 0 else "value") if t < 2 * P else (
            "asked" if batch.target[0, t] >= 0 else "blank")
        out.append({"role": role, "number": None if role == "blank" else
                    tok - config.n_keys if role == "value" else tok})
    return out


def recall_selection(model, batch) -> list[dict]:
    """What a state-space model's S6 scans select at each token of a one-sequence batch, per
    layer, from :meth:`qkv.tasks.mqar.MqarModel.selection` (qkv.nn's own layer): ``delta``,
    the step Δ averaged over the channels, and ``kept``, the share of the state that survives
    the step — the geometric mean of the decay exp(ΔA) over channels and states (1: the state
    is kept and little written; near 0: forgotten, and ΔBx written in its place)."""
    layers = []
    for s in model.selection(batch.tokens):
        decay = s["decay"][0].astype(np.float64)  # (T, D, N)
        log_kept = np.log(np.maximum(decay, np.finfo(np.float64).tiny)).mean(axis=(1, 2))
        layers.append({"delta": s["delta"][0].astype(np.float64).mean(axis=1).tolist(),
                       "kept": np.exp(log_kept).tolist()})
    return layers
