"""The GPT view: the shipped character-level GPT of :mod:`qkv.tasks.gpt` predicting, generating
and its head roles — every number computed by :mod:`qkv.tasks.gpt_watch`; the page draws them.

A model that cannot be loaded answers 503 (:class:`GPTUnavailable`), naming why; the rest of
the explorer keeps working.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from .errors import InputError
from .shipped import Unavailable, load_once

_loaded: dict[str, object] = {}
TOP = 10  # next-character bars


class GPTUnavailable(Unavailable):
    """The shipped GPT cannot be loaded (HTTP 503)."""


def load():
    """``(model, tokenizer)`` of ``qkv.tasks.gpt.load_pretrained()``, loaded once."""

    def loader():
        from qkv.tasks import gpt

        return gpt.load_pretrained()

    return load_once(_loaded, "model", "the GPT view (its shipped model)", loader, GPTUnavailable)


def _ids(tok, prompt: str, context: int) -> np.ndarray:
    try:
        ids = tok.encode(prompt)
    except ValueError as exc:
        raise InputError(f"prompt: {exc}") from None
    if ids.size == 0:
        raise InputError("prompt: write at least one character")
    if ids.size > context:
        raise InputError(f"prompt: {ids.size} characters, but the model reads at most "
                         f"{context}; shorten it")
    return ids


def predict(prompt: str, temperature: float) -> dict:
    """The prompt's characters, every head's causal weights, the next-character bars and the
    heads' direct pushes on the most likely character."""
    from qkv.tasks import gpt_watch as watch

    model, tok = load()
    ids = _ids(tok, prompt, model.config.block_size)
    seen = watch.look(model, ids, temperature)
    a = watch.logit_attribution(model, ids)
    top = np.argsort(-seen.probs, kind="stable")[:TOP]
    return {
        "chars": [tok.chars[i] for i in ids], "layers": model.config.n_layer,
        "heads": model.config.n_head, "context": model.config.block_size,
        "weights": seen.weights.astype(np.float64).tolist(), "allowed": seen.allowed.tolist(),
        "temperature": temperature,
        "next": {"chars": [tok.chars[i] for i in top],
                 "probs": [float(seen.probs[i]) for i in top]},
        "attribution": {"char": tok.chars[a.char], "logit": a.logit,
                        "heads": a.heads.tolist(), "mlps": float(a.mlps.sum()),
                        "embeddings": a.embeddings,
                        "biases": float(a.attn_bias.sum() + a.ln_bias)},
    }


def generate(prompt: str, steps: int, temperature: float, seed: int) -> dict:
    """``steps`` characters drawn one at a time through the KV cache, with the weights each
    new character's query put on the earlier characters, per layer and head."""
    from qkv.tasks import gpt_watch as watch

    model, tok = load()
    ids = _ids(tok, prompt, model.config.block_size)
    drawn = watch.generate(model, ids, steps, temperature, seed=seed)
    return {"prompt": [tok.chars[i] for i in ids],
            "chars": [tok.chars[s.char] for s in drawn],
            "probs": [float(s.probs[s.char]) for s in drawn],
            "weights": [s.weights.astype(np.float64).tolist() for s in drawn],
            "context": model.config.block_size, "temperature": temperature, "seed": seed}


@lru_cache(maxsize=4)
def roles(n_sequences: int = 32, seed: int = 0) -> dict:
    """Every head's previous-token and induction scores on ``n_sequences`` repeated random
    sequences drawn with ``seed`` (cached: the model is fixed), the sentence saying what they
    show, and the first sequence's weights."""
    from qkv.tasks import gpt_watch as watch

    model, tok = load()
    r = watch.head_roles(model, n_sequences, seed=seed)
    return {"previous_token": r.previous_token.tolist(), "induction": r.induction.tolist(),
            "half": r.half, "n_sequences": r.n_sequences, "sentence": watch.roles_sentence(r),
            "example": [tok.chars[i] for i in r.ids[0]],
            "example_weights": r.example_weights.tolist()}
