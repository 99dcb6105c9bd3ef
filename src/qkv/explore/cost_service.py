"""The cost view's growth plot: time against n for dense, causal, windowed attention and a
linear state-space scan — small n timed live (within a time budget), large n read from the
shipped ``qkv bench scaling`` results — and what the n² buys, read from the shipped models'
held-out results (far back, encoder–decoder).

Timing is what this view shows, so it is measured here with :func:`qkv.tasks.scaling.measure`
on :mod:`qkv.tasks.scaling`'s own calls; the slopes are :func:`qkv.tasks.scaling.slope`.
"""

from __future__ import annotations

import threading
import time

import numpy as np

from qkv.tasks import scaling

METHODS = ("qkv dense", "qkv causal", "qkv window", "ssm scan")  # naive: in docs/seeds.md
LIVE_MIN_N = 64
LIVE_FIT_FROM = 512  # the window (256) is dense below this: O(n·w) shows from here on ...


def live_fit_from(max_n: int) -> int:
    """... but a slope needs points: with a smaller max_n, fit the last three (n ≥ max_n / 4)."""
    return min(LIVE_FIT_FROM, max_n // 4)
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
    with _timing:
        global _warm
        if not _warm:  # the first calls compile kernels: not part of anyone's O(n²)
            warm = scaling.make_inputs(LIVE_MIN_N, d, dtype, np.random.default_rng(seed))
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
                        for m in METHODS]}


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


def evidence() -> dict:
    """What attention's n² buys here: the held-out scores stored in the shipped checkpoints
    (far back: accuracy of each model over all lags and its worst lag bucket; encoder–decoder:
    token accuracy per input-length bucket)."""
    from . import farback_service, seq2seq_service

    far = {}
    for kind, fb_model in farback_service.models().items():
        worst = min(fb_model.metrics["by_lag"], key=lambda r: r["accuracy"])
        far[kind] = {"accuracy": fb_model.metrics["accuracy"], "worst_lags": worst["lags"],
                     "worst_accuracy": worst["accuracy"]}
    s2s = {}
    for kind in ("attention", "fixed"):
        s2s_model = seq2seq_service.load(kind)
        s2s[kind] = [{"lengths": b["lengths"], "token_accuracy": b["token_accuracy"]}
                     for b in s2s_model.metrics["buckets"]]
    return {"farback": far, "seq2seq": s2s,
            "farback_held_out": sum(r["cases"] for r in fb_model.metrics["by_lag"]),
            "seq2seq_per_bucket": s2s_model.metrics["buckets"][0]["sequences"]}
