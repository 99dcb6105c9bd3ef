"""qkv.tasks.copy_payoff (what copying is worth in a text) against brute-force oracles written
from its definition, and the induction runs' plain-text and GPT recipes (issue 49 item 3)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from qkv.tasks import copy_payoff as cp
from qkv.tasks import gpt, induction


def brute(x, y, match, table):
    """The copy rule as its docstring says it, one position at a time."""
    found = right = news = stats = 0
    for row_x, row_y in zip(x.tolist(), y.tolist(), strict=True):
        for t in range(len(row_x)):
            gram = tuple(row_x[t - match + 1: t + 1]) if t >= match - 1 else None
            guess = table.get(gram, -1) if gram else -1
            stats += guess == row_y[t]
            earlier = [j for j in range(match - 1, t) if gram and
                       tuple(row_x[j - match + 1: j + 1]) == gram]
            if earlier:
                found += 1
                if row_x[earlier[-1] + 1] == row_y[t]:
                    right += 1
                    news += guess != row_y[t]
    return found, right, news, stats


def brute_table(train, match):
    counts: dict = {}
    for i in range(match - 1, len(train) - 1):
        gram = tuple(train[i - match + 1: i + 1].tolist())
        counts.setdefault(gram, {}).setdefault(int(train[i + 1]), 0)
        counts[gram][int(train[i + 1])] += 1
    return {g: min(c, key=lambda k: (-c[k], k)) for g, c in counts.items()}


def coded(table, match, vocab):
    """A table keyed by gram tuples → keyed by copy_payoff's codes."""
    return {sum(v * vocab ** (match - 1 - i) for i, v in enumerate(g)): n
            for g, n in table.items()}


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_the_copy_rule_is_its_definition(data):
    vocab = data.draw(st.integers(2, 5))
    match = data.draw(st.integers(1, 3))
    T = data.draw(st.integers(1, 12))
    n = data.draw(st.integers(1, 4))
    seq = np.array(data.draw(st.lists(st.integers(0, vocab - 1), min_size=n * T + 1,
                                      max_size=n * T + 1)))
    train = np.array(data.draw(st.lists(st.integers(0, vocab - 1), min_size=2, max_size=40)))
    x, y = seq[:-1].reshape(n, T), seq[1:].reshape(n, T)
    table = brute_table(train, match)
    assert cp.next_table(train, match, vocab) == coded(table, match, vocab)
    k = cp.copy_counts(x, y, match, coded(table, match, vocab), vocab)
    assert (k.found, k.right, k.news, k.stats_right) == brute(x, y, match, table)
    assert k.positions == n * T
    news, wrong = cp.copy_positions(x, y, match, coded(table, match, vocab), vocab)
    assert news.sum() == k.news and wrong.sum() == k.found - k.right
    where = news | (x % 2 == 0)  # a subset of positions counts only there
    sub = cp.copy_counts(x, y, match, coded(table, match, vocab), vocab, where=where)
    assert sub.positions == where.sum() and sub.news == k.news


def test_gram_codes_refuse_what_int64_cannot_hold():
    with pytest.raises(ValueError, match="match=0"):
        cp.gram_codes(np.zeros(3, int), 0, 78)
    with pytest.raises(ValueError, match="vocab 78"):
        cp.gram_codes(np.zeros(3, int), 11, 78)


def test_a_repeated_random_chunk_is_news_and_shakespeare_at_64_rarely_is():
    from qkv.tasks.corpus import load as load_corpus

    corpus = load_corpus()
    vocab = corpus.tokenizer.vocab_size
    table = cp.next_table(corpus.train, 2, vocab)
    rng = np.random.default_rng(3)
    x, y, copied = induction.repeat_windows(corpus.val, rng, 200, 64, vocab, random_fraction=1.0)
    k = cp.copy_counts(x, y, 2, table, vocab, where=copied)
    assert k.share("right") > 0.8  # a random chunk written twice: copying is right
    plain = cp.text_counts(corpus, 64, 2, table)
    assert plain.share("news") < 0.05 < k.share("news")
    assert cp.text_counts(corpus, 1024, 2, table).share("news") > 3 * plain.share("news")


def test_position_losses_are_the_mean_loss_position_by_position():
    config = gpt.GPTConfig(n_layer=2, n_head=2, n_embd=16, block_size=12, vocab_size=11, seed=5)
    model = gpt.GPT(config)
    rng = np.random.default_rng(0)
    x, y = rng.integers(0, 11, (5, 12)), rng.integers(0, 11, (5, 12))
    losses = cp.position_losses(model, x, y, chunk=2)
    assert losses.shape == (5, 12)
    assert losses.mean() == pytest.approx(gpt.mean_loss(model, x, y), rel=1e-6)


def test_the_text_run_feeds_plain_windows_and_the_gpt_recipe_is_the_shipped_gpts():
    c = induction.gpt_config(steps=3, decay_steps=3, warmup=0)
    shipped = gpt.GPTConfig()
    for name in ("n_layer", "n_head", "n_embd", "block_size", "batch", "lr", "mlp",
                 "weight_decay", "beta2", "grad_clip"):
        assert getattr(c, name) == getattr(shipped, name), name
    data = np.arange(5000) % 78
    text = induction.TextRun.fresh(c)
    x, y = text.batch(data)
    expect = gpt.get_batch(data, np.random.default_rng([0, 1]), c.batch, c.block_size)
    np.testing.assert_array_equal(x, expect[0])
    np.testing.assert_array_equal(y, expect[1])
    assert text.data == "text" and induction.InductionRun.data == "repeats"


def test_qkv_train_induction_trains_the_gpts_recipe_on_plain_text(tmp_path, capsys):
    from qkv.cli import main

    weights = tmp_path / "w.safetensors"
    assert main(["train", "induction", "--model", "gpt", "--data", "text", "--context", "40",
                 "--batch", "2", "--steps", "2", "--eval-every", "1", "--checkpoint",
                 str(tmp_path / "c.safetensors"), "--save-weights", str(weights)]) == 0
    out = capsys.readouterr().out
    assert "the shipped GPT's architecture (with MLPs)" in out and "plain windows" in out
    assert "on plain text · induction" in out
    model, _, meta = gpt.load(weights)
    c = model.config
    assert (c.mlp, c.n_layer, c.n_embd, c.block_size, c.batch) == (True, 4, 128, 40, 2)
    assert [r["step"] for r in meta["history"]] == [1, 2] and "text" in meta["history"][0]
    with pytest.raises(SystemExit, match=r"--context 8 is too short: .* give at least 39"):
        main(["train", "induction", "--context", "8", "--checkpoint", str(tmp_path / "x")])
