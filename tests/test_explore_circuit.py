"""View 10's induction model, live: the learner's prompt through the shipped attention-only
model with heads switched off and heads taken out of another head's queries, keys or values
(POST /api/gpt/circuit, /api/gpt/circuit/table). The API gives qkv.tasks.circuits' numbers; in
Chromium the page draws them, its sentences quote them, its task's ✓ is the best of every cut
the controls can make, it works from the keyboard and fits a phone with text ≥ 11 px."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

from page_checks import assert_page_clean
from test_explore_browser import CHROMIUM, SCREENSHOTS, idle, shown
from test_explore_views import browser, page, phone, server_url  # noqa: F401  (fixtures)

PROMPT = "ROMEO: qvzkwjxbtg. ROMEO: qvzkwj"
K_PATH = {"source": {"layer": 0, "head": 0}, "target": {"layer": 1, "head": 0}, "input": "k"}


@pytest.fixture(scope="module")
def shipped():
    from qkv.tasks import induction

    return induction.load_pretrained()


@pytest.fixture(scope="module")
def client():
    from fastapi.testclient import TestClient

    from qkv.explore import create_app

    with TestClient(create_app(), base_url="http://127.0.0.1") as c:
        yield c


@pytest.fixture(scope="module")
def table(client):
    answer = client.post("/api/gpt/circuit/table", json={})
    assert answer.status_code == 200, answer.text
    return answer.json()


# -- the API ------------------------------------------------------------------------------------
def test_the_circuit_answer_is_the_librarys_run(client, shipped):
    from qkv.tasks import circuits
    from qkv.tasks.gpt_watch import softmax_t

    model, tok, _ = shipped
    d = client.post("/api/gpt/circuit", json={"prompt": PROMPT, "paths": [K_PATH],
                                             "off": [{"layer": 0, "head": 2}]}).json()
    ids = tok.encode(PROMPT)
    cut = circuits.run(model, ids[None], [(0, 2)], [circuits.PathRemoval((0, 0), (1, 0), "k")])
    intact = circuits.run(model, ids[None])
    np.testing.assert_array_equal(np.array(d["weights"]), cut.weights[0].astype(np.float64))
    np.testing.assert_array_equal(np.array(d["intact_weights"]),
                                  intact.weights[0].astype(np.float64))
    p0, p1 = softmax_t(intact.logits[0, -1], 1.0), softmax_t(cut.logits[0, -1], 1.0)
    top = [tok.chars.index(c) for c in d["next"]["chars"]]
    assert top == list(np.argsort(-p0, kind="stable")[:len(top)])
    np.testing.assert_array_equal(d["next"]["after"], p1[top])
    assert d["labels"] == ["L0H2 off", "L0H0 out of L1H0's keys"]
    # what copying predicts, found here by reading the prompt
    last = PROMPT[-1]
    earlier = [j for j in range(len(PROMPT) - 1) if PROMPT[j] == last]
    c = d["copying"]
    assert c["earlier"] == earlier and c["keys"] == [j + 1 for j in earlier]
    assert c["copied"] == PROMPT[earlier[-1] + 1]
    assert c["weight_after"][1][0] == pytest.approx(
        float(cut.weights[0, 1, 0, -1, [j + 1 for j in earlier]].sum()))
    assert c["p_before"] == pytest.approx(p0[tok.chars.index(c["copied"])])
    assert d["repeat"]["after"] > d["repeat"]["before"]  # the cut breaks the copying


def test_the_table_is_the_librarys_composition_table(table, shipped):
    from qkv.explore.circuit_service import TABLE_SEQUENCES
    from qkv.tasks import circuits

    model = shipped[0]
    t = circuits.composition_table(model, TABLE_SEQUENCES)
    assert table["base"]["copy_loss"] == t["base"].copy_loss
    assert len(table["paths"]) == len(t["paths"]) == 48
    for row in table["paths"]:
        m = t["paths"][(tuple(row["source"]), tuple(row["target"]), row["input"])]
        assert row["copy_loss"] == m.copy_loss
        np.testing.assert_array_equal(row["induction"], m.induction)
    assert len(table["off"]) == 8 and table["alphabet"] == list(shipped[1].chars)


def test_the_circuit_api_refuses_in_the_learners_words(client):
    for body, expected in (
            ({"prompt": "a" * 49}, "prompt: it has 49 characters, but the induction model "
                                   "reads at most 48: shorten it"),
            ({"prompt": "café"}, "prompt for the induction model: it has characters the "
                                 "model never saw (“é”)"),
            ({"prompt": ""}, "type at least one character for the induction model"),
            ({"prompt": "ab", "paths": [{**K_PATH, "target": {"layer": 0, "head": 1}}]},
             "paths: L0H1 cannot lose L0H0"),
            ({"prompt": "ab", "off": [{"layer": 2, "head": 0}]},
             "off: there is no head 0 of layer 2"),
            ({"prompt": "ab", "paths": [{**K_PATH, "input": "o"}]}, "paths")):
        r = client.post("/api/gpt/circuit", json=body)
        assert r.status_code == 422 and expected in r.json()["detail"], r.json()
        assert "\n" not in r.json()["detail"]


# -- in the browser -------------------------------------------------------------------------------
pytestmark_browser = pytest.mark.skipif(not __import__("os").path.exists(CHROMIUM),
                                        reason=f"no {CHROMIUM}")


def _open(pg, extra=None):
    more = {"circuit": {"prompt": PROMPT, "off": [], "paths": [], "pick": None,
                        "target": [1, 0], "random": 0, **(extra or {})}}
    pg.goto(f"{pg.base}#view=gpt&more={json.dumps(more)}")
    pg.wait_for_selector("[data-testid='gpt-circ-cell-0-0']", timeout=120_000)
    pg.wait_for_selector("[data-testid='gpt-circ-path-0-0-k']", timeout=120_000)
    idle(pg)


def _weights(pg, testid: str, n: int) -> np.ndarray:
    cells = shown(pg, f"{testid}-")
    return np.array([[cells[f"{testid}-{i}-{j}"][0] for j in range(n)] for i in range(n)])


SMALL_TEXT = """(selector) => {
  const out = [];
  for (const e of document.querySelectorAll(selector)) {
    const own = [...e.childNodes].some(n => n.nodeType === 3 && n.textContent.trim());
    if (!own || e.closest('[hidden]') || e.getClientRects().length === 0) continue;
    let size = parseFloat(getComputedStyle(e).fontSize);
    if (e instanceof SVGElement && e.ownerSVGElement) size *= e.ownerSVGElement.getScreenCTM().a;
    if (size < 10.95) out.push(`${e.tagName} ${size.toFixed(1)} ${e.textContent.slice(0, 30)}`);
  }
  return out;
}"""


def small_text(pg, selector: str) -> list[str]:
    """Elements under ``selector`` whose own text renders below 11 px (an SVG's scale
    applied), as "TAG size text"."""
    return pg.evaluate(SMALL_TEXT, selector)


def _oracle(table) -> tuple:
    """The cut that raises the second-copy loss most, of every cut in the table."""
    best = max(table["paths"], key=lambda p: p["copy_loss"])
    return tuple(best["source"]), tuple(best["target"]), best["input"]


@pytestmark_browser
def test_the_page_cuts_the_circuit_and_says_what_it_did(page, table, shipped):  # noqa: F811
    from qkv.tasks import circuits

    model, tok, _ = shipped
    _open(page)
    ids = tok.encode(PROMPT)
    n = ids.size
    intact = circuits.run(model, ids[None]).weights[0]
    np.testing.assert_array_equal(_weights(page, "gpt-circ-cell", n),
                                  intact[1, 0].astype(np.float64))  # the induction head
    copy = page.get_by_test_id("gpt-circ-copy").text_content()
    w = float(intact[1, 0, -1, 13])
    assert f"L1H0 puts {w:.3f} of its weight on that position" in copy, copy
    task = page.get_by_test_id("gpt-circ-task")
    assert task.text_content().startswith("Not yet:")
    # the table sentence names the cut that costs L1H0 most, and its figures
    into = [p for p in table["paths"] if p["target"] == [1, 0]]
    top = max(into, key=lambda p: p["copy_loss"])
    said = page.get_by_test_id("gpt-circ-table-sentence").text_content()
    rise = top["copy_loss"] - table["base"]["copy_loss"]
    assert f"taking L{top['source'][0]}H{top['source'][1]} out of its keys costs most" in said
    assert f"(+{rise:.2f})" in said and "K-composition" in said, said
    # the key step, from the keyboard: focus the cut and press Enter
    page.get_by_test_id("gpt-circ-path-0-0-k").focus()
    page.keyboard.press("Enter")
    page.wait_for_selector("[data-testid='gpt-circ-intact-cell-0-0']")
    idle(page)
    cut = circuits.run(model, ids[None], paths=[circuits.PathRemoval((0, 0), (1, 0), "k")])
    np.testing.assert_array_equal(_weights(page, "gpt-circ-cell", n),
                                  cut.weights[0, 1, 0].astype(np.float64))
    copy = page.get_by_test_id("gpt-circ-copy").text_content()
    assert f"with L0H0 out of L1H0's keys: {float(cut.weights[0, 1, 0, -1, 13]):.3f}" in copy
    done = _oracle(table) == ((0, 0), (1, 0), "k")
    assert task.text_content().startswith("✓ " if done else "Not yet:"), task.text_content()
    assert ("done" in (task.get_attribute("class") or "").split()) == done
    assert_page_clean(page)
    page.locator("#gpt-circuit").screenshot(path=str(SCREENSHOTS / "gpt-circuit.png"))
    page.get_by_test_id("gpt-circ-path-0-0-v").click()  # two cuts: the task counts one
    assert task.text_content().startswith("Not yet: the task counts one cut alone")


@pytestmark_browser
def test_every_cut_the_task_can_see_gets_the_oracles_verdict(page, table):  # noqa: F811
    """The ✓ for exactly the best of all 48 cuts; every other cut a "Not yet" that counts the
    cuts above it — over the whole domain, every target head picked in turn."""
    _open(page)
    ranked = sorted(table["paths"], key=lambda p: -p["copy_loss"])
    task = page.get_by_test_id("gpt-circ-task")
    for target in sorted({tuple(p["target"]) for p in table["paths"]}):
        page.get_by_test_id("gpt-circ-target").select_option(f"{target[0]}.{target[1]}")
        for p in [p for p in table["paths"] if tuple(p["target"]) == target]:
            button = page.get_by_test_id(
                f"gpt-circ-path-{p['source'][0]}-{p['source'][1]}-{p['input']}")
            button.click()
            text = task.text_content()
            above = sum(q["copy_loss"] > p["copy_loss"] for q in ranked)
            if above == 0:
                assert text.startswith("✓ "), text
            else:
                assert re.search(rf"; {above} cuts? of the 48 raise it more", text), text
            page.get_by_test_id(
                f"gpt-circ-path-{p['source'][0]}-{p['source'][1]}-{p['input']}").click()
    idle(page)


@pytestmark_browser
def test_a_repeated_random_string_and_a_phone(phone, table):  # noqa: F811
    _open(phone)
    phone.get_by_test_id("gpt-circ-random").click()
    idle(phone)
    prompt = phone.get_by_test_id("gpt-circ-prompt").input_value()
    half = table["context"] // 2
    assert len(prompt) == 2 * half and prompt[:half] == prompt[half:]
    assert set(prompt) <= set(table["alphabet"])
    chars = phone.locator("[data-testid^='gpt-circ-cell-row-']").evaluate_all(
        "els => els.map(e => e.textContent)")
    assert len(chars) == 2 * half
    assert phone.evaluate("document.documentElement.scrollWidth") <= 390
    # every text of the section, as rendered (an SVG's scale applied), is at least 11 px
    small = small_text(phone, "#gpt-circuit *, #gpt-induction *")
    assert small == [], small
    assert_page_clean(phone)
    phone.locator("#gpt-circuit").screenshot(path=str(SCREENSHOTS / "gpt-circuit-390.png"))


def test_every_page_module_stays_under_700_lines():
    """The page's modules stay small (issue 49: views/gpt.js had grown to 744 lines); the
    induction model, its circuit controls, the role tables and the heat map live in gpt/."""
    from page_checks import STATIC, static_modules

    long = {m: n for m in static_modules()
            if (n := len((STATIC / m).read_text().splitlines())) >= 700}
    assert long == {}
    for module in ("gpt/draw.js", "gpt/roles.js", "gpt/induction.js", "gpt/circuit.js"):
        assert f'"../{module}"' in (STATIC / "views/gpt.js").read_text() or \
            f'"./{module.split("/")[1]}"' in (STATIC / "gpt/induction.js").read_text(), module
