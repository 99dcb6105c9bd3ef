"""View 1 (X → Q, K, V) in headless Chromium: the selected query's dot products, weights and
blended output are qkv's; each W's rotation · stretch · rotation is numpy's SVD; the morph, the
2 → 1 case, the learned preset's sentence and the guided task follow the numbers; both knobs of
the "projection" preset can be grabbed; no broken words, nothing wider than a phone, no serious
axe-core violation. (Its seeded random interactions are in tests/test_explore_random.py.)
Screenshots go to a temporary folder (docs/screenshots/ with scripts/screenshots.sh)."""

from __future__ import annotations

import json
import math
from importlib import resources

import numpy as np
import pytest
from playwright.sync_api import expect

import qkv
from page_checks import DESKTOP, PHONE, assert_fits, assert_page_clean, axe_serious
from qkv.explore import projections
from test_explore_browser import idle, shown, shown_matrix
from test_explore_views import _page, browser, server_url, shot  # noqa: F401 (fixtures)

CIRCLE = np.array([[round(math.cos(2 * math.pi * i / 8), 4),
                    round(math.sin(2 * math.pi * i / 8), 4)] for i in range(8)])
LEARNED = json.loads((resources.files("qkv.explore") / "static" / "learned_2d.json").read_text())
DEFAULT = {"w_q": [[1, 0], [0, 1]], "w_k": [[1, 0], [1, 1]], "w_v": [[2, 0], [0, 0.5]]}
EPS = np.finfo(np.float64).eps


def _opened(browser, server_url, viewport):  # noqa: F811
    context, pg, outside, problems = _page(browser, server_url, viewport)
    yield pg
    context.close()
    # a typed entry out of range is the server's 422, which Chromium also logs
    assert outside == [] and [p for p in problems if "status of 422" not in p] == []


@pytest.fixture
def desk(browser, server_url):  # noqa: F811
    yield from _opened(browser, server_url, DESKTOP)


@pytest.fixture
def phone(browser, server_url):  # noqa: F811
    yield from _opened(browser, server_url, PHONE)


def open_projections(page) -> None:
    page.goto(f"{page.base}#view=projections")
    idle(page)


def trace_of(w_q, w_k, w_v, x=CIRCLE) -> qkv.Trace:
    x = np.asarray(x, dtype=np.float64)
    return qkv.explain(x @ np.asarray(w_q, float), x @ np.asarray(w_k, float),
                       x @ np.asarray(w_v, float))


def assert_selection_is_qkvs(page, trace: qkv.Trace, i: int) -> None:
    """The lookup table of query i holds row i of qkv's trace, and the sentence names its top."""
    n = trace.weights.shape[1]
    cells = shown(page, "proj-sel-")
    for j in range(n):
        assert cells[f"proj-sel-dot-{j}"][0] == trace.scores[i, j]
        assert cells[f"proj-sel-scaled-{j}"][0] == trace.scaled[i, j]
        assert cells[f"proj-sel-weight-{j}"][0] == trace.weights[i, j]
    for c in range(trace.output.shape[1]):
        assert cells[f"proj-sel-out-{c}"][0] == trace.output[i, c]
    said = page.get_by_test_id("proj-lookup").text_content()
    top = int(np.argmax(trace.weights[i]))
    assert f"Query point {i} asks" in said
    assert f"falls on k{top}" in said and f"{trace.weights[i, top]:.3f}" in said


def assert_clean(page) -> None:
    assert_page_clean(page)
    assert axe_serious(page) == []


def test_pick_a_query_and_see_whom_it_looks_up(desk):
    page = desk
    open_projections(page)
    trace = trace_of(**DEFAULT)
    values, _ = shown_matrix(page, "proj-weight", 8, 8)
    np.testing.assert_array_equal(values, trace.weights)
    assert_selection_is_qkvs(page, trace, 0)
    assert page.get_by_test_id("proj-out-mark").count() == 1
    # the K plane shades each key by query 0's weight
    fills = page.locator("[data-testid='proj-plane-K'] circle.pt").evaluate_all(
        "els => els.map(e => e.style.fill)")
    darkest = int(np.argmax(trace.weights[0]))
    assert fills[darkest] != fills[int(np.argmin(trace.weights[0]))]
    tips = page.locator("[data-testid='proj-plane-K'] circle.pt title").all_text_contents()
    assert tips[1] == f"k1: weight {trace.weights[0, 1]:.3f}, q0 · k1 = {trace.scores[0, 1]:.3f}"
    # every table says its shape
    text = page.get_by_test_id("proj-result").text_content()
    for said in ("X: 8 × 2 (n × d_model)", "Q = X W_Q: 8 × 2 (n × d_k)", "8 × 8 (n × n)",
                 "output = weights V: 8 × 2 (n × d_v)", "V = X W_V: 8 × 2 (n × d_v)"):
        assert said in text
    # the counts sentence, from qkv's weights
    top = trace.weights.argmax(axis=1)
    counts = page.get_by_test_id("proj-counts").text_content()
    assert f"on itself for {int((top == np.arange(8)).sum())} of 8" in counts
    assert_clean(page)
    shot(page, "projections-default.png")
    # keyboard: the picker's arrow keys, then a click on a point of the X plane
    page.get_by_test_id("proj-pick-0").focus()
    page.keyboard.press("ArrowRight")
    idle(page)
    assert page.evaluate("document.activeElement.dataset.testid") == "proj-pick-1"
    assert_selection_is_qkvs(page, trace, 1)
    page.locator("[data-testid='proj-plane-X'] circle.pt[data-i='5']").click(force=True)
    idle(page)
    assert_selection_is_qkvs(page, trace, 5)
    assert page.get_by_test_id("proj-pick-5").get_attribute("aria-checked") == "true"


def test_the_learned_preset_says_what_training_produced(desk):
    page = desk
    open_projections(page)
    page.get_by_test_id("preset-w_q").select_option("learned")
    idle(page)
    page.get_by_test_id("proj-pick-2").click()
    idle(page)
    trace = trace_of(LEARNED["w_q"], LEARNED["w_k"], LEARNED["w_v"])
    hits = int((trace.weights.argmax(axis=1) == (np.arange(8) + 1) % 8).sum())
    said = page.get_by_test_id("proj-learned").text_content()
    assert f"for {hits} of 8 points the largest weight falls on the counter-clockwise" in said
    assert "for query 2 it is k3, its neighbour" in said
    assert_selection_is_qkvs(page, trace, 2)
    assert_clean(page)
    shot(page, "projections-learned-selection.png")
    # change one number: no longer the learned matrices, and the sentence goes
    page.get_by_test_id("w_v-0-0").fill("1")
    page.get_by_test_id("w_v-0-0").press("Enter")
    idle(page)
    assert page.get_by_test_id("proj-learned").count() == 0


def test_each_w_is_written_as_numpys_svd_and_the_morph_plays(desk):
    page = desk
    open_projections(page)
    w = np.asarray(DEFAULT["w_k"], dtype=np.float64)
    sigma = np.linalg.svd(w)[1]
    box = page.get_by_test_id("svd-w_k")
    shown_u, _ = shown_matrix(page, "svd-w_k-u", 2, 2)
    shown_s, _ = shown_matrix(page, "svd-w_k-s", 2, 2)
    shown_vt, _ = shown_matrix(page, "svd-w_k-vt", 2, 2)
    np.testing.assert_array_equal(np.abs(np.diag(shown_s)), sigma)
    np.testing.assert_allclose(shown_u @ shown_s @ shown_vt, w, rtol=0, atol=16 * EPS)
    angle = math.degrees(math.atan2(shown_u[0, 1], shown_u[0, 0]))
    text = box.text_content()
    assert f"turn {abs(angle):.2f}° {'counter-clockwise' if angle > 0 else 'clockwise'}" in text
    assert f"× {sigma[0]:.3f} along x and × {sigma[1]:.3f} along y" in text
    # the slider, by keyboard: t = 1.5 is the middle of the stretch
    page.get_by_test_id("proj-t").focus()
    page.keyboard.press("Home")
    for _ in range(15):
        page.keyboard.press("ArrowRight")
    note = page.get_by_test_id("proj-morph-note").text_content()
    assert "t = 1.5: step 2 of 3, stretch" in note
    assert page.get_by_test_id("basis-w_k-0").count() == 0  # knobs only at t = 3
    assert_clean(page)
    shot(page, "projections-morph.png")
    page.get_by_test_id("proj-play").click()
    expect(page.get_by_test_id("proj-t")).to_have_value("3", timeout=20_000)
    assert page.get_by_test_id("basis-w_k-0").count() == 1


def test_two_to_one_queries_and_keys_on_a_line(desk):
    page = desk
    open_projections(page)
    page.get_by_test_id("proj-dk-1").check()
    idle(page)
    w_q, w_k = [[1], [0]], [[1], [0]]
    trace = trace_of(w_q, w_k, DEFAULT["w_v"])
    values, _ = shown_matrix(page, "proj-weight", 8, 8)
    np.testing.assert_array_equal(values, trace.weights)
    q, _ = shown_matrix(page, "proj-q", 8, 1)
    np.testing.assert_array_equal(q, CIRCLE @ np.asarray(w_q, float))
    assert "Q = X W_Q: 8 × 1 (n × d_k)" in page.get_by_test_id("proj-result").text_content()
    page.get_by_test_id("proj-pick-3").click()
    idle(page)
    assert_selection_is_qkvs(page, trace, 3)
    said = page.get_by_test_id("proj-lookup").text_content()
    assert "depend only on the one number q3 = -0.707: negative" in said
    task = page.get_by_test_id("proj-task").text_content()
    self_hits = projections.lookups(trace.weights)["self_count"]
    assert f"{self_hits} of 8 points put their largest weight on themselves" in task
    assert "try d_k = 2" in task
    assert_clean(page)
    shot(page, "projections-2to1.png")
    # a hand-edited URL with a broken 2 × 1 matrix keeps d_k = 1 and falls back to the default
    broken = json.dumps({"lookup": {"dk": 1, "query": 3, "narrow": {"w_q": "bad", "w_k": [[1]]}}})
    page.goto(f"{page.base}#view=projections&more={broken}")
    page.reload()
    idle(page)
    values, _ = shown_matrix(page, "proj-weight", 8, 8)
    np.testing.assert_array_equal(values, trace.weights)
    assert_page_clean(page)


def test_projection_preset_knobs_fan_out_and_the_task_is_checked(desk):
    page = desk
    open_projections(page)
    page.get_by_test_id("preset-w_k").select_option("projection")
    idle(page)
    a = page.get_by_test_id("basis-w_k-0").locator("circle").bounding_box()
    b = page.get_by_test_id("basis-w_k-1").locator("circle").bounding_box()
    assert math.hypot(a["x"] - b["x"], a["y"] - b["y"]) > 16  # both can be grabbed
    # grab the second: only row 1 moves
    plane = page.get_by_test_id("proj-plane-K").bounding_box()
    unit = plane["width"] / 5.0
    page.mouse.move(b["x"] + b["width"] / 2, b["y"] + b["height"] / 2)
    page.mouse.down()
    page.mouse.move(plane["x"] + plane["width"] / 2,
                    plane["y"] + plane["height"] / 2 - 1.0 * unit, steps=5)
    page.mouse.up()
    idle(page)
    rows = [[float(page.get_by_test_id(f"w_k-{r}-{c}").input_value()) for c in range(2)]
            for r in range(2)]
    assert rows[0] == [0.5, 0.5] and rows[1] == pytest.approx([0.0, 1.0], abs=0.051)
    # the keyboard reaches the first
    page.get_by_test_id("basis-w_k-0").focus()
    page.keyboard.press("ArrowRight")
    idle(page)
    assert float(page.get_by_test_id("w_k-0-0").input_value()) == 0.55
    # the task: W_K = identity = W_Q makes every point its own best match
    page.get_by_test_id("preset-w_k").select_option("identity")
    idle(page)
    assert "Done: all 8 of 8 points" in page.get_by_test_id("proj-task").text_content()
    # an entry the server refuses: its 422 in the banner, the old result marked stale
    page.get_by_test_id("w_k-0-0").fill("1e9")
    page.get_by_test_id("w_k-0-0").press("Enter")
    idle(page)
    # in the learner's words: the matrix's own label, no field path or HTTP code
    said = page.get_by_test_id("error").text_content()
    assert said.startswith("W_K: must be at most 1,000,000") and "[0]" not in said, said
    assert page.get_by_test_id("view-projections").get_attribute("data-stale") == "1"
    assert_page_clean(page)
    page.get_by_test_id("w_k-0-0").fill("1")
    page.get_by_test_id("w_k-0-0").press("Enter")
    idle(page)
    assert page.get_by_test_id("error").is_hidden()
    assert page.get_by_test_id("view-projections").get_attribute("data-stale") is None


@pytest.mark.parametrize("state", ["default", "learned", "morph", "2to1"])
def test_view_one_on_a_phone(phone, state):
    page = phone
    open_projections(page)
    if state == "learned":
        page.get_by_test_id("preset-w_q").select_option("learned")
        page.get_by_test_id("proj-pick-2").click()
    elif state == "morph":
        page.get_by_test_id("proj-t").fill("1.5")
    elif state == "2to1":
        page.get_by_test_id("proj-dk-1").check()
    idle(page)
    assert_fits(page)
    assert_clean(page)
    shot(page, f"projections-{state}-phone.png")
