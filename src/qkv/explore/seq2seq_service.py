"""The encoder–decoder view: the shipped seq2seq checkpoints of :mod:`qkv.tasks.seq2seq`
(reversing a sequence of symbols), the attention model against the fixed-context-vector model.

Imported lazily: an install without ``qkv.tasks.seq2seq``, its checkpoints or safetensors (which
reads them; the ``[train]`` extra) answers every request 503 with a message saying so and the
command that installs what is missing, and the rest of the explorer keeps working.
"""

from __future__ import annotations

import string
import threading

import numpy as np

from .errors import InputError
from .shipped import Unavailable, load_once

_lock = threading.Lock()
_models: dict[str, object] = {}
LETTERS = string.ascii_lowercase


class Seq2SeqUnavailable(Unavailable):
    """The seq2seq module or its checkpoints are missing (HTTP 503)."""


def load(kind: str):
    """``qkv.tasks.seq2seq.load_pretrained(kind)``, loaded once; Seq2SeqUnavailable if absent."""

    def loader():
        from qkv.tasks import seq2seq

        return seq2seq.load_pretrained(kind)

    return load_once(_models, kind, "the encoder–decoder view (its shipped checkpoints)",
                     loader, Seq2SeqUnavailable)


def symbols_of(text: str, n_symbols: int) -> np.ndarray:
    """"abc" → [0, 1, 2]; InputError for anything outside the model's alphabet."""
    alphabet = LETTERS[:n_symbols]
    bad = sorted({c for c in text if c not in alphabet})
    if bad:
        # each refused character named, then what is allowed, in the learner's words
        named = ", ".join(repr(c) if c.strip() else repr(c).replace("' '", "a space")
                          for c in bad)
        verb = "is not a symbol" if len(bad) == 1 else "are not symbols"
        raise InputError(f"input: {named} {verb} of this model. Type only the lower-case "
                         f"letters {alphabet[0]} to {alphabet[-1]} ({n_symbols} symbols, no "
                         f"spaces), e.g. {alphabet[:8]}")
    return np.array([alphabet.index(c) for c in text], dtype=np.int64)


def decode(text: str) -> dict:
    """Both models' greedy decoding of ``text`` and their weights over the input positions."""
    models = {kind: load(kind) for kind in ("attention", "fixed")}
    n_symbols = models["attention"].config.n_symbols
    tokens = symbols_of(text.strip().lower(), n_symbols)
    if tokens.size == 0:
        raise InputError("input: write at least one symbol")
    max_len = models["attention"].config.max_len
    out = {"input": "".join(LETTERS[t] for t in tokens),
           "expected": "".join(LETTERS[t] for t in tokens[::-1]),
           "trained_lengths": [models["attention"].config.min_len, max_len]}
    for kind, model in models.items():
        symbols, weights = model.translate(tokens)  # (n,), (n, n)
        decoded = "".join(LETTERS[int(t)] for t in symbols)
        correct = int(sum(a == b for a, b in zip(decoded, out["expected"], strict=True)))
        out[kind] = {"output": decoded, "weights": np.asarray(weights, np.float64).tolist(),
                     "correct": correct, "length": int(tokens.size)}
    return out


_curves: dict[int | None, dict] = {}


def curves(per_bucket: int | None = None) -> dict:
    """Token accuracy and exact match by input length of both shipped models, and a
    held-out-style input of the longest trained length (:func:`seq2seq.alignment_example`'s),
    for a one-click look at the bottleneck.

    By default the scores are the ones stored in the shipped checkpoints: the run that trained
    them scored them on its held-out set (``qkv train seq2seq --seed S``, 1,000 sequences per
    bucket) — the same figures view 6 quotes, from the same source. With ``per_bucket`` they
    are scored afresh by :func:`seq2seq.evaluate` on that many held-out sequences per bucket
    (:func:`seq2seq.held_out`), once per process."""
    from qkv.tasks import seq2seq

    models = {kind: load(kind) for kind in ("attention", "fixed")}
    with _lock:
        if per_bucket not in _curves:
            config = models["attention"].config
            src, _, _ = seq2seq.alignment_example(models["attention"], config.max_len)
            if per_bucket is None:
                scores = {kind: [dict(b) for b in model.metrics["buckets"]]
                          for kind, model in models.items()}
                count = scores["attention"][0]["sequences"]
                run = (f"the held-out scores stored in the shipped checkpoints, from the run "
                       f"that trained them (qkv train seq2seq --seed {config.seed})")
            else:
                sets = seq2seq.held_out(config, per_bucket)
                scores = {kind: seq2seq.evaluate(model, sets) for kind, model in models.items()}
                count = per_bucket
                run = (f"scored afresh by seq2seq.evaluate on {per_bucket} held-out inputs per "
                       "bucket")
            _curves[per_bucket] = {
                "per_bucket": count, "run": run,
                "trained_lengths": [config.min_len, config.max_len],
                "d_hidden": config.d_hidden,
                "long_example": "".join(LETTERS[int(t)] for t in src),
                "models": scores}
        return _curves[per_bucket]
