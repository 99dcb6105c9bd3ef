"""Issue 51 item 12: docs/gpt.md's words about the GPT and the induction model against their
own numbers (the shipped weights and training history), and the second-copy induction score
(TransformerLens', Olsson et al.'s) beside the project's."""

from __future__ import annotations

import itertools
import re
from pathlib import Path

import numpy as np
import pytest

from qkv.tasks import gpt, gpt_watch, induction

DOC = (Path(__file__).resolve().parents[1] / "docs" / "gpt.md").read_text()


def test_the_second_copy_score_reads_one_key_per_second_copy_query():
    half, S, L, H = 5, 3, 1, 2
    T = 2 * half
    w = np.zeros((S, L, H, T, T))
    for i in range(T):  # head 0: all weight on the token after the twin; head 1: uniform
        w[:, :, 0, i, i - half + 1 if i >= half else 0] = 1
        w[:, :, 1, i, : i + 1] = 1 / (i + 1)
    scores, uniform = gpt_watch.standard_induction_scores(w, half)
    assert scores[0, 0] == 1
    assert scores[0, 1] == pytest.approx(uniform)
    assert uniform == pytest.approx(np.mean([1 / (i + 1) for i in range(half, T)]))
    with pytest.raises(ValueError, match="half = 4"):
        gpt_watch.standard_induction_scores(w, 4)


def test_the_docs_quote_each_layers_largest_where_it_matters():
    from qkv.tasks.corpus import load as load_corpus

    model = gpt.load_pretrained()[0]
    prompts = gpt_watch.candidate_prompts(load_corpus().val, 32, 96)  # as qkv look --where
    best = gpt_watch.where_heads_matter(model, prompts).drop  # (L, H) each head's largest fall
    layer3 = {f"L3H{h}": 100 * best[3, h] for h in range(4)}
    top = max(layer3, key=layer3.get)
    assert f"layer 3's largest is {top}'s −{layer3[top]:.1f} points" in " ".join(DOC.split())
    low = np.unravel_index(np.argmin(best), best.shape)
    assert f"the smallest of all sixteen is L{low[0]}H{low[1]}'s −{100 * best[low]:.1f}" \
        in " ".join(DOC.split())
    assert "the last layer's far less" not in DOC


def test_the_phase_change_is_said_as_the_history_shows_it():
    history = induction.load_pretrained()[2]["history"]
    steps = {r["step"]: r for r in history}
    text = " ".join(DOC.split())
    assert "a bump in the loss curve" not in text and "stays near uniform" not in text
    # the held-out loss never turns up by more than the wobble the doc states
    rises = [b["val"] - a["val"] for a, b in itertools.pairwise(history)]
    assert round(max(rises), 2) <= 0.01 and "wobbles of at most 0.01 nats" in text
    falls = [steps[s]["repeat"] - steps[s + 50]["repeat"] for s in range(1650, 1850, 50)]
    assert 0.255 <= min(falls) and max(falls) < 0.305 and "0.26–0.30 nats per 50 steps" in text
    before = (steps[300]["repeat"] - steps[1500]["repeat"]) / 24
    assert round(before, 2) == 0.01 and "about 0.01 nats per 50 steps from step 300" in text
    assert f"({steps[900]['induction']:.3f}, " in text
    assert f"to {steps[1500]['induction']:.3f} at step 1,500" in text


def test_l0h2_is_named_by_its_measured_self_weight():
    model = induction.load_pretrained()[0]
    roles = gpt_watch.head_roles(model)
    w = np.asarray(gpt_watch.weights_of(model, roles.ids)[0], np.float64)
    T = w.shape[-1]
    on_itself = w[:, 0, 2, np.arange(T), np.arange(T)].mean()
    assert f"**L0H2** puts {100 * on_itself:.0f}% of its weight on its own position" \
        in " ".join(DOC.split())
    assert "the strongest previous-token head" not in DOC


def test_the_second_copy_scores_in_the_docs_are_measured():
    text = DOC
    block = re.search(r"induction model: L1H0 second-copy score (\S+) \(uniform (\S+)\)", text)
    assert block
    model = induction.load_pretrained()[0]
    roles = gpt_watch.head_roles(model)
    second, uniform = gpt_watch.standard_induction_scores(
        gpt_watch.weights_of(model, roles.ids)[0], roles.half)
    assert (f"{second[1, 0]:.3f}", f"{uniform:.4f}") == block.groups()
