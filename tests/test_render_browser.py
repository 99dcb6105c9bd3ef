"""The HTML view in a real browser (Debian's /usr/bin/chromium via Playwright), opened from disk
with every network request refused: clicking a thumbnail shows that head's large view, and the
cells it shows carry that head's weights."""

from __future__ import annotations

import os

import numpy as np
import pytest

import qkv
from qkv.render import show

CHROMIUM = "/usr/bin/chromium"
pytestmark = pytest.mark.skipif(not os.path.exists(CHROMIUM), reason=f"no {CHROMIUM}")
sync_api = pytest.importorskip("playwright.sync_api")


def test_click_a_thumbnail_for_its_large_view(tmp_path):
    x = np.random.default_rng(0).standard_normal((2, 3, 7, 8))
    weights = qkv.attention_weights(x, x)  # (2, 3, 7, 7)
    path = show(weights, [f"tok{i}" for i in range(7)], title="browser").save(
        tmp_path / "heads.html")
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM,
                                    args=["--no-sandbox", "--disable-gpu"])
        page = browser.new_page()
        outside, errors = [], []

        def offline(route):
            url = route.request.url
            if url.startswith(("file:", "data:")):
                route.continue_()
            else:
                outside.append(url)
                route.abort()

        page.route("**/*", offline)
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        page.goto(path.as_uri())

        def visible_views():
            return [s for s in page.query_selector_all("section.view") if s.is_visible()]

        shown = visible_views()
        assert [(s.get_attribute("data-layer"), s.get_attribute("data-head"))
                for s in shown] == [("0", "0")]  # the first head until something is clicked
        for layer, head in ((1, 2), (0, 1)):
            page.click(f'label[for$="-{layer}-{head}"]')
            shown = visible_views()
            assert len(shown) == 1
            assert (shown[0].get_attribute("data-layer"),
                    shown[0].get_attribute("data-head")) == (str(layer), str(head))
            cells = [float(r.get_attribute("data-w"))
                     for r in shown[0].query_selector_all("rect.c")]
            np.testing.assert_allclose(cells, weights[layer, head].ravel(), atol=5e-7)
            texts = [t.text_content() for t in shown[0].query_selector_all("text.w")]
            assert len(texts) == weights[layer, head].size
            assert all(abs(float(t) - w) <= 0.005
                       for t, w in zip(texts, weights[layer, head].ravel(), strict=True))
        browser.close()
    assert not outside and not errors
