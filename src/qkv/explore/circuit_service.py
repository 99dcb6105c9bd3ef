"""The induction model live (view 10): the learner's prompt through the shipped attention-only
model of :mod:`qkv.tasks.induction`, with heads switched off and heads taken out of another
head's queries, keys or values only — every number from :mod:`qkv.tasks.circuits`; the page
draws them and writes its sentences from them.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from .circuit_schemas import (
    CircuitRequest,
    CircuitResponse,
    CircuitTableRequest,
    CircuitTableResponse,
)
from .errors import InputError
from .gpt_service import _finite, _ids, load_induction

TOP = 8  # next-character bars
TABLE_SEQUENCES = 128  # repeated random strings behind the composition table
LABEL = "prompt for the induction model"  # the page's label of its prompt


def _heads(model, pairs, what: str) -> list[tuple[int, int]]:
    c = model.config
    for layer, head in pairs:
        if not (0 <= layer < c.n_layer and 0 <= head < c.n_head):
            raise InputError(f"{what}: there is no head {head} of layer {layer}; the induction "
                             f"model has layers 0–{c.n_layer - 1}, each with heads "
                             f"0–{c.n_head - 1}")
    return list(pairs)


def _paths(model, paths):
    from qkv.tasks.circuits import PathRemoval

    out = []
    for (sl, sh), (tl, th), which in paths:
        _heads(model, [(sl, sh), (tl, th)], "paths")
        if not sl < tl:
            raise InputError(f"paths: L{tl}H{th} cannot lose L{sl}H{sh}: a head reads only "
                             "what earlier layers wrote, so the source's layer must come first")
        out.append(PathRemoval((sl, sh), (tl, th), which))
    return out


def _roles(weights: np.ndarray, ids: np.ndarray) -> dict:
    from qkv.tasks.gpt_watch import role_scores

    r = role_scores(weights[None].astype(np.float64), ids[None])
    return {"induction": _finite(r["induction"]) if r["n_induction"] else None,
            "previous": _finite(r["previous"]) if r["n_previous"] else None}


def circuit(prompt: str, off=(), paths=()) -> dict:
    """The prompt through the induction model intact and with ``off`` ((layer, head) pairs)
    switched off and ``paths`` (((layer, head), (layer, head), "q" | "k" | "v")) removed."""
    from qkv.tasks import circuits
    from qkv.tasks.gpt_watch import softmax_t

    model, tok, _ = load_induction()
    try:
        ids = _ids(tok, prompt, model.config.block_size)
    except InputError as exc:  # named as the page labels it: view 10 has two prompts
        raise InputError(str(exc).replace("prompt:", f"{LABEL}:", 1)) from None
    off = _heads(model, off, "off")
    removals = _paths(model, paths)
    intact = circuits.run(model, ids[None])
    changed = circuits.run(model, ids[None], off, removals) if off or removals else intact
    p0 = softmax_t(intact.logits[0, -1], 1.0)
    p1 = softmax_t(changed.logits[0, -1], 1.0)
    top0 = np.argsort(-p0, kind="stable")[:TOP]
    top1 = np.argsort(-p1, kind="stable")[:TOP]
    w0, w1 = intact.weights[0], changed.weights[0]  # (L, H, N, N)
    n = ids.size
    earlier = [j for j in range(n - 1) if ids[j] == ids[-1]]
    keys = [j + 1 for j in earlier]
    copied = int(ids[keys[-1]]) if keys else None
    # loss on the positions whose next character a copy predicts: the same two characters
    # occurred earlier (t − 1 ≥ j: the pair ids[j], ids[j + 1] lies wholly before t)
    repeat = [t for t in range(n - 1) if any(ids[j] == ids[t] and ids[j + 1] == ids[t + 1]
                                             for j in range(t - 1))]
    loss0 = circuits.token_losses(intact.logits, ids[None])[0]
    loss1 = circuits.token_losses(changed.logits, ids[None])[0]
    labels = [f"L{la}H{h} off" for la, h in off] + [p.label for p in removals]
    return {
        "chars": [tok.chars[i] for i in ids], "layers": model.config.n_layer,
        "heads": model.config.n_head, "context": model.config.block_size,
        "weights": w1.astype(np.float64).tolist(),
        "intact_weights": w0.astype(np.float64).tolist(),
        "allowed": np.tril(np.ones((n, n), bool)).tolist(), "labels": labels,
        "next": {"chars": [tok.chars[i] for i in top0], "probs": [float(p0[i]) for i in top0],
                 "after": [float(p1[i]) for i in top0],
                 "top_chars": [tok.chars[i] for i in top1],
                 "top_probs": [float(p1[i]) for i in top1]},
        "copying": {"char": tok.chars[ids[-1]], "earlier": earlier, "keys": keys,
                    "copied": None if copied is None else tok.chars[copied],
                    "weight_before": w0[:, :, -1, keys].sum(axis=-1).astype(float).tolist(),
                    "weight_after": w1[:, :, -1, keys].sum(axis=-1).astype(float).tolist(),
                    "p_before": None if copied is None else float(p0[copied]),
                    "p_after": None if copied is None else float(p1[copied])},
        "repeat": {"n": len(repeat),
                   "before": float(loss0[repeat].mean()) if repeat else None,
                   "after": float(loss1[repeat].mean()) if repeat else None},
        "roles_before": _roles(w0, ids), "roles_after": _roles(w1, ids),
    }


def _measured(m) -> dict:
    return {"induction": _finite(m.induction), "previous": _finite(m.previous),
            "copy_loss": m.copy_loss, "first_loss": m.first_loss}


@lru_cache(maxsize=1)
def table() -> dict:
    """:func:`qkv.tasks.circuits.composition_table` of the shipped induction model on
    TABLE_SEQUENCES repeated random strings (cached: the model is fixed)."""
    from qkv.tasks import circuits
    from qkv.tasks.gpt_watch import INDUCTION

    model, tok, _ = load_induction()
    c = model.config
    t = circuits.composition_table(model, TABLE_SEQUENCES)
    return {"n_sequences": TABLE_SEQUENCES, "half": t["ids"].shape[1] // 2,
            "layers": c.n_layer, "heads": c.n_head, "context": c.block_size,
            "alphabet": list(tok.chars), "threshold": INDUCTION,
            "base": _measured(t["base"]),
            "off": [{"layer": la, "head": h, **_measured(m)} for (la, h), m in t["off"].items()],
            "paths": [{"source": list(s), "target": list(tg), "input": which, **_measured(m)}
                      for (s, tg, which), m in t["paths"].items()]}


def register(app, responses: dict) -> None:
    """Add ``/api/gpt/circuit`` and ``/api/gpt/circuit/table`` to the explorer's app."""
    @app.post("/api/gpt/circuit", response_model=CircuitResponse, responses=responses)
    def gpt_circuit(req: CircuitRequest) -> dict:
        """View 10: the induction model on a prompt, heads off, paths between heads removed."""
        return circuit(req.prompt, [(x.layer, x.head) for x in req.off],
                       [((p.source.layer, p.source.head), (p.target.layer, p.target.head),
                         p.input) for p in req.paths])

    @app.post("/api/gpt/circuit/table", response_model=CircuitTableResponse,
              responses=responses)
    def gpt_circuit_table(req: CircuitTableRequest) -> dict:
        """View 10: every head off and every path into a last-layer head, measured."""
        return table()
