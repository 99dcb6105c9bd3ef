"""Issue 51 in headless Chromium, at 1400 and 390 px: the page's hints point the way its ✓ lies,
the learner's latest input wins, its screen-reader words follow the numbers, and its text is at
least 11 px as rendered.

- View 8 (far back): the hint ("move further back" / "move nearer") comes from the same oracle
  as the ✓ (views/farback.js taskHint), checked against an independent oracle (the shipped
  recency model called directly, tests/test_explore_lesson_views.far_first_miss) at every lag of
  ten series; following it from any lag reaches the ✓. Quick key presses on the lag slider are
  all kept: an answer for an older lag is never drawn over the slider.
- View 2: the live region never repeats an earlier move after the inputs changed.
- View 10: the sentence on the probability and the one on the logit each name their measure,
  and a head whose removal raises the probability more than any fall is said.
"""

from __future__ import annotations

import json
import urllib.parse
import urllib.request

import numpy as np
import pytest

from page_checks import DESKTOP, PHONE
from test_explore_browser import idle
from test_explore_lesson_views import far_first_miss
from test_explore_views import _page, browser, open_view, server_url  # noqa: F401  (fixtures)

WAIT_MS = 180_000  # the first far-back answers score the shipped models: generous under load
SERIES = range(10)  # series seeds whose hints are checked at every lag
pytestmark = pytest.mark.slow


@pytest.fixture(params=[DESKTOP, PHONE], ids=["1400", "390"])
def page(request, browser, server_url):  # noqa: F811
    context, pg, outside, problems = _page(browser, server_url, request.param)
    pg.set_default_timeout(WAIT_MS)
    yield pg
    context.close()
    # a page without a classroom queue probes GET /api/queue once and is answered 404 (issue
    # 50); a refusal the test asks for is a 422 (its words are checked in the banner)
    problems = [p for p in problems if "status of 404" not in p and "status of 422" not in p]
    assert outside == [] and problems == []


def api(page, path: str, body: dict) -> dict:
    request = urllib.request.Request(page.base.rstrip("/") + path, json.dumps(body).encode(),
                                     {"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=WAIT_MS / 1000) as answer:
        return json.loads(answer.read())


# -- view 8: the hint and the ✓ from one oracle; the latest lag wins -------------------------
def test_far_hint_points_towards_the_answer_from_every_lag(page):
    open_view(page, "farback")
    for seed in SERIES:
        answer = api(page, "/api/farback", {"seed": seed})
        target = far_first_miss({**answer, "request": {"seed": seed}})
        said = page.evaluate("""async (d) => {
            const m = await import('/static/views/farback.js');
            return d.sweep.lags.map((lag) => {
                const at = { ...d, event: { ...d.event, lag } };
                return [m.taskHint(at), m.taskVerdict(at).done, m.taskVerdict(at).text];
            });
        }""", answer)
        for lag, (hint, done, text) in enumerate(said, 1):
            if target is None:
                assert hint is None and not done, (seed, lag, text)
                continue
            want = None if lag == target else "further" if lag < target else "nearer"
            assert (hint, done) == (want, lag == target), (seed, lag, target, text)
            if want == "further":
                assert "move the event further back" in text, text
            elif want == "nearer":
                assert "move the event nearer" in text, text
        if target is not None:  # following the hint, one lag a step, reaches the ✓ from anywhere
            for start in range(1, len(said) + 1):
                lag, steps = start, 0
                while not said[lag - 1][1]:
                    lag += 1 if said[lag - 1][0] == "further" else -1
                    steps += 1
                    assert steps <= len(said), (seed, start)


def test_far_hint_for_the_series_the_issue_found(page):
    """Series 1: the ✓ at lag 4; at lags 6 and 7 the page said "further back" and "nearer"."""
    open_view(page, "farback", {"far": {"seed": 1, "lag": 6, "sign": 0, "distractors": None}})
    page.get_by_test_id("task-far").wait_for()
    idle(page)
    answer = api(page, "/api/farback", {"seed": 1, "event_lag": 6})
    target = far_first_miss({**answer, "request": {"seed": 1}})
    text = page.get_by_test_id("task-far").text_content()
    assert target is not None
    assert ("further back" in text) == (6 < target) and ("nearer" in text) == (6 > target), text


def test_far_lag_slider_keeps_every_key_press(page):
    open_view(page, "farback")
    page.get_by_test_id("far-words").wait_for()
    slider = page.get_by_test_id("far-lag")
    slider.focus()
    page.keyboard.press("Home")
    idle(page)
    for _ in range(10):  # quick presses: answers for older lags arrive while the learner types
        page.keyboard.press("ArrowRight")
    idle(page)
    assert slider.input_value() == "11"
    assert page.get_by_test_id("far-lag-value").text_content() == "lag 11"
    assert "At lag 11" in page.get_by_test_id("far-words").text_content()
    for _ in range(6):
        page.keyboard.press("ArrowLeft")
    idle(page)
    assert slider.input_value() == "5"
    assert "At lag 5" in page.get_by_test_id("far-words").text_content()


# -- view 2: the screen reader hears the vectors as they are now -------------------------------
def test_the_live_region_never_repeats_an_earlier_move(page):
    open_view(page, "vectors")
    handle = page.get_by_test_id("handle-key-1")
    handle.focus()
    for _ in range(3):
        page.keyboard.press("ArrowRight")
    idle(page)
    said = page.get_by_test_id("announce").text_content()
    assert said.startswith("k1 is now (0.15, 1.00); weights of q0:"), said
    page.get_by_test_id("check-shape-answer").fill("10 × 10")
    page.get_by_test_id("check-shape-run").click()
    idle(page)
    page.get_by_test_id("check-shape").wait_for()
    said = page.get_by_test_id("announce").text_content()
    k1 = page.evaluate("""() => Object.fromEntries(new URLSearchParams(location.hash.slice(1)))""")
    assert "k1 is now" not in said, (said, k1)
    assert said.startswith("weights of q0:"), said


# -- view 10: one measure per sentence, named in it -------------------------------------------
@pytest.mark.parametrize("prompt", ["To be, or not to b", "xqzv xqzv xqzv xq", "ROMEO."])
def test_the_gpt_sentences_each_name_their_one_measure(page, prompt):
    from qkv.tasks import gpt, gpt_watch

    model, tok = gpt.load_pretrained()
    ids = tok.encode(prompt)
    e = gpt_watch.head_effects(model, ids)
    a = gpt_watch.logit_attribution(model, ids)
    open_view(page, "gpt", {"gpt": {"prompt": prompt}})
    page.get_by_test_id("gpt-matters-sentence").wait_for()
    idle(page)
    prob = page.get_by_test_id("gpt-matters-sentence").text_content()
    logit = page.get_by_test_id("gpt-disagree").text_content()
    assert "logit" not in prob and "probability" in prob, prob
    assert "logit instead" in logit and "probability above" in logit, logit
    fall = np.unravel_index(np.argmax(e.drop), e.drop.shape)
    rise = np.unravel_index(np.argmin(e.drop), e.drop.shape)
    if e.drop[fall] > 0:
        assert f"switching L{fall[0]}H{fall[1]} off lowers it most, to " \
            f"{100 * (e.p_before - e.drop[fall]):.1f}% (−{100 * e.drop[fall]:.1f} points)" in prob
    said_rise = f"Switching L{rise[0]}H{rise[1]} off raises it most"
    assert (said_rise in prob) == bool(e.drop[rise] < 0), prob
    if e.drop[rise] < 0:  # "matters most" must not hide a larger rise
        assert ("a larger change than any head's fall" in prob) == \
            bool(-e.drop[rise] > max(e.drop[fall], 0)), prob
    assert "this prompt only" in prob
    direct = np.unravel_index(np.argmax(a.heads), a.heads.shape)
    total = np.unravel_index(np.argmax(e.total_effect), e.total_effect.shape)
    assert f"straight to the logit) is largest for L{direct[0]}H{direct[1]} " \
        f"({a.heads[direct]:.2f})" in logit, logit
    assert f"by every path) is largest for L{total[0]}H{total[1]} " \
        f"({e.total_effect[total]:.2f})" in logit, logit


# -- view 1: the letter F's task says what is possible, and its ✓ is reachable ------------------
def test_the_letter_f_task_says_at_most_3_of_7_and_is_done_there(page):
    from test_explore_learner_api import SHAPES, corners_by_sweep, reaching_w_k

    x = np.array(SHAPES["letter"])
    corners = corners_by_sweep(x)
    identity = [[1, 0], [0, 1]]
    open_view(page, "projections", {"proj": {"shape": "letter", "w_q": identity,
                                             "w_k": identity, "w_v": identity}})
    page.get_by_test_id("proj-task").wait_for()
    idle(page)
    said = page.get_by_test_id("proj-task").text_content()
    assert "At most 3 of 7 can" in said and "(points 0, 3, 5)" in said, said
    assert "points 1, 2, 4, 6 lie on an edge or inside it" in said, said
    assert "every point that can attend to itself" in said
    w_k = reaching_w_k(x, len(corners))
    open_view(page, "projections", {"proj": {"shape": "letter", "w_q": identity, "w_k": w_k,
                                             "w_v": identity}})
    page.get_by_test_id("proj-task").wait_for()
    idle(page)
    box = page.get_by_test_id("proj-task")
    assert "done" in box.get_attribute("class").split(), box.text_content()
    assert "Done: 3 of 7 points put their largest weight on themselves, as many as can." \
        in box.text_content()


# -- view 9: the heat map opens at its size, its labels apart and whole ------------------------
HEAT_JS = """() => {
    const map = document.querySelector('svg.heatmap');
    const box = map.getBoundingClientRect();
    const rows = Array.from(map.querySelectorAll('.tok-label.row'))
        .map((t) => t.getBoundingClientRect());
    const labels = Array.from(map.querySelectorAll('.tok-label'))
        .map((t) => [t.textContent, t.getBoundingClientRect()]);
    const cut = labels.filter(([, r]) => r.left < box.left - 0.5 || r.right > box.right + 0.5
        || r.top < box.top - 0.5 || r.bottom > box.bottom + 0.5).map(([t]) => t);
    let overlaps = 0;
    for (let i = 1; i < rows.length; i += 1) {
        if (rows[i].top < rows[i - 1].bottom - 1) overlaps += 1;
    }
    return { width: box.width, n: rows.length, overlaps, cut };
}"""


@pytest.mark.parametrize("sentence", [
    None,  # the default sentence: 13 tokens with [CLS] and [SEP]
    "In the beginning the universe was created and this has made a lot of people very angry "
    "and been widely regarded as a bad move by almost everyone who heard of it",
])
def test_the_heat_map_opens_at_its_size_with_its_labels_apart_and_whole(page, sentence):
    url = "view=model" + ("" if sentence is None else
                          "&sentence=" + urllib.parse.quote(sentence))
    page.goto(f"{page.base}#{url}")
    page.locator("svg.heatmap").wait_for()
    idle(page)
    first = page.evaluate(HEAT_JS)
    page.locator("canvas.thumb").nth(3).click()
    idle(page)
    again = page.evaluate(HEAT_JS)
    assert first["width"] == again["width"], (first, again)
    assert first["overlaps"] == 0 and first["cut"] == [], first
    width = page.viewport_size["width"]
    if width >= 1400:
        assert first["width"] >= 400, first  # beside the thumbnails, not 198 px


# -- view 6: one tile in every caption; a refusal names the control as labelled ----------------
def test_the_cost_captions_speak_of_one_tile(page):
    from qkv import engine

    config = engine.current()
    tq, tk = config.tile_q, config.key_tile(False)
    open_view(page, "cost")
    page.get_by_test_id("cost-mask").select_option("none")
    page.get_by_test_id("cost-n").fill("12")
    idle(page)
    rows, cols = -(-4096 // tq), -(-4096 // tk)
    skipped = page.get_by_test_id("cost-skipped").text_content()
    assert skipped.endswith(f"of {rows * cols}"), skipped
    grid = page.get_by_test_id("cost-grid").get_attribute("aria-label")
    assert grid.startswith(f"{rows} × {cols} tiles of {tq} queries × {tk} keys"), grid
    words = page.get_by_test_id("cost-memory-words").text_content()
    assert f"one {tq} × {tk} tile each" in words, words


def test_a_recall_refusal_names_the_asked_keys_control(page):
    open_view(page, "cost")
    page.get_by_test_id("recall-pairs").fill("3:17")
    page.get_by_test_id("recall-asked").fill("9")
    page.get_by_test_id("recall-run").click()
    idle(page)
    said = page.locator("#error").text_content()
    assert "asked keys: key 9 is asked but no pair stores it" in said, said
