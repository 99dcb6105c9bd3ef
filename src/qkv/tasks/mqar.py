"""MQAR: multi-query associative recall, attention against a selective state-space model.

The seed: "comparing every query against every key is O(n²) in sequence length, which is
exactly the scaling problem that motivated the state-space alternatives in Mamba". This task
shows what the n² buys. It is the multi-query associative recall of "Zoology" (Arora et al.
2023): a sequence of P key–value pairs, then every key asked once, in random order, among
filler tokens; at each asked key the model must name the value stored under it::

    k₁ v₁ k₂ v₂ … k_P v_P · · k₇ · k₂ · · k₁ …        (length T)
                               ↑     ↑      ↑
                              v₇    v₂     v₁          targets at the asked keys only

Tokens: 0 is the filler "·", keys are 1 … n_keys, values n_keys + 1 … n_keys + n_values. Every
model reads the tokens causally (position t sees positions ≤ t) and emits a distribution over
the vocabulary at each position. Two generators (``MqarConfig.generator``):

- ``"zoology"`` (the default) follows Zoology's ``multiquery_ar`` (zoology/data/
  associative_recall.py): the keys *and the values* of a sequence are distinct; the P asked
  keys sit at even offsets 2g after the pairs, the gaps g distinct and drawn with weight
  ∝ (g + 1)^(a − 1), a = :data:`QUERY_POWER` (a power law bunched near the pairs; the
  first pair's key tends to get the first draw); every other slot after the pairs holds a
  random token of the whole vocabulary (filler, keys and values alike — never a target).
- ``"uniform"`` (this module's first generator, kept to reproduce the earlier runs): values
  drawn with replacement, the questions at P positions anywhere after the pairs (uniformly,
  in random order), the filler "·" everywhere else.

What still differs from Zoology: its vocabulary is 8,192 tokens (here 1 + 32 + 32), it trains
on a fixed set of examples per (length, pairs) (here fresh batches every step, pairs
log-uniform), and its models have no previous-token embedding (and Mamba's expand is 2, here 1).

Three models, the same but for the sequence mixer in their two layers (pre-norm residual)::

    e_t    = E[tok_t] + E_prev[tok_{t−1}]          (B, T, d)  token and previous token, shared
    x      = e + mixer₁(LN(e));  x = x + mixer₂(LN(x))
    logits = LN(x) W_out + b_out                   (B, T, V)

- ``attention``: causal multi-head attention (qkv.nn.MultiHeadAttention, computed by
  qkv.attention with ``qkv.causal()``): every step can read every earlier step, at O(T²) cost.
- ``ssm-small``/``ssm-large``: the Mamba block (qkv.nn.MambaBlock: selective scan S6 with
  ``state_small`` and ``state_large`` states per channel): everything the layer keeps of the
  past is a fixed state of d × N numbers, at O(T) cost.

The previous-token embedding gives every model the pair structure for free (a value's position
knows its key), so the contrast is only the mixer: can it find the asked key's pair far back?
"""

from __future__ import annotations

import itertools
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from .. import causal
from ..nn import (
    Embedding,
    LayerNorm,
    Linear,
    MambaBlock,
    MultiHeadAttention,
    softmax_cross_entropy,
)
from ..nn._base import prefixed
from . import checkpoint as ckpt
from .training import cosine_lr, train_each, train_steps

KINDS = ("attention", "ssm-small", "ssm-large")
TASK = "mqar"
DATA = Path(__file__).parent / "data"
FILLER = 0
GENERATORS = ("zoology", "uniform")  # see the module's docstring
QUERY_POWER = 0.01  # Zoology's train_power_a = test_power_a: p(gap g) ∝ (g + 1)^(a − 1)


@dataclass(frozen=True)
class MqarConfig:
    """Everything that defines a run; stored in every checkpoint."""

    n_keys: int = 32
    n_values: int = 32
    train_lengths: tuple[int, ...] = (32, 64)  # each step's batch has one of these lengths
    eval_lengths: tuple[int, ...] = (32, 64, 128)
    eval_pairs: tuple[int, ...] = (1, 2, 4, 8, 16, 32)
    d_model: int = 64
    n_heads: int = 2
    state_small: int = 4
    state_large: int = 16
    batch: int = 32
    steps: int = 4800
    lr: float = 3e-3
    seed: int = 0
    generator: str = "zoology"  # one of GENERATORS

    def __post_init__(self):
        if self.generator not in GENERATORS:
            raise ValueError(f"MqarConfig: generator must be one of {GENERATORS}, got "
                             f"{self.generator!r}")
        for name in ("n_keys", "n_values", "d_model", "n_heads", "state_small", "state_large",
                     "batch", "steps"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"MqarConfig: {name} must be a positive int, got {value!r}")
        for name in ("train_lengths", "eval_lengths", "eval_pairs"):
            value = getattr(self, name)
            if isinstance(value, list):  # from JSON
                object.__setattr__(self, name, tuple(value))
                value = getattr(self, name)
            if (not isinstance(value, tuple) or not value
                    or any(isinstance(v, bool) or not isinstance(v, int) or v < 1
                           for v in value)):
                raise ValueError(f"MqarConfig: {name} must be a non-empty list of positive "
                                 f"ints, got {value!r}")
        for T in (*self.train_lengths, *self.eval_lengths):
            if T < 8:
                raise ValueError(f"MqarConfig: sequence lengths must be ≥ 8 (room for two "
                                 f"pairs and their queries), got {T}")
        if self.d_model % self.n_heads:
            raise ValueError(f"MqarConfig: d_model={self.d_model} must be a multiple of "
                             f"n_heads={self.n_heads}")
        if not self.lr > 0:
            raise ValueError(f"MqarConfig: lr must be > 0, got {self.lr!r}")

    @property
    def vocab(self) -> int:
        return 1 + self.n_keys + self.n_values

    def n_state(self, kind: str) -> int | None:
        return {"ssm-small": self.state_small, "ssm-large": self.state_large}.get(kind)

    def grid(self) -> list[tuple[int, int]]:
        """The (length, pairs) cells evaluated: every pair count that fits the length."""
        return [(T, P) for T in self.eval_lengths for P in self.eval_pairs
                if P <= max_pairs(T) and P <= self.n_keys]

    def lr_at(self, step: int) -> float:
        return cosine_lr(self.lr, step, self.steps)

    def to_dict(self) -> dict:
        d = asdict(self)
        return {k: list(v) if isinstance(v, tuple) else v for k, v in d.items()}


def max_pairs(length: int) -> int:
    """The most pairs a sequence of ``length`` tokens holds: 2P for the pairs, P for the
    queries, and as many filler tokens again as queries (P ≤ length / 4)."""
    return length // 4


@dataclass
class Batch:
    tokens: np.ndarray  # (B, T) ints
    target: np.ndarray  # (B, T) the value at each asked key, −1 elsewhere
    pairs: np.ndarray  # (B,) P of each row

    @property
    def asked(self) -> np.ndarray:
        return self.target >= 0  # (B, T)


def sample(config: MqarConfig, rng: np.random.Generator, n: int, length: int,
           pairs: int | np.ndarray) -> Batch:
    """``n`` sequences of ``length`` tokens with ``pairs`` pairs each (an int, or one per row,
    each in [1, length / 4]), drawn by the config's generator (see the module's docstring)."""
    c = config
    P = np.broadcast_to(np.asarray(pairs), (n,)).astype(np.int64)
    top = min(max_pairs(length), c.n_keys)
    if c.generator == "zoology":
        top = min(top, c.n_values)  # the values of a sequence are distinct too
    if (P < 1).any() or (P > top).any():
        raise ValueError(f"mqar.sample: pairs must lie in [1, {top}]"
                         f" for length {length}, got {sorted(set(P.tolist()))[:5]}")
    if c.generator == "zoology":
        return _sample_zoology(c, rng, n, length, P)
    return _sample_uniform(c, rng, n, length, P)


def query_gap_weights(length: int, pairs: int) -> np.ndarray:
    """The weights of the gaps g = 0 … (length − 2·pairs)/2 − 1 (query at offset 2g after the
    pairs) in the ``"zoology"`` generator: ∝ (g + 1)^(a − 1), normalised."""
    space = (length - 2 * pairs) // 2
    w = QUERY_POWER * np.arange(1, space + 1, dtype=np.float64) ** (QUERY_POWER - 1)
    return w / w.sum()


def _sample_zoology(c: MqarConfig, rng, n: int, length: int, P: np.ndarray) -> Batch:
    tokens = rng.integers(0, c.vocab, (n, length))  # every slot not set below: random tokens
    target = np.full((n, length), -1, np.int64)
    keys = np.argsort(rng.random((n, c.n_keys)), axis=1)[:, : P.max()] + 1  # distinct keys
    values = np.argsort(rng.random((n, c.n_values)), axis=1)[:, : P.max()] + 1 + c.n_keys
    for p in np.unique(P):
        rows = np.flatnonzero(P == p)
        k, v = keys[rows, :p], values[rows, :p]
        tokens[rows[:, None], np.arange(0, 2 * p, 2)] = k
        tokens[rows[:, None], np.arange(1, 2 * p, 2)] = v
        # p distinct gaps by weighted sampling without replacement, in draw order: the
        # smallest Exp(1)/w (Efraimidis–Spirakis) — the same law as drawing one gap at a time
        # with probability ∝ w among those left, as Zoology's np.random.choice does.
        w = query_gap_weights(length, int(p))
        order = np.argsort(rng.exponential(size=(len(rows), len(w))) / w, axis=1)[:, :p]
        slots = 2 * p + 2 * order  # pair i's key is asked at the i-th gap drawn
        tokens[rows[:, None], slots] = k
        target[rows[:, None], slots] = v
    return Batch(tokens, target, P)


def _sample_uniform(c: MqarConfig, rng, n: int, length: int, P: np.ndarray) -> Batch:
    tokens = np.full((n, length), FILLER, np.int64)
    target = np.full((n, length), -1, np.int64)
    keys = np.argsort(rng.random((n, c.n_keys)), axis=1)[:, : P.max()] + 1  # distinct keys
    values = rng.integers(0, c.n_values, (n, P.max())) + 1 + c.n_keys
    for p in np.unique(P):
        rows = np.flatnonzero(P == p)
        k, v = keys[rows, :p], values[rows, :p]
        tokens[rows[:, None], np.arange(0, 2 * p, 2)] = k
        tokens[rows[:, None], np.arange(1, 2 * p, 2)] = v
        free = length - 2 * p  # query slots: p distinct positions after the pairs, sorted
        slots = 2 * p + np.sort(np.argsort(rng.random((len(rows), free)), axis=1)[:, :p], axis=1)
        order = np.argsort(rng.random((len(rows), p)), axis=1)  # each key once, random order
        asked = np.take_along_axis(k, order, axis=1)
        tokens[rows[:, None], slots] = asked
        target[rows[:, None], slots] = np.take_along_axis(v, order, axis=1)
    return Batch(tokens, target, P)


def encode(config: MqarConfig, pairs: list[tuple[int, int]], queries: list[int],
           length: int | None = None) -> Batch:
    """One sequence from pairs ``[(key, value)]`` (key in 1…n_keys, value in 1…n_values, as a
    person numbers them) and the keys asked, in order; each asked key is followed by a filler,
    then fillers up to ``length`` (default: as short as that). A key asked but not stored has
    no target (−1); a key stored twice answers with its latest value."""
    c = config
    for k, v in pairs:
        if not (1 <= k <= c.n_keys and 1 <= v <= c.n_values):
            raise ValueError(f"mqar.encode: a pair must be (key in 1…{c.n_keys}, value in "
                             f"1…{c.n_values}), got ({k}, {v})")
    for k in queries:
        if not 1 <= k <= c.n_keys:
            raise ValueError(f"mqar.encode: an asked key must lie in 1…{c.n_keys}, got {k}")
    need = 2 * len(pairs) + 2 * len(queries)
    T = need if length is None else length
    if T < need or T < 1:
        raise ValueError(f"mqar.encode: {len(pairs)} pairs and {len(queries)} queries need "
                         f"{need} tokens, length {length} is too short")
    tokens = np.full((1, T), FILLER, np.int64)
    target = np.full((1, T), -1, np.int64)
    stored = {}
    for i, (k, v) in enumerate(pairs):
        tokens[0, 2 * i], tokens[0, 2 * i + 1] = k, c.n_keys + v
        stored[k] = c.n_keys + v
    for j, k in enumerate(queries):
        pos = 2 * len(pairs) + 2 * j
        tokens[0, pos] = k
        target[0, pos] = stored.get(k, -1)
    return Batch(tokens, target, np.array([len(pairs)]))


# -- the models -------------------------------------------------------------------------------
class MqarModel:
    """``kind`` in KINDS; ``forward(tokens (B, T)) → logits (B, T, vocab)``, causal."""

    def __init__(self, config: MqarConfig, kind: str, dtype=np.float32):
        if kind not in KINDS:
            raise ValueError(f"MqarModel: kind must be one of {KINDS}, got {kind!r}")
        c = config
        gen = np.random.default_rng([c.seed, KINDS.index(kind)])
        self.config, self.kind = c, kind
        d = c.d_model
        self.embed = Embedding(c.vocab, d, rng=gen, dtype=dtype)
        self.embed_prev = Embedding(c.vocab, d, rng=gen, dtype=dtype)
        self.norms = [LayerNorm(d, dtype=dtype) for _ in range(2)]
        if kind == "attention":
            self.mixers = [MultiHeadAttention(d, c.n_heads, rng=gen, dtype=dtype)
                           for _ in range(2)]
        else:
            self.mixers = [MambaBlock(d, c.n_state(kind), rng=gen, dtype=dtype)
                           for _ in range(2)]
        self.ln_f = LayerNorm(d, dtype=dtype)
        self.head = Linear(d, c.vocab, rng=gen, dtype=dtype)
        self.layers = {"embed": self.embed, "embed_prev": self.embed_prev,
                       "ln0": self.norms[0], "mix0": self.mixers[0],
                       "ln1": self.norms[1], "mix1": self.mixers[1],
                       "ln_f": self.ln_f, "head": self.head}
        self.params = {n: a for name, layer in self.layers.items()
                       for n, a in prefixed(name, layer.params).items()}

    @property
    def num_params(self) -> int:
        return sum(int(p.size) for p in self.params.values())

    @property
    def mixer_params(self) -> int:
        """Parameters of the two sequence mixers (what differs between the models)."""
        return sum(m.num_params for m in self.mixers)

    def _mix(self, i, x):
        if self.kind == "attention":
            return self.mixers[i].forward(x, mask=causal())
        return self.mixers[i].forward(x)

    def forward(self, tokens):
        tokens = np.asarray(tokens)
        if tokens.ndim != 2:
            raise ValueError(f"MqarModel: tokens must have shape (B, T), got {tokens.shape}")
        prev = np.concatenate([np.full_like(tokens[:, :1], FILLER), tokens[:, :-1]], axis=1)
        e, c_e = self.embed.forward(tokens)  # (B, T, d)
        ep, c_ep = self.embed_prev.forward(prev)
        x = e + ep
        ctxs = []
        for i in range(2):
            a, c_ln = self.norms[i].forward(x)
            m, c_mix = self._mix(i, a)
            x = x + m  # (B, T, d)
            ctxs.append((c_ln, c_mix))
        f, c_f = self.ln_f.forward(x)
        logits, c_h = self.head.forward(f)  # (B, T, V)
        return logits, (c_e, c_ep, ctxs, c_f, c_h)

    def backward(self, cache, dlogits) -> dict[str, np.ndarray]:
        c_e, c_ep, ctxs, c_f, c_h = cache
        df, g_head = self.head.backward(c_h, dlogits)
        dx, g_f = self.ln_f.backward(c_f, df)
        grads = {**prefixed("head", g_head), **prefixed("ln_f", g_f)}
        for i in (1, 0):
            c_ln, c_mix = ctxs[i]
            da, g_mix = self.mixers[i].backward(c_mix, dx)
            if self.kind == "attention":
                da = da[0]  # (dx, dcontext)
            dn, g_ln = self.norms[i].backward(c_ln, da)
            dx = dx + dn
            grads.update(prefixed(f"mix{i}", g_mix))
            grads.update(prefixed(f"ln{i}", g_ln))
        _, g_e = self.embed.backward(c_e, dx)
        _, g_ep = self.embed_prev.backward(c_ep, dx)
        grads.update(prefixed("embed", g_e))
        grads.update(prefixed("embed_prev", g_ep))
        return grads

    def selection(self, tokens) -> list[dict[str, np.ndarray]]:
        """What each layer's S6 scan selects at every token of ``tokens`` (B, T): per layer,
        :meth:`qkv.nn.MambaBlock.selection` of that layer's input (Δ ``(B, T, D)``, the decay
        exp(ΔA) ``(B, T, D, N)``, B and C). State-space kinds only: attention has no state."""
        if self.kind == "attention":
            raise ValueError("MqarModel.selection: attention has no state to select for; "
                             "ask a state-space model (ssm-small, ssm-large)")
        tokens = np.asarray(tokens)
        prev = np.concatenate([np.full_like(tokens[:, :1], FILLER), tokens[:, :-1]], axis=1)
        x = self.embed(tokens) + self.embed_prev(prev)
        out = []
        for norm, mixer in zip(self.norms, self.mixers, strict=True):
            a = norm(x)
            out.append(mixer.selection(a))
            x = x + mixer(a)
        return out

    def predict(self, tokens) -> np.ndarray:
        """The most likely token at every position ``(B, T)``."""
        return self.forward(tokens)[0].argmax(axis=-1)

    # -- checkpoints ------------------------------------------------------------------------
    def save(self, path, metrics: dict | None = None) -> Path:
        return ckpt.save_model(path, self, TASK, metrics)

    @staticmethod
    def pinned_shapes(config: MqarConfig, kind: str) -> dict[str, tuple[int, ...]]:
        """The shapes that fix the config's sizes (vocabulary, width, state), checked in a
        checkpoint's header before a model is built."""
        c, d = config, config.d_model
        shapes = {"embed.weight": (c.vocab, d), "head.weight": (d, c.vocab)}
        if kind != "attention":
            shapes["mix0.ssm.a_log"] = (d, c.n_state(kind))
        return shapes

    @classmethod
    def load(cls, path) -> MqarModel:
        return ckpt.load_model(path, cls, TASK, KINDS, MqarConfig)


SHIPPED = DATA / "mqar.json"
# what wrote SHIPPED and the checkpoints beside it (docs/lesson.md runs the same command)
SHIPPED_COMMAND = "qkv train mqar --seed 0 --json mqar.json --plot mqar.png --save-dir DIR"


def shipped() -> dict:
    """The JSON :func:`experiment` returned for the shipped run (``SHIPPED_COMMAND``)."""
    import json

    return json.loads(SHIPPED.read_text(encoding="utf-8"))


def load_pretrained(kind: str = "attention") -> MqarModel:
    """The shipped model of ``kind``, trained by ``qkv train mqar --seed 0 --save-dir DIR``
    (docs/lesson.md); ``.metrics`` holds its held-out accuracy per (length, pairs)."""
    if kind not in KINDS:
        raise ValueError(f"load_pretrained: kind must be one of {KINDS}, got {kind!r}")
    return MqarModel.load(DATA / f"mqar-{kind}.safetensors")


# -- training and evaluation ------------------------------------------------------------------
def loss_on(model: MqarModel, batch: Batch) -> tuple[float, dict[str, np.ndarray]]:
    """Cross-entropy at the asked keys only, and its gradients."""
    logits, cache = model.forward(batch.tokens)
    asked = batch.asked
    loss, d_asked = softmax_cross_entropy(logits[asked], batch.target[asked])
    dlogits = np.zeros_like(logits)
    dlogits[asked] = d_asked
    return loss, model.backward(cache, dlogits)


def train(model: MqarModel, on_step=None) -> list[float]:
    """Adam for ``config.steps`` steps, global gradient norm clipped to 1. Step i's batch has
    length ``train_lengths[i % len]`` and, per sequence, a pair count drawn log-uniformly from
    [1, length / 4] (as many sequences with 1–2 pairs as with 8–16: a model learns to recall
    one pair before many); all models see the same batches (generator ``[seed, 1]``)."""
    c = model.config
    lengths = itertools.cycle(c.train_lengths)

    def loss_and_grads(rng):
        T = next(lengths)
        top = min(max_pairs(T), c.n_keys)
        P = np.minimum(np.exp(rng.uniform(0.0, np.log(top + 1), c.batch)).astype(np.int64), top)
        return loss_on(model, sample(c, rng, c.batch, T, P))

    return train_steps(model, c, loss_and_grads, clip=1.0, on_step=on_step)


def held_out(config: MqarConfig, length: int, pairs: int, n: int) -> Batch:
    """The held-out sequences of one cell, from the generator ``[seed, 0xE7A1, length, pairs]``
    (the same for every model and every run)."""
    return sample(config, np.random.default_rng([config.seed, 0xE7A1, length, pairs]), n,
                  length, pairs)


def evaluate(model: MqarModel, per_cell: int = 100, chunk: int = 50) -> list[dict]:
    """Accuracy at the asked keys for every (length, pairs) of the config's grid, on
    ``per_cell`` held-out sequences each (so ``per_cell · pairs`` answers per cell)."""
    from ..engine.threads import single_threaded_blas

    rows = []
    with single_threaded_blas():
        for T, P in model.config.grid():
            b = held_out(model.config, T, P, per_cell)
            pred = np.concatenate([model.predict(b.tokens[i: i + chunk])
                                   for i in range(0, per_cell, chunk)])
            right = int((pred[b.asked] == b.target[b.asked]).sum())
            rows.append({"length": T, "pairs": P, "sequences": per_cell,
                         "answers": int(b.asked.sum()), "correct": right,
                         "accuracy": right / int(b.asked.sum())})
    return rows


def experiment(config: MqarConfig, per_cell: int = 100, *, kinds=KINDS, on_start=None,
               on_step=None, on_done=None) -> tuple[dict, dict[str, MqarModel]]:
    """Train the models of ``kinds`` (default all three) on the same batches and score them on
    the same held-out grid. Returns ``(result, models)``; ``result`` is JSON-able."""
    bad = [k for k in kinds if k not in KINDS]
    if bad or not kinds:
        raise ValueError(f"mqar.experiment: kinds must be some of {KINDS}, got {list(kinds)}")

    def score(model):
        return {"kind": model.kind, "n_state": config.n_state(model.kind),
                "mixer_parameters": model.mixer_params,
                "state_floats_per_layer": (None if model.kind == "attention" else
                                           config.d_model * config.n_state(model.kind)),
                "cells": evaluate(model, per_cell)}

    runs, models = train_each(kinds, lambda kind: MqarModel(config, kind), train, score,
                              on_start=on_start, on_step=on_step, on_done=on_done)
    return {"task": TASK, "config": config.to_dict(), "per_cell": per_cell,
            "models": runs}, models


def cell(run: dict, length: int, pairs: int) -> dict | None:
    """The cell of a run's results at (length, pairs), or None."""
    return next((r for r in run["cells"] if r["length"] == length and r["pairs"] == pairs),
                None)


def answers(model: MqarModel, batch: Batch) -> list[dict]:
    """Each asked key of a one-sequence batch with the model's answer: ``[{"position", "key",
    "expected", "answer", "probability"}]`` (keys and values numbered as a person writes them,
    from 1; ``answer`` None when the model's top token is not a value, ``expected`` None for a
    key that was never stored)."""
    c = model.config
    logits = model.forward(batch.tokens)[0][0]  # (T, V)
    z = logits - logits.max(axis=-1, keepdims=True)
    p = np.exp(z) / np.exp(z).sum(axis=-1, keepdims=True)
    out = []
    for pos in np.flatnonzero((batch.tokens[0] >= 1) & (batch.tokens[0] <= c.n_keys)):
        if pos < 2 * int(batch.pairs[0]):
            continue  # a key of the pairs, not a question
        top = int(p[pos].argmax())
        tgt = int(batch.target[0, pos])
        out.append({"position": int(pos), "key": int(batch.tokens[0, pos]),
                    "expected": None if tgt < 0 else tgt - c.n_keys,
                    "answer": top - c.n_keys if top > c.n_keys else None,
                    "probability": float(p[pos, top])})
    return out
