"""The lesson's measured claims in the page, in headless Chromium against a real ``qkv explore``:
view 8 · Far back (the shipped far-back models on an edited series), view 6's time against n and
view 7's accuracy by length. Every number shown is checked against the library (the models
called directly, their held-out scores, ``scaling.slope``); every state is checked with
tests/page_checks.py (no broken words, no stale result beside an error, nothing wider than a
phone, axe-core); tests/test_explore_random.py drives the far-back view at random. Screenshots at
1400 × 900 and 390 × 844 go to the screenshot folder
(a temporary one; docs/screenshots/ with scripts/screenshots.sh)."""

from __future__ import annotations

import functools
import json
import urllib.request
from decimal import ROUND_HALF_UP, Decimal
from urllib.parse import parse_qs, urlsplit

import numpy as np
import pytest

from page_checks import DESKTOP, PHONE, assert_fits, assert_page_clean, axe_serious
from qkv.explore.cost_service import live_fit_from
from qkv.tasks import farback, scaling, seq2seq
from test_explore_browser import idle, shown
from test_explore_views import _page, browser, open_view, server_url, shot  # noqa: F401  (fixtures)

WAIT_MS = 180_000  # the first answers score the shipped models: generous under load
KINDS = ("attention", "recency", "gru")
pytestmark = pytest.mark.slow  # real browser, real server, the shipped models scored


def _open(browser, server_url, viewport):  # noqa: F811
    context, pg, outside, problems = _page(browser, server_url, viewport)
    pg.set_default_timeout(WAIT_MS)
    return context, pg, outside, problems


@pytest.fixture
def desk(browser, server_url):  # noqa: F811
    context, pg, outside, problems = _open(browser, server_url, DESKTOP)
    pg.on("console", lambda m: problems.remove(f"console {m.type}: {m.text}")
          if m.type == "error" and "status of 422" in m.text
          and f"console {m.type}: {m.text}" in problems else None)
    yield pg
    context.close()
    assert outside == [] and problems == []


@pytest.fixture
def phone(browser, server_url):  # noqa: F811
    context, pg, outside, problems = _open(browser, server_url, PHONE)
    yield pg
    context.close()
    assert outside == [] and problems == []


def api(page, path: str, body: dict) -> dict:
    request = urllib.request.Request(page.base.rstrip("/") + path, json.dumps(body).encode(),
                                     {"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=WAIT_MS / 1000) as answer:
        return json.loads(answer.read())


def far_state(page) -> dict:
    """The far-back view's state, from the URL hash, as the request body the page sends."""
    more = json.loads(parse_qs(urlsplit(page.url).fragment)["more"][0])["far"]
    body = {"seed": more["seed"]}
    if more["lag"]:
        body["event_lag"] = more["lag"]
    if more["sign"]:
        body["event_sign"] = more["sign"]
    if more["distractors"] is not None:
        body["distractor_lags"] = more["distractors"]
    return body


def assert_far_shows(page, answer: dict) -> None:
    """The predictions, probabilities and every step's weight shown are the answer's, and the
    answer's are the shipped models' on the answer's series."""
    x = features_of(answer)
    for kind in KINDS:
        assert answer["models"][kind]["prediction"] == \
            (1 if int(farback.load_pretrained(kind).predict(x)[0]) == 1 else -1)
    np.testing.assert_array_equal(np.array(answer["weights"], np.float32),
                                  farback.load_pretrained("attention").weights(x)[0])
    for kind in KINDS:
        assert shown(page, f"far-pred-{kind}")[f"far-pred-{kind}"][0] == \
            answer["models"][kind]["prediction"]
        assert shown(page, f"far-p-{kind}")[f"far-p-{kind}"][0] == answer["models"][kind]["p_plus"]
    W = answer["window"]
    weights = shown(page, "far-w-")
    assert [weights[f"far-w-{W - i}"][0] for i in range(W)] == answer["weights"]


def features_of(answer: dict) -> np.ndarray:
    """The task's features ``(1, W, n_types + 3)`` of the answer's series, as
    ``farback.sample`` builds them."""
    n_types = farback.load_pretrained("attention").config.n_types
    types, sizes, signs = (np.array(answer[k]) for k in ("types", "sizes", "signs"))
    x = np.concatenate([np.eye(n_types)[types], sizes[:, None], signs[:, None],
                        (signs * sizes)[:, None]], axis=-1)
    return x[None].astype(np.float32)


def task_shown(page, testid: str) -> tuple[bool, str]:
    """A guided task's verdict as shown: (marked done?, its sentence)."""
    box = page.get_by_test_id(testid)
    return "done" in (box.get_attribute("class") or "").split(), box.text_content()


def assert_verdict(page, testid: str, done: bool, *said: str) -> None:
    """The task box says done exactly when the numbers imply it, and names those numbers."""
    shown_done, text = task_shown(page, testid)
    assert shown_done == done and text.startswith("✓ " if done else "Not yet: "), text
    for part in said:
        assert part in text, (part, text)


def sign_of(s: int) -> str:
    return "+" if s > 0 else "−"


def far_first_miss(answer: dict) -> int | None:
    """The task's true answer, computed here and not by the page: the shortest lag at which the
    shipped recency model no longer reads the event (:func:`far_reads`), or None if it reads
    it at every lag."""
    reads = far_reads(answer)
    return reads.index(False) + 1 if False in reads else None


def far_reads(answer: dict) -> tuple[bool, ...]:
    """For each lag 1 … window, whether the shipped recency model reads the event there —
    right for the event's sign and for the flipped one — when the answer's series has its
    event moved to that lag (as the lag slider moves it: ``farback_service.make_series``, a
    distractor on that step taken over). The model is called directly, on each lag's
    series."""
    body = answer["request"]
    lags = body.get("distractor_lags")
    return _reads(body["seed"], answer["event"]["sign"], None if lags is None else tuple(lags))


@functools.cache
def _reads(seed: int, sign: int, distractor_lags: tuple[int, ...] | None) -> tuple[bool, ...]:
    """:func:`far_reads`, computed once per seed, sign and distractors: it does not depend on
    the lag shown, and the tests judge many lags of one series (2 × window model calls, a
    second or two, each time)."""
    from qkv.explore import farback_service

    recency = farback.load_pretrained("recency")  # loaded once: each call reads the checkpoint
    config = recency.config
    reads = []
    for L in range(1, config.window + 1):
        dis = None if distractor_lags is None else [d for d in distractor_lags if d != L]
        right = []
        for s in (sign, -sign):
            types, sizes, signs, _ = farback_service.make_series(seed, L, s, dis)
            x = farback.features(types[None], sizes[None], signs[None], config.n_types)
            right.append((recency.predict(x)[0] == 1) == (s > 0))
        reads.append(all(right))
    return tuple(reads)


def assert_far_task(page, answer: dict, body: dict | None = None) -> None:
    """View 8's task, judged here by :func:`far_first_miss` (the model called directly at
    every lag, both signs): done exactly when the event sits at the shortest lag where the
    recency average no longer reads it, and the sentence names the answers shown."""
    answer = {**answer, "request": body or far_state(page)}
    target = far_first_miss(answer)
    # the sweep the page's verdict reads (the server's, kept between requests) is the models'
    # on this series at every lag
    swept, reads = answer["sweep"]["models"]["recency"]["reads"], far_reads(answer)
    assert swept == list(reads), \
        [lag for lag, (a, b) in enumerate(zip(swept, reads, strict=True), 1) if a != b]
    done = target is not None and answer["event"]["lag"] == target
    shown_done, text = task_shown(page, "task-far")
    assert shown_done == done, (target, answer["event"]["lag"], text)
    opening = "✓ " if done else ("Not yet. " if target is not None else "At lag ")
    assert text.startswith(opening), text
    r = answer["models"]["recency"]
    assert (f"At lag {answer['event']['lag']} the recency average answers "
            f"{sign_of(r['prediction'])} (P(+) = {r['p_plus']:.3f}) for the event's sign "
            f"{sign_of(answer['event']['sign'])}") in text, text


def assert_skip_task(page, answer: dict) -> None:
    """View 6's task, judged here from the API's tile counts: at least 80% skipped."""
    t = answer["tiles"]
    share = t["empty"] / t["total"]
    which = "no mask" if answer["mask"] == "none" else f"the {answer['mask']} mask"
    assert_verdict(page, "task-skip", share >= 0.8,
                   f"ith {which} at n = {answer['n']:,}, qkv skips "
                   f"{t['empty']:,} of {t['total']:,} tiles ({to_fixed(100 * share, 1)}%)")


def to_fixed(x: float, digits: int) -> str:
    """JavaScript's ``x.toFixed(digits)`` for x ≥ 0: a tie on x's exact value rounds up (9 of 16
    tiles is 56.25%: "56.3", where Python's format rounds half to even, "56.2")."""
    return str(Decimal(x).quantize(Decimal(1).scaleb(-digits), rounding=ROUND_HALF_UP))


def check_everywhere(page) -> None:
    assert_page_clean(page)
    assert axe_serious(page) == []


# -- far back ------------------------------------------------------------------------------------
def far_small_text(page) -> list[str]:
    """Text in the open view rendered under 11 CSS px: an HTML element's computed font size,
    an SVG text's font size times its SVG's scale on screen (getScreenCTM)."""
    return page.evaluate("""() => {
        const open = document.querySelector('section.view:not([hidden])');
        const bad = [];
        for (const e of open.querySelectorAll('*')) {
            const own = Array.from(e.childNodes).some((n) =>
                n.nodeType === 3 && n.textContent.trim());
            if (!own || !e.getClientRects().length) continue;
            let px = parseFloat(getComputedStyle(e).fontSize);
            if (e instanceof SVGElement && e.getScreenCTM()) {
                const m = e.getScreenCTM();
                px *= Math.hypot(m.a, m.b);
            }
            if (px < 11 - 1e-6) {
                bad.push(`${e.tagName} "${e.textContent.trim().slice(0, 30)}": ${px.toFixed(1)}`);
            }
        }
        return bad.slice(0, 10);
    }""")


def far_verdicts_over_every_lag(page, answer: dict) -> list[bool]:
    """The page's own verdict function (views/farback.js taskVerdict) applied to the answer
    with the event at each lag 1 … window (for distractors as sampled the sweep does not depend
    on the lag shown, so the answer's sweep is each lag's)."""
    return page.evaluate("""async (d) => {
        const m = await import('/static/views/farback.js');
        return d.sweep.lags.map((lag) => m.taskVerdict({ ...d, event: { ...d.event, lag } }).done);
    }""", answer)


def test_far_back_view_shows_what_the_models_compute(desk):
    open_view(desk, "farback")
    desk.get_by_test_id("far-curves-table").wait_for()
    idle(desk)
    config = farback.load_pretrained("attention").config
    s = farback.sample(config, np.random.default_rng([0, 0xFA4B]), 1)  # seed 0, as the view's
    for kind in KINDS:
        model = farback.load_pretrained(kind)
        logits = model.forward(s.x)[0][0].astype(np.float64)
        assert shown(desk, f"far-pred-{kind}")[f"far-pred-{kind}"][0] == \
            (1 if logits[1] > logits[0] else -1)
        np.testing.assert_allclose(shown(desk, f"far-p-{kind}")[f"far-p-{kind}"][0],
                                   1 / (1 + np.exp(logits[0] - logits[1])), rtol=1e-12)
        stored = model.metrics  # farback.evaluate on the held-out set, when it was trained
        for i, bucket in enumerate(stored["by_lag"]):
            assert shown(desk, f"far-acc-{kind}-{i}")[f"far-acc-{kind}-{i}"][0] == \
                bucket["accuracy"]
        assert shown(desk, f"far-acc-{kind}")[f"far-acc-{kind}"][0] == stored["accuracy"]
    w = farback.load_pretrained("attention").weights(s.x)[0]
    weights = shown(desk, "far-w-")
    W = config.window
    np.testing.assert_array_equal(
        np.array([weights[f"far-w-{W - i}"][0] for i in range(W)], np.float32), w)
    # the words about the curves are the stored numbers': where each falls to chance
    words = desk.get_by_test_id("far-curves-words").text_content().lower()
    for kind in KINDS:
        chance = farback.load_pretrained(kind).metrics["chance_from"]
        label = {"attention": "attention", "recency": "recency average", "gru": "gru"}[kind]
        if chance is None:
            assert f"{label} is never at chance" in words
        else:
            lags = f"{chance[0]}–{chance[1]}" if chance[1] > chance[0] else f"{chance[0]}"
            assert f"{label} falls to chance from lag {lags} (" in words
    tuned = farback.tuned_gru_run()["run"]
    said = desk.get_by_test_id("far-tuned").text_content()
    assert f"{tuned['parameters']:,} parameters, 600 steps, {tuned['train_seconds']:.1f} s" in said
    answer = api(desk, "/api/farback", far_state(desk))
    assert_far_shows(desk, answer)
    assert f"At lag {int(s.lag[0])}" in desk.get_by_test_id("far-words").text_content()
    assert_far_task(desk, answer)
    check_everywhere(desk)
    shot(desk, "farback.png")

    # the task over its whole domain: the page's verdict at every lag against the oracle's
    target = far_first_miss({**answer, "request": far_state(desk)})
    verdicts = far_verdicts_over_every_lag(desk, answer)
    assert verdicts == [lag == target for lag in range(1, W + 1)], target
    # … and driven by the keyboard through the states that matter: lag 1, the answer, its
    # neighbours (the slider moves one lag per arrow key)
    slider = desk.get_by_test_id("far-lag")
    slider.focus()
    desk.keyboard.press("Home")
    idle(desk)
    assert far_state(desk)["event_lag"] == 1
    assert_far_task(desk, api(desk, "/api/farback", far_state(desk)))
    assert target is not None and target < 64  # the recency average fades within 64 steps
    for lag in range(2, target + 2):
        desk.keyboard.press("ArrowRight")
        idle(desk)
        assert far_state(desk)["event_lag"] == lag
        if lag >= target - 1:
            assert_far_task(desk, api(desk, "/api/farback", far_state(desk)))
    assert not task_shown(desk, "task-far")[0]
    desk.keyboard.press("ArrowLeft")
    idle(desk)
    assert task_shown(desk, "task-far")[0]  # back on the answer
    check_everywhere(desk)

    # degenerate inputs to the verdict: a recency model that reads the event at every lag (no
    # answer), and one that misses it already at lag 1 (the answer is lag 1)
    degenerate = desk.evaluate("""async (d) => {
        const m = await import('/static/views/farback.js');
        const at = (lag, reads) => ({ ...d, event: { ...d.event, lag },
            sweep: { ...d.sweep, models: { ...d.sweep.models, recency: {
                ...d.sweep.models.recency, reads } } } });
        const all = d.sweep.lags.map(() => true);
        const first = d.sweep.lags.map((lag) => lag !== 1);
        return [d.sweep.lags.map((lag) => m.taskVerdict(at(lag, all)).done),
                d.sweep.lags.map((lag) => m.taskVerdict(at(lag, first)).done)];
    }""", answer)
    assert not any(degenerate[0])
    assert degenerate[1] == [lag == 1 for lag in range(1, W + 1)]

    # lag 1, no distractors: all three right, and the page says so
    desk.get_by_test_id("far-lag1").click()
    idle(desk)
    answer = api(desk, "/api/farback", far_state(desk))
    assert far_state(desk)["event_lag"] == 1 and answer["distractor_lags"] == []
    assert all(answer["models"][k]["correct"] for k in KINDS)
    assert "At lag 1 all three models are right." in desk.get_by_test_id("far-words").text_content()
    assert_far_shows(desk, answer)
    assert_far_task(desk, answer)

    # distractors on every step after the event, then the event moved and flipped
    desk.get_by_test_id("far-reset").click()
    idle(desk)
    desk.get_by_test_id("far-lag").fill("40")
    idle(desk)
    desk.get_by_test_id("far-recent").click()
    idle(desk)
    answer = api(desk, "/api/farback", far_state(desk))
    assert answer["distractor_lags"] == list(range(1, 9))
    assert desk.get_by_test_id("far-distractors").input_value() == "1, 2, 3, 4, 5, 6, 7, 8"
    assert "8 block trades of other types are distractors, 8 of them more recent" in \
        desk.get_by_test_id("far-words").text_content()
    assert_far_shows(desk, answer)
    assert_far_task(desk, answer)
    desk.get_by_test_id("far-sign").click()
    idle(desk)
    answer = api(desk, "/api/farback", far_state(desk))
    assert far_state(desk)["event_sign"] == answer["event"]["sign"]
    assert_far_shows(desk, answer)
    assert_far_task(desk, answer)
    check_everywhere(desk)

    # bad input, in the learner's words: the control's label, no field path, no HTTP code
    for typed, says in (("abc", 'Distractor lags: "abc" is not a lag.'),
                        ("0, 999", 'Distractor lags: "0" is not a lag.'),
                        ("40", "Distractor lags: 40 is the event's lag"),
                        ("3, 3", "Distractor lags: each lag may be typed once.")):
        desk.get_by_test_id("far-distractors").fill(typed)
        desk.get_by_test_id("far-apply").click()
        idle(desk)
        banner = desk.get_by_test_id("error").text_content()
        assert says in banner and "distractor_lags" not in banner and "HTTP" not in banner, banner
        assert desk.get_by_test_id("view-farback").get_attribute("data-stale") == "1"
        check_everywhere(desk)
    desk.get_by_test_id("far-seed").fill("-3")
    desk.get_by_test_id("far-seed").dispatch_event("change")
    banner = desk.get_by_test_id("error").text_content()
    assert banner.startswith("Series seed: type a whole number") and "HTTP" not in banner


def test_far_back_view_on_a_phone(phone):
    open_view(phone, "farback")
    phone.get_by_test_id("far-curves-table").wait_for()
    idle(phone)
    # nothing opens scrolled sideways, nothing is wider than the phone, no text under 11 px
    assert phone.evaluate("window.scrollX") == 0
    scrolled = phone.evaluate("""() => Array.from(document.querySelectorAll(
        '#view-farback *')).filter((e) => e.scrollLeft > 0).map((e) => e.className)""")
    assert scrolled == []
    assert_fits(phone)
    assert far_small_text(phone) == []
    # every text of the charts lies inside its chart (no stray clipped words)
    outside = phone.evaluate("""() => Array.from(document.querySelectorAll(
        '#view-farback svg text')).filter((t) => {
            const r = t.getBoundingClientRect(), s = t.ownerSVGElement.getBoundingClientRect();
            return r.width > 0 && (r.left < s.left - 1 || r.right > s.right + 1);
        }).map((t) => t.textContent)""")
    assert outside == []
    check_everywhere(phone)
    shot(phone, "farback-phone.png")
    phone.get_by_test_id("far-lag1").click()
    idle(phone)
    assert far_small_text(phone) == [] and phone.evaluate("window.scrollX") == 0
    assert_fits(phone)


# -- cost: time against n ------------------------------------------------------------------------
def assert_growth_shows(page) -> None:
    """The growth plot's shipped points are the shipped results, its live points lie in
    64 … 2,048, and each slope shown is ``scaling.slope`` of the points drawn."""
    dots = page.locator("[data-testid^='growth-chart-']").evaluate_all(
        "els => els.map(e => [e.dataset.testid, +e.dataset.x, +e.dataset.y])")
    series: dict[int, list[tuple[float, float]]] = {}
    for testid, x, y in dots:
        k = int(testid.split("-")[-2])
        series.setdefault(k, []).append((x, y))
    shipped = scaling.shipped()
    fit_from = live_fit_from(int(page.get_by_test_id("growth-max").input_value()))
    methods = ("qkv dense", "qkv causal", "qkv window", "ssm scan")
    for k, method in enumerate(methods):  # series 0–3 shipped, 4–7 live, same order
        assert series[k] == [(p["n"], p["seconds"]) for p in shipped["methods"][method]["points"]]
        fit = [(n, t) for n, t in series[k] if n >= shipped["config"]["fit_from"]]
        assert shown(page, f"growth-slope-shipped-{k}")[f"growth-slope-shipped-{k}"][0] == \
            scaling.slope(*zip(*fit, strict=True))
        live = [(n, t) for n, t in series.get(k + 4, []) if n >= fit_from]
        assert all(64 <= n <= 2048 for n, _ in series.get(k + 4, []))
        if len(live) >= 2:
            assert shown(page, f"growth-slope-live-{k}")[f"growth-slope-live-{k}"][0] == \
                pytest.approx(scaling.slope(*zip(*live, strict=True)), rel=1e-12)
        else:  # a busy machine spent the time budget before the second point of the fit
            assert page.get_by_test_id(f"growth-slope-live-{k}").text_content() == \
                "too few points"


def test_cost_view_times_n_live_and_shipped_with_scalings_slopes(desk):
    open_view(desk, "cost")
    desk.get_by_test_id("growth-slopes").wait_for()
    idle(desk)
    assert_growth_shows(desk)  # what the n² buys: tests/test_explore_cost_recall_browser.py
    check_everywhere(desk)
    shot(desk, "cost-growth.png")
    # the task: a mask and an n where qkv skips at least 80% of the tiles
    states = [("causal", 12), ("window", 12), ("window", 13)]
    for mask, exponent in states:
        desk.get_by_test_id("cost-mask").select_option(mask)
        desk.get_by_test_id("cost-n").fill(str(exponent))
        idle(desk)
        assert_skip_task(desk, api(desk, "/api/cost", {"n": 2 ** exponent, "mask": mask}))
    assert task_shown(desk, "task-skip")[0]  # window at n = 8,192 skips 211 of 256
    check_everywhere(desk)


# -- encoder–decoder: accuracy by length, and the bottleneck at first look -----------------------
def test_encoder_decoder_shows_the_bottleneck_first_and_the_held_out_curve(desk):
    open_view(desk, "seq2seq")
    desk.get_by_test_id("seq2seq-curve-table").wait_for()
    idle(desk)
    text = desk.get_by_test_id("seq2seq-input").input_value()
    symbols = np.array(["abcdefghijklmnop".index(c) for c in text])
    config = seq2seq.load_pretrained("fixed").config
    assert len(text) == config.max_len  # a long input by default
    right = {}
    for kind in ("attention", "fixed"):
        out, _ = seq2seq.load_pretrained(kind).translate(symbols)
        right[kind] = int((out == symbols[::-1]).sum())
        assert f"— {right[kind]} of {len(text)} right" in desk.get_by_test_id(
            "seq2seq-result").text_content()
    assert right["fixed"] < right["attention"]  # the bottleneck, at first look
    assert shown(desk, "fixed-w-") == {} and desk.get_by_test_id("fixed-context").is_visible()
    curves = api(desk, "/api/seq2seq/curves", {})  # = seq2seq.evaluate (test_explore_measured)
    for kind in ("attention", "fixed"):
        for i, bucket in enumerate(curves["models"][kind]):
            assert shown(desk, f"s2s-acc-{kind}-{i}")[f"s2s-acc-{kind}-{i}"][0] == \
                bucket["token_accuracy"]
    assert_s2s_task(desk, api(desk, "/api/seq2seq", {"input": text}))
    assert not task_shown(desk, "task-s2s")[0]  # 40 symbols: longer than 12
    check_everywhere(desk)
    shot(desk, "seq2seq-curves.png")
    desk.get_by_test_id("seq2seq-short").click()
    idle(desk)
    assert desk.get_by_test_id("seq2seq-input").input_value() == curves["long_example"][:8]
    assert_s2s_task(desk, api(desk, "/api/seq2seq", {"input": curves["long_example"][:8]}))
    check_everywhere(desk)
    # the task done: the longest prefix of at most 12 symbols that splits the two models
    for k in range(12, 3, -1):
        answer = api(desk, "/api/seq2seq", {"input": text[:k]})
        if s2s_task_done(answer):
            break
    else:
        pytest.fail("no prefix of the default input of 4–12 symbols splits the two models")
    desk.get_by_test_id("seq2seq-input").fill(text[:k])
    desk.get_by_test_id("seq2seq-run").click()
    idle(desk)
    assert_s2s_task(desk, answer)
    assert task_shown(desk, "task-s2s")[0]
    check_everywhere(desk)


def s2s_task_done(answer: dict) -> bool:
    a, f = answer["attention"], answer["fixed"]
    return len(answer["input"]) <= 12 and a["correct"] == a["length"] and f["correct"] < f["length"]


def assert_s2s_task(page, answer: dict) -> None:
    """View 7's task, judged here from the API's answer."""
    a, f = answer["attention"], answer["fixed"]
    assert_verdict(page, "task-s2s", s2s_task_done(answer),
                   f"n “{answer['input']}” ({len(answer['input'])} symbols) attention gets "
                   f"{a['correct']} of {a['length']} right, the fixed context vector "
                   f"{f['correct']} of {f['length']}")


@pytest.mark.parametrize("view, ready, name", [
    ("cost", "growth-slopes", "phone-cost-growth.png"),
    ("seq2seq", "seq2seq-curve-table", "phone-seq2seq-curves.png"),
])
def test_the_lesson_views_fit_a_phone(phone, view, ready, name):
    open_view(phone, view)
    phone.get_by_test_id(ready).wait_for()
    idle(phone)
    assert_fits(phone, PHONE["width"])
    check_everywhere(phone)
    shot(phone, name)
