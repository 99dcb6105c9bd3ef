"""What the notebook widgets' browser tests share (tests/test_widgets_lab.py, _notebook.py,
_marimo.py): a notebook server on loopback, Chromium on one of its pages with every request off
loopback blocked, and the widgets' gestures — drag the lesson's key k1, move q0 with ↓, click a
mask cell — each checked against ``qkv.explain``.

- :func:`server`: a notebook server (JupyterLab, Notebook 7, marimo) started in a temporary
  folder, its kernel importing the qkv under test; yields its URL once ``ready`` answers.
- :func:`browser_page`: Chromium (Debian's /usr/bin/chromium, never ``playwright install``) on a
  URL; on exit, asserts that no request or websocket left loopback and that the page threw nothing.
- :func:`drag_key_and_check`, :func:`press_arrow_and_check`, :func:`click_mask_cell_and_check`:
  the gestures and their checks on a ``.qkv-widget`` element, whichever front end drew it;
  :func:`check_kernel_state`: the kernel's own state after them.
- Jupyter only (JupyterLab, Notebook 7 share the notebook's markup): :data:`JUPYTER_CELLS`,
  :func:`run_cell`, :func:`cell_widget`, :func:`kernel_state`.
"""

from __future__ import annotations

import contextlib
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
from playwright import sync_api

import qkv
from page_checks import block_outside
from qkv.explore.compute import mask_vectors

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]
TIMEOUT_MS = 90_000  # a notebook server's first load and a kernel start, on a shared machine
SRC = Path(qkv.__file__).resolve().parent.parent  # the qkv under test, for the kernel too

SEED_Q, SEED_K, SEED_V = [[1.0, 0.0]], [[1.0, 0.0], [0.0, 1.0], [0.7, 0.7]], \
    [[2.0, 0.0], [0.0, 2.0], [1.0, 1.0]]
LOOPBACK = "127.0.0.1"

needs_chromium = pytest.mark.skipif(not os.path.exists(CHROMIUM), reason=f"no {CHROMIUM}")


def free_port() -> int:
    with socket.socket() as s:
        s.bind((LOOPBACK, 0))
        return s.getsockname()[1]


def ipynb(cells: list[str]) -> dict:
    """A notebook (nbformat 4) of code cells, for the Python 3 kernel."""
    return {"nbformat": 4, "nbformat_minor": 5,
            "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3",
                                        "language": "python"}},
            "cells": [{"cell_type": "code", "id": f"c{n}", "metadata": {}, "source": src,
                       "outputs": [], "execution_count": None} for n, src in enumerate(cells)]}


# The notebook the Jupyter front ends (JupyterLab, Notebook 7) run: the widgets, then the kernel's
# own view of them (printed after STATE), then the model's heads.
JUPYTER_CELLS = [
    "import json\nfrom qkv.widgets import MaskEditor, Vectors\nw = Vectors()\nw",
    'm = MaskEditor("a b c d", presets=[{"kind": "causal"}])\nm',
    'print("STATE" + json.dumps({"q": w.state["q"], "k": w.state["k"], '
    '"answer": w.answers["/api/trace"], "overrides": m.state["overrides"], '
    '"mask": m.answers["/api/mask"]}))',
    'from qkv.widgets import ModelHeads\nh = ModelHeads("The cat sat.")\nh',
]


def jupyter_args(root: Path) -> list[str]:
    """A Jupyter server's arguments: loopback, no token, no browser, serving ``root``."""
    return ["--no-browser", "--ip", LOOPBACK, "--IdentityProvider.token=", "--allow-root",
            f"--ServerApp.root_dir={root}"]


@contextlib.contextmanager
def server(argv: list[str], root: Path, port: int, ready: str = "/", timeout: float = 120):
    """Run ``python -m argv…`` in ``root`` with the qkv under test first on its path and its
    configuration kept in ``root`` (Jupyter's, marimo's), until ``http://127.0.0.1:port`` +
    ``ready`` answers; yields that base URL. The server is stopped on exit."""
    env = {**os.environ, "PYTHONPATH": f"{SRC}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
           "JUPYTER_CONFIG_DIR": str(root / ".config" / "jupyter"),
           "JUPYTER_RUNTIME_DIR": str(root / ".runtime"),
           "XDG_CONFIG_HOME": str(root / ".config"), "XDG_STATE_HOME": str(root / ".state"),
           "MARIMO_SKIP_UPDATE_CHECK": "1"}
    log_path = root / f"{argv[0]}.log"
    url = f"http://{LOOPBACK}:{port}"
    with open(log_path, "w") as log:
        proc = subprocess.Popen([sys.executable, "-m", *argv], cwd=root, env=env, stdout=log,
                                stderr=subprocess.STDOUT)
        try:
            deadline = time.monotonic() + timeout
            while True:
                try:
                    with urllib.request.urlopen(url + ready, timeout=5):
                        break
                except OSError:
                    if proc.poll() is not None or time.monotonic() > deadline:
                        raise RuntimeError(f"{argv[0]} did not start: "
                                           + log_path.read_text()[-2000:]) from None
                    time.sleep(0.3)
            yield url
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()


# A front end's own known error, tolerated by browser_page: (message, where its stack starts).
# Notebook 7.6's keyboard-shortcuts plugin reads its own settings before they are loaded when
# another plugin's settings load first (a race on every page load, before any cell runs):
# https://github.com/jupyter/notebook/issues/7862 ("registry.plugins[shortcuts.id] is undefined").
NOTEBOOK7_SHORTCUTS_RACE = ("Cannot read properties of undefined (reading 'schema')",
                            "/static/notebook/notebook_core.")


@contextlib.contextmanager
def browser_page(base: str, path: str, known_errors: tuple[tuple[str, str], ...] = ()):
    """Chromium on ``base + path``. Any request off ``base`` is blocked and, like a websocket to
    anywhere but loopback or an uncaught exception in the page, fails the test on exit — except
    ``known_errors``, (message, a text in the first line of its stack), the front end's own.
    ``page.sockets`` lists the URLs of the websockets the page opened."""
    problems: list[str] = []

    def page_error(exc) -> None:
        at = (exc.stack or "").split("\n    at ", 2)[1:2]
        if not any(exc.message == msg and at and where in at[0] for msg, where in known_errors):
            problems.append(f"page error: {exc.message}\n{exc.stack}")

    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        context = browser.new_context(viewport={"width": 1400, "height": 1000})
        outside = block_outside(context, base, "data:", "blob:")
        page = context.new_page()
        page.set_default_timeout(TIMEOUT_MS)
        page.on("pageerror", page_error)
        page.sockets = []  # every websocket the page opened, by URL

        def websocket(ws) -> None:
            page.sockets.append(ws.url)
            if not ws.url.startswith(f"ws://{LOOPBACK}:"):
                outside.append(ws.url)

        page.on("websocket", websocket)
        page.goto(base + path)
        yield page
        browser.close()
    assert outside == [], f"the notebook tried to reach the network: {outside}"
    assert problems == [], problems


def run_cell(page, n: int) -> None:
    """Run cell n of the open notebook (JupyterLab and Notebook 7 share the notebook's markup)."""
    cell = page.locator(".jp-Notebook .jp-Cell").nth(n)
    cell.locator(".jp-InputArea-prompt").click()  # select the cell (command mode)
    page.keyboard.press("Shift+Enter")


def cell_widget(page, n: int):
    """The qkv widget in the output of the notebook's cell n."""
    return page.locator(".jp-Notebook .jp-Cell").nth(n).locator(".qkv-widget")


def kernel_state(page) -> dict:
    """Run JUPYTER_CELLS[2] and read what it prints: the kernel's own view of the widgets."""
    run_cell(page, 2)
    output = page.locator(".jp-OutputArea-output pre", has_text="STATE")
    output.wait_for()
    return json.loads(output.text_content().strip().removeprefix("STATE"))


def check_kernel_state(kernel: dict, query: list[float], key: list[float], trace: qkv.Trace,
                       clicked: qkv.Trace) -> None:
    """The kernel's own state after the gestures (``kernel`` as JUPYTER_CELLS[2] prints it): the
    Vectors widget has q0 ``query`` and k1 ``key`` and its last answer is ``trace``; the
    MaskEditor has cell (0, 1) clicked and its last answer is ``clicked``."""
    assert kernel["k"][1] == key and kernel["q"] == [query]
    request, answer = kernel["answer"]
    assert request["keys"][1] == key and request["queries"] == [query]
    np.testing.assert_array_equal(np.asarray(answer["trace"]["weights"]), trace.weights)
    assert kernel["overrides"] == [{"i": 0, "j": 1, "allowed": True}]
    np.testing.assert_array_equal(np.asarray(kernel["mask"][1]["trace"]["weights"]),
                                  clicked.weights)


def shown(widget, prefix: str) -> dict[str, str]:
    """{data-testid: data-value} of the widget's elements whose test id starts with prefix."""
    return widget.locator(f"[data-testid^='{prefix}']").evaluate_all(
        "els => Object.fromEntries(els.map(e => [e.dataset.testid, e.dataset.value]))")


def weights(widget, nq: int, nk: int, prefix: str = "weight") -> np.ndarray:
    """The (nq, nk) matrix the widget shows as ``prefix-i-j`` cells, at full precision."""
    cells = shown(widget, f"{prefix}-")
    return np.array([[float(cells[f"{prefix}-{i}-{j}"]) for j in range(nk)] for i in range(nq)])


def shows(widget, expected: np.ndarray, prefix: str = "weight") -> bool:
    """Whether the widget shows exactly ``expected`` (False while it is still drawing)."""
    try:
        return np.array_equal(weights(widget, *expected.shape, prefix), expected)
    except (KeyError, ValueError):
        return False


def until(check, what: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.2)


def drag(page, widget, handle: str, x: float, y: float) -> None:
    """Drag the arrow head ``handle`` to about (x, y) on the widget's plane (480 × 480 units,
    the origin in the middle, ``data-range`` the largest coordinate drawn)."""
    plane = widget.get_by_test_id("plane")
    box, head = plane.bounding_box(), widget.get_by_test_id(handle).bounding_box()
    unit = 480 / (2 * float(plane.get_attribute("data-range")))
    page.mouse.move(head["x"] + head["width"] / 2, head["y"] + head["height"] / 2)
    page.mouse.down()
    page.mouse.move(box["x"] + (240 + x * unit) * box["width"] / 480,
                    box["y"] + (240 - y * unit) * box["height"] / 480, steps=8)
    page.mouse.up()


def vector_input(widget, testid: str) -> list[float]:
    return [float(x) for x in widget.get_by_test_id(testid).input_value().replace(",", " ")
            .split()]


def drag_key_and_check(page, vectors) -> tuple[list[float], qkv.Trace]:
    """The Vectors widget ``vectors`` (the lesson's example) shows qkv's weights; drag k1 to about
    (1.5, 1.0) and wait until it shows ``qkv.explain``'s weights and output for the new keys.
    Returns (the key as dropped, that trace)."""
    vectors.get_by_test_id("handle-key-1").wait_for()
    until(lambda: shows(vectors, qkv.explain(SEED_Q, SEED_K, SEED_V).weights), "the weights")
    drag(page, vectors, "handle-key-1", 1.5, 1.0)
    key = vector_input(vectors, "key-input-1")
    assert key == pytest.approx([1.5, 1.0], abs=0.051)
    trace = qkv.explain(SEED_Q, [SEED_K[0], key, SEED_K[2]], SEED_V)
    until(lambda: shows(vectors, trace.weights), "the dragged key's weights")
    out = vectors.get_by_test_id("output-0-0")
    assert float(out.get_attribute("data-value")) == trace.output[0, 0]
    assert out.text_content() == f"{trace.output[0, 0]:.4f}"
    return key, trace


def press_arrow_and_check(page, vectors, key: list[float]) -> tuple[list[float], qkv.Trace]:
    """On the Vectors widget after :func:`drag_key_and_check` (k1 = ``key``): focus q0's arrow
    head and press "a" (a notebook's insert-cell shortcut: it must stay in the widget) and ↓,
    which moves q0 by 0.05; wait until it shows ``qkv.explain``'s weights. Returns (q0, trace)."""
    vectors.get_by_test_id("handle-query-0").focus()
    page.keyboard.press("a")
    page.keyboard.press("ArrowDown")
    query = [1.0, -0.05]
    trace = qkv.explain([query], [SEED_K[0], key, SEED_K[2]], SEED_V)
    until(lambda: shows(vectors, trace.weights), "the weights after the arrow key")
    assert vectors.get_by_test_id("query-input-0").input_value() == "1, -0.05"
    return query, trace


def click_mask_cell_and_check(masks) -> qkv.Trace:
    """The MaskEditor ``masks`` (causal over 4 tokens, seed 0): click cell (0, 1), which allows
    it (``| qkv.allow``), and wait until it shows ``qkv.explain``'s weights. Returns the trace."""
    masks.get_by_test_id("mask-cell-0-1").wait_for()
    q, k, v = mask_vectors(4, 0, False)
    until(lambda: shows(masks, qkv.explain(q, k, v, mask=qkv.causal()).weights, "mask-cell"),
          "the causal mask's weights")
    masks.get_by_test_id("mask-cell-0-1").click()
    allowed = np.zeros((4, 4), dtype=bool)
    allowed[0, 1] = True
    clicked = qkv.explain(q, k, v, mask=qkv.causal() | qkv.allow(allowed))
    until(lambda: shows(masks, clicked.weights, "mask-cell"), "the clicked mask's weights")
    return clicked
