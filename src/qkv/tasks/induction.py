"""An attention-only two-layer model that grows an induction head: Olsson et al. (2022),
"In-context learning and induction heads", at a size that trains in minutes.

The shipped GPT (:mod:`qkv.tasks.gpt`) has no induction head (docs/gpt.md). Olsson et al. saw
induction heads form in small attention-only models, suddenly — a *phase change*, a bump in
the loss curve — and only with two layers: a previous-token head in layer 0 writes "the token
before me was A" into each position, and a layer-1 head uses it to find where A occurred
before and copy what came next. This module trains such a model, :class:`qkv.tasks.gpt.GPT`
with ``mlp=False``, on text with repeats:

- **Data** (:func:`repeat_windows`): windows of Shakespeare (the shipped corpus's training
  part) in which a chunk of 8–20 characters, at a random place, is written again later at a
  random distance; in half of the windows the chunk is uniformly random characters of the
  alphabet. The text around it teaches what text teaches (a previous-character head pays off
  there); the repeat rewards finding the earlier copy by its content, since its distance varies.
- **Evaluation** every ``eval_every`` steps (:meth:`InductionRun.evaluate`): the loss on fixed
  held-out windows built the same way from the validation text (``val``; ``repeat``: only
  the positions inside the repeated chunk, which an induction head can predict), the training-text
  loss on the same kind of windows (``train``), and every head's :func:`role_scores
  <qkv.tasks.gpt_watch.role_scores>` on 16 repeated random sequences: the best layer-1
  induction score (``induction``) and the best layer-0 previous-token score (``previous``).

``qkv train induction`` reproduces the shipped file (``data/induction-shakespeare.safetensors``,
weights and history); the recipe is :func:`config`.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from .gpt import GPT, GPTConfig, GPTRun, get_batch, mean_loss, windows
from .gpt import load as load_gpt

PRETRAINED = Path(__file__).with_name("data") / "induction-shakespeare.safetensors"
MIN_LENGTH, MAX_LENGTH = 8, 20  # the repeated chunk
RANDOM_FRACTION = 0.5
EVAL_WINDOWS = 64


def config(**changes) -> GPTConfig:
    """The recipe: 2 attention-only layers × 4 heads, 64 wide, context 48; batch 32, AdamW at
    3e-3 (warmup 50, cosine to 3e-4 by the last step), 3,000 steps, evaluated every 50."""
    base = dict(n_layer=2, n_head=4, n_embd=64, block_size=48, vocab_size=78, batch=32,
                steps=3000, lr=3e-3, warmup=50, decay_steps=3000, eval_every=50,
                eval_windows=EVAL_WINDOWS, mlp=False, seed=0)
    base.update(changes)
    return GPTConfig(**base)


def repeat_windows(data: np.ndarray, rng: np.random.Generator, n: int, block: int,
                   vocab: int, min_length: int | None = None, max_length: int | None = None,
                   random_fraction: float | None = None
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``n`` windows of text with a repeat: ``(x, y, copied)``, x and y ``(n, block)`` (y the
    next character of x) and ``copied (n, block)`` True where y[t] repeats an earlier chunk
    (after the chunk's first character, so an induction head can predict it).

    Each row is a window of ``data`` (Shakespeare) in which a chunk of ``length`` characters
    (uniform in [min_length, max_length]) at a random place is written again later, at a random
    distance; in ``random_fraction`` of the rows the chunk is first replaced by uniformly random
    ids. The distance varies from the chunk's length to nearly the window, so no fixed offset
    finds the earlier copy: only its content does."""
    lo = MIN_LENGTH if min_length is None else min_length
    hi = MAX_LENGTH if max_length is None else max_length
    frac = RANDOM_FRACTION if random_fraction is None else random_fraction
    if not 2 <= lo <= hi or 2 * hi > block + 1:
        raise ValueError(f"repeat_windows: chunk lengths [{lo}, {hi}] must satisfy 2 ≤ min ≤ "
                         f"max and 2·max ≤ block + 1 = {block + 1}")
    starts = rng.integers(0, len(data) - block - 1, n)
    rows = data[starts[:, None] + np.arange(block + 1)].copy()  # (n, block + 1)
    length = rng.integers(lo, hi + 1, n)  # (n,)
    random = rng.random(n) < frac
    copied = np.zeros((n, block), bool)
    for r in range(n):
        m = int(length[r])
        src = int(rng.integers(0, block + 1 - 2 * m + 1))  # room for the copy after it
        dst = int(rng.integers(src + m, block + 1 - m + 1))
        if random[r]:
            rows[r, src: src + m] = rng.integers(0, vocab, m)
        rows[r, dst: dst + m] = rows[r, src: src + m]
        copied[r, dst: dst + m - 1] = True  # y[t] = row[t + 1] inside the copy, after its start
    return rows[:, :-1], rows[:, 1:], copied


def gpt_config(**changes) -> GPTConfig:
    """The shipped GPT's recipe (:class:`~qkv.tasks.gpt.GPTConfig`'s defaults: 4 layers × 4
    heads with MLPs, 128 wide, context 64, batch 12, AdamW at 1e-3 with warmup 100 and a
    cosine to 1e-4 by the last step), evaluated as the induction model is: every 100 steps on
    64 held-out windows."""
    base = dict(eval_every=100, eval_windows=EVAL_WINDOWS, seed=0)
    base.update(changes)
    return GPTConfig(**base)


class InductionRun(GPTRun):
    """:class:`qkv.tasks.gpt.GPTRun` on text with repeats, evaluated for the phase change."""

    data = "repeats"  # what its batches are (TextRun: plain text)

    def batch(self, data):
        c = self.config
        x, y, _ = repeat_windows(data, self.rng, c.batch, c.block_size, c.vocab_size)
        return x, y

    def held_out(self, data, salt: int):
        """Fixed evaluation windows (the same at every evaluation)."""
        c = self.config
        rng = np.random.default_rng([c.seed, 7, salt])
        return repeat_windows(data, rng, c.eval_windows, c.block_size, c.vocab_size)

    def evaluate(self, corpus) -> dict:
        from .gpt_watch import head_roles

        c = self.config
        train = mean_loss(self.model, *self.held_out(corpus.train, 1)[:2])
        x, y, copied = self.held_out(corpus.val, 2)
        val = mean_loss(self.model, x, y)
        copy = copy_loss(self.model, x, y, copied)
        text = mean_loss(self.model, *windows(corpus.val, c.block_size, c.eval_windows))
        roles = head_roles(self.model, n_sequences=16, seed=1)
        # an induction head needs a layer before it (the previous-token head): the best over
        # layers 1 and up (the induction model has only layer 1)
        row = {"step": self.step, "train": round(train, 5), "val": round(val, 5),
               "repeat": round(copy, 5), "text": round(text, 5),
               "induction": round(float(roles.induction[1:].max()), 5),
               "previous": round(float(roles.previous_token[0].max()), 5),
               "elapsed": round(self.elapsed, 3)}
        self.history.append(row)
        return row


class TextRun(InductionRun):
    """The same run and evaluations on plain text (nanoGPT's batches, no repeats written in):
    does an induction head form from the text's own repeats?"""

    data = "text"

    def batch(self, data):
        return get_batch(data, self.rng, self.config.batch, self.config.block_size)


def copy_loss(model: GPT, x: np.ndarray, y: np.ndarray, copied: np.ndarray) -> float:
    """Mean next-character cross-entropy over the positions ``copied (n, T)`` whose target
    repeats an earlier chunk of the window: what copying can predict."""
    from ..nn import log_softmax

    logp = log_softmax(model(x).astype(np.float64))  # (n, T, V)
    picked = np.take_along_axis(logp, y[..., None], axis=-1)[..., 0]  # (n, T)
    return float(-picked[copied].mean())


def load_pretrained() -> tuple[GPT, object, dict]:
    """The shipped induction model, its tokenizer and its metadata (``history``: the phase
    change, one row per evaluation)."""
    return load_gpt(PRETRAINED)


COMMAND = "qkv train induction --seed 0 --save-weights induction-shakespeare.safetensors"


def phase_change(history: list[dict], threshold: float | None = None) -> dict:
    """Where the history shows the phase change: the first evaluation whose layer-1 induction
    score reaches ``threshold`` (default :data:`qkv.tasks.gpt_watch.INDUCTION`), and the
    evaluation interval over which the copy loss fell the most, with the losses around it.
    ``step`` is None if the score never reached the threshold."""
    from .gpt_watch import INDUCTION

    threshold = INDUCTION if threshold is None else threshold
    if not history:
        raise ValueError("phase_change: the history is empty; train first")
    reached = next((row for row in history if row["induction"] >= threshold), None)
    drops = [(history[i - 1]["repeat"] - history[i]["repeat"], i) for i in range(1, len(history))]
    _, i = max(drops) if drops else (0.0, 0)
    return {"step": None if reached is None else reached["step"],
            "induction_at": None if reached is None else reached["induction"],
            "steepest_from": history[max(i - 1, 0)]["step"], "steepest_to": history[i]["step"],
            "repeat_from": history[max(i - 1, 0)]["repeat"], "repeat_to": history[i]["repeat"],
            "first": history[0], "last": history[-1]}
