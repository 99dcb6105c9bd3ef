"""The notebook widgets in a real JupyterLab, driven by Chromium: a notebook is executed, a key
arrow dragged and a mask cell clicked in the browser, and the numbers the widgets show — and the
kernel's own state — are qkv's. No request may leave loopback."""

from __future__ import annotations

import json

import numpy as np
import pytest

pytest.importorskip("anywidget")
pytest.importorskip("jupyterlab")

import qkv
from widget_pages import (
    SEED_K,
    SEED_V,
    browser_page,
    click_mask_cell_and_check,
    drag_key_and_check,
    free_port,
    ipynb,
    jupyter_args,
    needs_chromium,
    server,
    shown,
    shows,
    until,
    vector_input,
    weights,
)

CELLS = [
    "import json\nfrom qkv.widgets import MaskEditor, Vectors\nw = Vectors()\nw",
    'm = MaskEditor("a b c d", presets=[{"kind": "causal"}])\nm',
    'print("STATE" + json.dumps({"q": w.state["q"], "k": w.state["k"], '
    '"answer": w.answers["/api/trace"], "overrides": m.state["overrides"], '
    '"mask": m.answers["/api/mask"]}))',
    'from qkv.widgets import ModelHeads\nh = ModelHeads("The cat sat.")\nh',
]

pytestmark = [pytest.mark.slow, needs_chromium]


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    """A JupyterLab on loopback, no token, in a temporary folder holding the test notebook."""
    root = tmp_path_factory.mktemp("lab")
    (root / "widgets.ipynb").write_text(json.dumps(ipynb(CELLS)))
    port = free_port()
    with server(["jupyter", "lab", *jupyter_args(root), "--port", str(port),
                 "--LabApp.news_url=",
                 "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate"],
                root, port, "/api/status") as url:
        yield url


@pytest.fixture(scope="module")
def page(lab):
    """Chromium on the notebook; any request off loopback is blocked and fails the test."""
    with browser_page(lab, "/lab/tree/widgets.ipynb") as pg:
        # the kernel has started (the status bar says so) before any cell is run
        pg.get_by_text("Python 3 (ipykernel) | Idle").wait_for()
        yield pg


def run_cell(page, n: int) -> None:
    """Run the notebook's cell n (JupyterLab and Notebook 7 share the notebook's markup)."""
    cell = page.locator(".jp-Notebook .jp-Cell").nth(n)
    cell.locator(".jp-InputArea-prompt").click()  # select the cell (command mode)
    page.keyboard.press("Shift+Enter")


def kernel_state(page) -> dict:
    """What the STATE cell (CELLS[2]) printed: the kernel's own view of the widgets."""
    run_cell(page, 2)
    output = page.locator(".jp-OutputArea-output pre", has_text="STATE")
    output.wait_for()
    return json.loads(output.text_content().strip().removeprefix("STATE"))


def test_vectors_and_mask_widgets_compute_in_the_kernel(page):
    run_cell(page, 0)
    vectors = page.locator(".qkv-widget").nth(0)
    key, _ = drag_key_and_check(page, vectors)

    # the keyboard: ↓ on the focused query head moves q0 by 0.05; keys typed in the widget do
    # not reach JupyterLab's shortcuts ("a" would insert a cell, ↓ move the active cell)
    vectors.get_by_test_id("handle-query-0").focus()
    active = page.locator(".jp-Cell.jp-mod-active").get_attribute("data-windowed-list-index")
    page.keyboard.press("a")
    page.keyboard.press("ArrowDown")
    query = [1.0, -0.05]
    trace = qkv.explain([query], [SEED_K[0], key, SEED_K[2]], SEED_V)
    until(lambda: shows(vectors, trace.weights), "the weights after the arrow key")
    assert vector_input(vectors, "query-input-0") == query
    assert vectors.get_by_test_id("query-input-0").input_value() == "1, -0.05"
    assert page.locator(".jp-Cell.jp-mod-active").get_attribute("data-windowed-list-index") \
        == active == "0"  # focusing the widget made its own cell, 0, the active one
    assert page.locator(".jp-Notebook .jp-Cell").count() == len(CELLS)

    # the mask editor: causal over 4 tokens; clicking (0, 1) allows it (| qkv.allow)
    run_cell(page, 1)
    clicked = click_mask_cell_and_check(page.locator(".qkv-widget").nth(1))

    # the kernel's own state: the dragged key, its answer, the clicked cell
    kernel = kernel_state(page)
    assert kernel["k"][1] == key and kernel["q"] == [query]
    request, answer = kernel["answer"]
    assert request["keys"][1] == key and request["queries"] == [query]
    np.testing.assert_array_equal(np.asarray(answer["trace"]["weights"]), trace.weights)
    assert kernel["overrides"] == [{"i": 0, "j": 1, "allowed": True}]
    np.testing.assert_array_equal(np.asarray(kernel["mask"][1]["trace"]["weights"]),
                                  clicked.weights)


def test_model_heads_widget_and_its_neuron_view(page):
    from qkv.explore.model_service import ModelUnavailable, load_minilm

    try:
        minilm = load_minilm()
    except ModelUnavailable as exc:
        pytest.skip(str(exc))
    run_cell(page, 3)
    heads = page.locator(".jp-Notebook .jp-Cell").nth(3).locator(".qkv-widget")
    heads.get_by_test_id("heat-row-2").wait_for()
    tokens, heads_weights = minilm.attentions("The cat sat.")
    n = len(tokens)
    assert heads.locator("canvas.thumb").count() == heads_weights.shape[0] * heads_weights.shape[1]
    np.testing.assert_array_equal(weights(heads, n, n, "heat-cell"),
                                  np.asarray(heads_weights[0, 0], dtype=np.float64))
    heads.get_by_test_id("heat-row-2").click()  # the neuron view of token 2 in layer 0, head 0
    _, q, k, v = minilm.head_inputs("The cat sat.", 0)
    trace = qkv.explain(np.asarray(q[0, [2]], np.float64), np.asarray(k[0], np.float64),
                        np.asarray(v[0], np.float64))

    def shows_neuron():
        try:
            cells = shown(heads, "neuron-weight-")
            return [float(cells[f"neuron-weight-{j}"]) for j in range(n)] \
                == trace.weights[0].tolist()
        except (KeyError, ValueError):
            return False

    until(shows_neuron, "the neuron view's weights")
