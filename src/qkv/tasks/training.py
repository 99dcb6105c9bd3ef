"""The training loops: associative recall's :class:`Run`, and the runner the seeds' experiments
(:mod:`~qkv.tasks.seq2seq`, :mod:`~qkv.tasks.farback`) share — pure NumPy on qkv's forward and
backward.

One step: sample a batch → forward → softmax cross-entropy → backward → Adam. Every random
draw comes from generators seeded by ``config.seed`` (initialisation: ``seed``; training data:
``[seed, 1]``; held-out data: ``[seed, 0xE7A1]``; the single example ``i`` that ``qkv train
explain --index i`` shows: ``[seed, 0xE7A1, 1, i]``), and the data generator's state is saved in
each checkpoint, so a run resumed from a checkpoint continues bit-for-bit as if never stopped.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import numpy as np

from ..engine import threads
from ..engine.threads import single_threaded_blas
from ..nn import Adam, softmax_cross_entropy
from . import checkpoint as ckpt
from .recall import RecallConfig, RecallModel, RecallTask, evaluate

TASK = "recall"


@dataclass
class Run:
    """A model, its optimiser, its data stream and its progress so far."""

    config: RecallConfig
    model: RecallModel
    opt: Adam
    rng: np.random.Generator
    step: int = 0
    elapsed: float = 0.0  # training seconds across resumes
    history: list[dict] = field(default_factory=list)  # held-out evaluations

    @property
    def model_size(self) -> int:
        return sum(int(p.size) for p in self.model.params.values())

    @classmethod
    def fresh(cls, config: RecallConfig) -> Run:
        model = RecallModel(config)
        return cls(config, model, Adam(model.params, lr=config.lr),
                   np.random.default_rng([config.seed, 1]))

    # -- checkpoints ------------------------------------------------------------------------
    def save(self, path) -> None:
        tensors = {f"model.{n}": a for n, a in self.model.params.items()}
        tensors.update({f"adam.{n}": a for n, a in self.opt.state_dict().items()})
        ckpt.save(path, tensors, {
            "task": TASK, "config": self.config.to_dict(), "step": self.step,
            "rng": self.rng.bit_generator.state, "elapsed": self.elapsed,
            "history": self.history,
        })

    @classmethod
    def load(cls, path) -> Run:
        """The run saved at ``path``; a :class:`~qkv.tasks.checkpoint.CheckpointError` naming
        the file for anything truncated, edited, out of range or inconsistent. The config is
        checked against the stored shapes before the model is built from it."""
        tensors, meta = ckpt.load(path, check=_check_header)
        with ckpt.reading(path):
            config = ckpt.config_from(RecallConfig, meta["config"])
            run = cls.fresh(config)
            expected = {f"model.{n}": p for n, p in run.model.params.items()}
            expected.update({f"adam.{n}": a for n, a in run.opt.state_dict().items()})
            ckpt.expect_tensors(tensors, expected)
            for name, p in run.model.params.items():
                p[...] = tensors[f"model.{name}"]
            ckpt.load_optimizer(run.opt, tensors, "adam.", meta["step"])
            ckpt.restore_rng(run.rng, meta["rng"])
        run.step, run.elapsed, run.history = meta["step"], meta["elapsed"], meta["history"]
        return run

    # -- training ---------------------------------------------------------------------------
    def train_step(self, task: RecallTask) -> tuple[float, float]:
        """One Adam step on a fresh batch; returns (loss, batch accuracy)."""
        batch = task.sample(self.rng, self.config.batch)
        logits, ctx = self.model.forward(batch)
        loss, dlogits = softmax_cross_entropy(logits, batch.target)
        self.opt.lr = self.config.lr_at(self.step)
        self.opt.step(self.model.backward(ctx, dlogits))
        self.step += 1
        return loss, float((logits.argmax(-1) == batch.target).mean())

    def train(self, steps: int, *, eval_every: int = 100, held_out: int = 2000,
              checkpoint=None, stop_at: float | None = None,
              on_step: Callable[[Run, float, float], None] | None = None,
              on_eval: Callable[[Run, dict], None] | None = None) -> dict:
        """Train until ``self.step == steps`` (or held-out accuracy ≥ ``stop_at``).

        Evaluates on the held-out set every ``eval_every`` steps and at the end, saving a
        checkpoint (if ``checkpoint`` is a path) after each evaluation. Returns the last
        evaluation: ``{"step", "accuracy", "top_weight_hit", "elapsed"}``.

        The BLAS is held to one thread meanwhile (with threadpoolctl installed): these matrices
        are small, and BLAS threads on them cost ~8× the wall time on a busy 2-core machine
        (measured: 100 steps in 16.6 s with BLAS threads, 2.1 s without).
        """
        with single_threaded_blas():
            return self._train(steps, eval_every, held_out, checkpoint, stop_at, on_step,
                               on_eval)

    def _train(self, steps, eval_every, held_out, checkpoint, stop_at, on_step, on_eval):
        task = RecallTask(self.config)
        held = task.held_out(held_out)
        last = self.history[-1] if self.history else None
        while self.step < steps:
            t0 = time.perf_counter()
            loss, acc = self.train_step(task)
            self.elapsed += time.perf_counter() - t0
            if on_step:
                on_step(self, loss, acc)
            if self.step % eval_every == 0 or self.step == steps:
                last = self._evaluate(held, checkpoint, on_eval)
                if stop_at is not None and last["accuracy"] >= stop_at:
                    break
        if last is None or last["step"] != self.step:
            last = self._evaluate(held, checkpoint, on_eval)
        return last

    def _evaluate(self, held, checkpoint, on_eval) -> dict:
        metrics = {"step": self.step, **evaluate(self.model, held),
                   "elapsed": round(self.elapsed, 3)}
        self.history.append(metrics)
        if checkpoint is not None:
            self.save(checkpoint)
        if on_eval:
            on_eval(self, metrics)
        return metrics


def _check_header(meta: dict, shapes: ckpt.Shapes) -> None:
    """The metadata of a recall checkpoint, checked on the header alone (before any tensor is
    read or any model built): task, config (types, ranges, and the sizes its tensors pin),
    step, elapsed and history."""
    if meta.get("task") != TASK:
        raise ckpt.CheckpointError(f"a checkpoint of task {meta.get('task')!r}, not {TASK!r}")
    for key in ("config", "step", "rng", "elapsed", "history"):
        if key not in meta:
            raise ckpt.CheckpointError(f"metadata {key!r} is missing")
    config = ckpt.config_from(RecallConfig, meta["config"])
    ckpt.expect_shapes(shapes, {f"model.{n}": s for n, s in
                                RecallModel.pinned_shapes(config).items()}, "config")
    ckpt.check_progress(meta, ("accuracy", "top_weight_hit"))


# -- the seeds' experiments: several models, the same batches, one runner ---------------------
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
