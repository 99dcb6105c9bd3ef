"""What copying is worth in a text: how often a window's own earlier characters tell the next
character something the text's statistics do not.

An induction head predicts by copying: it finds where the current characters occurred earlier
in its context and reads what came next there (Olsson et al. 2022). Gradient descent builds one
only if copying pays on the training data — if the earlier copy is right where the model could
not have guessed from the characters just before. This module counts that, model-free, for any
context length: the **copy rule** at position t of a window (the last ``match`` characters,
``x[t-match+1..t]``, found earlier in the same window; its prediction is the character that
followed their most recent earlier occurrence) against the **text's statistics** (the character
that most often follows those ``match`` characters anywhere in the training text). A position
is *news* when the copy rule fires, is right, and the statistics say otherwise: there, and only
there, copying is worth more than an n-gram table.

Windows are consecutive, of ``context`` characters, as the validation loss cuts them
(:func:`qkv.tasks.gpt.windows`): each position sees its window's earlier characters only.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class CopyCounts:
    """The copy rule over ``positions`` next-character predictions: ``found`` where the last
    ``match`` characters occurred earlier in the window, ``right`` where what followed them there
    is the next character, ``news`` where it is right and the text's statistics predict another
    character; ``stats_right`` where the statistics alone are right (over all positions)."""

    context: int
    match: int
    positions: int
    found: int
    right: int
    news: int
    stats_right: int

    def share(self, name: str) -> float:
        """``found``, ``right``, ``news`` or ``stats_right`` as a fraction of all positions."""
        return getattr(self, name) / self.positions

    def to_dict(self) -> dict:
        return {"context": self.context, "match": self.match, "positions": self.positions,
                "found": self.found, "right": self.right, "news": self.news,
                "stats_right": self.stats_right}


def gram_codes(ids: np.ndarray, match: int, vocab: int) -> np.ndarray:
    """``(..., T)`` ids → ``(..., T)`` int64 codes of the ``match`` characters ending at each
    position (−1 where fewer than ``match`` precede it, within the last axis)."""
    if not 1 <= match or vocab ** match >= 2 ** 62:
        raise ValueError(f"gram_codes: match={match} must be ≥ 1 with vocab**match < 2**62 "
                         f"(vocab {vocab})")
    ids = np.asarray(ids, np.int64)
    codes = np.zeros(ids.shape, np.int64)
    for i in range(match):  # code[t] = Σ_i ids[t - match + 1 + i] · vocab^(match - 1 - i)
        shifted = np.zeros_like(ids)
        shift = match - 1 - i
        shifted[..., shift:] = ids[..., : ids.shape[-1] - shift]
        codes = codes * vocab + shifted
    codes[..., : match - 1] = -1
    return codes


def next_table(train: np.ndarray, match: int, vocab: int) -> dict[int, int]:
    """The text's statistics: for every ``match`` characters of ``train``, the character that
    most often follows them (the smallest id on a tie)."""
    codes = gram_codes(train[:-1], match, vocab)
    ok = codes >= 0
    pairs = codes[ok] * vocab + train[1:][ok]
    uniq, counts = np.unique(pairs, return_counts=True)
    gram, nxt = uniq // vocab, uniq % vocab
    order = np.lexsort((nxt, -counts, gram))  # per gram: the most frequent, then smallest id
    gram, nxt = gram[order], nxt[order]
    first = np.ones(len(gram), bool)
    first[1:] = gram[1:] != gram[:-1]
    return dict(zip(gram[first].tolist(), nxt[first].tolist(), strict=True))


def copy_guesses(x: np.ndarray, match: int, vocab: int) -> np.ndarray:
    """``(n, T)`` the copy rule's prediction at each position of the windows ``x (n, T)``: the
    character that followed the most recent earlier occurrence, in the same window, of the last
    ``match`` characters; −1 where they did not occur before (the rule does not fire)."""
    x = np.asarray(x)
    codes = gram_codes(x, match, vocab)
    guesses = np.full(x.shape, -1, np.int64)
    for r in range(len(x)):
        last: dict[int, int] = {}  # gram code → its most recent end position in this window
        xs, cs = x[r].tolist(), codes[r].tolist()
        for t, code in enumerate(cs):
            if code < 0:
                continue
            j = last.get(code)
            if j is not None:
                guesses[r, t] = xs[j + 1]
            last[code] = t
    return guesses


def _outcomes(x, y, match: int, table: dict[int, int], vocab: int) -> dict[str, np.ndarray]:
    """Per position ``(n, T)``: the copy rule ``found`` (fires), ``right``, ``news`` (right and
    the statistics wrong), and ``stats_right`` (the statistics alone right)."""
    y = np.asarray(y)
    guesses = copy_guesses(x, match, vocab)
    codes = gram_codes(np.asarray(x), match, vocab)
    stats = np.array([table.get(c, -1) for c in codes.ravel().tolist()],
                     np.int64).reshape(codes.shape)
    right = (guesses >= 0) & (guesses == y)
    return {"found": guesses >= 0, "right": right, "news": right & (stats != y),
            "stats_right": stats == y}


def copy_counts(x: np.ndarray, y: np.ndarray, match: int, table: dict[int, int],
                vocab: int, where: np.ndarray | None = None) -> CopyCounts:
    """The copy rule on windows ``x, y (n, T)`` (y the next character of x), against ``table``
    (:func:`next_table` of the training text); counted at the positions ``where (n, T)`` (all,
    by default)."""
    x = np.asarray(x)
    where = np.ones(x.shape, bool) if where is None else np.asarray(where, bool)
    o = _outcomes(x, y, match, table, vocab)
    return CopyCounts(x.shape[1], match, int(where.sum()),
                      *(int(o[k][where].sum()) for k in ("found", "right", "news", "stats_right")))


def text_counts(corpus, context: int, match: int, table: dict[int, int] | None = None
                ) -> CopyCounts:
    """:func:`copy_counts` over the whole validation text in consecutive windows of
    ``context`` characters (the statistics from the training text)."""
    from .gpt import windows

    vocab = corpus.tokenizer.vocab_size
    table = next_table(corpus.train, match, vocab) if table is None else table
    return copy_counts(*windows(corpus.val, context), match, table, vocab)


def copy_positions(x: np.ndarray, y: np.ndarray, match: int, table: dict[int, int],
                   vocab: int) -> tuple[np.ndarray, np.ndarray]:
    """``(news, wrong)``, each ``(n, T)``: True where the copy rule is right and the statistics
    are not (the *news* of :func:`copy_counts`), and where the copy rule fires but is wrong
    (the last ``match`` characters occurred before, and something else followed them)."""
    o = _outcomes(x, y, match, table, vocab)
    return o["news"], o["found"] & ~o["right"]


def position_losses(model, x: np.ndarray, y: np.ndarray, hooks: dict | None = None,
                    chunk: int = 128) -> np.ndarray:
    """``(n, T)`` next-character cross-entropy (nats) of ``model`` on windows ``x, y``, run
    with ``hooks`` (:meth:`qkv.tasks.gpt.GPT.run_with_hooks`; e.g. heads switched off)."""
    from ..nn import log_softmax

    out = np.empty(x.shape, np.float64)
    for i in range(0, len(x), chunk):
        logits = model.run_with_hooks(x[i: i + chunk], hooks or {})  # (b, T, V)
        logp = log_softmax(logits.astype(np.float64))
        out[i: i + chunk] = -np.take_along_axis(logp, y[i: i + chunk, :, None], -1)[..., 0]
    return out
