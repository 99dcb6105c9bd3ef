"""View 9's task "find a previous-token head", judged by an oracle of its own: for every head
of MiniLM and for degenerate sentences (spaces only, one word, two words) as well as ordinary
ones, the page's ✓ must be what the oracle computes from qkv's weights, independently of the
page. Only the sentence's own tokens count ([CLS] and [SEP] are the tokenizer's)."""

from __future__ import annotations

import numpy as np
import pytest

from test_explore_browser import CHROMIUM, SCREENSHOTS, idle
from test_explore_views import browser, page, phone, server_url  # noqa: F401  (fixtures)

pytestmark = pytest.mark.skipif(not __import__("os").path.exists(CHROMIUM),
                                reason=f"no {CHROMIUM}")
SPECIAL = {"[CLS]", "[SEP]", "[PAD]", "[MASK]"}


@pytest.fixture(scope="module")
def minilm():
    from qkv.explore.model_service import ModelUnavailable, load_minilm

    try:
        return load_minilm()
    except ModelUnavailable as exc:
        pytest.skip(str(exc))


def oracle(tokens: list[str], weights: np.ndarray) -> tuple[bool | None, int, int]:
    """(verdict, hits, queries) for one head's weights (n, n): the queries are the tokens whose
    token and previous token are both the sentence's own; None when fewer than 2 exist."""
    own = [t not in SPECIAL for t in tokens]
    queries = [i for i in range(1, len(tokens)) if own[i] and own[i - 1]]
    hits = sum(int(np.argmax(weights[i])) == i - 1 for i in queries)
    if len(queries) < 2:
        return None, hits, len(queries)
    return hits / len(queries) > 0.5, hits, len(queries)


def _load(pg, sentence):
    pg.get_by_test_id("sentence").fill(sentence)
    pg.get_by_test_id("load-sentence").click()
    idle(pg)


SENTENCES = ["   ", "hello", "hello there", "a b c d e f g h i j",
             "The cat sat on the mat because it was tired."]

# Every head's thumbnail clicked in the page, one after another, and the task's box read right
# after each click (the click handler redraws it before it returns): one round trip for all
# heads instead of three per head.
CLICK_EVERY_HEAD = """([layers, heads]) => {
    const read = [];
    for (let l = 0; l < layers; l += 1) {
        for (let h = 0; h < heads; h += 1) {
            document.querySelector(`[data-testid="thumb-${l}-${h}"]`).click();
            const box = document.querySelector('[data-testid="task-previous"]');
            read.push([l, h, box.textContent, box.getAttribute('class'),
                       document.querySelector('#heat-title').textContent]);
        }
    }
    return read;
}"""


def _assert_verdict(sentence, tokens, weights, layer, head, text, cls, title) -> bool | None:
    """The box's text and class for head (layer, head), as shown after clicking its thumbnail,
    are the oracle's; the heat map's title names the head clicked. Returns the verdict."""
    verdict, hits, queries = oracle(tokens, weights[layer, head])
    where = f"{sentence!r} L{layer}H{head}: {text}"
    assert title.startswith(f"layer {layer}, head {head}:"), (where, title)
    done = "done" in (cls or "").split()
    assert done == (verdict is True), where
    assert text.startswith("✓ " if verdict else "Not yet: " if verdict is False
                           else "Type a longer sentence"), where
    if verdict is not None:
        unit = "token" if queries == 1 else "tokens"
        assert f"{hits} of {queries} {unit} " in text, where
    else:
        assert "1 tokens" not in text and "0 token " not in text, where
    return verdict


def test_the_previous_token_task_agrees_with_its_oracle_on_every_head(page, minilm):  # noqa: F811
    page.goto(f"{page.base}#view=model")
    idle(page)
    reached = {True: 0, False: 0, None: 0}
    for sentence in SENTENCES:
        _load(page, sentence)
        tokens, weights = minilm.attentions(sentence)  # (L, H, n, n)
        L, H = weights.shape[:2]
        # a few heads the learner's way: Playwright's click (the thumbnail visible, enabled,
        # not covered), the box read back through Playwright
        for layer, head in ((L - 1, H - 1), (L // 2, H // 2), (0, 0)):
            page.get_by_test_id(f"thumb-{layer}-{head}").click()
            box = page.get_by_test_id("task-previous")
            _assert_verdict(sentence, tokens, weights, layer, head, box.text_content(),
                            box.get_attribute("class"),
                            page.get_by_test_id("heat-title").text_content())
        # then every head, each clicked in the page
        read = page.evaluate(CLICK_EVERY_HEAD, [L, H])
        assert [(layer, head) for layer, head, *_ in read] == \
            [(layer, head) for layer in range(L) for head in range(H)]
        for layer, head, text, cls, title in read:
            reached[_assert_verdict(sentence, tokens, weights, layer, head, text, cls,
                                    title)] += 1
    # the test saw all three states: a head that is one, heads that are not, no verdict
    assert all(reached.values()), reached
    page.get_by_test_id("sentence").fill("   ")
    page.get_by_test_id("load-sentence").click()
    idle(page)
    page.get_by_test_id("thumb-0-0").click()
    text = page.get_by_test_id("task-previous").text_content()
    assert text == ("Type a longer sentence, three words or more: this one has 0 tokens of its "
                    "own besides the 2 markers the tokenizer adds, so no token has a token of "
                    "the sentence just before it."), text


def test_view_9_screenshots(page, phone):  # noqa: F811
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    for pg, name in ((page, "model-1400.png"), (phone, "model-390.png")):
        pg.goto(f"{pg.base}#view=model&layer=2&head=3")
        idle(pg)
        pg.screenshot(path=str(SCREENSHOTS / name), full_page=True)
        assert pg.evaluate("document.documentElement.scrollWidth") <= pg.viewport_size["width"]
