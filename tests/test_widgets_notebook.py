"""The notebook widgets in a real Jupyter Notebook 7, driven by Chromium: the notebook of
tests/test_widgets_lab.py is executed in Notebook 7's own page (/notebooks/…), a key arrow dragged
and a mask cell clicked, and the numbers the widgets show — and the kernel's own state — are
qkv's. No request may leave loopback."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("anywidget")
pytest.importorskip("notebook")

from widget_pages import (
    JUPYTER_CELLS,
    NOTEBOOK7_SHORTCUTS_RACE,
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
)

pytestmark = [pytest.mark.slow, needs_chromium]


@pytest.fixture(scope="module")
def page(tmp_path_factory):
    """Chromium on the notebook in Notebook 7 (loopback, no token); any request off loopback is
    blocked and fails the test."""
    root = tmp_path_factory.mktemp("notebook7")
    (root / "widgets.ipynb").write_text(json.dumps(ipynb(JUPYTER_CELLS)))
    port = free_port()
    with server(["jupyter", "notebook", *jupyter_args(root), "--port", str(port)], root, port,
                "/api/status") as url, \
            browser_page(url, "/notebooks/widgets.ipynb", (NOTEBOOK7_SHORTCUTS_RACE,)) as pg:
        # the kernel has started: the page is connected to its channels, and then the
        # notebook's execution indicator says idle (it says so once before a kernel exists, and a
        # cell run then is dropped)
        if not any("/channels" in url for url in pg.sockets):  # events arrive in calls to pg
            pg.wait_for_event("websocket", lambda ws: "/channels" in ws.url)
        pg.locator(".jp-Notebook-ExecutionIndicator[data-status='idle']").wait_for()
        yield pg


def test_vectors_and_mask_widgets_in_notebook_7(page):
    run_cell(page, 0)
    vectors = cell_widget(page, 0)
    key, _ = drag_key_and_check(page, vectors)
    # keys typed in the widget stay in it: in command mode, "a" would insert a cell and ↓ move
    # to the next one
    query, trace = press_arrow_and_check(page, vectors, key)
    assert page.locator(".jp-Notebook .jp-Cell").count() == len(JUPYTER_CELLS)
    assert page.locator(".jp-Cell.jp-mod-active").get_attribute("data-windowed-list-index") \
        == "0"

    run_cell(page, 1)
    clicked = click_mask_cell_and_check(cell_widget(page, 1))
    check_kernel_state(kernel_state(page), query, key, trace, clicked)
