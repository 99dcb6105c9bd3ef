"""Two learners in one classroom, in two real browsers (headless Chromium, each its own cookie
jar): both join with the code, work on the same view at the same time with different inputs,
and each page shows qkv's answer for its own inputs only. Loopback only (``--host 127.0.0.1``
stands for the LAN address --classroom would find)."""

from __future__ import annotations

import os

import pytest
from playwright import sync_api

import qkv
from page_checks import block_outside
from test_explore_browser import CHROMIUM, CHROMIUM_ARGS, TIMEOUT_MS, assert_shows_trace, idle
from test_explore_classroom import Server, code_in

pytestmark = pytest.mark.skipif(not os.path.exists(CHROMIUM), reason=f"no {CHROMIUM}")

# Two learners' inputs for the vectors view (in the page's URL state), and a later edit each.
LEARNERS = {
    "ada": {"q": [[0.5, 1.0]], "k": [[1.0, 2.0], [-0.5, 0.25]], "v": [[1.0, 0.0], [0.0, 1.0]],
            "edit": [[2.0, -1.0]]},
    "bo": {"q": [[1.0, 0.0], [0.0, 1.0]], "k": [[1.0, 0.0], [0.7, 0.7], [0.0, 1.0]],
           "v": [[2.0, 0.0], [0.0, 2.0], [1.0, 1.0]], "edit": [[-1.0, 0.5], [0.25, 0.25]]},
}


def fragment(inputs: dict) -> str:
    def rows(m):
        return ";".join(",".join(f"{x:g}" for x in row) for row in m)

    return f"view=vectors&q={rows(inputs['q'])}&k={rows(inputs['k'])}&v={rows(inputs['v'])}"


@pytest.fixture(scope="module")
def classroom():
    server = Server("--classroom", "--host", "127.0.0.1", "--port", "0")
    try:
        yield server.url, code_in(server.banner)
    finally:
        server.stop()


def test_two_learners_each_see_only_their_own_answers(classroom):
    url, code = classroom
    origin = url.rstrip("/")
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            pages, problems, outside = {}, [], []
            for name, inputs in LEARNERS.items():
                context = browser.new_context(viewport={"width": 1400, "height": 1000})
                outside.append(block_outside(context, origin, "data:"))
                page = context.new_page()
                page.set_default_timeout(TIMEOUT_MS)
                page.on("pageerror", lambda exc, n=name: problems.append(f"{n}: {exc}"))
                page.on("console", lambda m, n=name: problems.append(f"{n}: {m.text}")
                        if m.type == "error" else None)
                # Without the code: the page that says how to join, not the explorer.
                refused = page.goto(url)
                assert refused.status == 401 and "join" in page.content()
                # With it: the explorer, the code gone from the address, the inputs kept.
                page.goto(f"{url}?join={code}#{fragment(inputs)}")
                assert "join=" not in page.url and "view=vectors" in page.url
                pages[name] = page
            for name, page in pages.items():  # both loaded at once, then each checked
                idle(page)
                inputs = LEARNERS[name]
                assert_shows_trace(page, qkv.explain(inputs["q"], inputs["k"], inputs["v"]))
            for name, page in pages.items():  # each edits its own queries, interleaved
                for i, row in enumerate(LEARNERS[name]["edit"]):
                    box = page.get_by_test_id(f"query-input-{i}")
                    box.fill(", ".join(f"{x:g}" for x in row))
                    box.press("Enter")
            for name, page in pages.items():
                idle(page)
                inputs = LEARNERS[name]
                assert_shows_trace(page, qkv.explain(inputs["edit"], inputs["k"], inputs["v"]))
            cookies = [page.context.cookies()[0]["value"] for page in pages.values()]
            assert len(set(cookies)) == 2  # two learners, not one
            assert all(code not in c for c in cookies)
        finally:
            browser.close()
    assert problems == [] or all("401" in p for p in problems), problems
    assert all(o == [] for o in outside), outside


def test_a_waiting_request_says_how_many_are_ahead_and_the_note_goes_when_answered(classroom):
    """The page asks /api/queue while a heavy request is out; here the server's answers are
    held and the queue's reply is given by the test, so the wait is exact."""
    url, code = classroom
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_context(viewport={"width": 1400, "height": 1000}).new_page()
            page.set_default_timeout(TIMEOUT_MS)
            held = []
            page.route("**/api/farback", lambda route: held.append(route))  # let go below
            page.route("**/api/queue", lambda route: route.fulfill(json={
                "waiting": [{"path": "/api/farback", "ahead": 3}], "queue": {}}))
            page.goto(f"{url}?join={code}#view=farback")
            note = page.get_by_test_id("queue-note")
            note.wait_for(state="visible")
            assert note.text_content() == "Waiting for the shared machine: 3 ahead of you"
            page.unroute("**/api/queue")
            for route in held:
                route.continue_()
            page.unroute("**/api/farback")
            note.wait_for(state="hidden")
        finally:
            browser.close()
