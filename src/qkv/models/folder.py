"""Any local Hugging Face transformers model folder, for the views (``qkv look``, the explorer).

    model = TransformersFolder.load("path/to/folder")   # config.json, weights, tokenizer files
    tokens, weights, allowed = model.attention_map("The cat sat on the mat")
    # weights (layers, heads, n, n) float64; allowed (layers, heads, n, n) bool, or None
    tokens, trace = model.head_trace("The cat sat on the mat", layer=1, head=2, token=4)

The model runs in transformers with ``attn_implementation="qkv"``
(:mod:`qkv.integrations.transformers`), so every attention call of every layer is computed by
qkv's kernel; ``record()`` collects the weights of each layer and ``capture()`` the inputs of
one layer (q after its position encoding, k, v, the mask and the scale), from which the neuron
view is ``qkv.explain`` of one query row. A causal model's future keys are masked pairs
(``allowed`` False), never weights of 0. This is the same small surface :class:`MiniLM` gives
the views (``config.n_layers``, ``config.n_heads``, ``attentions``, ``head_inputs``,
``head_trace``), plus the mask.

Every load failure — no folder, no config.json, an architecture transformers does not know or
whose attention does not go through its attention interface, an encoder–decoder, no tokenizer —
is a :class:`qkv.models.ModelFilesError` whose message names the folder and the problem in one
line. A missing transformers/torch is an ImportError with the install hint.
"""

from __future__ import annotations

import contextlib
import json
import operator
import threading
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .files import ModelFilesError

__all__ = ["AttentionMap", "FolderConfig", "TransformersFolder", "attention_map", "load_model",
           "looks_like_minilm"]

# Files one of which a tokenizer needs (fast tokenizer, sentencepiece, WordPiece, BPE).
TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "spiece.model", "vocab.txt",
                   "vocab.json", "sentencepiece.bpe.model")
MAX_TOKENS = 512  # a view of n × n weights per head; longer texts are refused, not truncated


@dataclass(frozen=True)
class FolderConfig:
    """What the views need to know of the model: its sizes and its kind."""

    n_layers: int
    n_heads: int
    n_kv_heads: int
    model_type: str
    architecture: str  # the transformers class that runs it, e.g. "GPT2Model"


@dataclass(frozen=True)
class AttentionMap:
    """One text through the model: ``tokens`` (n labels), ``weights (L, H, n, n)`` float64 and
    ``allowed (L, H, n, n)`` bool (True = may attend), None when no pair is masked."""

    tokens: list[str]
    weights: np.ndarray
    allowed: np.ndarray | None


def _fail(folder: Path, problem: str) -> ModelFilesError:
    return ModelFilesError(f"model folder {folder}: {problem}", folder)


def read_folder_config(folder: str | Path) -> tuple[Path, dict]:
    """The resolved folder and its config.json, checked without loading any weights."""
    folder = Path(folder).expanduser().resolve()
    if not folder.is_dir():
        from .files import INSTALL

        raise _fail(folder, "does not exist or is not a folder; pass a local folder with "
                    "config.json, weights and tokenizer files (as save_pretrained writes), or "
                    f"leave --model out for MiniLM (installed with: {INSTALL})")
    path = folder / "config.json"
    if not path.is_file():
        raise _fail(folder, "has no config.json, so it is not a transformers model folder")
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise _fail(folder, f"config.json is not valid JSON ({exc})") from None
    if not isinstance(config, dict) or not isinstance(config.get("model_type"), str):
        raise _fail(folder, "config.json has no \"model_type\", so transformers cannot tell "
                    "which architecture it is")
    return folder, config


def looks_like_minilm(folder: str | Path) -> bool:
    """True for a BERT folder that qkv's own :class:`MiniLM` reads (no torch needed)."""
    try:
        folder, config = read_folder_config(folder)
    except ModelFilesError:
        return False
    return (config.get("model_type") == "bert" and (folder / "tokenizer.json").is_file()
            and (folder / "model.safetensors").is_file())


def _check_index(name: str, value, size: int, where: str = "") -> int:
    try:
        index = operator.index(value)
    except TypeError:
        raise TypeError(f"{name} must be an int in [0, {size}), got {value!r}") from None
    if isinstance(value, bool) or not 0 <= index < size:
        raise ValueError(f"{name} must lie in [0, {size}){where}, got {value!r}")
    return index


class TransformersFolder:
    """A transformers model from a local folder, its attention computed by qkv. Build it with
    :meth:`load`; it holds no per-call state (calls may run concurrently)."""

    def __init__(self, folder: Path, model, tokenizer, config: FolderConfig):
        self.folder, self.model, self.tokenizer, self.config = folder, model, tokenizer, config
        # A fast tokenizer resets its Rust-side truncation/padding state on every call, which
        # fails with "Already borrowed" when two threads (the explorer's requests) call it.
        self._tokenizer_lock = threading.Lock()

    @property
    def name(self) -> str:
        """e.g. "tiny-gpt2 (GPT2Model)"; a folder called "model" is named with its parent."""
        label = self.folder.name
        if label.lower() == "model" and self.folder.parent.name:
            label = f"{self.folder.parent.name}/{label}"
        return f"{label} ({self.config.architecture})"

    @classmethod
    def load(cls, path: str | Path) -> TransformersFolder:
        """Load ``path`` (config.json, safetensors or bin weights, tokenizer files) in float32
        with ``attn_implementation="qkv"``, and check one forward pass goes through qkv."""
        folder, raw = read_folder_config(path)
        if raw.get("is_encoder_decoder"):
            raise _fail(folder, f"{raw['model_type']} is an encoder–decoder model; qkv look "
                        "shows encoders and decoder-only models (BERT, GPT-2, Llama, …)")
        if not any((folder / name).is_file() for name in TOKENIZER_FILES):
            raise _fail(folder, "has no tokenizer files (one of " + ", ".join(TOKENIZER_FILES)
                        + "); save the tokenizer beside the model with "
                        "tokenizer.save_pretrained(folder)")
        # ImportError with the install hint when transformers or torch is missing.
        from ..integrations import transformers as qt

        with _quiet():
            return cls._load(folder, qt)

    @classmethod
    def _load(cls, folder: Path, qt) -> TransformersFolder:
        import torch
        import transformers

        try:
            hf_config = transformers.AutoConfig.from_pretrained(folder, local_files_only=True)
        except (ValueError, KeyError, OSError) as exc:
            raise _fail(folder, f"transformers cannot read its config.json: {_first_line(exc)}") \
                from None
        try:
            tokenizer = transformers.AutoTokenizer.from_pretrained(folder, local_files_only=True)
        except Exception as exc:  # transformers raises many kinds here
            raise _fail(folder, f"its tokenizer cannot be loaded: {_first_line(exc)}") from None
        try:
            model = transformers.AutoModel.from_pretrained(
                folder, attn_implementation=qt.NAME, dtype=torch.float32, local_files_only=True)
        except (ValueError, OSError, KeyError, RuntimeError, TypeError, ImportError) as exc:
            raise _fail(folder, f"transformers cannot load it with qkv's attention "
                        f"(attn_implementation='qkv'): {_first_line(exc)}") from None
        model.eval()
        text = hf_config.get_text_config() if hasattr(hf_config, "get_text_config") else hf_config
        n_layers = getattr(text, "num_hidden_layers", None)
        n_heads = getattr(text, "num_attention_heads", None)
        if not isinstance(n_layers, int) or not isinstance(n_heads, int):
            raise _fail(folder, "its config has no num_hidden_layers / num_attention_heads")
        n_kv = getattr(text, "num_key_value_heads", None) or n_heads
        config = FolderConfig(n_layers, n_heads, int(n_kv), hf_config.model_type,
                              type(model).__name__)
        self = cls(folder, model, tokenizer, config)
        self._check_runs_on_qkv()
        return self

    def _check_runs_on_qkv(self) -> None:
        """One short forward pass: every layer's attention must have gone through qkv."""
        from ..integrations import transformers as qt

        ids = self._ids("a")
        with qt.capture() as cap:
            self._forward(ids)
        missing = [i for i in range(self.config.n_layers) if i not in cap.calls]
        if missing:
            raise _fail(self.folder, f"{self.config.architecture}'s attention does not run "
                        f"through transformers' attention interface (layers {missing} never "
                        "called qkv), so qkv cannot compute or show its weights")

    # -- running it ---------------------------------------------------------------------------
    def _ids(self, sentence: str):
        if not isinstance(sentence, str):
            raise TypeError(f"sentence must be a str, got {type(sentence).__name__}")
        with self._tokenizer_lock:
            ids = self.tokenizer(sentence, return_tensors="pt")["input_ids"]  # (1, n)
        if ids.shape[1] == 0:
            raise ValueError("sentence gives no tokens; write some text")
        if ids.shape[1] > MAX_TOKENS:
            raise ValueError(f"sentence has {ids.shape[1]} tokens; qkv's views show at most "
                             f"{MAX_TOKENS}: shorten it")
        return ids

    def _forward(self, ids) -> None:
        import torch

        try:
            with torch.no_grad():
                self.model(input_ids=ids)
        except (ValueError, TypeError, RuntimeError) as exc:
            raise _fail(self.folder, f"{self.config.architecture} cannot run on qkv: "
                        f"{_first_line(exc)}") from None

    def tokens(self, sentence: str) -> list[str]:
        """The text's tokens as a person reads them (BPE's "Ġ"/"▁" turned back into text)."""
        return self._labels(self._ids(sentence)[0].tolist())

    def _labels(self, ids: list[int]) -> list[str]:
        labels = []
        with self._tokenizer_lock:
            for token in self.tokenizer.convert_ids_to_tokens(ids):
                text = self.tokenizer.convert_tokens_to_string([token]).strip()
                labels.append(text or token)
        return labels

    def attention_map(self, sentence: str) -> AttentionMap:
        """Every layer's and head's weights for ``sentence``, computed by qkv (``record()``),
        and the pairs its masks allow (``capture()``: the masks each layer ran with)."""
        from ..integrations import transformers as qt

        ids = self._ids(sentence)
        with qt.record() as rec, qt.capture() as cap:
            self._forward(ids)
        weights, allowed = [], []
        for layer in range(self.config.n_layers):
            weights.append(rec.weights[layer][0][0])  # (H, n, n): batch 0 of the one call
            allowed.append(qt.allowed_pairs(cap.calls[layer][0])[0])  # (H, n, n)
        allowed = np.stack(allowed)  # (L, H, n, n)
        return AttentionMap(self._labels(ids[0].tolist()),
                            np.stack(weights).astype(np.float64),
                            None if allowed.all() else allowed)

    def attentions(self, sentence: str) -> tuple[list[str], np.ndarray]:
        """Tokens and weights ``(n_layers, n_heads, n, n)``, as :meth:`MiniLM.attentions`."""
        result = self.attention_map(sentence)
        return result.tokens, result.weights

    def head_inputs(self, sentence: str, layer: int):
        """``(tokens, call)``: what ``layer``'s attention received (a
        :class:`qkv.integrations.transformers.Call`: q, k, v, mask, scale)."""
        from ..integrations import transformers as qt

        layer = _check_index("layer", layer, self.config.n_layers)
        ids = self._ids(sentence)
        with qt.capture(layers=[layer]) as cap:
            self._forward(ids)
        return self._labels(ids[0].tolist()), cap.calls[layer][0]

    def head_trace(self, sentence: str, layer: int, head: int, token: int, *, inputs=None):
        """``(tokens, trace)``: ``qkv.explain`` of query ``token`` in ``head`` of ``layer`` —
        its query (after the position encoding), every key and value of the kv head it reads
        (GQA), the scores, the mask's row (future keys of a causal model are masked) and the
        weights. ``inputs``: what :meth:`head_inputs` returned, if the caller kept it."""
        import qkv

        from ..integrations import transformers as qt

        c = self.config
        layer = _check_index("layer", layer, c.n_layers)
        head = _check_index("head", head, c.n_heads)
        tokens, call = inputs or self.head_inputs(sentence, layer)
        token = _check_index("token", token, len(tokens),
                             f" (the sentence has {len(tokens)} tokens)")
        group = call.q.shape[1] // call.k.shape[1]  # query heads per kv head (GQA)
        q = call.q[0, head, [token]].astype(np.float64)  # (1, D)
        k = call.k[0, head // group].astype(np.float64)  # (n, D)
        v = call.v[0, head // group].astype(np.float64)  # (n, D)
        row = qt.allowed_pairs(call)[0, head, [token]]  # (1, n)
        mask = None if row.all() else qkv.allow(row)
        bias = None
        if call.bias is not None:
            bias = np.broadcast_to(call.bias, (*call.q.shape[:2], *call.bias.shape[-2:]))
            bias = bias[0, head, [token]].astype(np.float64)  # (1, n)
        return tokens, qkv.explain(q, k, v, mask, bias, call.scale)

    def __repr__(self) -> str:
        c = self.config
        return (f"TransformersFolder({c.architecture}, layers={c.n_layers}, heads={c.n_heads}, "
                f"kv_heads={c.n_kv_heads}, folder={str(self.folder)!r})")


@contextlib.contextmanager
def _quiet():
    """transformers' load reports and progress bars off while loading (errors still raise)."""
    from transformers.utils import logging

    verbosity, bars = logging.get_verbosity(), logging.is_progress_bar_enabled()
    logging.set_verbosity_error()
    logging.disable_progress_bar()
    try:
        yield
    finally:
        logging.set_verbosity(verbosity)
        if bars:
            logging.enable_progress_bar()


def load_model(folder: str | Path | None = None, hf: bool = False):
    """``(model, name)`` for the views' ``--model FOLDER`` / ``--hf``.

    No folder: qkv's own :class:`MiniLM` from the installed wheel. A MiniLM-style BERT folder:
    the same, read from that folder (no torch needed). Any other folder, or ``hf=True``:
    :class:`TransformersFolder` (the wheel's folder when no folder is given). Raises
    ModelFilesError (a bad folder) or ImportError (transformers missing: the install hint).
    """
    from .minilm import MiniLM

    if hf or (folder is not None and not looks_like_minilm(folder)):
        if folder is None:
            from .files import wheel_folder

            folder = wheel_folder()[0]
        model = TransformersFolder.load(folder)
        return model, model.name
    try:
        return MiniLM.load(folder), "all-MiniLM-L6-v2"
    except ModelFilesError as exc:
        if folder is None:
            raise
        raise ModelFilesError(f"{exc} (qkv's own BERT encoder could not read this folder; "
                              "--hf runs it through transformers instead)", exc.path) from None


def attention_map(model, sentence: str) -> AttentionMap:
    """:meth:`TransformersFolder.attention_map` for either kind of model (MiniLM masks nothing
    in one sentence, so its ``allowed`` is None)."""
    if isinstance(model, TransformersFolder):
        return model.attention_map(sentence)
    tokens, weights = model.attentions(sentence)  # (L, H, n, n)
    return AttentionMap([str(t) for t in tokens], np.asarray(weights, dtype=np.float64), None)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0]
