"""Checks every browser test of ``qkv explore`` can call on a Playwright page, and the way a view
declares its random interactions for tests/test_explore_random.py.

- :func:`assert_page_clean`: no "undefined", "NaN", "null" or "[object Object]" in the visible
  text, and no result drawn beside an error unless it is marked stale.
- :func:`assert_fits`: no element of the open view is wider than the viewport (a phone is 390 px).
- :func:`axe_serious`: axe-core's serious and critical violations of the page.
- :data:`INTERACTIONS`: view name → :class:`Interaction`: ``act(page, rng) -> str`` does one
  random thing to that view (drag, type, toggle, slide; sometimes a long or invalid input) and
  says what it did; ``verify(page)`` asserts that the numbers the view shows are qkv's for the
  inputs in the page's URL (it may return early while the view shows an error: the stale mark
  is checked by :func:`assert_page_clean`). A view registers with
  ``@interaction("name", verify=check_name)`` on its act function; tests/test_explore_random.py
  opens each registered view and does ~10 steps under a fixed seed, checking after each.
- :func:`static_modules`: the page's ES modules, by their path under static/.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

STATIC = Path(__file__).resolve().parents[1] / "src" / "qkv" / "explore" / "static"
BROKEN_WORDS = ("undefined", "NaN", "null", "[object Object]")
PHONE = {"width": 390, "height": 844}
DESKTOP = {"width": 1400, "height": 900}

@dataclass(frozen=True)
class Interaction:
    act: Callable  # (page, rng: random.Random) -> str, what it did
    verify: Callable  # (page) -> None: the view's numbers are qkv's for the URL's inputs


INTERACTIONS: dict[str, Interaction] = {}


def interaction(view: str, verify: Callable):
    """Register the decorated ``act(page, rng) -> str`` and ``verify(page)`` as the random
    interaction of ``view`` (its name as in main.js). ``act`` may leave a request in flight
    (the test waits for the page to be idle) and returns a short description for failure
    messages."""
    def register(act):
        if view in INTERACTIONS:
            raise ValueError(f"view {view!r} already has a random interaction")
        INTERACTIONS[view] = Interaction(act, verify)
        return act
    return register


def url_state(page) -> dict[str, str]:
    """The page's state as its URL hash holds it (JSON fields left as text)."""
    return page.evaluate("Object.fromEntries(new URLSearchParams(location.hash.slice(1)))")


def error_shown(page) -> bool:
    return page.locator("#error").is_visible()


def static_modules() -> list[str]:
    """Every .js file of the page, as served: "main.js", "core/api.js", "views/scale.js", …"""
    return sorted(str(p.relative_to(STATIC)) for p in STATIC.rglob("*.js"))


def visible_text(page) -> str:
    return page.locator("body").inner_text()


def assert_page_clean(page) -> None:
    """No broken words in the visible text; when the open view shows an error, its old result
    is gone or marked stale (the view's section carries data-stale)."""
    # the page says "never NaN" / "not NaN" on purpose (a fully masked row is zeros)
    text = re.sub(r"\b(never|not) NaN\b", "", visible_text(page))
    for word in BROKEN_WORDS:
        # whole words only: "nullable" or "annulled" would be fine, "null" alone is not
        found = re.findall(rf"(?<![\w-]){re.escape(word)}(?![\w-])", text)
        assert not found, f"the page shows {word!r}: …{_around(text, word)}…"
    error = page.locator("#error")
    if error.is_visible():
        shown = page.evaluate("""() => {
            const open = document.querySelector('section.view:not([hidden])');
            const drawn = Array.from(open.querySelectorAll('[data-result]')).some((n) =>
                n.childElementCount > 0 || n.textContent.trim() !== '');
            return {view: open.id, drawn, stale: open.dataset.stale === '1'};
        }""")
        assert not shown["drawn"] or shown["stale"], (
            f"{shown['view']} shows the error {error.inner_text()!r} beside a result that is "
            "not marked stale")


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


def block_outside(context, *allowed: str) -> list[str]:
    """Abort every request of ``context`` whose URL starts with none of ``allowed`` (the
    server's origin, "data:", …); returns the list the blocked URLs are appended to, which a
    test asserts empty: the page must work offline."""
    outside: list[str] = []

    def only_local(route):
        url = route.request.url
        if url.startswith(allowed):
            route.continue_()
        else:
            outside.append(url)
            route.abort()

    context.route("**/*", only_local)
    return outside



# -- legibility: text size, sideways scrolling, knobs over labels -------------------------------
MIN_TEXT_PX = 11  # no rendered text shorter than this, in CSS px, after any SVG scaling

_SMALL_TEXT_JS = """(minPx) => {
  const hidden = (e) => { for (let p = e; p; p = p.parentElement) {
    const st = getComputedStyle(p);
    if (st.display === 'none' || st.visibility === 'hidden' || p.classList.contains('sr-only')
        || p.hidden) return true; } return false; };
  const out = [];
  const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  for (let n = walker.nextNode(); n; n = walker.nextNode()) {
    const text = n.textContent.trim();
    const e = n.parentElement;
    if (!text || !e || ['TITLE', 'SCRIPT', 'STYLE', 'OPTION'].includes(e.tagName.toUpperCase())
        || hidden(e)) continue;
    const range = document.createRange();
    range.selectNodeContents(n);
    const rects = Array.from(range.getClientRects()).filter((r) => r.width > 0 && r.height > 0);
    if (!rects.length) continue;  // not drawn
    // the font size as rendered, not the glyph box (a line box is ~1.2 em, so 10 px text has
    // 12 px boxes): the computed size, times an SVG text's scale on screen (its viewBox and
    // transforms, getScreenCTM)
    let h = parseFloat(getComputedStyle(e).fontSize);
    if (e instanceof SVGElement && e.getScreenCTM()) {
      const m = e.getScreenCTM();
      h *= Math.sqrt(Math.abs(m.a * m.d - m.b * m.c));
    }
    if (h < minPx - 1e-6) out.push(`${e.tagName.toLowerCase()}${e.getAttribute('class')
      ? '.' + e.getAttribute('class').split(' ')[0] : ''} "${text.slice(0, 24)}": ` +
      `${h.toFixed(2)} px`);
  }
  return out;
}"""


def small_text(page, min_px: float = MIN_TEXT_PX) -> list[str]:
    """Every visible piece of text on the page rendered smaller than ``min_px`` CSS px: its
    computed font size, an SVG text's times its SVG's scale on screen (getScreenCTM). Not its
    glyph box, which is taller than the font (issue 51: 10.75 px labels had 12 px boxes)."""
    return page.evaluate(_SMALL_TEXT_JS, min_px)


def sideways(page) -> list[str]:
    """What opens scrolled sideways: the page wider than the viewport, or a box of the open
    view whose content is wider than it without being a labelled region the keyboard reaches
    (role="region", an aria-label, tabindex ≥ 0)."""
    return page.evaluate("""() => {
        const bad = [];
        const vw = document.documentElement.clientWidth;
        if (document.documentElement.scrollWidth > vw) bad.push(
            `the page is ${document.documentElement.scrollWidth} px wide in a ${vw} px window`);
        const open = document.querySelector('section.view:not([hidden])');
        for (const e of open ? open.querySelectorAll('*') : []) {
            const st = getComputedStyle(e);
            if (!['auto', 'scroll'].includes(st.overflowX)) continue;
            if (e.scrollWidth <= e.clientWidth + 1) continue;
            const ok = e.getAttribute('role') === 'region' && e.getAttribute('aria-label')
                && e.tabIndex >= 0;
            if (!ok) bad.push(`${e.tagName.toLowerCase()}${e.id ? '#' + e.id : ''}` +
                `.${e.className}: scrolls sideways (${e.scrollWidth} in ${e.clientWidth} px) ` +
                'but is not a labelled region the keyboard reaches');
        }
        return bad;
    }""")


def labels_under_knobs(page) -> list[str]:
    """Text of an SVG in the open view that a draggable knob covers: a knob's circle
    (.handle, .handle-knob) overlapping a text's box, unless the text is that knob's own."""
    return page.evaluate("""() => {
        const bad = [];
        const open = document.querySelector('section.view:not([hidden])');
        for (const plane of open ? open.querySelectorAll('svg') : []) {
            const knobs = Array.from(plane.querySelectorAll('circle.handle, circle.handle-knob'));
            for (const t of plane.querySelectorAll('text')) {
                const b = t.getBoundingClientRect();
                if (!b.width || !t.textContent.trim()) continue;
                for (const k of knobs) {
                    if (k.parentElement.contains(t)) continue;  // the knob's own name
                    const c = k.getBoundingClientRect();
                    const cx = c.x + c.width / 2, cy = c.y + c.height / 2, r = c.width / 2;
                    const nx = Math.max(b.left, Math.min(cx, b.right));
                    const ny = Math.max(b.top, Math.min(cy, b.bottom));
                    if (Math.hypot(nx - cx, ny - cy) < r - 1) bad.push(
                        `"${t.textContent.trim()}" under ${k.parentElement.dataset.testid ||
                          k.dataset.testid || 'a knob'}`);
                }
            }
        }
        return bad;
    }""")
