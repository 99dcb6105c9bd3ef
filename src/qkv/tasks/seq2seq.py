"""Seq2seq: a fixed context vector against attention, on reversing a sequence of random symbols.

The seed: "a plain Sequence-to-Sequence Encoder-Decoder model compresses an entire input
sequence into one fixed-size context vector, and that bottleneck degrades badly on long
sequences ... let it look back at the original input sequence directly, at every step".

Task: the input is n random symbols (n from ``min_len`` to ``max_len``); the output is the same
symbols reversed. The right answer is never in doubt and the right alignment is the
anti-diagonal: output step t must read input position n − 1 − t.

Two models, identical but for how the decoder sees the input::

    e      = E[x]                                 (B, n, E)    shared symbol embedding
    hs     = GRU_fwd(e) + flip(GRU_bwd(flip(e)))  (B, n, H)    each position's annotation, read
                                                               from both sides (Bahdanau 2014)
    hn     = last(GRU_fwd) + last(GRU_bwd)        (B, H)       the whole input, summarised
    s      = GRU_dec(E[y_prev], h0 = hn)          (B, m, H)    y_prev = BOS, y_0, …, y_{m−2}
    fixed:     c_t = hn                           the one fixed-size context vector (Cho 2014)
    attention: c_t = MHA(s_t, context = hs,       softmax((s_t W_Q)(hs W_K)ᵀ/√d) (hs W_V) W_O,
                         mask = padding(n))       computed by qkv.attention (Nq = m ≠ Nk = n)
    logits = [s_t ; c_t] W_out + b_out            (B, m, V)

(flip reverses each sequence within its own length.) Training uses teacher forcing (the
decoder reads the true previous symbol); evaluation decodes greedily (it reads its own previous
answer), so one early mistake can spoil an exact match.
"""

from __future__ import annotations

import itertools
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from .. import attention, attention_weights, padding
from ..nn import GRU, Embedding, Linear, MultiHeadAttention, softmax_cross_entropy
from ..nn._base import prefixed
from . import checkpoint as ckpt
from .training import cosine_lr, train_each, train_steps

KINDS = ("fixed", "attention")
TASK = "seq2seq"
DATA = Path(__file__).parent / "data"


def _positive(owner: str, **values) -> None:
    for name, value in values.items():
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{owner}: {name} must be a positive int, got {value!r}")


@dataclass(frozen=True)
class Seq2SeqConfig:
    """Everything that defines a run; stored in every checkpoint."""

    n_symbols: int = 16
    min_len: int = 4
    max_len: int = 40
    d_emb: int = 32
    d_hidden: int = 128
    d_attn: int = 16  # W_Q, W_K, W_V width: small, so the two models' sizes stay within 10%
    batch: int = 64
    steps: int = 1200
    lr: float = 3e-3
    clip: float = 1.0  # global gradient-norm clip: GRUs' gradients spike now and then
    seed: int = 0

    def __post_init__(self):
        _positive("Seq2SeqConfig", n_symbols=self.n_symbols, min_len=self.min_len,
                  max_len=self.max_len, d_emb=self.d_emb, d_hidden=self.d_hidden,
                  d_attn=self.d_attn, batch=self.batch, steps=self.steps)
        if self.max_len < self.min_len:
            raise ValueError(f"Seq2SeqConfig: max_len={self.max_len} must be ≥ min_len="
                             f"{self.min_len}")
        if not self.lr > 0 or not self.clip > 0:
            raise ValueError(f"Seq2SeqConfig: lr and clip must be > 0, got lr={self.lr!r}, "
                             f"clip={self.clip!r}")

    def lr_at(self, step: int) -> float:
        """Cosine decay from lr to lr/10 over the run."""
        return cosine_lr(self.lr, step, self.steps)

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class Batch:
    src: np.ndarray  # (B, n_max) symbols, padded with 0 after each length
    lengths: np.ndarray  # (B,) input lengths (= output lengths)
    target: np.ndarray  # (B, n_max) the reversed symbols, padded with 0

    def __len__(self) -> int:
        return len(self.lengths)


def sample(rng: np.random.Generator, n: int, n_symbols: int, lo: int, hi: int) -> Batch:
    """``n`` random sequences with lengths uniform in [lo, hi], and their reversals."""
    lengths = rng.integers(lo, hi + 1, n)
    width = int(lengths.max())
    src = rng.integers(0, n_symbols, (n, width))
    pos = np.arange(width)
    valid = pos[None, :] < lengths[:, None]  # (B, n_max)
    src = np.where(valid, src, 0)
    rev = np.clip(lengths[:, None] - 1 - pos[None, :], 0, None)  # output t reads n − 1 − t
    target = np.where(valid, np.take_along_axis(src, rev, axis=1), 0)
    return Batch(src, lengths, target)


def buckets(config: Seq2SeqConfig) -> list[tuple[int, int]]:
    """Length buckets for evaluation: [min, 10], [11, 20], … up to max_len."""
    edges = [config.min_len - 1, *range(10, config.max_len, 10), config.max_len]
    return [(a + 1, b) for a, b in itertools.pairwise(edges) if b > a]


def held_out(config: Seq2SeqConfig, per_bucket: int = 1000) -> list[tuple[tuple[int, int], Batch]]:
    """A fixed held-out set per length bucket, from a generator no training run uses."""
    rng = np.random.default_rng([config.seed, 0xE7A1])
    return [((lo, hi), sample(rng, per_bucket, config.n_symbols, lo, hi))
            for lo, hi in buckets(config)]


class Seq2SeqModel:
    """The encoder–decoder of the module docstring; ``kind`` is "fixed" or "attention".

    Params (flat names, as saved): ``emb.weight (V+1, E)`` (row V is BOS), ``enc.*`` and
    ``enc_bwd.*`` (the encoder's two directions), ``dec.*`` (GRU), ``attn.*`` (attention
    only), ``out.weight (2H, V)``, ``out.bias``.
    """

    def __init__(self, config: Seq2SeqConfig, kind: str, dtype=np.float32):
        if kind not in KINDS:
            raise ValueError(f"Seq2SeqModel: kind must be one of {KINDS}, got {kind!r}")
        c = config
        gen = np.random.default_rng([c.seed, KINDS.index(kind)])
        self.config, self.kind = c, kind
        self.bos = c.n_symbols
        self.emb = Embedding(c.n_symbols + 1, c.d_emb, rng=gen, dtype=dtype)
        self.enc = GRU(c.d_emb, c.d_hidden, rng=gen, dtype=dtype)
        self.enc_bwd = GRU(c.d_emb, c.d_hidden, rng=gen, dtype=dtype)
        self.dec = GRU(c.d_emb, c.d_hidden, rng=gen, dtype=dtype)
        self.layers = {"emb": self.emb, "enc": self.enc, "enc_bwd": self.enc_bwd,
                       "dec": self.dec}
        if kind == "attention":
            self.attn = MultiHeadAttention(c.d_hidden, 1, d_head=c.d_attn, rng=gen, dtype=dtype)
            self.layers["attn"] = self.attn
        self.out = Linear(2 * c.d_hidden, c.n_symbols, rng=gen, dtype=dtype)
        self.layers["out"] = self.out
        self.params = {n: a for name, layer in self.layers.items()
                       for n, a in prefixed(name, layer.params).items()}

    @property
    def num_params(self) -> int:
        return sum(int(p.size) for p in self.params.values())

    # -- the encoder: both directions ---------------------------------------------------------
    def encode(self, e, lengths):
        """``((hs (B, n, H), hn (B, H)), ctx)`` from embedded inputs ``e (B, n, E)``."""
        (fs, fn), c_f = self.enc.forward(e, lengths=lengths)
        (bs, bn), c_b = self.enc_bwd.forward(_flip(e, lengths), lengths=lengths)
        return (fs + _flip(bs, lengths), fn + bn), (c_f, c_b, lengths)

    def encode_backward(self, ctx, dhs, dhn):
        c_f, c_b, lengths = ctx
        (de_f, _), g_f = self.enc.backward(c_f, (dhs, dhn))
        (de_b, _), g_b = self.enc_bwd.backward(
            c_b, (None if dhs is None else _flip(dhs, lengths), dhn))
        grads = {**prefixed("enc", g_f), **prefixed("enc_bwd", g_b)}
        return de_f + _flip(de_b, lengths), grads

    # -- training: teacher forcing ----------------------------------------------------------
    def forward(self, batch: Batch):
        """Teacher-forced logits ``(B, n_max, V)`` and what the backward needs."""
        B = batch.src.shape[0]
        e_src, c_esrc = self.emb.forward(batch.src)  # (B, n, E)
        (hs, hn), c_enc = self.encode(e_src, batch.lengths)  # (B, n, H), (B, H)
        prev = np.concatenate([np.full((B, 1), self.bos), batch.target[:, :-1]], axis=1)
        e_dec, c_edec = self.emb.forward(prev)  # (B, n, E)
        (s, _), c_dec = self.dec.forward(e_dec, h0=hn)  # (B, n, H)
        if self.kind == "attention":
            ctx, c_att = self.attn.forward(s, context=hs, mask=padding(batch.lengths))
        else:
            ctx, c_att = np.broadcast_to(hn[:, None, :], s.shape), None  # (B, n, H)
        logits, c_out = self.out.forward(np.concatenate([s, ctx], axis=-1))  # (B, n, V)
        return logits, (c_esrc, c_enc, c_edec, c_dec, c_att, c_out)

    def backward(self, cache, dlogits) -> dict[str, np.ndarray]:
        c_esrc, c_enc, c_edec, c_dec, c_att, c_out = cache
        H = self.config.d_hidden
        dsc, g_out = self.out.backward(c_out, dlogits)  # (B, n, 2H)
        ds, dctx = dsc[..., :H], dsc[..., H:]
        grads = prefixed("out", g_out)
        if self.kind == "attention":
            (ds_att, dhs), g_att = self.attn.backward(c_att, dctx)
            ds = ds + ds_att
            dhn_ctx = 0.0
            grads.update(prefixed("attn", g_att))
        else:
            dhs, dhn_ctx = None, dctx.sum(axis=1)  # hn was broadcast over the output steps
        (de_dec, dh0), g_dec = self.dec.backward(c_dec, (ds, None))
        de_src, g_enc = self.encode_backward(c_enc, dhs, dh0 + dhn_ctx)
        _, g_e1 = self.emb.backward(c_esrc, de_src)
        _, g_e2 = self.emb.backward(c_edec, de_dec)
        grads.update(prefixed("dec", g_dec))
        grads.update(g_enc)
        grads["emb.weight"] = g_e1["weight"] + g_e2["weight"]
        return grads

    def loss(self, batch: Batch):
        """Mean cross-entropy over the real output positions, and the parameter gradients."""
        logits, cache = self.forward(batch)
        valid = np.arange(batch.src.shape[1])[None, :] < batch.lengths[:, None]  # (B, n)
        loss, dsel = softmax_cross_entropy(logits[valid], batch.target[valid])
        dlogits = np.zeros_like(logits)
        dlogits[valid] = dsel
        return loss, self.backward(cache, dlogits)

    # -- inference: greedy decoding ---------------------------------------------------------
    def greedy(self, src, lengths, *, with_weights: bool = True
               ) -> tuple[np.ndarray, np.ndarray | None]:
        """Greedy decoding of ``lengths[b]`` symbols per sequence.

        Returns ``(tokens (B, n_max), weights (B, n_max, n_max))``: the decoded symbols and, per
        output step, the weights over the input positions — the attention model's
        cross-attention from ``qkv.attention_weights``; for the fixed model, weight 1 on the
        last input position (the only thing its decoder sees is the final encoder state).
        ``with_weights=False`` skips the weights (None), for scoring.
        """
        src, lengths = np.asarray(src), np.asarray(lengths)
        B, n = src.shape
        (hs, hn), _ = self.encode(self.emb(src), lengths)
        mask = padding(lengths)
        h = hn
        prev = np.full(B, self.bos)
        tokens = np.zeros((B, n), np.int64)
        weights = np.zeros((B, n, n))
        if self.kind == "attention":
            _, k, v = self.attn.project(hs[:, :1], context=hs)  # keys, values once: (B,1,n,d)
            p = self.attn.params
        for t in range(n):
            h = self.dec.step(self.emb(prev), h)  # (B, H)
            if self.kind == "attention":
                q = self.attn.project(h[:, None, :])[0]  # (B, 1, 1, d): one query per sequence
                if with_weights:
                    weights[:, t] = attention_weights(q, k, mask=mask)[:, 0, 0]  # (B, n)
                out = attention(q, k, v, mask=mask)[:, 0, 0]  # (B, d)
                ctx = out @ p["w_o"] + p["b_o"]  # (B, H): the layer's output projection
            else:
                ctx = hn
                weights[np.arange(B), t, lengths - 1] = 1.0
            logits = self.out(np.concatenate([h, ctx], axis=-1))  # (B, V)
            prev = tokens[:, t] = logits.argmax(axis=-1)
        live = np.arange(n)[None, :] < lengths[:, None]
        tokens = np.where(live, tokens, 0)
        weights *= live[:, :, None]
        return tokens, (weights if with_weights else None)

    def translate(self, tokens) -> tuple[np.ndarray, np.ndarray]:
        """One sequence of symbols ``(n,)`` → ``(output symbols (n,), weights (n, n))``.

        ``weights[t, j]`` is how much output step t reads input position j (see :meth:`greedy`).
        """
        tokens = np.asarray(tokens)
        if tokens.ndim != 1 or tokens.size == 0:
            raise ValueError(f"translate: tokens must be a non-empty 1-d sequence, got shape "
                             f"{tokens.shape}")
        if tokens.dtype == bool or not np.issubdtype(tokens.dtype, np.integer):
            raise TypeError(f"translate: tokens must be integers, got dtype {tokens.dtype}")
        if tokens.min() < 0 or tokens.max() >= self.config.n_symbols:
            raise ValueError(f"translate: tokens must lie in [0, {self.config.n_symbols}), got "
                             f"values from {tokens.min()} to {tokens.max()}")
        out, w = self.greedy(tokens[None], np.array([tokens.size]))
        return out[0], w[0]

    # -- checkpoints ------------------------------------------------------------------------
    def save(self, path, metrics: dict | None = None) -> Path:
        return ckpt.save_model(path, self, TASK, metrics)

    @staticmethod
    def pinned_shapes(config: Seq2SeqConfig, kind: str) -> dict[str, tuple[int, ...]]:
        """The shapes of the parameters that fix every size in ``config`` the model allocates
        (n_symbols, d_emb, d_hidden, d_attn): a checkpoint's header is checked against them
        before a model is built from its config."""
        c = config
        shapes = {"emb.weight": (c.n_symbols + 1, c.d_emb),
                  "enc.w_ih": (c.d_emb, 3 * c.d_hidden),
                  "out.weight": (2 * c.d_hidden, c.n_symbols)}
        if kind == "attention":
            shapes["attn.w_q"] = (c.d_hidden, c.d_attn)
        return shapes

    @classmethod
    def load(cls, path) -> Seq2SeqModel:
        """The model saved at ``path``; a :class:`~qkv.tasks.checkpoint.CheckpointError` naming
        the file for anything truncated, edited or inconsistent."""
        return ckpt.load_model(path, cls, TASK, KINDS, Seq2SeqConfig)


def _flip(a: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Reverse each row's first ``lengths[b]`` entries along axis 1; padded entries become 0.
    Its own inverse (and its own adjoint) on the real entries."""
    n = a.shape[1]
    pos = np.arange(n)
    idx = np.clip(lengths[:, None] - 1 - pos[None, :], 0, None)  # (B, n)
    out = np.take_along_axis(a, idx.reshape(*idx.shape, *([1] * (a.ndim - 2))), axis=1)
    live = (pos[None, :] < lengths[:, None]).reshape(*idx.shape, *([1] * (a.ndim - 2)))
    return np.where(live, out, 0).astype(a.dtype, copy=False)


def load_pretrained(kind: str = "attention") -> Seq2SeqModel:
    """The shipped model of ``kind`` ("attention" or "fixed"), trained by docs/lesson.md's
    ``qkv train seq2seq --seed 0 … --save-dir out`` and copied here by the maintainers'
    ``python scripts/regenerate_artefacts.py seq2seq``;
    ``.metrics`` holds its held-out scores per length bucket."""
    if kind not in KINDS:
        raise ValueError(f"load_pretrained: kind must be one of {KINDS}, got {kind!r}")
    return Seq2SeqModel.load(DATA / f"seq2seq-{kind}.safetensors")


# -- training and evaluation ----------------------------------------------------------------
def train(model: Seq2SeqModel, on_step=None) -> list[float]:
    """Train ``model`` for ``config.steps`` Adam steps; returns the loss per step.

    Data come from a generator seeded ``[seed, 1]`` — the same batches for both kinds, so the
    two models see exactly the same examples in the same order.
    """
    c = model.config
    return train_steps(
        model, c, lambda rng: model.loss(sample(rng, c.batch, c.n_symbols, c.min_len, c.max_len)),
        clip=c.clip, on_step=on_step)


def evaluate(model: Seq2SeqModel, sets, chunk: int = 500) -> list[dict]:
    """Token accuracy and exact match per length bucket, decoding greedily."""
    from ..engine.threads import single_threaded_blas

    rows = []
    with single_threaded_blas():
        for (lo, hi), batch in sets:
            right = total = exact = 0
            for i in range(0, len(batch), chunk):
                lengths = batch.lengths[i: i + chunk]
                n = int(lengths.max())
                src, target = batch.src[i: i + chunk, :n], batch.target[i: i + chunk, :n]
                out, _ = model.greedy(src, lengths, with_weights=False)
                live = np.arange(n)[None, :] < lengths[:, None]
                ok = (out == target) & live
                right += int(ok.sum())
                total += int(live.sum())
                exact += int((ok | ~live).all(axis=1).sum())
            rows.append({"lengths": [lo, hi], "sequences": len(batch),
                         "token_accuracy": right / total, "exact_match": exact / len(batch)})
    return rows


def experiment(config: Seq2SeqConfig, per_bucket: int = 1000, *, on_start=None, on_step=None,
               on_done=None) -> tuple[dict, dict[str, Seq2SeqModel]]:
    """Train both models on the same batches and score both on the same held-out buckets.

    Returns ``(result, models)``: ``result`` is JSON-able — the config, and per model its
    parameter count, training time, final loss and ``buckets`` (token accuracy and exact match
    per length bucket).
    """
    sets = held_out(config, per_bucket)
    runs, models = train_each(KINDS, lambda kind: Seq2SeqModel(config, kind), train,
                              lambda model: {"buckets": evaluate(model, sets)},
                              on_start=on_start, on_step=on_step, on_done=on_done)
    for kind, model in models.items():
        model.metrics = runs[kind]
    return {"task": TASK, "config": config.to_dict(), "per_bucket": per_bucket,
            "models": runs}, models


def alignment_example(model: Seq2SeqModel, length: int = 24, index: int = 0):
    """A held-out-style input of ``length`` symbols (generator ``[seed, 0xA11]``), the model's
    output and its weights ``(n_out, n_in)`` — for the heat map."""
    rng = np.random.default_rng([model.config.seed, 0xA11, index])
    src = rng.integers(0, model.config.n_symbols, length)
    out, weights = model.translate(src)
    return src, out, weights
