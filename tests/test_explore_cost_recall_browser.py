"""View 6 · Cost in headless Chromium against a real ``qkv explore``: the memory row and its
sentence, the recall curves (the shipped MQAR run's JSON), the three models' answers on a
sequence the learner edits (the checkpoints called directly), the task's ✓ judged by the
library, every chart's text at least 11 CSS px at 390 px, and screenshots at both widths."""

from __future__ import annotations

import numpy as np
import pytest

from page_checks import PHONE, assert_fits
from qkv.tasks import mqar
from test_explore_browser import idle, shown
from test_explore_lesson_views import api, assert_verdict, check_everywhere, desk, phone  # noqa: F401  (desk, phone: fixtures)
from test_explore_views import _page, browser, open_view, server_url, shot  # noqa: F401

pytestmark = pytest.mark.slow


def library_answers(pairs, asked) -> dict[str, list]:
    config = mqar.load_pretrained("attention").config
    batch = mqar.encode(config, [tuple(p) for p in pairs], asked)
    out = {}
    for kind in mqar.KINDS:
        pred = mqar.load_pretrained(kind).predict(batch.tokens)[0]
        out[kind] = [int(pred[j]) - config.n_keys if pred[j] > config.n_keys else None
                     for j in np.flatnonzero(batch.target[0] >= 0)]
    return out


def shown_pairs(page) -> tuple[list[list[int]], list[int]]:
    pairs = [[int(x) for x in item.split(":")]
             for item in page.get_by_test_id("recall-pairs").input_value().split()]
    asked = [int(k) for k in page.get_by_test_id("recall-asked").input_value().split()]
    return pairs, asked


def assert_answers_shown(page) -> dict[str, list]:
    """Each model's answer on the page is the checkpoint's own on the sequence in the fields."""
    pairs, asked = shown_pairs(page)
    want = library_answers(pairs, asked)
    for kind, answers in want.items():
        for i, a in enumerate(answers):
            cell = page.get_by_test_id(f"recall-answer-{kind}-{i}")
            assert cell.get_attribute("data-value") == ("" if a is None else str(a))
    return want


def oracle_done(pairs, asked, want) -> bool:
    stored = dict(map(tuple, pairs))
    right = {k: [a == stored[q] for a, q in zip(v, asked, strict=True)] for k, v in want.items()}
    return all(right["attention"]) and not all(right["ssm-small"])


def assert_recall_task(page) -> None:
    pairs, asked = shown_pairs(page)
    want = assert_answers_shown(page)
    done = oracle_done(pairs, asked, want)
    stored = dict(map(tuple, pairs))
    att = sum(a == stored[q] for a, q in zip(want["attention"], asked, strict=True))
    small = sum(a == stored[q] for a, q in zip(want["ssm-small"], asked, strict=True))
    assert_verdict(page, "task-recall", done, f"attention answers {att} of {len(asked)}",
                   f"state-space model {small} of {len(asked)}")


def test_cost_view_shows_what_the_n2_buys_as_the_library_computes_it(desk):  # noqa: F811
    open_view(desk, "cost")
    desk.get_by_test_id("recall-table").wait_for()
    desk.get_by_test_id("recall-answers").wait_for()
    idle(desk)
    data = mqar.shipped()
    # the curves: every cell of the shipped run's JSON, as the table shows it
    for kind in mqar.KINDS:
        for r in data["models"][kind]["cells"]:
            got = shown(desk, f"recall-acc-{kind}-{r['length']}-{r['pairs']}")
            assert got[f"recall-acc-{kind}-{r['length']}-{r['pairs']}"][0] == r["accuracy"]
    # issue 34: view 6 quoted view 7's accuracy from another run (1,000 inputs per bucket against
    # view 7's 200); it now shows its own task's figures only
    assert "inputs per bucket" not in desk.locator("#view-cost").inner_text()
    intro = desk.get_by_test_id("recall-intro").text_content()
    assert "Mamba" in intro and "state-space" in intro
    for kind in ("ssm-small", "ssm-large"):
        run = data["models"][kind]
        assert f"{data['config']['d_model']} × {run['n_state']} = " \
               f"{run['state_floats_per_layer']:,}" in intro
    # the chart draws the selected length's cells
    length = int(desk.get_by_test_id("recall-length").input_value())
    dots = desk.locator("[data-testid^='recall-chart-']").evaluate_all(
        "els => els.map(e => [e.dataset.testid, +e.dataset.x, +e.dataset.y])")
    for k, kind in enumerate(mqar.KINDS):
        assert [(x, y) for t, x, y in dots if t.startswith(f"recall-chart-{k}-")] == [
            (r["pairs"], r["accuracy"]) for r in data["models"][kind]["cells"]
            if r["length"] == length]
    # the first sequence: one pair, which every model recalls (the task is not done yet)
    assert len(shown_pairs(desk)[0]) == 1
    assert_recall_task(desk)
    assert "done" not in desk.get_by_test_id("task-recall").get_attribute("class").split()
    check_everywhere(desk)
    shot(desk, "cost-buys.png")
    # more pairs, until the task is done (the oracle says which count does it first)
    for n in (2, 4, 8, 16, 32):
        desk.get_by_test_id("recall-n").fill(str(n))
        desk.get_by_test_id("recall-new").click()
        idle(desk)
        assert len(shown_pairs(desk)[0]) == n
        assert_recall_task(desk)
        if desk.get_by_test_id("task-recall").get_attribute("class").split().count("done"):
            break
    check_everywhere(desk)
    shot(desk, "cost-recall.png")


def test_an_edited_sequence_is_answered_and_bad_edits_are_refused_in_words(desk):  # noqa: F811
    open_view(desk, "cost")
    desk.get_by_test_id("recall-answers").wait_for()
    idle(desk)
    desk.get_by_test_id("recall-pairs").fill("3:17 9:4 12:30 1:1")
    desk.get_by_test_id("recall-asked").fill("12 3 1 9")
    desk.get_by_test_id("recall-run").click()
    idle(desk)
    assert shown_pairs(desk) == ([[3, 17], [9, 4], [12, 30], [1, 1]], [12, 3, 1, 9])
    assert_recall_task(desk)
    body = api(desk, "/api/cost/recall", {"pairs": [[3, 17], [9, 4], [12, 30], [1, 1]],
                                          "asked": [12, 3, 1, 9]})
    said = desk.get_by_test_id("recall-said").text_content()
    for m in body["models"]:
        assert f"{m['correct']} of {m['total']} right" in said
    for text, asked, says in (("3:17 3:4", "3", "key 3 is stored twice"),
                              ("3:17", "9", "key 9 is asked but no pair stores it"),
                              ("3-17", "3", "write each pair as key:value")):
        desk.get_by_test_id("recall-pairs").fill(text)
        desk.get_by_test_id("recall-asked").fill(asked)
        desk.get_by_test_id("recall-run").click()
        idle(desk)
        assert says in desk.get_by_test_id("error").text_content()
        check_everywhere(desk)


def test_the_memory_row_explains_itself_at_small_n(desk):  # noqa: F811
    open_view(desk, "cost")
    desk.get_by_test_id("cost-n").fill("4")  # n = 16
    idle(desk)
    body = api(desk, "/api/cost", {"n": 16, "mask": desk.get_by_test_id("cost-mask")
                                   .input_value()})
    assert shown(desk, "cost-qkv")["cost-qkv"][0] == body["qkv_bytes"]
    words = desk.get_by_test_id("cost-memory-words").text_content()
    assert "does not tile" in words and "one n × n matrix where the naive way keeps two" in words
    assert body["qkv_bytes"] < body["naive_bytes"]


CHART_TEXT = """() => Array.from(document.querySelectorAll(
    'section.view:not([hidden]) svg text')).filter((t) => t.getBoundingClientRect().height > 0)
    .map((t) => [t.textContent, t.getBoundingClientRect().height,
                 parseFloat(getComputedStyle(t).fontSize) *
                 t.ownerSVGElement.getBoundingClientRect().width /
                 t.ownerSVGElement.viewBox.baseVal.width])"""


def test_view_6_on_a_phone_fits_and_its_chart_text_is_legible(phone):  # noqa: F811
    open_view(phone, "cost")
    phone.get_by_test_id("growth-slopes").wait_for()
    phone.get_by_test_id("recall-table").wait_for()
    phone.get_by_test_id("recall-answers").wait_for()
    idle(phone)
    assert_fits(phone, PHONE["width"])
    texts = phone.evaluate(CHART_TEXT)
    assert texts
    small = [(t, round(px, 1)) for t, _, px in texts if px < 11]
    assert small == [], small  # issue 34: the growth chart's ticks were ~6 px at 390 px
    check_everywhere(phone)
    shot(phone, "cost-phone.png")
