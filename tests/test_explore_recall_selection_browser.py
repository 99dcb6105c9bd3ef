"""View 6 · what "selective" selects (issue 49, item 4), in headless Chromium against a real
``qkv explore``: on the learner's own key:value sequence, every cell of the strip is the share of
the state the library's S6 layer keeps at that token; the words state the figures an oracle
computes from the checkpoints; the room sentence quotes the shipped accuracy by pairs; at 390 px
the view fits and no text is under 11 px. Screenshots at both widths (QKV_SCREENSHOTS)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from page_checks import PHONE, assert_fits
from qkv.tasks import mqar
from test_explore_browser import idle
from test_explore_lesson_views import check_everywhere, desk, far_small_text, phone  # noqa: F401  (desk, phone: fixtures)
from test_explore_views import _page, browser, open_view, server_url, shot  # noqa: F401

pytestmark = pytest.mark.slow

PAIRS, ASKED = "3:17 9:4 12:30 1:1 20:2 7:9", "12 3 20 1 9 7"


def oracle_kept(pairs, asked) -> dict[str, list[np.ndarray]]:
    """Per state-space model and layer, exp(mean over channels and states of Δ·A) per token, from
    the checkpoint's own layers (Δ from the model's selection, A from the layer's parameters)."""
    config = mqar.load_pretrained("attention").config
    batch = mqar.encode(config, pairs, asked)
    out = {}
    for kind in ("ssm-small", "ssm-large"):
        model = mqar.load_pretrained(kind)
        out[kind] = [np.exp((s["delta"][0].astype(np.float64)[:, :, None]
                             * mixer.ssm.A.astype(np.float64)).mean(axis=(1, 2)))
                     for s, mixer in zip(model.selection(batch.tokens), model.mixers, strict=True)]
    return out


def ask(page) -> None:
    page.get_by_test_id("recall-pairs").fill(PAIRS)
    page.get_by_test_id("recall-asked").fill(ASKED)
    page.get_by_test_id("recall-run").click()
    idle(page)
    page.get_by_test_id("recall-kept").wait_for()


def test_the_strip_and_its_words_are_the_library_s_numbers(desk):  # noqa: F811
    open_view(desk, "cost")
    desk.get_by_test_id("recall-answers").wait_for()
    idle(desk)
    ask(desk)
    pairs = [tuple(int(x) for x in p.split(":")) for p in PAIRS.split()]
    asked = [int(k) for k in ASKED.split()]
    want = oracle_kept(pairs, asked)
    n_pairs = len(pairs)
    for kind, layers in want.items():
        for layer, kept in enumerate(layers):
            for i, k in enumerate(kept):
                cell = desk.get_by_test_id(f"recall-kept-{kind}-{layer}-{i}")
                assert math.isclose(float(cell.get_attribute("data-value")), k, rel_tol=1e-5)
                assert cell.text_content() == f"{100 * k:.0f}"
    # the words: per model, the layer whose pairs and questions differ most, both shares quoted
    words = [desk.get_by_test_id(f"recall-selection-words-{i}").text_content() for i in (0, 1)]
    for said, (kind, layers) in zip(words, want.items(), strict=True):
        stats = []
        for kept in layers:
            in_pairs = np.log(kept[: 2 * n_pairs]).mean()
            after = np.log(kept[2 * n_pairs:]).mean()
            stats.append((abs(after - in_pairs), after - in_pairs, np.exp(in_pairs),
                          np.exp(after)))
        layer = int(np.argmax([s[0] for s in stats]))
        _, contrast, k_pairs, k_asked = stats[layer]
        n_state = mqar.load_pretrained(kind).config.n_state(kind)
        assert said.startswith(f"state-space, N = {n_state}, layer {layer + 1}:")
        assert f"reads the pairs it keeps {100 * k_pairs:.0f}%" in said
        assert f"while it is asked {100 * k_asked:.0f}%" in said
        assert f"half of it gone after {math.log(0.5) / math.log(k_pairs):.1f} tokens" in said
        if abs(contrast) >= 0.02:
            assert ("holds its state while it is asked" in said) == (contrast > 0)
    # the room sentence: the shipped accuracy by pairs at the longest training length
    room = desk.get_by_test_id("recall-room").text_content()
    data = mqar.shipped()
    length = max(data["config"]["train_lengths"])
    assert f"at length {length}" in room
    for kind in ("ssm-small", "ssm-large"):
        cells = [c for c in data["models"][kind]["cells"] if c["length"] == length]
        fall = next((c for c in cells if c["accuracy"] < 0.9), None)
        if fall is not None:
            assert f"{100 * fall['accuracy']:.0f}% with {fall['pairs']}" in room
    check_everywhere(desk)
    desk.get_by_test_id("recall-selection").scroll_into_view_if_needed()
    shot(desk, "cost-selection.png")


def test_the_strip_fits_a_phone_and_its_text_is_legible(phone):  # noqa: F811
    open_view(phone, "cost")
    phone.get_by_test_id("recall-answers").wait_for()
    idle(phone)
    ask(phone)
    phone.get_by_test_id("recall-room").wait_for()
    assert_fits(phone, PHONE["width"])
    assert far_small_text(phone) == []
    check_everywhere(phone)
    phone.get_by_test_id("recall-selection").scroll_into_view_if_needed()
    shot(phone, "cost-selection-phone.png")
