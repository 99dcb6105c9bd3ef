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
@dataclass
class HeadRoles:
    previous_token: np.ndarray  # (L, H) mean weight on the key just before the query
    induction: np.ndarray  # (L, H) mean weight on the token after the earlier occurrence
    half: int  # length of the random sequence that is repeated
    ids: np.ndarray  # (n_sequences, 2·half) the sequences
    example_weights: np.ndarray  # (L, H, 2·half, 2·half) the first sequence's weights

    @property
    def n_sequences(self) -> int:
        return len(self.ids)


@one_blas_thread
def head_roles(model: GPT, n_sequences: int = 32, half: int | None = None,
               seed: int = 0) -> HeadRoles:
    """Previous-token and induction scores of every head on ``n_sequences`` random sequences
    of ``half`` characters (default: half the context) each followed by itself."""
    half = model.config.block_size // 2 if half is None else half
    if not 2 <= 2 * half <= model.config.block_size:
        raise ValueError(f"half must lie in [1, {model.config.block_size // 2}], got {half}")
    rng = np.random.default_rng([seed, 0x1D])
    first = rng.integers(0, model.config.vocab_size, (n_sequences, half))
    ids = np.concatenate([first, first], axis=1)  # (S, 2·half)
    w = weights_of(model, ids)[0].astype(np.float64)  # (S, L, H, N, N)
    n = 2 * half
    rows = np.arange(1, n)
    prev = w[..., rows, rows - 1].mean(axis=(0, -1))  # (L, H): query i → key i − 1
    second = np.arange(half, n)  # token at i repeats the one at i − half, followed by i−half+1
    induction = w[..., second, second - half + 1].mean(axis=(0, -1))  # (L, H)
    return HeadRoles(prev, induction, half, ids, w[0])


@dataclass
class TextRoles:
    """What the heads do on real text: on consecutive windows of the validation text, each
    head's mean weight on the previous character and on the most recent space (the start of
    the current word), over the queries that have one."""

    previous_char: np.ndarray  # (L, H)
    last_space: np.ndarray  # (L, H)
    n_windows: int


@one_blas_thread
def text_roles(model: GPT, ids: np.ndarray, space: int, n_windows: int = 40) -> TextRoles:
    """:class:`TextRoles` on the first ``n_windows`` context-long windows of ``ids`` (a text's
    ids; ``space`` is the id of " ")."""
    from .gpt import windows

    x, _ = windows(ids, model.config.block_size, n_windows)  # (S, T)
    S, T = x.shape
    w = weights_of(model, x)[0].astype(np.float64)  # (S, L, H, T, T)
    rows = np.arange(1, T)
    prev = w[..., rows, rows - 1].mean(axis=(0, -1))  # (L, H)
    # the most recent space at or before each query: a running maximum of space positions
    where = np.where(x == space, np.arange(T), -1)  # (S, T)
    last = np.maximum.accumulate(where, axis=1)  # (S, T)
    s_idx, q_idx = np.nonzero(last >= 0)
    on_space = w[s_idx, :, :, q_idx, last[s_idx, q_idx]]  # (M, L, H)
    return TextRoles(prev, on_space.mean(axis=0), S)


INDUCTION = 0.3  # an induction score at or above this calls a head an induction head
PREVIOUS = 0.5  # a previous-token score at or above this calls a head a previous-token head


def roles_sentence(roles) -> str:
    """What the grid shows, written from its numbers."""
    L, H = roles.previous_token.shape
    best_p = np.unravel_index(np.argmax(roles.previous_token), (L, H))
    best_i = np.unravel_index(np.argmax(roles.induction), (L, H))
    chance = float(np.mean(1.0 / np.arange(roles.half + 1, 2 * roles.half + 1)))
    n_ind = int((roles.induction >= INDUCTION).sum())
    n_prev = int((roles.previous_token >= PREVIOUS).sum())
    ind = (f"{n_ind} head(s) score ≥ {INDUCTION} as induction heads"
           if n_ind else f"no head scores ≥ {INDUCTION} as an induction head")
    return (f"{n_prev} head(s) put ≥ {PREVIOUS:.0%} of their weight on the previous character "
            f"(strongest L{best_p[0]}H{best_p[1]}, {roles.previous_token[best_p]:.2f}); {ind} "
            f"(strongest L{best_i[0]}H{best_i[1]}, {roles.induction[best_i]:.2f}; uniform "
            f"attention would give {chance:.3f})")


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
        mlps[i] = direct(block.mlp.fc2(c_mlp[2][0, pos]))  # c_mlp[2]: fc2's input, gelu(h)
    emb = p["wte.weight"][ids[pos]] + p["wpe.weight"][pos]
    ln_bias = float(p["ln_f.bias"].astype(np.float64) @ p["wte.weight"][char])
    return Attribution(char, float(logits[pos, char]), heads, mlps, attn_bias, direct(emb),
                       ln_bias)


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
