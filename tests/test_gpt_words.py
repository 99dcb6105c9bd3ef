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


# -- issue 49 item 3: the GPT's own heads (docs/gpt.md), each figure from a shipped history -----
def _history(name: str) -> dict[int, dict]:
    from qkv.tasks import own_heads

    model, _, meta = own_heads.run(name).load()
    return {r["step"]: r for r in own_heads.history(model, meta)}


def _best_head_worth(name: str, corpus) -> tuple[tuple[int, int], dict]:
    """A run without an induction head: its best-scoring head and what that head is worth."""
    from qkv.tasks import own_heads

    model = own_heads.run(name).load()[0]
    assert not own_heads.induction_heads(model)
    head = own_heads.best_head(model)
    return head, own_heads.worth(model, [head], corpus)


def test_the_gpt_with_repeats_phase_change_is_said_as_its_history_shows_it():
    from qkv.tasks.gpt_watch import INDUCTION

    h = _history("gpt-repeats")
    small = _history("attention-only")
    text = " ".join(DOC.split())
    first = min(s for s, r in h.items() if r["induction"] >= INDUCTION)
    before = [h[s]["induction"] for s in h if s <= 4500]
    assert (f"until step {4500:,} the previous-token head grows ({h[1000]['previous']:.2f} at "
            f"step 1,000 → {h[4500]['previous']:.2f}) while the induction score stays at "
            f"{min(before):.2f}–{max(before):.2f} and the loss on the repeats barely moves "
            f"({h[1000]['repeat']:.2f} → {h[4500]['repeat']:.2f})") in text
    assert first == 5100 and (f"within 500 steps the induction score jumps from "
                              f"{h[4800]['induction']:.2f} to {h[5300]['induction']:.2f} and the "
                              f"repeats' loss falls from {h[4800]['repeat']:.2f} to "
                              f"{h[5300]['repeat']:.2f}") in text
    small_first = min(s for s, r in small.items() if r["induction"] >= INDUCTION)
    assert (f"at {h[first]['chars'] / 1e6:.2f} M training characters against "
            f"{small[small_first]['chars'] / 1e6:.2f} M") in text
    # the plain-text loss: its lowest so far at the phase change, not reached again until …
    plain = {s: r["text"] for s, r in h.items()}
    assert min(v for s, v in plain.items() if s <= first) == plain[first]
    again = min(s for s in plain if s > first and plain[s] <= plain[first])
    between = [v for s, v in plain.items() if first < s < again]
    wobble = max(plain[b] - plain[a] for a, b in itertools.pairwise(sorted(plain)) if b < 5000)
    assert (f"its lowest so far, {plain[first]:.3f} at step {first:,}, is not reached again "
            f"until step {again:,}; between the two it averages {np.mean(between):.3f} (at most "
            f"{max(between):.3f}; before step 5,000 no evaluation on its 64 windows rose more "
            f"than {wobble:.3f} "
            "above the one before)") in text


def test_the_gpt_trained_longer_on_plain_text_is_said_as_its_history_shows_it():
    from qkv.tasks import gpt_watch, own_heads

    h = _history("gpt-text")
    text = " ".join(DOC.split())
    last = max(h)
    best = max(h.values(), key=lambda r: r["induction"])
    model = own_heads.run("gpt-text").load()[0]
    uniform = gpt_watch.head_roles(model, n_sequences=16, seed=1).chance_induction  # as trained
    assert all(r["induction"] < gpt_watch.INDUCTION for r in h.values())
    assert 1.8 < h[last]["chars"] / _history("gpt-repeats")[5100]["chars"] < 2  # nearly twice
    assert (f"In {last:,} steps — {h[last]['chars'] / 1e6:.2f} M training characters, nearly "
            f"twice the {_history('gpt-repeats')[5100]['chars'] / 1e6:.2f} M") in text
    assert (f"the best induction score is {best['induction']:.3f} (at step {best['step']:,}) and "
            f"it ends at {h[last]['induction']:.3f}, below the {uniform:.3f} that uniform "
            "attention would give") in text and h[last]["induction"] < uniform
    assert (f"from {h[1000]['repeat']:.2f} at step 1,000 to {h[last]['repeat']:.2f}, as it "
            "grows surer") in text and h[last]["repeat"] > h[1000]["repeat"]
    assert (f"({h[2000]['text']:.3f} at step 2,000, where the shipped run stopped, to "
            f"{h[last]['text']:.3f} at step {last:,})") in text


def test_what_copying_is_worth_is_said_as_measured():
    from qkv.tasks import own_heads
    from qkv.tasks.corpus import load as load_corpus

    corpus = load_corpus()
    text = " ".join(DOC.split())
    pay = {(r["context"], r["repeats"]): r for r in own_heads.payoff(corpus)}
    own, rep = pay[64, False], pay[64, True]
    assert (f"occurred earlier at {100 * own['found']:.1f}% of positions, but what followed them "
            f"there is the next character at only {100 * own['right']:.1f}%: copying is wrong at "
            f"{100 * (own['found'] - own['right']):.1f}% of all positions and news at "
            f"{100 * own['news']:.2f}%") in text
    assert (f"offer news at {100 * rep['news']:.2f}% of positions, "
            f"{rep['news'] / own['news']:.1f}× as often") in text
    assert (f"news at {100 * pay[256, False]['news']:.2f}% of positions in windows of 256 "
            f"characters, {100 * pay[1024, False]['news']:.2f}% at 1,024, "
            f"{100 * pay[4096, False]['news']:.2f}% at 4,096") in text
    assert round((own["found"] - own["right"]) / own["news"]) == 6 and "six times as" in text
    # the induction head of the GPT trained with repeats, switched off
    model = own_heads.run("gpt-repeats").load()[0]
    heads = own_heads.induction_heads(model)
    w = own_heads.worth(model, heads, corpus)
    name = " and ".join(f"L{a}H{b}" for a, b in heads)
    assert w["without"]["plain"] < w["with"]["plain"]  # "costs more than it gives"
    assert (f"the induction head {name} of the GPT trained with repeats takes that GPT's "
            f"plain-text loss from {w['with']['plain']:.3f} *down* to "
            f"{w['without']['plain']:.3f}") in text
    assert (f"where copying is news ({w['with']['news']:.3f} with it, {w['without']['news']:.3f} "
            f"without) and on the repeats ({w['with']['repeats']:.3f} against "
            f"{w['without']['repeats']:.3f})") in text
    assert (f"it costs {w['with']['wrong'] - w['without']['wrong']:.3f} nats "
            f"({w['with']['wrong']:.3f} with it, {w['without']['wrong']:.3f} without)") in text
    # the plain-text GPT: no induction head, its best-scoring head's worth
    best, w = _best_head_worth("gpt-text", corpus)
    assert (f"its best-scoring head in layers 1–3 (L{best[0]}H{best[1]}) is worth "
            f"{w['without']['plain'] - w['with']['plain']:.3f} nats on plain text and nothing at "
            f"the news positions ({w['with']['news']:.3f} with it, {w['without']['news']:.3f} "
            "without)") in text and w["without"]["news"] <= w["with"]["news"]


def test_the_gpt_on_256_character_windows_is_said_as_its_history_shows_it():
    from qkv.tasks import gpt_watch, own_heads
    from qkv.tasks.corpus import load as load_corpus

    corpus = load_corpus()
    h, h64, rep = _history("gpt-text-256"), _history("gpt-text"), _history("gpt-repeats")
    text = " ".join(DOC.split())
    last = max(h)
    best = max(h.values(), key=lambda r: r["induction"])
    assert h[last]["chars"] == h64[max(h64)]["chars"]  # "the same characters"
    assert all(r["induction"] < gpt_watch.INDUCTION for r in h.values())
    assert (f"its best induction score is {best['induction']:.3f} (at step {best['step']:,}) and "
            f"its previous-token score ends at {h[last]['previous']:.3f}, where the 64-character "
            f"run's ends at {h64[max(h64)]['previous']:.3f} and the GPT with repeats' at "
            f"{rep[max(rep)]['previous']:.3f}") in text
    assert max(r["previous"] for r in h.values()) < gpt_watch.PREVIOUS  # no previous-token head
    pay = {(r["context"], r["repeats"]): r["news"] for r in own_heads.payoff(corpus)}
    assert round(pay[256, False] / pay[64, False]) == 3 and "three times the" in text
    assert 1 / 3 < pay[256, False] / pay[64, True] < 0.4 and "little more than a third" in text
    assert (f"its plain-text loss ends at {h[last]['text']:.3f} on its 256-character windows, "
            f"against {h64[max(h64)]['text']:.3f} on 64-character ones") in text
    head, w = _best_head_worth("gpt-text-256", corpus)
    model = own_heads.run("gpt-repeats").load()[0]
    r = own_heads.worth(model, own_heads.induction_heads(model), corpus)
    assert (f"its best-scoring head in layers 1–3 (L{head[0]}H{head[1]}) is worth "
            f"{w['without']['plain'] - w['with']['plain']:.3f} nats on plain text and "
            f"{w['without']['news'] - w['with']['news']:.3f} at the news positions, where the "
            f"induction head of the GPT with repeats is worth "
            f"{r['without']['news'] - r['with']['news']:.3f}") in text
