"""View 1's "the power is the three together", in headless Chromium against a real
``qkv explore``: the table is the shipped runs of qkv.tasks.frozen_projections, the caption
says their numbers, and "show above" loads a run's W's into the planes, where the view's own
lookup (computed by the server on its 8-point circle) lands where the run's judge says it does
on that circle. At 1400 and 390 px (nothing wider than the phone, no text under 11 px);
screenshots to the screenshot folder."""

from __future__ import annotations

import re

import pytest

from page_checks import DESKTOP, PHONE, assert_fits
from qkv.tasks import frozen_projections as fp
from test_explore_browser import idle
from test_explore_lesson_views import far_small_text
from test_explore_views import _page, browser, open_view, server_url, shot  # noqa: F401  (fixtures)

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("viewport", [DESKTOP, PHONE], ids=["desk", "phone"])
def test_the_frozen_runs_are_shown_said_and_loaded(browser, server_url, viewport):  # noqa: F811
    context, page, outside, problems = _page(browser, server_url, viewport)
    try:
        open_view(page, "projections")
        page.get_by_test_id("proj-frozen-table").wait_for()
        idle(page)
        shipped = fp.shipped()
        runs = shipped["runs"]
        for i, run in enumerate(runs):
            mse = page.get_by_test_id(f"proj-frozen-mse-{i}")
            assert float(mse.get_attribute("data-value")) == run["mse"]
            right = page.get_by_test_id(f"proj-frozen-right-{i}").get_attribute("data-value")
            assert int(right) == run["right"]
        words = page.get_by_test_id("proj-frozen-words").text_content()
        everything = next(r for r in runs if len(r["learned"]) == 3)
        T = everything["tokens"]
        assert f"{everything['right']} of {T} outputs nearest their neighbour" in words
        said = {"W_V frozen at the identity": "W_V frozen at the identity",
                "W_V frozen at random": "Frozen at random"}  # the W_V sentence names it once
        for run in runs:
            if len(run["learned"]) == 2:
                name = said.get(run["label"], run["label"])
                assert f"{name}: {run['right']} of {T} right" in words, run["label"]
        best = min(runs, key=lambda r: r["mse"])
        assert f"The lowest error: {best['label']}" in words
        # each run's W's, loaded into the planes: the view's own lookup on its 8-point circle
        # puts the largest weight on the neighbour where the run's judge says it does
        for i in (0, [r["label"] for r in runs].index("W_V frozen at random")):
            page.get_by_test_id(f"proj-frozen-load-{i}").click()
            idle(page)
            run = runs[i]
            for key in ("w_q", "w_k", "w_v"):
                for r_, row in enumerate(run[key]):
                    for c_, value in enumerate(row):
                        typed = page.get_by_test_id(f"{key}-{r_}-{c_}").input_value()
                        assert float(typed) == value, (run["label"], key)
            eight = next(b for b in run["by_points"] if b["points"] == 8)
            counts = page.get_by_test_id("proj-counts").text_content()
            nxt = re.search(r"on its counter-clockwise neighbour for (\d+)", counts)
            assert nxt and int(nxt.group(1)) == eight["top_on_neighbour"], (counts, eight)
            itself = re.search(r"on itself for (\d+) of 8", counts)
            assert itself and int(itself.group(1)) == eight["top_on_self"], (counts, eight)
        page.get_by_test_id("proj-frozen").scroll_into_view_if_needed()
        assert far_small_text(page) == [] and page.evaluate("window.scrollX") == 0
        assert_fits(page, viewport["width"])
        shot(page, f"projections-frozen-{viewport['width']}.png")
    finally:
        context.close()
    assert outside == [] and problems == []
