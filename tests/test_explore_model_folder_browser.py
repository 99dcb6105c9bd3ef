"""`qkv explore --model FOLDER` in headless Chromium: a causal model's heads in the model view,
its future keys drawn as masked (grey, ×) in the thumbnails, the heat map and the neuron view,
and every weight the page holds equal to what qkv computed for that folder."""

from __future__ import annotations

import os

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

import test_explore_browser as eb
from qkv.models.folder import TransformersFolder
from qkv.render.colors import MASKED
from test_explore_live import cli_server
from test_look_transformers import SENTENCE, SRC, build

CHROMIUM, idle, shot, shown = eb.CHROMIUM, eb.idle, eb.shot, eb.shown
browser, page = eb.browser, eb.page  # the fixtures: Chromium, and a fresh page on server_url

pytestmark = pytest.mark.skipif(not os.path.exists(CHROMIUM), reason=f"no {CHROMIUM}")


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return build("llama", tmp_path_factory.mktemp("models") / "llama")


@pytest.fixture(scope="module")
def server_url(folder):  # the `page` fixture's server: this folder's model
    env = {**os.environ, "PYTHONPATH": str(SRC), "HF_HUB_OFFLINE": "1"}
    with cli_server("--model", str(folder), env=env) as url:
        yield url


def test_causal_heads_are_drawn_masked(page, folder):
    model = TransformersFolder.load(folder)
    expected = model.attention_map(SENTENCE)
    n = len(expected.tokens)
    page.goto(f"{page.base}#view=model")
    idle(page)
    page.get_by_test_id("sentence").fill(SENTENCE)
    page.get_by_test_id("load-sentence").click()
    idle(page)
    assert page.get_by_test_id("model-name").text_content() == \
        "llama (LlamaModel), 2 layers × 4 heads,"
    assert page.locator("canvas.thumb").count() == 2 * 4
    # a thumbnail's pixels: masked pairs in the masked grey, the others on the weight scale
    pixels = page.get_by_test_id("thumb-1-3").evaluate(
        "c => Array.from(c.getContext('2d').getImageData(0, 0, c.width, c.height).data)")
    rgb = np.array(pixels).reshape(n, n, 4)[..., :3]
    future = ~np.tril(np.ones((n, n), bool))
    assert (rgb[future] == MASKED).all() and not (rgb[~future] == MASKED).all(axis=-1).any()
    # the large heat map: every future cell is masked, grey, marked ×; the rest are qkv's
    page.get_by_test_id("thumb-1-3").click()
    cells = page.locator("[data-testid^='heat-cell-']").evaluate_all(
        "els => els.map(e => [e.dataset.testid, e.dataset.allowed, e.style.fill, "
        "Number(e.dataset.value)])")
    grid = {tid: (allowed, fill, value) for tid, allowed, fill, value in cells}
    for i in range(n):
        for j in range(n):
            allowed, fill, value = grid[f"heat-cell-{i}-{j}"]
            assert allowed == ("0" if j > i else "1")
            assert (fill == "rgb({}, {}, {})".format(*MASKED)) == (j > i)
            assert value == float(expected.weights[1, 3, i, j])
    assert page.locator(".heatmap .mask-mark").count() == n * (n - 1) // 2
    page.get_by_test_id("heat-cell-2-7").hover()
    assert page.get_by_test_id("hover-info").text_content().endswith("masked (may not attend)")
    # the neuron view of token 3: its past keys weighted, its future keys masked
    page.get_by_test_id("heat-row-3").click()
    idle(page)
    _, trace = model.head_trace(SENTENCE, 1, 3, 3)
    weights = shown(page, "neuron-weight-")
    for j in range(n):
        value, text = weights[f"neuron-weight-{j}"]
        assert value == trace.weights[0, j]
        assert (text == "× masked") == (j > 3)
    title = page.get_by_test_id("neuron-title").text_content()  # GQA 4/2: kv head 3 // 2
    assert "k[1], v[1]" in title and "query head 3 reads kv head 1" in title, title
    shot(page, "model-causal.png")
