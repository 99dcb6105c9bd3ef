"""A character-level GPT trained by qkv's own layers: GPT-2's architecture, nanoGPT's recipe.

The model (GPT-2, Radford et al. 2019, as nanoGPT writes it), for ids ``(B, N)``::

    x = wte[ids] + wpe[0..N)                                  # (B, N, C) token + position
    x = x + MHA(LN₁(x), causal)  ;  x = x + MLP(LN₂(x))       # × n_layer pre-LN blocks
    logits = LN_f(x) · wteᵀ                                   # (B, N, V) tied output embedding

built from :mod:`qkv.nn` (``Embedding``, ``TransformerBlock`` — whose attention is
:func:`qkv.attention` with ``qkv.causal()`` — ``LayerNorm``, ``Adam``,
``softmax_cross_entropy``), trained on :mod:`qkv.tasks.corpus` one character per token.

Training follows nanoGPT's ``shakespeare_char`` CPU run (4 layers, 4 heads, 128 wide, context
64, batch 12, 2,000 iterations, no dropout): AdamW with β = (0.9, 0.99), weight decay 0.1 on the
matrices and embeddings only, gradients clipped to norm 1, the rate warmed up linearly for 100
steps then cosine-decayed from 1e-3 to 1e-4 by step 2,000; weights N(0, 0.02), the residual
output projections N(0, 0.02/√(2·n_layer)). Two differences, both GPT-2's own architecture so
that the model exports to transformers as is: every Linear and LayerNorm has a bias (nanoGPT's
run has ``bias=False``), and the MLP's GELU is GPT-2's tanh approximation (``gelu_new``;
nanoGPT uses the exact erf form, which costs ~50× more per element in NumPy).

Randomness: initialisation from ``[seed]``, training batches from ``[seed, 1]`` (its state is
saved in each checkpoint, so ``--resume`` continues bit for bit). Each batch is computed in
``shards`` slices on as many threads (:func:`~qkv.tasks.training.sharded_loss`; one per core
the engine may use, ``QKV_NUM_THREADS`` sets it): a run is deterministic for a seed and a shard
count, and the shard count is saved in each checkpoint so that a resumed run keeps it.

The validation loss is :func:`validation_loss`: the mean cross-entropy over the whole
validation text cut into consecutive windows of ``block_size`` characters — no sampling, so it
is one exact figure.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from .. import masks
from ..engine import api as functional
from ..engine.threads import single_threaded_blas
from ..engine.tiles import cpu_workers
from ..nn import (
    Adam,
    Embedding,
    KVCache,
    LayerNorm,
    MultiHeadAttention,
    TransformerBlock,
    merge_heads,
    softmax_cross_entropy,
)
from ..nn._base import Layer, as_rng, check_dtype, matmul_rows, outer_sum, prefixed
from . import checkpoint as ckpt
from .corpus import CharTokenizer, Corpus
from .corpus import load as load_corpus
from .training import clip_grad_norm, cosine_lr, sharded_loss

TASK = "gpt"
PRETRAINED = Path(__file__).with_name("data") / "gpt-shakespeare.safetensors"


@dataclass(frozen=True)
class GPTConfig:
    """The model's shape and its training recipe (defaults: nanoGPT's CPU run)."""

    n_layer: int = 4
    n_head: int = 4
    n_embd: int = 128
    block_size: int = 64  # context length
    vocab_size: int = 78  # the shipped corpus's distinct characters
    batch: int = 12
    steps: int = 2000
    lr: float = 1e-3  # peak; cosine-decayed to lr/10 at decay_steps
    warmup: int = 100
    decay_steps: int = 2000
    weight_decay: float = 0.1
    beta2: float = 0.99
    grad_clip: float = 1.0
    eval_every: int = 250
    eval_windows: int = 240  # the training-time estimates: this many fixed windows per split
    seed: int = 0
    mlp: bool = True  # False: attention-only blocks (Olsson et al. 2022's small models)

    def __post_init__(self):
        for name in ("n_layer", "n_head", "n_embd", "block_size", "vocab_size", "batch",
                     "steps", "decay_steps", "eval_every", "eval_windows"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"GPTConfig: {name} must be a positive int, got {value!r}")
        if isinstance(self.warmup, bool) or not isinstance(self.warmup, int) or not (
                0 <= self.warmup < self.decay_steps):
            raise ValueError(f"GPTConfig: warmup must be an int in [0, decay_steps="
                             f"{self.decay_steps}), got {self.warmup!r}")
        if self.n_embd % self.n_head:
            raise ValueError(f"GPTConfig: n_embd={self.n_embd} must be a multiple of "
                             f"n_head={self.n_head}")
        for name in ("lr", "grad_clip"):
            if not getattr(self, name) > 0:
                raise ValueError(f"GPTConfig: {name} must be > 0, got {getattr(self, name)!r}")
        if not 0 <= self.weight_decay < 1 or not 0 <= self.beta2 < 1:
            raise ValueError(f"GPTConfig: weight_decay and beta2 must lie in [0, 1), got "
                             f"{self.weight_decay!r}, {self.beta2!r}")

    @property
    def d_head(self) -> int:
        return self.n_embd // self.n_head

    def lr_at(self, step: int) -> float:
        """nanoGPT's ``get_lr``: linear warmup over ``warmup`` steps, then a cosine from lr to
        lr/10 over the steps up to ``decay_steps``, then lr/10."""
        if step < self.warmup:
            return self.lr * (step + 1) / (self.warmup + 1)
        return cosine_lr(self.lr, step - self.warmup, self.decay_steps - self.warmup)

    def to_dict(self) -> dict:
        return asdict(self)


class AttentionBlock(Layer):
    """``y = x + MHA(LN₁(x), mask)``: a pre-LN block without its MLP, the block of the
    attention-only models in which Olsson et al. (2022) watched induction heads form. Same
    interface as :class:`qkv.nn.TransformerBlock` (``mlp`` is None; its ctx has the MLP's
    slots empty), so :class:`GPT` and everything that reads it run either kind."""

    mlp = None

    def __init__(self, d_model: int, n_heads: int, rng=None, dtype=np.float32):
        gen = as_rng(rng)
        self.ln1 = LayerNorm(d_model, dtype=dtype)
        self.attn = MultiHeadAttention(d_model, n_heads, rng=gen, dtype=dtype)
        self.params = {**prefixed("ln1", self.ln1.params), **prefixed("attn", self.attn.params)}

    def forward(self, x, mask=None, *, cache=None):
        a, c_ln1 = self.ln1.forward(x)
        att, c_att = self.attn.forward(a, mask=mask, cache=cache)
        return x + att, (None if cache is not None else (c_ln1, c_att, None, None))  # (…, N, C)

    def backward(self, ctx, dy):
        if ctx is None:
            raise ValueError("AttentionBlock.backward: the forward ran with a KV cache "
                             "(inference only)")
        c_ln1, c_att, _, _ = ctx
        (da, _), g_att = self.attn.backward(c_att, dy)
        dx_norm, g_ln1 = self.ln1.backward(c_ln1, da)
        return dy + dx_norm, {**prefixed("ln1", g_ln1), **prefixed("attn", g_att)}


class GPT(Layer):
    """The decoder. ``forward(ids)`` → ``(logits (B, N, V), ctx)``; ``backward(ctx, dlogits)``
    → ``(None, grads)`` with a gradient for every name in ``params``.

    Params: ``wte.weight (V, C)`` (also the output embedding), ``wpe.weight (block_size, C)``,
    ``h.<i>.{ln1,attn,ln2,mlp}.*`` (see :class:`qkv.nn.TransformerBlock`), ``ln_f.*``.
    """

    def __init__(self, config: GPTConfig, rng=None, dtype=np.float32):
        c = self.config = config
        self.dtype = check_dtype(dtype)
        gen = as_rng(c.seed if rng is None else rng)
        self.wte = Embedding(c.vocab_size, c.n_embd, rng=gen, dtype=dtype)
        self.wpe = Embedding(c.block_size, c.n_embd, rng=gen, dtype=dtype)
        self.blocks = [TransformerBlock(c.n_embd, c.n_head, 4 * c.n_embd, rng=gen, dtype=dtype,
                                        activation="gelu_tanh") if c.mlp
                       else AttentionBlock(c.n_embd, c.n_head, rng=gen, dtype=dtype)
                       for _ in range(c.n_layer)]
        self.ln_f = LayerNorm(c.n_embd, dtype=dtype)
        self.params = {**prefixed("wte", self.wte.params), **prefixed("wpe", self.wpe.params)}
        for i, block in enumerate(self.blocks):
            self.params.update(prefixed(f"h.{i}", block.params))
        self.params.update(prefixed("ln_f", self.ln_f.params))
        # nanoGPT's initialisation: N(0, 0.02) matrices, N(0, 0.02/√(2L)) for the projections
        # that write into the residual stream, zero biases, LayerNorm (1, 0).
        for name, p in self.params.items():
            if p.ndim == 2:
                std = 0.02 / math.sqrt(2 * c.n_layer) if name.endswith(
                    ("attn.w_o", "mlp.fc2.weight")) else 0.02
                p[...] = gen.normal(0.0, std, p.shape)

    @classmethod
    def pinned_shapes(cls, config: GPTConfig) -> dict[str, tuple[int, ...]]:
        """Every parameter's shape for ``config`` (to check a checkpoint's header)."""
        c, C = config, config.n_embd
        shapes = {"wte.weight": (c.vocab_size, C), "wpe.weight": (c.block_size, C)}
        for i in range(c.n_layer):
            shapes[f"h.{i}.attn.w_q"] = (C, C)
            if c.mlp:
                shapes[f"h.{i}.mlp.fc1.weight"] = (C, 4 * C)
        return shapes

    def _check_ids(self, ids, start: int = 0) -> np.ndarray:
        ids = np.asarray(ids)
        if ids.ndim != 2:
            raise ValueError(f"GPT: ids must have shape (B, N), got {ids.shape}")
        if start + ids.shape[1] > self.config.block_size:
            raise ValueError(f"GPT: {start + ids.shape[1]} positions exceed the context of "
                             f"{self.config.block_size} characters; give at most "
                             f"{self.config.block_size}")
        return ids

    def embed(self, ids, start: int = 0) -> tuple[np.ndarray, np.ndarray]:
        """``(x (B, N, C), ids)``: token plus position embeddings of positions start..start+N."""
        ids = self._check_ids(ids, start)
        tok, ids = self.wte.forward(ids)  # (B, N, C)
        return tok + self.params["wpe.weight"][start: start + ids.shape[1]], ids

    def unembed(self, x) -> tuple[np.ndarray, tuple]:
        """Final LayerNorm and the tied output embedding: ``(logits (…, V), ctx)``."""
        h, c_ln = self.ln_f.forward(x)  # (B, N, C)
        return matmul_rows(h, self.params["wte.weight"].T), (h, c_ln)  # (B, N, V)

    def forward(self, ids):
        x, ids = self.embed(ids)
        causal = masks.causal()
        ctxs = []
        for block in self.blocks:
            x, c = block.forward(x, mask=causal)  # (B, N, C)
            ctxs.append(c)
        logits, c_out = self.unembed(x)
        return logits, (ids, ctxs, c_out)

    # -- hook points: read or replace what a component writes (TransformerLens' idea) --------
    def hook_points(self) -> list[str]:
        """The names :meth:`run_with_hooks` accepts, in the order they run. For block i:

        - ``h.i.attn.z`` ``(B, H, N, d_head)``: each head's output, Σ_j w_ij v_j, before W_O
          (TransformerLens' ``hook_z``); zeroing head h's slice switches that head off;
        - ``h.i.attn.out`` ``(B, N, C)``: the attention sublayer's output, W_O and its bias
          applied, as it is added to the residual stream (``hook_attn_out``);
        - ``h.i.mlp.out`` ``(B, N, C)``: the MLP's output (models with MLPs only).
        """
        names = []
        for i in range(self.config.n_layer):
            names += [f"h.{i}.attn.z", f"h.{i}.attn.out"]
            if self.config.mlp:
                names.append(f"h.{i}.mlp.out")
        return names

    def run_with_hooks(self, ids, hooks: dict[str, Callable[[np.ndarray], np.ndarray]]
                       ) -> np.ndarray:
        """Logits ``(B, N, V)`` of ids ``(B, N)``, with each hook ``fn(activation) →
        activation`` applied where its name (:meth:`hook_points`) is computed; its result (same
        shape) is what the model uses from there on. An ablation is one such hook. The same
        operations as :meth:`forward` in the same order, so ``hooks={}`` gives its logits bit
        for bit (tests/test_gpt_watch.py)."""
        known = set(self.hook_points())
        unknown = sorted(set(hooks) - known)
        if unknown:
            raise ValueError(f"run_with_hooks: unknown hook point(s) {unknown}; this model's "
                             f"are {self.hook_points()}")

        def at(name: str, value: np.ndarray) -> np.ndarray:
            if name not in hooks:
                return value
            new = np.asarray(hooks[name](value))
            if new.shape != value.shape:
                raise ValueError(f"run_with_hooks: the hook at {name!r} returned shape "
                                 f"{new.shape}; it must keep {value.shape}")
            return new.astype(value.dtype, copy=False)

        x, _ = self.embed(ids)  # (B, N, C)
        causal = masks.causal()
        for i, block in enumerate(self.blocks):
            attn = block.attn
            q, k, v = attn.project(block.ln1(x))  # (B, H, N, d_head) each
            z = functional.attention(q, k, v, mask=causal, scale=attn.scale)  # (B, H, N, d)
            z = at(f"h.{i}.attn.z", z)
            out = matmul_rows(merge_heads(z), attn.params["w_o"])  # (B, N, C)
            if attn.has_bias:
                out += attn.params["b_o"]
            x = x + at(f"h.{i}.attn.out", out)
            if block.mlp is not None:
                x = x + at(f"h.{i}.mlp.out", block.mlp(block.ln2(x)))
        return self.unembed(x)[0]

    def backward(self, ctx, dlogits):
        ids, ctxs, (h, c_ln) = ctx
        wte = self.params["wte.weight"]
        dlogits = np.asarray(dlogits, dtype=h.dtype)
        d_wte_out = outer_sum(dlogits, h)  # (V, C) = Σ dlogitsᵀ h: logits = h wteᵀ
        dx, g_ln = self.ln_f.backward(c_ln, matmul_rows(dlogits, wte))  # (B, N, C)
        grads = prefixed("ln_f", g_ln)
        for i in reversed(range(len(self.blocks))):
            dx, g = self.blocks[i].backward(ctxs[i], dx)
            grads.update(prefixed(f"h.{i}", g))
        _, g_tok = self.wte.backward(ids, dx)
        grads["wte.weight"] = (g_tok["weight"] + d_wte_out).astype(self.dtype, copy=False)
        d_pos = np.zeros_like(self.params["wpe.weight"])
        d_pos[: dx.shape[-2]] = dx.reshape(-1, *dx.shape[-2:]).sum(axis=0)
        grads["wpe.weight"] = d_pos
        return None, {name: grads[name] for name in self.params}

    def loss(self, ids, targets) -> tuple[float, dict[str, np.ndarray]]:
        """Mean next-character cross-entropy of ``ids (B, N)`` against ``targets (B, N)``, and
        every parameter's gradient."""
        logits, ctx = self.forward(ids)
        loss, dlogits = softmax_cross_entropy(logits, targets)
        return loss, self.backward(ctx, dlogits)[1]

    # -- decoding through the KV cache ------------------------------------------------------
    def new_cache(self) -> KVCache:
        return KVCache(self.config.n_layer)

    def step(self, ids, cache: KVCache) -> np.ndarray:
        """Logits ``(B, n_new, V)`` for ``ids (B, n_new)`` appended after the ``cache.length``
        positions already in ``cache``: each layer projects only the new positions and their
        queries read the cached keys, O(n·d) per new position."""
        x, _ = self.embed(ids, start=cache.length)
        causal = masks.causal()  # aligns bottom-right: new query i sees every cached key
        for i, block in enumerate(self.blocks):
            x, _ = block.forward(x, mask=causal, cache=cache[i])
        return self.unembed(x)[0]

    def __repr__(self):
        c = self.config
        return (f"GPT(n_layer={c.n_layer}, n_head={c.n_head}, n_embd={c.n_embd}, "
                f"block_size={c.block_size}, vocab_size={c.vocab_size}, "
                f"{self.num_params:,} parameters)")


# -- data -------------------------------------------------------------------------------------
def get_batch(data: np.ndarray, rng: np.random.Generator, batch: int, block: int):
    """nanoGPT's ``get_batch``: ``batch`` windows at random offsets; ``(x, y)`` each
    ``(batch, block)``, y the next character of x."""
    starts = rng.integers(0, len(data) - block, batch)
    rows = starts[:, None] + np.arange(block)  # (B, T)
    return data[rows], data[rows + 1]


def windows(data: np.ndarray, block: int, limit: int | None = None):
    """Consecutive non-overlapping windows of ``data``: ``(x, y)`` each ``(n, block)``
    (the first ``limit`` windows, if given)."""
    n = (len(data) - 1) // block
    if limit is not None:
        n = min(n, limit)
    return data[: n * block].reshape(n, block), data[1: n * block + 1].reshape(n, block)


def mean_loss(model: GPT, x: np.ndarray, y: np.ndarray, chunk: int = 256) -> float:
    """Mean next-character cross-entropy over the windows ``x, y (n, block)``."""
    total = 0.0
    for i in range(0, len(x), chunk):
        logits = model(x[i: i + chunk])  # (b, T, V)
        loss, _ = softmax_cross_entropy(logits.astype(np.float64), y[i: i + chunk])
        total += loss * y[i: i + chunk].size
    return total / y.size


def validation_loss(model: GPT, corpus: Corpus | None = None) -> float:
    """The documented figure: the mean cross-entropy (nats per character) over the whole
    validation text, in consecutive windows of the model's context."""
    corpus = load_corpus() if corpus is None else corpus
    with single_threaded_blas():
        return mean_loss(model, *windows(corpus.val, model.config.block_size))


# -- a training run ---------------------------------------------------------------------------
@dataclass
class GPTRun:
    """A model, its two AdamW groups (decayed: matrices and embeddings; not: biases and
    LayerNorms), its batch stream and its history."""

    config: GPTConfig
    model: GPT
    opts: tuple[Adam, Adam]
    rng: np.random.Generator
    step: int = 0
    elapsed: float = 0.0  # training seconds across resumes
    history: list[dict] = field(default_factory=list)  # {"step", "train", "val", "elapsed"}
    # the batch's rows are split into this many shards computed on as many threads
    # (training.sharded_loss): one per core the engine may use, at most one per row
    shards: int = 0

    def __post_init__(self):
        if not self.shards:
            self.shards = min(cpu_workers(), self.config.batch)

    @classmethod
    def fresh(cls, config: GPTConfig) -> GPTRun:
        model = GPT(config)
        betas = (0.9, config.beta2)
        decay = {n: p for n, p in model.params.items() if p.ndim >= 2}
        rest = {n: p for n, p in model.params.items() if p.ndim < 2}
        opts = (Adam(decay, lr=config.lr, betas=betas, weight_decay=config.weight_decay),
                Adam(rest, lr=config.lr, betas=betas))
        return cls(config, model, opts, np.random.default_rng([config.seed, 1]))

    # -- checkpoints ------------------------------------------------------------------------
    def _state(self, weights_only: bool = False) -> dict[str, np.ndarray]:
        tensors = {f"model.{n}": a for n, a in self.model.params.items()}
        if weights_only:
            return tensors
        for tag, opt in zip(("decay", "rest"), self.opts, strict=True):
            tensors.update({f"adam.{tag}.{n}": a for n, a in opt.state_dict().items()})
        return tensors

    def save(self, path, chars: str, *, weights_only: bool = False) -> None:
        """Write the run to ``path``; ``weights_only`` leaves out Adam's moments (a quarter of
        the size, for shipping a model; such a file loads but cannot be resumed)."""
        ckpt.save(path, self._state(weights_only), {
            "task": TASK, "config": self.config.to_dict(), "chars": chars, "step": self.step,
            "rng": self.rng.bit_generator.state, "elapsed": self.elapsed,
            "history": self.history, "weights_only": weights_only, "shards": self.shards,
        })

    @classmethod
    def load(cls, path, *, resume: bool = True) -> tuple[GPTRun, CharTokenizer]:
        """The run saved at ``path`` and its tokenizer; a one-line
        :class:`~qkv.tasks.checkpoint.CheckpointError` naming the file for anything truncated,
        edited, out of range or inconsistent. ``resume=False`` also accepts a weights-only
        file (its optimiser state is then fresh)."""
        tensors, meta = ckpt.load(path, check=_check_header)
        with ckpt.reading(path):
            weights_only = meta.get("weights_only", False) is True
            if weights_only and resume:
                raise ckpt.CheckpointError("holds the weights only (no Adam state), so it "
                                           "cannot be resumed; train a new run instead")
            run = cls.fresh(ckpt.config_from(GPTConfig, meta["config"]))
            ckpt.expect_tensors(tensors, run._state(weights_only))
            for name, p in run.model.params.items():
                p[...] = tensors[f"model.{name}"]
            opts = () if weights_only else zip(("decay", "rest"), run.opts, strict=True)
            for tag, opt in opts:
                ckpt.load_optimizer(opt, tensors, f"adam.{tag}.", meta["step"])
            ckpt.restore_rng(run.rng, meta["rng"])
            tok = CharTokenizer(meta["chars"])
        run.step, run.elapsed, run.history = meta["step"], meta["elapsed"], meta["history"]
        run.shards = meta.get("shards", 1)  # a resumed run keeps its shards: bit for bit
        return run, tok

    # -- training ---------------------------------------------------------------------------
    def batch(self, data: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The next training batch ``(x, y)`` each ``(batch, block_size)``, drawn from
        ``self.rng`` (a run on other data overrides this; see :mod:`qkv.tasks.induction`)."""
        return get_batch(data, self.rng, self.config.batch, self.config.block_size)

    def train_step(self, data: np.ndarray) -> float:
        """One AdamW step on a fresh batch of ``data``; returns the batch's loss."""
        c = self.config
        x, y = self.batch(data)
        loss, grads = sharded_loss(self.model.loss, x, y, self.shards)
        clip_grad_norm(grads, c.grad_clip)
        lr = c.lr_at(self.step)
        for opt in self.opts:
            opt.lr = lr
            opt.step({n: grads[n] for n in opt.params})
        self.step += 1
        return loss

    def evaluate(self, corpus: Corpus) -> dict:
        """Loss on the first ``eval_windows`` consecutive windows of each split (a fixed set,
        so the curve is not sampling noise); appended to ``history``."""
        c = self.config
        row = {"step": self.step,
               "train": round(mean_loss(self.model, *windows(corpus.train, c.block_size,
                                                             c.eval_windows)), 5),
               "val": round(mean_loss(self.model, *windows(corpus.val, c.block_size,
                                                           c.eval_windows)), 5),
               "elapsed": round(self.elapsed, 3)}
        self.history.append(row)
        return row

    def train(self, steps: int, corpus: Corpus, *, checkpoint=None,
              on_step: Callable[[GPTRun, float], None] | None = None,
              on_eval: Callable[[GPTRun, dict], None] | None = None) -> dict:
        """Train until ``self.step == steps``; evaluate (and checkpoint) every ``eval_every``
        steps and at the end. The BLAS is held to one thread: these matrices are small."""
        chars = corpus.tokenizer.chars
        last = self.history[-1] if self.history else None
        with single_threaded_blas():
            while self.step < steps:
                t0 = time.perf_counter()
                loss = self.train_step(corpus.train)
                self.elapsed += time.perf_counter() - t0
                if on_step:
                    on_step(self, loss)
                if self.step % self.config.eval_every == 0 or self.step == steps:
                    last = self._checkpoint(corpus, checkpoint, chars, on_eval)
            if last is None or last["step"] != self.step:
                last = self._checkpoint(corpus, checkpoint, chars, on_eval)
        return last

    def _checkpoint(self, corpus, checkpoint, chars, on_eval) -> dict:
        row = self.evaluate(corpus)
        if checkpoint is not None:
            self.save(checkpoint, chars)
        if on_eval:
            on_eval(self, row)
        return row


def _check_header(meta: dict, shapes: ckpt.Shapes) -> None:
    """A GPT checkpoint's metadata, checked on the header alone (before any tensor is read)."""
    if meta.get("task") != TASK:
        raise ckpt.CheckpointError(f"a checkpoint of task {meta.get('task')!r}, not {TASK!r}")
    for key in ("config", "chars", "step", "rng", "elapsed", "history"):
        if key not in meta:
            raise ckpt.CheckpointError(f"metadata {key!r} is missing")
    config = ckpt.config_from(GPTConfig, meta["config"])
    ckpt.expect_shapes(shapes, {f"model.{n}": s for n, s in GPT.pinned_shapes(config).items()},
                       "config")
    chars = meta["chars"]
    if (not isinstance(chars, str) or len(chars) != config.vocab_size
            or len(set(chars)) != len(chars)):
        raise ckpt.CheckpointError(f"chars must be {config.vocab_size} distinct characters")
    ckpt.check_progress(meta, ("train", "val"))
    shards = meta.get("shards", 1)  # files written before sharding ran unsharded
    if isinstance(shards, bool) or not isinstance(shards, int) or not 1 <= shards <= config.batch:
        raise ckpt.CheckpointError(f"shards must be an int in [1, batch={config.batch}], got "
                                   f"{shards!r}")


def load(path) -> tuple[GPT, CharTokenizer, dict]:
    """The model, tokenizer and metadata (step, history, …) of a GPT checkpoint."""
    run, tok = GPTRun.load(path, resume=False)
    return run.model, tok, {"step": run.step, "history": run.history, "elapsed": run.elapsed}


def load_pretrained() -> tuple[GPT, CharTokenizer]:
    """The shipped model: nanoGPT's CPU configuration trained by qkv on the shipped corpus
    (``qkv train gpt --seed 0``; its figures are in docs/gpt.md)."""
    model, tok, _ = load(PRETRAINED)
    return model, tok
