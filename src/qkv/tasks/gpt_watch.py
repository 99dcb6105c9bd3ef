"""Watching the GPT predict: its causal attention, next-character distribution, head roles,
each head's direct push on the chosen character, and generation through the KV cache.

Everything here computes with qkv (the model's own layers and :func:`qkv.attention_weights`);
the terminal view (``qkv look --gpt``) and the explorer only draw what these functions return.

- :func:`look`: for a prompt, every layer's and head's weights ``(L, H, N, N)`` with the causal
  ``allowed`` pattern (a future key is *masked*, not a weight of 0), and the next-character
  probabilities at a temperature.
- :func:`head_roles`: Olsson et al. (2022), "In-context learning and induction heads": on random
  character sequences repeated twice, a head's *previous-token score* is its mean weight from
  each position to the one before, and its *induction score* the mean weight from a token in
  the second copy to the token right after that token's occurrence in the first copy.
- :func:`logit_attribution`: the final LayerNorm is linear once its scale 1/σ is fixed at the
  value it took, so the chosen character's logit is exactly a sum over what each component wrote
  into the residual stream — embeddings, each head (its slice of W_O), each layer's output bias
  and MLP — plus the final LayerNorm's bias term. Each head's share is its direct contribution.
- :func:`generate`: one character per step through :class:`qkv.nn.KVCache`, with the weights
  the new character's query put on every earlier character in each head.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .. import masks
from ..engine import api as functional
from ..engine.threads import one_blas_thread
from ..engine.threads import single_threaded_blas as _one_thread
from .gpt import GPT


@dataclass
class Look:
    """One prompt through the model."""

    ids: np.ndarray  # (N,)
    weights: np.ndarray  # (L, H, N, N) each row sums to 1 over its allowed keys
    allowed: np.ndarray  # (N, N) bool: key j ≤ query i
    probs: np.ndarray  # (V,) the next character's distribution at `temperature`
    logits: np.ndarray  # (V,) the last position's logits
    temperature: float


def _prompt(model: GPT, ids) -> np.ndarray:
    ids = np.asarray(ids).reshape(-1)
    if ids.size == 0:
        raise ValueError("prompt is empty; give at least one character")
    if ids.size > model.config.block_size:
        raise ValueError(f"prompt has {ids.size} characters but the model's context is "
                         f"{model.config.block_size}; give at most {model.config.block_size}")
    return ids


MIN_TEMPERATURE = 1e-3  # logits / T stays finite (|logits| ≪ 1e300 · T)


def softmax_t(logits: np.ndarray, temperature: float) -> np.ndarray:
    """softmax(logits / T) over the last axis (float64); T ≥ 0.001 (as T → 0 this becomes
    the argmax, which ``greedy=True`` gives exactly)."""
    if (isinstance(temperature, bool) or not isinstance(temperature, (int, float))
            or not MIN_TEMPERATURE <= temperature < float("inf")):
        raise ValueError(f"temperature must be a number ≥ {MIN_TEMPERATURE}, got "
                         f"{temperature!r}; for the most likely character use greedy")
    z = np.asarray(logits, dtype=np.float64) / temperature
    z = np.exp(z - z.max(axis=-1, keepdims=True))
    return z / z.sum(axis=-1, keepdims=True)


@one_blas_thread
def weights_of(model: GPT, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Every layer's and head's causal weights for ids ``(B, N)``, from
    :func:`qkv.attention_weights` on each block's input: ``(w (B, L, H, N, N), logits
    (B, N, V))``."""
    x, _ = model.embed(ids)  # (B, N, C)
    causal = masks.causal()
    weights = []
    for block in model.blocks:
        weights.append(block.attn.attention_weights(block.ln1(x), mask=causal))  # (B, H, N, N)
        x = block(x, mask=causal)
    return np.stack(weights, axis=1), model.unembed(x)[0]


def look(model: GPT, ids, temperature: float = 1.0) -> Look:
    ids = _prompt(model, ids)
    w, logits = weights_of(model, ids[None])
    n = ids.size
    return Look(ids, w[0], np.tril(np.ones((n, n), bool)),
                softmax_t(logits[0, -1], temperature), logits[0, -1], float(temperature))


# -- head roles ------------------------------------------------------------------------------
def role_scores(weights: np.ndarray, ids: np.ndarray) -> dict:
    """The one definition of the head roles (Olsson et al. 2022), for any sequences.

    ``weights (S, L, H, T, T)`` of the sequences ``ids (S, T)``. A head's *previous-token
    score* is its mean weight from each query i ≥ 1 on key i − 1. Its *induction score* is its
    mean weight, over the queries whose token occurred earlier, on the keys right after those
    earlier occurrences (key j + 1 where token j equals token i, j + 1 < i): where an
    induction head looks, to copy what came next last time. On a random sequence repeated
    twice the second copy's keys are exactly those; on text the same rule finds them.

    Returns ``previous``, ``induction`` ``(L, H)``, what uniform causal attention (weight
    1/(i+1) on each allowed key) would score on the same queries (``chance_previous``,
    ``chance_induction``), and how many queries each mean is over (``n_previous``,
    ``n_induction``; an induction score over no query is NaN).
    """
    w = np.asarray(weights, dtype=np.float64)
    ids = np.asarray(ids)
    S, T = ids.shape
    if w.shape[:1] + w.shape[-2:] != (S, T, T):
        raise ValueError(f"role_scores: weights have shape {w.shape}; ids {ids.shape} need "
                         f"({S}, L, H, {T}, {T})")
    rows = np.arange(1, T)
    previous = w[..., rows, rows - 1].mean(axis=(0, -1)) if T > 1 else np.full(w.shape[1:3],
                                                                                np.nan)
    same = ids[:, :, None] == ids[:, None, :]  # (S, T, T): token i equals token j
    target = np.zeros((S, T, T), bool)
    target[:, :, 1:] = same[:, :, :-1]  # key k follows a copy (k − 1) of query i's token
    target &= np.tri(T, k=-1, dtype=bool)  # k < i: the copy lies before the query
    has = target.any(axis=-1)  # (S, T)
    mass = np.einsum("slhqk,sqk->lhsq", w, target.astype(np.float64))  # (L, H, S, T)
    n_ind = int(has.sum())
    induction = mass[..., has].mean(axis=-1) if n_ind else np.full(w.shape[1:3], np.nan)
    uniform = target.sum(axis=-1) / np.arange(1, T + 1)  # (S, T) uniform weight on targets
    return {"previous": previous, "induction": induction,
            "chance_previous": float(np.mean(1.0 / (rows + 1))) if T > 1 else float("nan"),
            "chance_induction": float(uniform[has].mean()) if n_ind else float("nan"),
            "n_previous": S * (T - 1), "n_induction": n_ind}


def standard_induction_scores(weights: np.ndarray, half: int) -> tuple[np.ndarray, float]:
    """The induction score as TransformerLens and Olsson et al. report it, on random sequences
    of ``half`` tokens each followed by itself: a head's mean weight, over the second copy's
    queries i ∈ [half, 2·half), on key i − half + 1 — the token right after the current one's
    occurrence in the first copy. Unlike :func:`role_scores`' induction score it ignores chance
    repeats inside the first copy. ``weights (S, L, H, 2·half, 2·half)``; returns the ``(L, H)``
    scores and what uniform causal attention (1/(i+1) on each allowed key) would score."""
    w = np.asarray(weights, dtype=np.float64)
    if w.shape[-1] != 2 * half or w.shape[-2] != 2 * half:
        raise ValueError(f"standard_induction_scores: weights have shape {w.shape}; half = "
                         f"{half} needs (S, L, H, {2 * half}, {2 * half})")
    queries = np.arange(half, 2 * half)
    scores = w[..., queries, queries - half + 1].mean(axis=(0, -1))
    return scores, float(np.mean(1.0 / (queries + 1)))


@dataclass
class HeadRoles:
    """Every head's :func:`role_scores` on a set of sequences (``source`` says which)."""

    previous_token: np.ndarray  # (L, H)
    induction: np.ndarray  # (L, H)
    chance_previous: float
    chance_induction: float
    source: str  # "random" (repeated random sequences) or "text" (validation windows)
    ids: np.ndarray  # (S, T) the sequences
    example_weights: np.ndarray  # (L, H, T, T) the first sequence's weights
    half: int | None = None  # random: the length of the sequence that is repeated
    last_space: np.ndarray | None = None  # text: (L, H) mean weight on the most recent space

    @property
    def n_sequences(self) -> int:
        return len(self.ids)

    @property
    def what(self) -> str:
        """The sequences, in words."""
        if self.source == "random":
            return (f"{self.n_sequences} random sequences of {self.half} characters, each "
                    "followed by itself")
        return (f"{self.n_sequences} windows of {self.ids.shape[1]} characters of the "
                "validation text")


def _roles(model: GPT, ids: np.ndarray, source: str, **extra) -> HeadRoles:
    w = weights_of(model, ids)[0].astype(np.float64)  # (S, L, H, T, T)
    r = role_scores(w, ids)
    if source == "text" and extra.get("space") is not None:
        extra["last_space"] = _on_last_space(w, ids, extra["space"])
    extra.pop("space", None)
    return HeadRoles(r["previous"], r["induction"], r["chance_previous"], r["chance_induction"],
                     source, ids, w[0], **extra)


@one_blas_thread
def head_roles(model: GPT, n_sequences: int = 32, half: int | None = None,
               seed: int = 0) -> HeadRoles:
    """:func:`role_scores` of every head on ``n_sequences`` random sequences of ``half``
    characters (default: half the context), each followed by itself (Olsson et al.)."""
    half = model.config.block_size // 2 if half is None else half
    if not 2 <= 2 * half <= model.config.block_size:
        raise ValueError(f"half must lie in [1, {model.config.block_size // 2}], got {half}")
    rng = np.random.default_rng([seed, 0x1D])
    first = rng.integers(0, model.config.vocab_size, (n_sequences, half))
    ids = np.concatenate([first, first], axis=1)  # (S, 2·half)
    return _roles(model, ids, "random", half=half)


def _on_last_space(w: np.ndarray, x: np.ndarray, space: int) -> np.ndarray:
    """(L, H) mean weight on the most recent space at or before each query that has one."""
    T = x.shape[1]
    where = np.where(x == space, np.arange(T), -1)  # (S, T)
    last = np.maximum.accumulate(where, axis=1)  # (S, T) a running maximum of space positions
    s_idx, q_idx = np.nonzero(last >= 0)
    if not s_idx.size:
        return np.full(w.shape[1:3], np.nan)
    return w[s_idx, :, :, q_idx, last[s_idx, q_idx]].mean(axis=0)  # (L, H)


@one_blas_thread
def text_roles(model: GPT, ids: np.ndarray, space: int | None = None,
               n_windows: int = 40) -> HeadRoles:
    """:func:`role_scores` of every head on the first ``n_windows`` context-long windows of a
    text's ``ids`` (the same definition as on random sequences), and with ``space`` (the id
    of " ") each head's mean weight on the most recent space, the start of the current word."""
    from .gpt import windows

    x, _ = windows(np.asarray(ids), model.config.block_size, n_windows)  # (S, T)
    if not len(x):
        raise ValueError(f"text_roles: the text has {len(ids)} characters, fewer than one "
                         f"window of {model.config.block_size + 1}")
    return _roles(model, x, "text", space=space)


INDUCTION = 0.3  # an induction score at or above this calls a head an induction head
PREVIOUS = 0.5  # a previous-token score at or above this calls a head a previous-token head


def _count(n: int, one: str, many: str) -> str:
    return f"{n} {one if n == 1 else many}"


def roles_sentence(roles: HeadRoles) -> str:
    """What the grid shows, written from its numbers."""
    L, H = roles.previous_token.shape
    best_p = np.unravel_index(np.nanargmax(roles.previous_token), (L, H))
    n_prev = int((roles.previous_token >= PREVIOUS).sum())
    prev = (f"On {roles.what}: {_count(n_prev, 'head puts', 'heads put')} ≥ {PREVIOUS:.0%} of "
            f"their weight on the previous character (strongest L{best_p[0]}H{best_p[1]}, "
            f"{roles.previous_token[best_p]:.2f}; uniform attention would give "
            f"{roles.chance_previous:.3f})")
    if np.all(np.isnan(roles.induction)):
        return prev + "; no character repeats, so no induction score."
    best_i = np.unravel_index(np.nanargmax(roles.induction), (L, H))
    n_ind = int((roles.induction >= INDUCTION).sum())
    ind = (f"{_count(n_ind, 'head scores', 'heads score')} ≥ {INDUCTION} as "
           f"{'an induction head' if n_ind == 1 else 'induction heads'}"
           if n_ind else f"no head scores ≥ {INDUCTION} as an induction head")
    return (f"{prev}; {ind} (strongest L{best_i[0]}H{best_i[1]}, "
            f"{roles.induction[best_i]:.2f}; uniform attention would give "
            f"{roles.chance_induction:.3f}).")


# -- direct logit attribution ----------------------------------------------------------------
@dataclass
class Attribution:
    char: int  # the character attributed
    logit: float
    heads: np.ndarray  # (L, H) each head's direct contribution to that logit
    mlps: np.ndarray  # (L,)
    attn_bias: np.ndarray  # (L,) each layer's W_O bias
    embeddings: float  # token + position
    ln_bias: float  # the final LayerNorm's bias · wte[char]

    @property
    def total(self) -> float:
        return float(self.heads.sum() + self.mlps.sum() + self.attn_bias.sum()
                     + self.embeddings + self.ln_bias)


@one_blas_thread
def logit_attribution(model: GPT, ids, char: int | None = None,
                      position: int = -1) -> Attribution:
    """Split the logit of ``char`` (default: the most likely) at ``position`` into what each
    component wrote into the residual stream (see the module doc). ``total`` equals the logit
    up to rounding."""
    ids = _prompt(model, ids)
    logits, (_, ctxs, (_, (_, inv_std))) = model.forward(ids[None])  # keeping every context
    logits = logits[0]  # (N, V)
    pos = range(ids.size)[position]
    char = int(np.argmax(logits[pos])) if char is None else int(char)
    if not 0 <= char < model.config.vocab_size:
        raise ValueError(f"char must lie in [0, {model.config.vocab_size}), got {char}")
    p = model.params
    u = (p["ln_f.weight"] * p["wte.weight"][char]).astype(np.float64)  # (C,)
    scale = float(inv_std[0, pos, 0])

    def direct(v: np.ndarray) -> float:  # (C,) written into the stream → its logit share
        v = np.asarray(v, dtype=np.float64)
        return float(((v - v.mean()) * scale) @ u)

    dh = model.config.d_head
    heads = np.zeros((model.config.n_layer, model.config.n_head))
    mlps, attn_bias = np.zeros(model.config.n_layer), np.zeros(model.config.n_layer)
    for i, (block, (_, c_att, _, c_mlp)) in enumerate(zip(model.blocks, ctxs, strict=True)):
        out = c_att[5]  # (1, H, N, d_head) each head's output (MultiHeadAttention's ctx)
        w_o = block.attn.params["w_o"]  # (H·d_head, C)
        for h in range(model.config.n_head):
            heads[i, h] = direct(out[0, h, pos] @ w_o[h * dh:(h + 1) * dh])
        attn_bias[i] = direct(block.attn.params["b_o"])
        if block.mlp is not None:  # an attention-only block writes nothing more
            mlps[i] = direct(block.mlp.fc2(c_mlp[2][0, pos]))  # c_mlp[2]: fc2's input, gelu(h)
    emb = p["wte.weight"][ids[pos]] + p["wpe.weight"][pos]
    ln_bias = float(p["ln_f.bias"].astype(np.float64) @ p["wte.weight"][char])
    return Attribution(char, float(logits[pos, char]), heads, mlps, attn_bias, direct(emb),
                       ln_bias)


# -- ablation: switch a head off and re-run -----------------------------------------------------
@dataclass(frozen=True)
class Ablation:
    """Switch off one head (``head``) or a layer's whole attention (``head=None``).

    TransformerLens' convention: ``kind="zero"`` replaces the head's output (its slice of
    ``h.L.attn.z``, before W_O) by zeros, or the layer's attention output (``h.L.attn.out``, W_O
    and its bias applied) by zeros; ``kind="mean"`` replaces it by its mean over a reference set
    (:func:`mean_activations`), which keeps the part every input shares.
    """

    layer: int
    head: int | None = None
    kind: str = "zero"

    @property
    def label(self) -> str:
        return f"L{self.layer}H{self.head}" if self.head is not None else f"L{self.layer} attention"

    @property
    def point(self) -> str:
        return f"h.{self.layer}.attn.z" if self.head is not None else f"h.{self.layer}.attn.out"

    def check(self, model: GPT) -> Ablation:
        c = model.config
        for name, value, top in (("layer", self.layer, c.n_layer), ("head", self.head, c.n_head)):
            if name == "head" and value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or not (
                    0 <= value < top):
                raise ValueError(f"ablation {name} must be an int in [0, {top}), got {value!r}")
        if self.kind not in ("zero", "mean"):
            raise ValueError(f"ablation kind must be 'zero' or 'mean', got {self.kind!r}")
        return self


@one_blas_thread
def mean_activations(model: GPT, ids: np.ndarray) -> dict[str, np.ndarray]:
    """Each head's mean output ``h.L.attn.z`` ``(H, d_head)`` and each layer's mean attention
    output ``h.L.attn.out`` ``(C,)`` over the reference sequences ``ids (S, T)`` (every
    sequence and position): what a mean ablation puts in their place."""
    ids = np.asarray(ids)
    if ids.ndim != 2 or not ids.size:
        raise ValueError(f"mean_activations: ids must be a non-empty (S, T) array, got shape "
                         f"{ids.shape}")
    means = {}

    def keep(name, axes):
        def hook(a):
            means[name] = a.astype(np.float64).mean(axis=axes)
            return a
        return hook

    hooks = {}
    for i in range(model.config.n_layer):
        hooks[f"h.{i}.attn.z"] = keep(f"h.{i}.attn.z", (0, 2))  # (B, H, N, d) → (H, d)
        hooks[f"h.{i}.attn.out"] = keep(f"h.{i}.attn.out", (0, 1))  # (B, N, C) → (C,)
    model.run_with_hooks(ids, hooks)
    return means


def ablation_hooks(model: GPT, ablations, means: dict | None = None) -> dict:
    """The hooks for :meth:`GPT.run_with_hooks` that carry out ``ablations`` (several may
    share one hook point)."""
    by_point: dict[str, list[Ablation]] = {}
    for a in ablations:
        a.check(model)
        if a.kind == "mean" and (means is None or a.point not in means):
            raise ValueError(f"a mean ablation of {a.label} needs means (mean_activations of a "
                             "reference set)")
        by_point.setdefault(a.point, []).append(a)

    def hook_for(items):
        def hook(act):
            act = act.copy()
            for a in items:
                fill = 0.0 if a.kind == "zero" else means[a.point]
                if a.head is None:
                    act[...] = fill  # (B, N, C) the layer's whole attention output
                else:
                    act[:, a.head] = fill if a.kind == "zero" else fill[a.head]  # (B, N, d)
            return act
        return hook

    return {point: hook_for(items) for point, items in by_point.items()}


@dataclass
class Ablated:
    """One prompt's next-character logits and distribution, before and after ``ablations``."""

    ablations: tuple
    logits_before: np.ndarray  # (V,)
    logits_after: np.ndarray  # (V,)
    probs_before: np.ndarray  # (V,) at `temperature`
    probs_after: np.ndarray  # (V,)
    temperature: float


def ablate(model: GPT, ids, ablations=(), means: dict | None = None,
           temperature: float = 1.0) -> Ablated:
    """Run the prompt with and without ``ablations`` (a sequence of :class:`Ablation`)."""
    ids = _prompt(model, ids)[None]  # (1, N)
    ablations = tuple(ablations)
    hooks = ablation_hooks(model, ablations, means)
    with _one_thread():
        before = model.run_with_hooks(ids, {})[0, -1]  # (V,)
        after = model.run_with_hooks(ids, hooks)[0, -1] if hooks else before
    return Ablated(ablations, before, after, softmax_t(before, temperature),
                   softmax_t(after, temperature), float(temperature))


@dataclass
class HeadEffects:
    """What switching off each head (and each layer's attention) does to one prediction: the
    chosen character's probability (at T = 1) and logit before and after."""

    char: int
    p_before: float
    drop: np.ndarray  # (L, H) p_before − p_after, each head switched off alone
    logit_change: np.ndarray  # (L, H) logit_after − logit_before (the total effect, negated)
    layer_drop: np.ndarray  # (L,) the same for each layer's whole attention
    kind: str

    @property
    def total_effect(self) -> np.ndarray:
        """(L, H) logit_before − logit_after: what the head adds to the logit, all paths."""
        return -self.logit_change


def head_effects(model: GPT, ids, char: int | None = None, kind: str = "zero",
                 means: dict | None = None) -> HeadEffects:
    """Switch off every head in turn, then every layer's attention, and measure the drop in
    the probability (T = 1) of ``char`` (default: the most likely next character)."""
    ids = _prompt(model, ids)
    c = model.config
    with _one_thread():
        base = model.run_with_hooks(ids[None], {})[0, -1]  # (V,)
        char = int(np.argmax(base)) if char is None else int(char)
        if not 0 <= char < c.vocab_size:
            raise ValueError(f"char must lie in [0, {c.vocab_size}), got {char}")
        p0 = softmax_t(base, 1.0)[char]
        drop, change = np.zeros((c.n_layer, c.n_head)), np.zeros((c.n_layer, c.n_head))
        layer_drop = np.zeros(c.n_layer)
        for layer in range(c.n_layer):
            for h in [*range(c.n_head), None]:
                hooks = ablation_hooks(model, [Ablation(layer, h, kind)], means)
                logits = model.run_with_hooks(ids[None], hooks)[0, -1]
                p = softmax_t(logits, 1.0)[char]
                if h is None:
                    layer_drop[layer] = p0 - p
                else:
                    drop[layer, h] = p0 - p
                    change[layer, h] = float(logits[char]) - float(base[char])
    return HeadEffects(char, float(p0), drop, change, layer_drop, kind)


@dataclass
class WhereHeadsMatter:
    """For each head, the candidate prompt where switching it off lowers the predicted
    character's probability the most."""

    prompts: np.ndarray  # (S, T) the candidates searched
    best: np.ndarray  # (L, H) index of each head's prompt
    drop: np.ndarray  # (L, H) the drop there
    chars: np.ndarray  # (S,) each candidate's predicted character
    kind: str


def candidate_prompts(text_ids: np.ndarray, length: int, n: int) -> np.ndarray:
    """``n`` windows of ``length`` characters spread evenly over a text's ids: ``(n, length)``."""
    text_ids = np.asarray(text_ids)
    if len(text_ids) < length or n < 1:
        raise ValueError(f"candidate_prompts: need n ≥ 1 and a text of at least {length} "
                         f"characters, got n={n} and {len(text_ids)}")
    starts = np.linspace(0, len(text_ids) - length, n).astype(np.int64)
    return text_ids[starts[:, None] + np.arange(length)]


def where_heads_matter(model: GPT, prompts: np.ndarray, kind: str = "zero",
                       means: dict | None = None, heads=None) -> WhereHeadsMatter:
    """Search ``prompts (S, T)``: for every head (or only ``heads``, ``(layer, head)`` pairs),
    switched off alone on all of them at once, the prompt whose predicted character loses the
    most probability (T = 1). Heads not searched keep index −1 and a NaN drop."""
    prompts = np.asarray(prompts)
    c = model.config
    if heads is None:
        heads = [(la, h) for la in range(c.n_layer) for h in range(c.n_head)]
    with _one_thread():
        base = model.run_with_hooks(prompts, {})[:, -1]  # (S, V)
        chars = base.argmax(axis=-1)  # (S,)
        rows = np.arange(len(prompts))
        p0 = softmax_t(base, 1.0)[rows, chars]  # (S,)
        best = np.full((c.n_layer, c.n_head), -1, np.int64)
        drop = np.full((c.n_layer, c.n_head), np.nan)
        for layer, h in heads:
            hooks = ablation_hooks(model, [Ablation(layer, h, kind)], means)
            p = softmax_t(model.run_with_hooks(prompts, hooks)[:, -1], 1.0)[rows, chars]
            d = p0 - p  # (S,)
            best[layer, h] = int(np.argmax(d))
            drop[layer, h] = float(d[best[layer, h]])
    return WhereHeadsMatter(prompts, best, drop, chars, kind)


# -- generation through the KV cache ---------------------------------------------------------
@dataclass
class Step:
    char: int  # the character chosen at this step
    probs: np.ndarray  # (V,) the distribution it was drawn from
    weights: np.ndarray  # (L, H, n) the weights the last query put on the n earlier positions


@one_blas_thread
def generate(model: GPT, ids, n: int, temperature: float = 1.0, seed: int | None = 0,
             greedy: bool = False) -> list[Step]:
    """Append ``n`` characters to the prompt ``ids`` one at a time through a KV cache: each
    step feeds one character, so each layer projects one position and its query reads the
    cached keys — O(n·d) per step. Stops at the model's context. ``greedy`` takes the argmax,
    otherwise a draw from softmax(logits/T) with generator ``seed``."""
    ids = _prompt(model, ids)
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise ValueError(f"n must be an int ≥ 0, got {n!r}")
    n = min(n, model.config.block_size - ids.size + 1)
    rng = np.random.default_rng(seed)
    cache = model.new_cache()
    feed, steps = ids, []
    for _ in range(n):
        logits, weights = _cached_step(model, feed, cache)
        probs = softmax_t(logits, temperature)
        char = int(np.argmax(probs)) if greedy else int(rng.choice(probs.size, p=probs))
        steps.append(Step(char, probs, weights))
        feed = np.array([char])
        if cache.length >= model.config.block_size:
            break
    return steps


def _cached_step(model: GPT, feed: np.ndarray, cache) -> tuple[np.ndarray, np.ndarray]:
    """Feed ``feed (n_new,)`` after the cached positions through each block's real decoding
    path; returns the last position's logits ``(V,)`` and its query's weights ``(L, H, n)``
    over every cached key (recomputed from the layer's q and the cache: O(n·d))."""
    x, _ = model.embed(feed[None], start=cache.length)  # (1, n_new, C)
    causal = masks.causal()
    weights = []
    for i, block in enumerate(model.blocks):
        a = block.ln1(x)
        x, _ = block.forward(x, mask=causal, cache=cache[i])  # appends this layer's k, v
        q, _, _ = block.attn.project(a[:, -1:])  # (1, H, 1, d) the new query
        weights.append(functional.attention_weights(q, cache[i].k)[0, :, 0])  # (H, n)
    return model.unembed(x)[0][0, -1], np.stack(weights)
