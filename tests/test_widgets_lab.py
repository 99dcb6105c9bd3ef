"""The notebook widgets in a real JupyterLab, driven by Chromium: a notebook is executed, a key
arrow dragged and a mask cell clicked in the browser, and the numbers the widgets show — and the
kernel's own state — are qkv's. No request may leave loopback."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("anywidget")
pytest.importorskip("jupyterlab")
from playwright import sync_api

import qkv
from qkv.explore.compute import mask_vectors

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]
TIMEOUT_MS = 90_000  # JupyterLab's first load and a kernel start, on a shared machine
SRC = Path(qkv.__file__).resolve().parent.parent  # the qkv under test, for the kernel too

SEED_Q, SEED_K, SEED_V = [[1.0, 0.0]], [[1.0, 0.0], [0.0, 1.0], [0.7, 0.7]], \
    [[2.0, 0.0], [0.0, 2.0], [1.0, 1.0]]
CELLS = [
    "import json\nfrom qkv.widgets import MaskEditor, Vectors\nw = Vectors()\nw",
    'm = MaskEditor("a b c d", presets=[{"kind": "causal"}])\nm',
    'print("STATE" + json.dumps({"q": w.state["q"], "k": w.state["k"], '
    '"answer": w.answers["/api/trace"], "overrides": m.state["overrides"], '
    '"mask": m.answers["/api/mask"]}))',
    'from qkv.widgets import ModelHeads\nh = ModelHeads("The cat sat.")\nh',
]

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not os.path.exists(CHROMIUM), reason=f"no {CHROMIUM}")]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _notebook(cells: list[str]) -> dict:
    return {"nbformat": 4, "nbformat_minor": 5,
            "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3",
                                        "language": "python"}},
            "cells": [{"cell_type": "code", "id": f"c{n}", "metadata": {}, "source": src,
                       "outputs": [], "execution_count": None} for n, src in enumerate(cells)]}


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    """A JupyterLab on loopback, no token, in a temporary folder holding the test notebook."""
    root = tmp_path_factory.mktemp("lab")
    (root / "widgets.ipynb").write_text(json.dumps(_notebook(CELLS)))
    port = _free_port()
    env = {**os.environ, "PYTHONPATH": f"{SRC}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
           "JUPYTER_CONFIG_DIR": str(root / ".config"), "JUPYTER_RUNTIME_DIR": str(root / ".rt")}
    log = open(root / "lab.log", "w")  # closed below
    proc = subprocess.Popen(
        [sys.executable, "-m", "jupyter", "lab", "--no-browser", "--ip", "127.0.0.1",
         "--port", str(port), "--IdentityProvider.token=", "--allow-root",
         f"--ServerApp.root_dir={root}", "--LabApp.news_url=",
         "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate"],
        cwd=root, env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                with urllib.request.urlopen(f"{url}/api/status", timeout=5):
                    break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("jupyter lab did not start: "
                                       + (root / "lab.log").read_text()[-2000:]) from None
                time.sleep(0.5)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()


@pytest.fixture(scope="module")
def page(lab):
    """Chromium on the notebook; any request off loopback is blocked and fails the test."""
    outside, problems = [], []
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        context = browser.new_context(viewport={"width": 1400, "height": 1000})

        def only_local(route):
            url = route.request.url
            if url.startswith((lab, "data:", "blob:", "ws://127.0.0.1")):
                route.continue_()
            else:
                outside.append(url)
                route.abort()

        context.route("**/*", only_local)
        pg = context.new_page()
        pg.set_default_timeout(TIMEOUT_MS)
        pg.on("pageerror", lambda exc: problems.append(f"page error: {exc}"))
        pg.goto(f"{lab}/lab/tree/widgets.ipynb")
        # the kernel has started (the status bar says so) before any cell is run
        pg.get_by_text("Python 3 (ipykernel) | Idle").wait_for()
        yield pg
        browser.close()
    assert outside == [], f"the notebook tried to reach the network: {outside}"
    assert problems == []


def _run_cell(page, n: int) -> None:
    cell = page.locator(".jp-Notebook .jp-Cell").nth(n)
    cell.locator(".jp-InputArea-prompt").click()  # select the cell (command mode)
    page.keyboard.press("Shift+Enter")


def _weights(widget, nq: int, nk: int, prefix: str = "weight") -> np.ndarray:
    cells = widget.locator(f"[data-testid^='{prefix}-']").evaluate_all(
        "els => Object.fromEntries(els.map(e => [e.dataset.testid, e.dataset.value]))")
    return np.array([[float(cells[f"{prefix}-{i}-{j}"]) for j in range(nk)] for i in range(nq)])


def _drag(page, widget, handle: str, x: float, y: float) -> None:
    plane = widget.get_by_test_id("plane")
    box, head = plane.bounding_box(), widget.get_by_test_id(handle).bounding_box()
    unit = 480 / (2 * float(plane.get_attribute("data-range")))
    page.mouse.move(head["x"] + head["width"] / 2, head["y"] + head["height"] / 2)
    page.mouse.down()
    page.mouse.move(box["x"] + (240 + x * unit) * box["width"] / 480,
                    box["y"] + (240 - y * unit) * box["height"] / 480, steps=8)
    page.mouse.up()


def _until(check, what: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.2)


def test_vectors_and_mask_widgets_compute_in_the_kernel(page):
    _run_cell(page, 0)
    vectors = page.locator(".qkv-widget").nth(0)
    vectors.get_by_test_id("handle-key-1").wait_for()
    seed = qkv.explain(SEED_Q, SEED_K, SEED_V)
    _until(lambda: vectors.locator("[data-testid='weight-0-2']").count() == 1, "the weights")
    np.testing.assert_array_equal(_weights(vectors, 1, 3), seed.weights)

    # drag k1 to about (1.5, 1.0): the shown weights become qkv.explain's for the new keys
    _drag(page, vectors, "handle-key-1", 1.5, 1.0)
    key = [float(x) for x in vectors.get_by_test_id("key-input-1").input_value()
           .replace(",", " ").split()]
    assert key == pytest.approx([1.5, 1.0], abs=0.051)
    trace = qkv.explain(SEED_Q, [SEED_K[0], key, SEED_K[2]], SEED_V)

    def shows_new_weights():
        try:
            return np.array_equal(_weights(vectors, 1, 3), trace.weights)
        except (KeyError, ValueError):
            return False

    _until(shows_new_weights, "the dragged key's weights")
    out = vectors.get_by_test_id("output-0-0")
    assert float(out.get_attribute("data-value")) == trace.output[0, 0]
    assert out.text_content() == f"{trace.output[0, 0]:.4f}"

    # the keyboard: ↓ on the focused query head moves q0 by 0.05; keys typed in the widget do
    # not reach JupyterLab's shortcuts ("a" would insert a cell, ↓ move the active cell)
    vectors.get_by_test_id("handle-query-0").focus()
    active = page.locator(".jp-Cell.jp-mod-active").get_attribute("data-windowed-list-index")
    page.keyboard.press("a")
    page.keyboard.press("ArrowDown")
    query = [1.0, -0.05]
    trace = qkv.explain([query], [SEED_K[0], key, SEED_K[2]], SEED_V)
    _until(shows_new_weights, "the weights after the arrow key")
    assert vectors.get_by_test_id("query-input-0").input_value() == "1, -0.05"
    assert page.locator(".jp-Cell.jp-mod-active").get_attribute("data-windowed-list-index") \
        == active == "0"  # focusing the widget made its own cell, 0, the active one
    assert page.locator(".jp-Notebook .jp-Cell").count() == len(CELLS)

    # the mask editor: causal over 4 tokens; clicking (0, 1) allows it (| qkv.allow)
    _run_cell(page, 1)
    masks = page.locator(".qkv-widget").nth(1)
    masks.get_by_test_id("mask-cell-0-1").wait_for()
    masks.get_by_test_id("mask-cell-0-1").click()
    q, k, v = mask_vectors(4, 0, False)
    allowed = np.zeros((4, 4), dtype=bool)
    allowed[0, 1] = True
    clicked = qkv.explain(q, k, v, mask=qkv.causal() | qkv.allow(allowed))

    def shows_click():
        try:
            return np.array_equal(_weights(masks, 4, 4, "mask-cell"), clicked.weights)
        except (KeyError, ValueError):
            return False

    _until(shows_click, "the clicked mask's weights")

    # the kernel's own state: the dragged key, its answer, the clicked cell
    _run_cell(page, 2)
    output = page.locator(".jp-OutputArea-output pre", has_text="STATE")
    output.wait_for()
    kernel = json.loads(output.text_content().strip().removeprefix("STATE"))
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
    _run_cell(page, 3)
    heads = page.locator(".qkv-widget").nth(2)
    heads.get_by_test_id("heat-row-2").wait_for()
    tokens, weights = minilm.attentions("The cat sat.")
    n = len(tokens)
    assert heads.locator("canvas.thumb").count() == weights.shape[0] * weights.shape[1]
    np.testing.assert_array_equal(_weights(heads, n, n, "heat-cell"),
                                  np.asarray(weights[0, 0], dtype=np.float64))
    heads.get_by_test_id("heat-row-2").click()  # the neuron view of token 2 in layer 0, head 0
    _, q, k, v = minilm.head_inputs("The cat sat.", 0)
    trace = qkv.explain(np.asarray(q[0, [2]], np.float64), np.asarray(k[0], np.float64),
                        np.asarray(v[0], np.float64))

    def shows_neuron():
        try:
            cells = heads.locator("[data-testid^='neuron-weight-']").evaluate_all(
                "els => Object.fromEntries(els.map(e => [e.dataset.testid, e.dataset.value]))")
            shown = [float(cells[f"neuron-weight-{j}"]) for j in range(n)]
            return shown == trace.weights[0].tolist()
        except (KeyError, ValueError):
            return False

    _until(shows_neuron, "the neuron view's weights")
