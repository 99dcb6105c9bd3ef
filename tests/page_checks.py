"""Checks every browser test of ``qkv explore`` can call on a Playwright page, and the way a view
declares its random interactions for tests/test_explore_random.py.

- :func:`assert_page_clean`: no "undefined", "NaN", "null" or "[object Object]" in the visible
  text, and no result drawn beside an error unless it is marked stale.
- :func:`assert_fits`: no element of the open view is wider than the viewport (a phone is 390 px).
- :func:`axe_serious`: axe-core's serious and critical violations of the page.
- :data:`INTERACTIONS`: view name → a function ``(page, rng) -> str`` that does one random thing
  to that view (drag, type, toggle, slide; sometimes a long or invalid input) and says what it
  did. A view registers its function with ``@interaction("name")``; the random test opens each
  registered view and calls it ~10 times under a fixed seed, checking the page after each step.
- :func:`static_modules`: the page's ES modules, by their path under static/.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

STATIC = Path(__file__).resolve().parents[1] / "src" / "qkv" / "explore" / "static"
BROKEN_WORDS = ("undefined", "NaN", "null", "[object Object]")
PHONE = {"width": 390, "height": 844}
DESKTOP = {"width": 1400, "height": 900}

INTERACTIONS: dict[str, Callable] = {}


def interaction(view: str):
    """Register ``fn(page, rng) -> str`` as the random interaction of ``view`` (its name as in
    main.js). ``rng`` is a ``random.Random``; the function leaves the page idle or mid-request
    (the test waits) and returns a short description for failure messages."""
    def register(fn):
        if view in INTERACTIONS:
            raise ValueError(f"view {view!r} already has a random interaction")
        INTERACTIONS[view] = fn
        return fn
    return register


def static_modules() -> list[str]:
    """Every .js file of the page, as served: "main.js", "core/api.js", "views/scale.js", …"""
    return sorted(str(p.relative_to(STATIC)) for p in STATIC.rglob("*.js"))


def visible_text(page) -> str:
    return page.locator("body").inner_text()


def assert_page_clean(page) -> None:
    """No broken words in the visible text; when the open view shows an error, its old result
    is gone or marked stale (the view's section carries data-stale)."""
    text = visible_text(page)
    for word in BROKEN_WORDS:
        # whole words only: "nullable" or "annulled" would be fine, "null" alone is not
        found = re.findall(rf"(?<![\w-]){re.escape(word)}(?![\w-])", text)
        assert not found, f"the page shows {word!r}: …{_around(text, word)}…"
    error = page.locator("#error")
    if error.is_visible():
        view = page.evaluate("new URLSearchParams(location.hash.slice(1)).get('view')")
        section = page.locator(f"#view-{view}")
        stale = section.get_attribute("data-stale")
        assert stale == "1", (f"view {view} shows the error {error.inner_text()!r} beside a "
                              "result that is not marked stale")


def _around(text: str, word: str, width: int = 60) -> str:
    at = text.find(word)
    return text[max(0, at - width): at + len(word) + width].replace("\n", " ")


def assert_fits(page, width: int = PHONE["width"]) -> None:
    """No element of the open view (nor the page) is wider than ``width`` px: scrolling boxes
    (``overflow-x: auto``) may hold wider content, their own box must fit."""
    too_wide = page.evaluate("""(width) => {
        const open = document.querySelector('section.view:not([hidden])');
        const scrollsX = (e) => ['auto', 'scroll'].includes(getComputedStyle(e).overflowX);
        const inScroller = (e) => { for (let p = e.parentElement; p; p = p.parentElement) {
            if (scrollsX(p)) return true; } return false; };
        const bad = [];
        if (document.documentElement.scrollWidth > width) bad.push(
            `the page is ${document.documentElement.scrollWidth} px wide`);
        for (const e of open ? open.querySelectorAll('*') : []) {
            if (inScroller(e)) continue;
            const r = e.getBoundingClientRect();
            if (r.width > 0 && (r.right > width + 0.5 || r.left < -0.5)) {
                bad.push(`${e.tagName.toLowerCase()}${e.id ? '#' + e.id : ''}` +
                    `${e.dataset.testid ? '[' + e.dataset.testid + ']' : ''}: ` +
                    `${Math.round(r.left)}…${Math.round(r.right)} px`);
            }
        }
        return bad.slice(0, 8);
    }""", width)
    assert not too_wide, f"wider than {width} px: {too_wide}"


def axe_serious(page) -> list[str]:
    """axe-core's serious and critical violations on the page, as "id: help (n nodes)"."""
    from axe_playwright_python.sync_playwright import Axe

    results = Axe().run(page)
    return [f"{v['id']}: {v['help']} ({len(v['nodes'])} nodes: "
            f"{[n['target'] for n in v['nodes'][:3]]})"
            for v in results.response["violations"] if v["impact"] in ("serious", "critical")]
