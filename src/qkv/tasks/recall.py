"""Associative recall: the lesson's library search as a task, solved by one learned attention layer.

A sequence holds ``n_pairs`` (key, value) pairs — books with a catalogue tag and contents — and
ends with a query key. The model must output the value stored under that key:

    slot     0        1        2      ...   P−1        P
    key     k₀       k₁       k₂           k_{P−1}    q = k_j     (the query key)
    value   v₀       v₁       v₂           v_{P−1}    ?           (the model must say v_j)

Each slot is one position whose input vector is the sum of its key's and its value's embeddings
(the query slot's value is the special "?" token). Keys in a sequence are distinct; values are
drawn with replacement. The model is the lookup and nothing more:

    x      = E_key[key] + E_val[value]                         (B, P+1, d)
    h      = x_q + MHA(x_q, context=x)                          x_q = x[:, P:]  the query slot
    logits = LN(h) W_out + b_out                                (B, n_values)

MHA's W_Q, W_K, W_V start random. To solve the task the query slot's q must match the key part
of exactly one slot's k (the matching key) and W_V must carry that slot's value part — the
lesson's "nothing about query or key is hand-designed" made concrete. ``RecallModel.lookup``
returns the query's attention weights over the slots, which after training land on the slot
whose key matches.

:class:`Run` trains it: one step samples a batch → forward → softmax cross-entropy → backward →
Adam. Every random draw comes from generators seeded by ``config.seed`` (initialisation:
``seed``; training data: ``[seed, 1]``; held-out data: ``[seed, 0xE7A1]``; the single example
``i`` that ``qkv train explain --index i`` shows: ``[seed, 0xE7A1, 1, i]``), and the data
generator's state is saved in each checkpoint, so a run resumed from a checkpoint continues
bit-for-bit as if never stopped.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

import numpy as np

from ..engine.threads import single_threaded_blas
from ..nn import Adam, Embedding, LayerNorm, Linear, MultiHeadAttention, softmax_cross_entropy
from ..nn._base import prefixed
from . import checkpoint as ckpt
from .training import cosine_lr

MAX_STEP_ELEMENTS = 2**27


@dataclass(frozen=True)
class RecallConfig:
    """Everything that defines a run; stored in every checkpoint."""

    n_keys: int = 128
    n_values: int = 128
    n_pairs: int = 32
    d_model: int = 64
    n_heads: int = 1
    batch: int = 128
    lr: float = 3e-3
    decay_steps: int = 1000  # cosine decay of lr to lr/10 over this many steps, then constant
    seed: int = 0

    def __post_init__(self):
        for name in ("n_keys", "n_values", "n_pairs", "d_model", "n_heads", "batch",
                     "decay_steps"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"RecallConfig: {name} must be a positive int, got {value!r}")
        if self.n_pairs > self.n_keys:
            raise ValueError(f"RecallConfig: n_pairs={self.n_pairs} needs at least that many "
                             f"distinct keys, but n_keys={self.n_keys}")
        if self.d_model % self.n_heads:
            raise ValueError(f"RecallConfig: d_model={self.d_model} must be divisible by "
                             f"n_heads={self.n_heads}")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or self.seed < 0:
            raise ValueError(f"RecallConfig: seed must be an int ≥ 0, got {self.seed!r}")
        if (isinstance(self.lr, bool) or not isinstance(self.lr, (int, float))
                or not 0 < self.lr < math.inf):
            raise ValueError(f"RecallConfig: lr must be a finite number > 0, got {self.lr!r}")
        # One training step draws (batch, n_keys) floats to pick distinct keys and holds
        # (batch, n_pairs + 1, d_model) activations a few times over: refuse sizes that cannot
        # fit rather than fail inside NumPy with a MemoryError.
        per_step = self.batch * max(self.n_keys, (self.n_pairs + 1) * self.d_model)
        if per_step > MAX_STEP_ELEMENTS:
            raise ValueError(f"RecallConfig: batch={self.batch} × max(n_keys, (n_pairs + 1) × "
                             f"d_model) = {per_step:,} values per training step, more than the "
                             f"{MAX_STEP_ELEMENTS:,} (1 GiB of float64) allowed")

    def lr_at(self, step: int) -> float:
        """Learning rate for training step ``step`` (0-based): cosine from lr down to lr/10.

        A constant rate lets held-out accuracy sag from 100% to ~99.7% late in training (Adam's
        steps stay lr-sized while the gradients vanish); decaying it keeps the solution put.
        """
        return cosine_lr(self.lr, step, self.decay_steps)

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class RecallBatch:
    keys: np.ndarray  # (B, P+1) key token per slot; the last slot holds the query key
    values: np.ndarray  # (B, P+1) value token per slot; the last slot holds "?" (= n_values)
    target: np.ndarray  # (B,) the value stored under the query key
    slot: np.ndarray  # (B,) index of the pair whose key matches the query


class RecallTask:
    """Draws recall sequences. Training and held-out data use independent generators."""

    def __init__(self, config: RecallConfig):
        self.config = config

    def sample(self, rng: np.random.Generator, batch: int) -> RecallBatch:
        c = self.config
        # distinct keys per sequence: the first n_pairs of a random permutation of all keys
        keys = np.argsort(rng.random((batch, c.n_keys)), axis=1)[:, : c.n_pairs]  # (B, P)
        values = rng.integers(0, c.n_values, (batch, c.n_pairs))  # (B, P)
        slot = rng.integers(0, c.n_pairs, batch)  # (B,)
        rows = np.arange(batch)
        query = keys[rows, slot]
        return RecallBatch(
            keys=np.concatenate([keys, query[:, None]], axis=1),
            values=np.concatenate([values, np.full((batch, 1), c.n_values)], axis=1),
            target=values[rows, slot], slot=slot,
        )

    def held_out(self, n: int = 2000) -> RecallBatch:
        """A fixed held-out set, from a generator no training run ever uses (seed offset)."""
        return self.sample(np.random.default_rng([self.config.seed, 0xE7A1]), n)

    def example(self, index: int) -> RecallBatch:
        """Held-out sequence ``index`` on its own, the one ``qkv train explain --index`` shows.

        Each index has its own generator ``[seed, 0xE7A1, 1, index]``, so example ``index`` is
        the same whatever the size of the held-out set or whichever other examples are drawn,
        and no training run ever draws from it (training uses ``[seed, 1]``). It is not a row
        of :meth:`held_out`, whose rows all come from one stream and so depend on ``n``.
        """
        if isinstance(index, bool) or not isinstance(index, (int, np.integer)) or index < 0:
            raise ValueError(f"RecallTask.example: index must be an int ≥ 0, got {index!r}")
        return self.sample(np.random.default_rng([self.config.seed, 0xE7A1, 1, int(index)]), 1)


class RecallModel:
    """One attention layer reading the query slot's answer out of the pairs (see module doc).

    Params (flat names, as saved in checkpoints): ``key_emb.weight (n_keys, d)``,
    ``val_emb.weight (n_values+1, d)``, ``attn.w_q`` … ``attn.b_o``, ``ln.weight``,
    ``ln.bias``, ``head.weight (d, n_values)``, ``head.bias``.
    """

    def __init__(self, config: RecallConfig, rng=None, dtype=np.float32):
        c = config
        gen = np.random.default_rng(c.seed if rng is None else rng)
        scale = 1.0 / np.sqrt(c.d_model)  # embeddings of unit norm: O(1) scores at init
        self.key_emb = Embedding(c.n_keys, c.d_model, rng=gen, dtype=dtype)
        self.val_emb = Embedding(c.n_values + 1, c.d_model, rng=gen, dtype=dtype)
        for emb in (self.key_emb, self.val_emb):
            emb.params["weight"] *= emb.params["weight"].dtype.type(scale)
        self.attn = MultiHeadAttention(c.d_model, c.n_heads, rng=gen, dtype=dtype)
        self.ln = LayerNorm(c.d_model, dtype=dtype)
        self.head = Linear(c.d_model, c.n_values, rng=gen, dtype=dtype)
        self.config = config
        self.layers = {"key_emb": self.key_emb, "val_emb": self.val_emb, "attn": self.attn,
                       "ln": self.ln, "head": self.head}
        self.params = {n: a for name, layer in self.layers.items()
                       for n, a in prefixed(name, layer.params).items()}

    @staticmethod
    def pinned_shapes(config: RecallConfig) -> dict[str, tuple[int, ...]]:
        """The shapes of the parameters that fix every size in ``config`` the model allocates
        (n_keys, n_values, d_model): a checkpoint's header is checked against them before a
        model is built from its config (tests/test_checkpoint.py keeps them equal to the
        built model's)."""
        c = config
        return {"key_emb.weight": (c.n_keys, c.d_model),
                "val_emb.weight": (c.n_values + 1, c.d_model),
                "head.weight": (c.d_model, c.n_values)}

    def _embed(self, batch: RecallBatch):
        ek, ck = self.key_emb.forward(batch.keys)
        ev, cv = self.val_emb.forward(batch.values)
        return ek + ev, (ck, cv)  # (B, P+1, d)

    def forward(self, batch: RecallBatch):
        x, c_emb = self._embed(batch)  # (B, S, d), S = P + 1
        xq = x[:, -1:]  # (B, 1, d): the query slot
        a, c_att = self.attn.forward(xq, context=x)  # (B, 1, d)
        h = xq + a
        z, c_ln = self.ln.forward(h)
        logits, c_head = self.head.forward(z[:, 0])  # (B, n_values)
        return logits, (c_emb, c_att, c_ln, c_head)

    def backward(self, ctx, dlogits):
        c_emb, c_att, c_ln, c_head = ctx
        dz, g_head = self.head.backward(c_head, dlogits)
        dh, g_ln = self.ln.backward(c_ln, dz[:, None, :])  # (B, 1, d)
        (dxq, dx), g_att = self.attn.backward(c_att, dh)
        dx = dx.copy()
        dx[:, -1:] += dxq + dh  # the query slot feeds q (dxq) and the residual (dh)
        _, g_key = self.key_emb.backward(c_emb[0], dx)
        _, g_val = self.val_emb.backward(c_emb[1], dx)
        grads = {}
        for name, g in (("key_emb", g_key), ("val_emb", g_val), ("attn", g_att), ("ln", g_ln),
                        ("head", g_head)):
            grads.update(prefixed(name, g))
        return grads

    def predict(self, batch: RecallBatch) -> np.ndarray:
        return self.forward(batch)[0].argmax(axis=-1)

    def lookup(self, batch: RecallBatch) -> np.ndarray:
        """The query slot's attention weights over all slots ``(B, H, S)`` (S = P + 1)."""
        x, _ = self._embed(batch)
        return self.attn.attention_weights(x[:, -1:], context=x)[:, :, 0, :]


def evaluate(model: RecallModel, batch: RecallBatch, chunk: int = 1000) -> dict[str, float]:
    """Held-out accuracy and the fraction of queries whose largest weight is on the matching key.

    With several heads, a query counts as a hit when *any* head's largest weight is on it.
    """
    correct = hits = 0
    n = len(batch.target)
    for start in range(0, n, chunk):
        part = RecallBatch(*(a[start: start + chunk] for a in
                             (batch.keys, batch.values, batch.target, batch.slot)))
        correct += int((model.predict(part) == part.target).sum())
        top = model.lookup(part).argmax(axis=-1)  # (b, H)
        hits += int((top == part.slot[:, None]).any(axis=1).sum())
    return {"accuracy": correct / n, "top_weight_hit": hits / n}


# -- training ---------------------------------------------------------------------------------
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
