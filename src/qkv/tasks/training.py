"""The training runner every task shares (:mod:`~qkv.tasks.recall`, :mod:`~qkv.tasks.seq2seq`,
:mod:`~qkv.tasks.farback`, :mod:`~qkv.tasks.gpt`) — pure NumPy on qkv's forward and backward:
the learning-rate schedule, gradient clipping, data-parallel shards, the Adam loop and one model
per kind trained on the same batches. It imports no task: each task passes its model, its loss
and its data in.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable

import numpy as np

from ..engine import threads
from ..engine.threads import single_threaded_blas
from ..nn import Adam


# -- the lesson's experiments: several models, the same batches, one runner ---------------------
def cosine_lr(lr: float, step: int, steps: int) -> float:
    """The learning rate for step ``step`` (0-based): a cosine from ``lr`` down to ``lr/10``
    over ``steps`` steps, then constant."""
    t = min(step, steps) / steps
    return lr * (0.1 + 0.9 * 0.5 * (1.0 + math.cos(math.pi * t)))


def clip_grad_norm(grads: dict[str, np.ndarray], limit: float) -> float:
    """Scale ``grads`` in place so that their global norm is at most ``limit`` (GRUs'
    gradients spike now and then); returns the norm before clipping."""
    norm = math.sqrt(sum(float(np.vdot(g, g)) for g in grads.values()))
    if norm > limit:
        for g in grads.values():
            g *= limit / norm
    return norm


def sharded_loss(loss: Callable[[np.ndarray, np.ndarray], tuple[float, dict[str, np.ndarray]]],
                 x: np.ndarray, y: np.ndarray, shards: int
                 ) -> tuple[float, dict[str, np.ndarray]]:
    """``loss(x, y)`` — a mean over the batch's rows ``x, y (B, …)`` and its gradients —
    computed on ``shards`` consecutive slices of the rows, one Python thread each, and combined
    as Σ (Bᵢ/B) · (lossᵢ, gradsᵢ).

    Data parallelism on one machine: NumPy's GEMMs and ufuncs and the compiled loops release
    the GIL, so the shards' forward and backward passes overlap on the cores, each with a
    one-thread BLAS (:func:`qkv.engine.threads.run`). The slices and the order of the sum are
    fixed by ``shards`` alone, never by the threads' timing, so a run is deterministic for a
    given shard count; it equals the unsharded loss and gradients to rounding. ``shards=1``
    calls ``loss(x, y)`` itself.
    """
    if isinstance(shards, bool) or not isinstance(shards, int) or not 1 <= shards <= len(x):
        raise ValueError(f"sharded_loss: shards must be an int in [1, {len(x)}] (the batch's "
                         f"rows), got {shards!r}")
    if shards == 1:
        return loss(x, y)
    rows = np.array_split(np.arange(len(x)), shards)
    parts: list = [None] * shards

    def work(_worker: int, i: int) -> None:
        parts[i] = loss(x[rows[i]], y[rows[i]])

    threads.run(work, range(shards), shards)
    weights = [len(r) / len(x) for r in rows]
    total = sum(w * part[0] for w, part in zip(weights, parts, strict=True))
    grads = {}
    for name, g in parts[0][1].items():
        acc = g * weights[0]
        for w, part in zip(weights[1:], parts[1:], strict=True):
            acc += part[1][name] * w
        grads[name] = acc
    return total, grads


def train_steps(model, config, loss_and_grads: Callable[[np.random.Generator], tuple],
                *, clip: float, on_step: Callable[[int, float], None] | None = None
                ) -> list[float]:
    """Adam on ``model.params`` for ``config.steps`` steps; returns the loss per step.

    Each step calls ``loss_and_grads(rng)`` — draw a batch from ``rng``, return ``(loss,
    grads)`` — clips the gradient norm to ``clip`` and takes an Adam step at
    ``config.lr_at(step)``. ``rng`` is the generator ``[config.seed, 1]``, so every model
    trained from the same config sees the same batches in the same order. BLAS is held to one
    thread: these matrices are small and its threads only slow them down.
    """
    rng = np.random.default_rng([config.seed, 1])
    opt = Adam(model.params, lr=config.lr)
    losses = []
    with single_threaded_blas():
        for step in range(config.steps):
            loss, grads = loss_and_grads(rng)
            clip_grad_norm(grads, clip)
            opt.lr = config.lr_at(step)
            opt.step(grads)
            losses.append(loss)
            if on_step:
                on_step(step + 1, loss)
    return losses


def train_each(kinds: Iterable[str], build: Callable, train: Callable, score: Callable, *,
               on_start=None, on_step=None, on_done=None) -> tuple[dict, dict]:
    """Build, train and score one model per kind, in order; returns ``(runs, models)``.

    ``build(kind) → model``; ``train(model, on_step) → losses`` (e.g. by :func:`train_steps`);
    ``score(model) → dict`` of held-out results. Each run is ``{"parameters", "train_seconds",
    "final_loss" (mean of the last 50 steps), **score(model)}``. The hooks are called as
    ``on_start(kind, model)``, ``on_step(kind, step, loss)``, ``on_done(kind, run)``.
    """
    runs, models = {}, {}
    for kind in kinds:
        model = build(kind)
        if on_start:
            on_start(kind, model)
        t0 = time.perf_counter()
        hook = None if on_step is None else (lambda s, loss, k=kind: on_step(k, s, loss))
        losses = train(model, hook)
        run = {"parameters": model.num_params,
               "train_seconds": round(time.perf_counter() - t0, 1),
               "final_loss": float(np.mean(losses[-50:])), **score(model)}
        runs[kind], models[kind] = run, model
        if on_done:
            on_done(kind, run)
    return runs, models
