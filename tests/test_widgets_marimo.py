"""The notebook widgets in a real marimo app, driven by Chromium: ``marimo run`` (loopback, no
token) serves a notebook holding ``mo.ui.anywidget(Vectors())`` and
``mo.ui.anywidget(MaskEditor(…))``; a key arrow is dragged, q0 moved with ↓ and a mask cell
clicked, and the numbers the widgets show — and the kernel's own state — are qkv's. No request
may leave loopback."""

from __future__ import annotations

import json
import re

import pytest

pytest.importorskip("anywidget")
pytest.importorskip("marimo")

from widget_pages import (
    browser_page,
    check_kernel_state,
    click_mask_cell_and_check,
    drag_key_and_check,
    free_port,
    needs_chromium,
    press_arrow_and_check,
    server,
    until,
)

pytestmark = [pytest.mark.slow, needs_chromium]

# The widgets, a button, and the kernel's own view of the widgets after each click of it (marimo
# runs a cell again when a UI element it reads changes).
NOTEBOOK = '''\
import marimo

app = marimo.App()


@app.cell
def _():
    import json

    import marimo as mo

    from qkv.widgets import MaskEditor, Vectors

    w = mo.ui.anywidget(Vectors())
    w
    return MaskEditor, json, mo, w


@app.cell
def _(MaskEditor, mo):
    m = mo.ui.anywidget(MaskEditor("a b c d", presets=[{"kind": "causal"}]))
    m
    return (m,)


@app.cell
def _(mo):
    refresh = mo.ui.button(value=0, on_click=lambda n: n + 1, label="kernel state")
    refresh
    return (refresh,)


@app.cell
def _(json, m, mo, refresh, w):
    mo.plain_text("STATE" + json.dumps({
        "clicks": refresh.value, "q": w.widget.state["q"], "k": w.widget.state["k"],
        "answer": w.widget.answers.get("/api/trace"), "overrides": m.widget.state["overrides"],
        "mask": m.widget.answers.get("/api/mask")}))
    return


if __name__ == "__main__":
    app.run()
'''


@pytest.fixture(scope="module")
def page(tmp_path_factory):
    """Chromium on the app ``marimo run`` serves; any request off loopback is blocked and fails
    the test."""
    root = tmp_path_factory.mktemp("marimo")
    (root / "widgets.py").write_text(NOTEBOOK)
    port = free_port()
    with server(["marimo", "run", "widgets.py", "--headless", "--host", "127.0.0.1", "--port",
                 str(port), "--no-token"], root, port, "/health") as url, \
            browser_page(url, "/") as pg:
        yield pg


def kernel_state(page, clicks: int) -> dict:
    """Click the "kernel state" button (the ``clicks``-th time) and read what the STATE cell
    then shows: the kernel's own view of the widgets."""
    page.get_by_role("button", name="kernel state").click()
    shown = page.get_by_text(re.compile("^STATE"))

    def state():
        return json.loads(shown.text_content().removeprefix("STATE"))

    until(lambda: state()["clicks"] == clicks, "the STATE cell to run again")
    return state()


def test_vectors_and_mask_widgets_in_marimo(page):
    vectors, masks = page.locator(".qkv-widget").nth(0), page.locator(".qkv-widget").nth(1)
    key, _ = drag_key_and_check(page, vectors)
    query, trace = press_arrow_and_check(page, vectors, key)
    clicked = click_mask_cell_and_check(masks)
    check_kernel_state(kernel_state(page, 1), query, key, trace, clicked)

    # the fields and buttons are drawn: marimo's reset (Tailwind's preflight, in the widget's
    # shadow root) would leave them without a border or a background
    for control in (vectors.get_by_test_id("key-input-1"), vectors.locator("button").first):
        style = control.evaluate("e => [getComputedStyle(e).borderTopWidth, "
                                 "getComputedStyle(e).backgroundColor]")
        assert style[0] == "1px" and style[1] != "rgba(0, 0, 0, 0)", style
