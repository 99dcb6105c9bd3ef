"""Circuits, not only heads: one head taken out of *another head's* queries, keys or values.

Switching a head off (:mod:`qkv.tasks.gpt_watch`'s ablation) removes what it writes into the
residual stream from everything downstream at once. A circuit shows when the removal is
narrower: every head reads the residual stream three times, once for its queries, once for its
keys and once for its values (each through its layer's LayerNorm and its own W_Q, W_K, W_V
slice), and a later head may depend on an earlier head through only one of the three —
Elhage et al. (2021), "A mathematical framework for transformer circuits", call these Q-, K-
and V-composition. Olsson et al. (2022) found the induction head's circuit this way: a
previous-token head writes "the character before me was A" into each position, and the
induction head's *keys* read it (K-composition), so that a query A finds the position after
an earlier A.

:func:`run` re-runs the model with any heads switched off (their output zeroed, as
``Ablation(kind="zero")``) and any :class:`PathRemoval`: the source head's write
``z_h W_O[h]`` subtracted from the residual stream that the target head's queries, keys or
values only are computed from (LayerNorm re-applied; the source's direct path — in a model with
MLPs the part of it carried by an MLP in between stays). Every other head, and the target's
other two inputs, read the stream unchanged. Attention runs through :func:`qkv.attention` and
:func:`qkv.attention_weights`, the weights of every head are returned, so the role scores
(:func:`qkv.tasks.gpt_watch.role_scores`, one definition) are measured on the altered run.

:func:`measure` gives, on repeated random sequences, every head's role scores and the
*second-copy loss*: the mean next-character loss on the positions of the second copy that a
copy can predict (after its first character), as :func:`qkv.tasks.induction.copy_loss` counts
them. :func:`composition_table` measures every path into every last-layer head.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np

from .. import masks
from ..engine import api as functional
from ..engine.threads import one_blas_thread
from ..nn import log_softmax, merge_heads
from ..nn._base import matmul_rows
from .gpt import GPT

INPUTS = ("q", "k", "v")
INPUT_WORDS = {"q": "queries", "k": "keys", "v": "values"}


def _check_head(model: GPT, layer, head, what: str) -> tuple[int, int]:
    c = model.config
    for name, value, top in (("layer", layer, c.n_layer), ("head", head, c.n_head)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or not (
                0 <= value < top):
            raise ValueError(f"{what}: {name} must be an int in [0, {top}), got {value!r}")
    return int(layer), int(head)


@dataclass(frozen=True)
class PathRemoval:
    """Take head ``source`` (layer, head) out of head ``target``'s ``input`` ("q", "k" or "v")
    only; the target layer must come after the source layer."""

    source: tuple[int, int]
    target: tuple[int, int]
    input: str

    @property
    def label(self) -> str:
        (sl, sh), (tl, th) = self.source, self.target
        return f"L{sl}H{sh} out of L{tl}H{th}'s {INPUT_WORDS.get(self.input, self.input)}"

    def check(self, model: GPT) -> PathRemoval:
        source = _check_head(model, *self.source, "path source")
        target = _check_head(model, *self.target, "path target")
        if self.input not in INPUTS:
            raise ValueError(f"path input must be one of {INPUTS}, got {self.input!r}")
        if not source[0] < target[0]:
            raise ValueError(f"path: the target's layer ({target[0]}) must come after the "
                             f"source's ({source[0]}): a head reads only what earlier layers "
                             "wrote")
        return PathRemoval(source, target, self.input)


@dataclass
class CircuitRun:
    """One run with heads switched off and paths removed."""

    logits: np.ndarray  # (B, N, V)
    weights: np.ndarray  # (B, L, H, N, N) every head's causal weights in this run
    off: tuple = ()
    paths: tuple = ()


@one_blas_thread
def run(model: GPT, ids, off: Iterable = (), paths: Iterable[PathRemoval] = ()) -> CircuitRun:
    """Logits and every head's weights for ids ``(B, N)`` with the heads ``off`` ((layer,
    head) pairs) zeroed and the ``paths`` removed (see the module doc). With neither, the
    logits are :meth:`GPT.run_with_hooks`'s with no hook."""
    ids = np.asarray(ids)
    off = tuple(_check_head(model, la, h, "off") for la, h in off)
    paths = tuple(p.check(model) for p in paths)
    c = model.config
    dh = c.d_head
    # (target layer, target head, input) → the source heads taken out of it
    cut: dict[tuple[int, int, str], list[tuple[int, int]]] = {}
    for p in paths:
        cut.setdefault((*p.target, p.input), []).append(p.source)
    x, _ = model.embed(ids)  # (B, N, C)
    causal = masks.causal()
    writes: dict[tuple[int, int], np.ndarray] = {}  # each head's z_h W_O[h]: (B, N, C)
    weights = []
    for i, block in enumerate(model.blocks):
        attn = block.attn
        q, k, v = attn.project(block.ln1(x))  # (B, H, N, d_head) each
        qkv = {"q": q, "k": k, "v": v}
        for (layer, head, which), sources in cut.items():
            if layer != i:
                continue
            without = x - sum(writes[s] for s in sources)  # the stream without the sources
            alt = dict(zip(INPUTS, attn.project(block.ln1(without)), strict=True))
            qkv[which] = qkv[which].copy()
            qkv[which][:, head] = alt[which][:, head]
        q, k, v = qkv["q"], qkv["k"], qkv["v"]
        weights.append(functional.attention_weights(q, k, mask=causal, scale=attn.scale))
        z = functional.attention(q, k, v, mask=causal, scale=attn.scale)  # (B, H, N, d)
        for layer, head in off:
            if layer == i:
                z[:, head] = 0.0
        w_o = attn.params["w_o"]  # (H·d_head, C)
        for h in range(c.n_head):
            writes[(i, h)] = matmul_rows(z[:, h], w_o[h * dh:(h + 1) * dh])
        out = matmul_rows(merge_heads(z), w_o)  # (B, N, C)
        if attn.has_bias:
            out += attn.params["b_o"]
        x = x + out
        if block.mlp is not None:
            x = x + block.mlp(block.ln2(x))
    return CircuitRun(model.unembed(x)[0], np.stack(weights, axis=1), off, paths)


def repeated_random(model: GPT, n_sequences: int, half: int | None = None,
                    seed: int = 0) -> np.ndarray:
    """``(n_sequences, 2·half)`` random ids, each sequence followed by itself: the draw of
    :func:`qkv.tasks.gpt_watch.head_roles` (same generator, same sequences)."""
    half = model.config.block_size // 2 if half is None else half
    if not 2 <= 2 * half <= model.config.block_size:
        raise ValueError(f"half must lie in [1, {model.config.block_size // 2}], got {half}")
    rng = np.random.default_rng([seed, 0x1D])
    first = rng.integers(0, model.config.vocab_size, (n_sequences, half))
    return np.concatenate([first, first], axis=1)


def token_losses(logits: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """``(B, N − 1)``: −log p of each next id, from the logits at each position (float64)."""
    logp = log_softmax(np.asarray(logits[:, :-1], dtype=np.float64))
    return -np.take_along_axis(logp, np.asarray(ids)[:, 1:, None], axis=-1)[..., 0]


@dataclass
class Measured:
    """A run's figures on repeated random sequences."""

    induction: np.ndarray  # (L, H) role_scores' induction score
    previous: np.ndarray  # (L, H) previous-token score
    copy_loss: float  # mean loss on the second copy's predictable positions
    first_loss: float  # mean loss on the first copy (nothing to copy from)
    second_copy_score: np.ndarray = field(repr=False, default=None)  # (L, H) see below


def measure(model: GPT, ids: np.ndarray, off=(), paths=()) -> Measured:
    """The figures of :func:`run` on ``ids`` from :func:`repeated_random` (each row a half
    followed by itself). ``second_copy_score`` is Olsson et al.'s narrower induction score:
    the mean weight, over the second copy's queries only, on the key one step after the
    query's twin in the first copy."""
    from .gpt_watch import role_scores

    ids = np.asarray(ids)
    half = ids.shape[1] // 2
    if ids.shape[1] != 2 * half or not np.array_equal(ids[:, :half], ids[:, half:]):
        raise ValueError("measure: each row of ids must be a sequence followed by itself")
    r = run(model, ids, off, paths)
    w = r.weights.astype(np.float64)
    roles = role_scores(w, ids)
    loss = token_losses(r.logits, ids)  # (B, 2·half − 1); column t predicts ids[:, t + 1]
    queries = np.arange(half, 2 * half)
    second = w[:, :, :, queries, queries - half + 1].mean(axis=(0, -1))  # (L, H)
    return Measured(roles["induction"], roles["previous"], float(loss[:, half:].mean()),
                    float(loss[:, :half - 1].mean()), second)


def composition_table(model: GPT, n_sequences: int = 256, seed: int = 0) -> dict:
    """On :func:`repeated_random` sequences: the intact model's figures, every head's when it is
    switched off, and for every head of the last layer, every earlier head taken out of its
    queries, keys or values in turn — that target's induction score and the second-copy loss.

    Returns ``base`` (a :class:`Measured`), ``off`` ``{(layer, head): Measured}`` and
    ``paths`` ``{(source, target, input): Measured}``."""
    c = model.config
    ids = repeated_random(model, n_sequences, seed=seed)
    heads = [(la, h) for la in range(c.n_layer) for h in range(c.n_head)]
    last = c.n_layer - 1
    table = {"base": measure(model, ids), "ids": ids,
             "off": {head: measure(model, ids, off=[head]) for head in heads}, "paths": {}}
    for target in [(last, h) for h in range(c.n_head)]:
        for source in [x for x in heads if x[0] < last]:
            for which in INPUTS:
                p = PathRemoval(source, target, which)
                table["paths"][(source, target, which)] = measure(model, ids, paths=[p])
    return table


def report(n_sequences: int = 1000, seed: int = 0) -> str:
    """What docs/gpt.md prints under ``python -m qkv.tasks.circuits``: the shipped induction
    model's induction head with its previous-token head cut out of each input in turn, and each
    of the two switched off, on ``n_sequences`` repeated random strings."""
    from .gpt_watch import head_roles
    from .induction import load_pretrained

    model = load_pretrained()[0]
    roles = head_roles(model)
    last = model.config.n_layer - 1
    ind = (last, int(np.nanargmax(roles.induction[last])))
    prev = (0, int(np.nanargmax(roles.previous_token[0])))
    ids = repeated_random(model, n_sequences, seed=seed)
    base = measure(model, ids)
    rows = [("intact", base)]
    rows += [(PathRemoval(prev, ind, which).label,
              measure(model, ids, paths=[PathRemoval(prev, ind, which)])) for which in INPUTS]
    rows += [(f"L{la}H{h} off", measure(model, ids, off=[(la, h)])) for la, h in (prev, ind)]
    name = f"L{ind[0]}H{ind[1]}"
    lines = [f"The shipped induction model on {n_sequences} random strings of "
             f"{ids.shape[1] // 2} characters, each followed by itself (seed {seed}): "
             f"induction head {name}, previous-token head L{prev[0]}H{prev[1]}.",
             f"{'run':<32} {name + ' induction':>16} {'second-copy score':>18} "
             f"{'second-copy loss':>17} {'change':>7}"]
    for label, m in rows:
        change = "" if m is base else f"{m.copy_loss - base.copy_loss:+.2f}"
        lines.append(f"{label:<32} {m.induction[ind]:>16.3f} {m.second_copy_score[ind]:>18.3f} "
                     f"{m.copy_loss:>17.3f} {change:>7}")
    return "\n".join(lines)


def main(argv=None) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m qkv.tasks.circuits",
                                     description=report.__doc__)
    parser.add_argument("--sequences", type=int, default=1000, help="repeated random strings")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if args.sequences < 1:
        parser.error(f"--sequences must be at least 1, got {args.sequences}")
    print(report(args.sequences, args.seed))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
