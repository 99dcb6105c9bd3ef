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
    JUPYTER_CELLS,
    browser_page,
    cell_widget,
    check_kernel_state,
    click_mask_cell_and_check,
    drag_key_and_check,
    free_port,
    ipynb,
    jupyter_args,
    kernel_state,
    needs_chromium,
    press_arrow_and_check,
    run_cell,
    server,
    shown,
    until,
    weights,
)

pytestmark = [pytest.mark.slow, needs_chromium]


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    """A JupyterLab on loopback, no token, in a temporary folder holding the test notebook."""
    root = tmp_path_factory.mktemp("lab")
    (root / "widgets.ipynb").write_text(json.dumps(ipynb(JUPYTER_CELLS)))
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


def test_vectors_and_mask_widgets_compute_in_the_kernel(page):
    run_cell(page, 0)
    vectors = cell_widget(page, 0)
    key, _ = drag_key_and_check(page, vectors)

    # the keyboard: ↓ on the focused query head moves q0 by 0.05; keys typed in the widget do
    # not reach JupyterLab's shortcuts ("a" would insert a cell, ↓ move the active cell)
    query, trace = press_arrow_and_check(page, vectors, key)
    assert page.locator(".jp-Cell.jp-mod-active").get_attribute("data-windowed-list-index") \
        == "0"  # focusing the widget made its own cell, 0, the active one; ↓ did not move it
    assert page.locator(".jp-Notebook .jp-Cell").count() == len(JUPYTER_CELLS)

    # the mask editor: causal over 4 tokens; clicking (0, 1) allows it (| qkv.allow)
    run_cell(page, 1)
    clicked = click_mask_cell_and_check(cell_widget(page, 1))

    # the kernel's own state: the dragged key, the moved query, their answer, the clicked cell
    check_kernel_state(kernel_state(page), query, key, trace, clicked)


def test_model_heads_widget_and_its_neuron_view(page):
    from qkv.explore.model_service import ModelUnavailable, load_minilm

    try:
        minilm = load_minilm()
    except ModelUnavailable as exc:
        pytest.skip(str(exc))
    run_cell(page, 3)
    heads = cell_widget(page, 3)
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
