"""The GPT view: the shipped character-level GPT of :mod:`qkv.tasks.gpt` predicting, generating,
its heads switched off, its head roles, and the attention-only model of
:mod:`qkv.tasks.induction` growing an induction head — every number computed by
:mod:`qkv.tasks.gpt_watch`; the page draws them.

A model that cannot be loaded answers 503 (:class:`GPTUnavailable`), naming why; the rest of
the explorer keeps working.
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np

from .errors import InputError
from .shipped import Unavailable, load_once

_loaded: dict[str, object] = {}
TOP = 10  # next-character bars
MEAN_WINDOWS = 40  # the mean-ablation reference set: this many validation windows
CANDIDATES, CANDIDATE_LENGTH = 96, 32  # the search for the prompt where each head matters most


class GPTUnavailable(Unavailable):
    """The shipped GPT cannot be loaded (HTTP 503)."""


def load():
    """``(model, tokenizer)`` of ``qkv.tasks.gpt.load_pretrained()``, loaded once."""

    def loader():
        from qkv.tasks import gpt

        return gpt.load_pretrained()

    return load_once(_loaded, "model", "the GPT view (its shipped model)", loader, GPTUnavailable)


def load_induction():
    """``(model, tokenizer, meta)`` of ``qkv.tasks.induction.load_pretrained()``, loaded once."""

    def loader():
        from qkv.tasks import induction

        if not induction.PRETRAINED.exists():
            raise OSError(f"{induction.PRETRAINED} is missing; reinstall qkv, or rebuild it "
                          f"with: {induction.COMMAND}")
        return induction.load_pretrained()

    return load_once(_loaded, "induction", "the induction model", loader, GPTUnavailable)


# characters that print as blank (or not at all), named so that a tab never reads as a space
_INVISIBLE = {"\t": "a tab (⇥)", "\r": "a carriage return", "\u00a0": "a no-break space",
              "\u200b": "a zero-width space", "\ufeff": "a byte-order mark"}


def _named(c: str) -> str:
    """“x” for a character that shows itself; words (a tab) or its code point otherwise."""
    if c in _INVISIBLE:
        return _INVISIBLE[c]
    if not c.isprintable() or c.isspace():
        return f"the invisible character U+{ord(c):04X}"
    return f"“{c}”"


def _ids(tok, prompt: str, context: int) -> np.ndarray:
    unknown = sorted(set(prompt) - set(tok.chars))
    if unknown:
        shown = ", ".join(_named(c) for c in unknown[:5])
        raise InputError(f"prompt: it has characters the model never saw ({shown}); use the "
                         "letters, digits, punctuation, spaces and newlines of the Shakespeare "
                         "text it learned from")
    ids = tok.encode(prompt)
    if ids.size == 0:
        raise InputError("prompt: write at least one character")
    if ids.size > context:
        raise InputError(f"prompt: {ids.size} characters, but the model reads at most "
                         f"{context}; shorten it")
    return ids


def _finite(a) -> list | float | None:
    """An array (or number) as JSON: NaN (a mean over nothing) becomes null."""
    if np.ndim(a) == 0:
        return None if not math.isfinite(float(a)) else float(a)
    return [_finite(x) for x in a]


@lru_cache(maxsize=1)
def _validation():
    from qkv.tasks.corpus import load as load_corpus

    return load_corpus().val


@lru_cache(maxsize=1)
def means() -> dict:
    """Every head's and layer's mean output over MEAN_WINDOWS validation windows."""
    from qkv.tasks import gpt_watch as watch
    from qkv.tasks.gpt import windows

    model, _ = load()
    x, _ = windows(_validation(), model.config.block_size, MEAN_WINDOWS)
    return watch.mean_activations(model, x)


@lru_cache(maxsize=64)
def _effects(prompt: str, kind: str):
    from qkv.tasks import gpt_watch as watch

    model, tok = load()
    ids = _ids(tok, prompt, model.config.block_size)
    return watch.head_effects(model, ids, kind=kind, means=means() if kind == "mean" else None)


def _switch(model, layer: int, head: int | None, kind: str):
    """An :class:`~qkv.tasks.gpt_watch.Ablation`, or a 422 in the learner's words."""
    from qkv.tasks import gpt_watch as watch

    c = model.config
    if not 0 <= layer < c.n_layer or (head is not None and not 0 <= head < c.n_head):
        what = f"layer {layer}" if head is None else f"head {head} of layer {layer}"
        raise InputError(f"ablate: there is no {what} to switch off; the model has layers "
                         f"0–{c.n_layer - 1}, each with heads 0–{c.n_head - 1}")
    return watch.Ablation(layer, head, kind).check(model)


def predict(prompt: str, temperature: float, ablate=(), kind: str = "zero") -> dict:
    """The prompt's characters, every head's causal weights, the next-character bars (before
    and after switching off ``ablate``: ``(layer, head or None)`` pairs), the heads' direct
    pushes on the most likely character, what switching off each head does to it, and the
    head roles measured on this prompt."""
    from qkv.tasks import gpt_watch as watch

    model, tok = load()
    ids = _ids(tok, prompt, model.config.block_size)
    ablations = [_switch(model, layer, head, kind) for layer, head in ablate]
    seen = watch.look(model, ids, temperature)
    a = watch.logit_attribution(model, ids)
    e = _effects(prompt, kind)
    top = np.argsort(-seen.probs, kind="stable")[:TOP]
    roles = watch.role_scores(seen.weights[None], ids[None])
    answer = {
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
        "effects": {"char": tok.chars[e.char], "p_before": e.p_before, "drop": e.drop.tolist(),
                    "total": e.total_effect.tolist(), "layer_drop": e.layer_drop.tolist(),
                    "kind": e.kind},
        "prompt_roles": {"previous": _finite(roles["previous"]) if roles["n_previous"] else None,
                         "induction": _finite(roles["induction"]) if roles["n_induction"]
                         else None,
                         "chance_previous": _finite(roles["chance_previous"]),
                         "chance_induction": _finite(roles["chance_induction"]),
                         "n_previous": roles["n_previous"], "n_induction": roles["n_induction"]},
        "ablation": None,
    }
    if ablations:
        after = watch.ablate(model, ids, ablations, means() if kind == "mean" else None,
                             temperature)
        top_after = np.argsort(-after.probs_after, kind="stable")[:TOP]
        np.testing.assert_array_equal(after.probs_before, seen.probs)  # one forward, two paths
        answer["ablation"] = {
            "labels": [x.label for x in ablations], "kind": kind,
            "heads": [[x.layer, x.head] for x in ablations if x.head is not None],
            "layers": [x.layer for x in ablations if x.head is None],
            "after": [float(after.probs_after[i]) for i in top],
            "top": {"chars": [tok.chars[i] for i in top_after],
                    "probs": [float(after.probs_after[i]) for i in top_after]}}
    return answer


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


def role_set(roles, tok) -> dict:
    """A :class:`~qkv.tasks.gpt_watch.HeadRoles` as JSON, with its sentence."""
    from qkv.tasks import gpt_watch as watch

    return {"previous_token": _finite(roles.previous_token),
            "induction": _finite(roles.induction),
            "chance_previous": _finite(roles.chance_previous),
            "chance_induction": _finite(roles.chance_induction),
            "source": roles.source, "what": roles.what, "n_sequences": roles.n_sequences,
            "half": roles.half, "sentence": watch.roles_sentence(roles),
            "last_space": None if roles.last_space is None else _finite(roles.last_space),
            "example": [tok.chars[i] for i in roles.ids[0]],
            "example_weights": roles.example_weights.tolist()}


@lru_cache(maxsize=64)
def where(layer: int, head: int, kind: str = "zero") -> dict:
    """The prompt, of CANDIDATES windows of the validation text, where switching head
    ``(layer, head)`` off lowers the predicted character's probability (T = 1) the most."""
    from qkv.tasks import gpt_watch as watch

    model, tok = load()
    _switch(model, layer, head, kind)
    prompts = watch.candidate_prompts(_validation(), CANDIDATE_LENGTH, CANDIDATES)
    w = watch.where_heads_matter(model, prompts, kind, means() if kind == "mean" else None,
                                 heads=[(layer, head)])
    best = int(w.best[layer, head])
    return {"layer": layer, "head": head, "kind": kind, "prompt": tok.decode(prompts[best]),
            "char": tok.chars[w.chars[best]], "drop": float(w.drop[layer, head]),
            "n_candidates": len(prompts), "length": CANDIDATE_LENGTH}


@lru_cache(maxsize=4)
def roles(n_sequences: int = 32, seed: int = 0) -> dict:
    """Every head's previous-token and induction scores, by one definition, on
    ``n_sequences`` repeated random sequences drawn with ``seed`` and on windows of the
    validation text (cached: the model is fixed), with the sentences saying what they show."""
    from qkv.tasks import gpt_watch as watch

    model, tok = load()
    random = watch.head_roles(model, n_sequences, seed=seed)
    text = watch.text_roles(model, _validation(), tok.chars.index(" "))
    return {"random": role_set(random, tok), "text": role_set(text, tok)}


@lru_cache(maxsize=1)
def induction() -> dict:
    """The attention-only model: its training history (loss and induction score against the
    step: the phase change), its head roles on repeated random sequences, and its patterns."""
    from qkv.tasks import gpt_watch as watch
    from qkv.tasks import induction as ind

    model, tok, meta = load_induction()
    c = model.config
    roles = watch.head_roles(model)  # as the GPT's: 32 sequences, seed 0
    text = watch.text_roles(model, _validation(), tok.chars.index(" "))
    history = meta["history"]
    phase = ind.phase_change(history)
    return {"layers": c.n_layer, "heads": c.n_head, "width": c.n_embd, "context": c.block_size,
            "params": model.num_params, "steps": meta["step"], "elapsed": meta["elapsed"],
            "history": [{k: row[k] for k in ("step", "val", "repeat", "induction", "previous")}
                        for row in history],
            "phase": phase, "threshold": watch.INDUCTION,
            "random": role_set(roles, tok), "text": role_set(text, tok),
            "command": ind.COMMAND}
