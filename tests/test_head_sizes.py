"""View 5's rule behind d_k (/api/heads/sizes): d_k = d_model / heads for the models of this
explorer, read from their own configurations, and for published ones; in Chromium the page
states the rule with those numbers and fits a phone."""

from __future__ import annotations

import json
import os

import pytest

from page_checks import assert_page_clean
from test_explore_browser import CHROMIUM, SCREENSHOTS, idle
from test_explore_circuit import small_text
from test_explore_views import browser, page, phone, server_url  # noqa: F401  (fixtures)


@pytest.fixture(scope="module")
def sizes():
    from fastapi.testclient import TestClient

    from qkv.explore import create_app

    with TestClient(create_app(), base_url="http://127.0.0.1") as client:
        answer = client.post("/api/heads/sizes", json={})
    assert answer.status_code == 200, answer.text
    return {m["name"]: m for m in answer.json()["models"]}


def test_the_models_here_are_read_from_their_configurations(sizes):
    from qkv.models.files import wheel_folder
    from qkv.tasks import gpt, induction

    folder, _ = wheel_folder()
    config = json.loads((folder / "config.json").read_text())
    mini = sizes["MiniLM (all-MiniLM-L6-v2)"]
    assert (mini["heads"], mini["d_k"], mini["d_model"]) == (
        config["num_attention_heads"], config["hidden_size"] // config["num_attention_heads"],
        config["hidden_size"]) == (12, 32, 384)
    assert mini["kv_per_token"] is None and not mini["decoder"]
    for name, model in (("this GPT (view 10)", gpt.load_pretrained()[0]),
                        ("the induction model (view 10)", induction.load_pretrained()[0])):
        c, row = model.config, sizes[name]
        assert (row["layers"], row["heads"], row["d_model"], row["d_k"]) == (
            c.n_layer, c.n_head, c.n_embd, c.d_head)


def test_every_row_keeps_the_rule(sizes):
    for m in sizes.values():
        assert m["heads"] * m["d_k"] == m["d_model"], m
        if m["decoder"]:
            assert m["kv_per_token"] == 2 * m["layers"] * m["kv_heads"] * m["d_k"], m
    published = {k: (v["layers"], v["heads"], v["d_k"], v["d_model"])
                 for k, v in sizes.items() if not v["here"]}
    assert published == {"GPT-2 small": (12, 12, 64, 768), "GPT-2 XL": (48, 25, 64, 1600),
                         "Llama-2-7B": (32, 32, 128, 4096)}


@pytest.mark.skipif(not os.path.exists(CHROMIUM), reason=f"no {CHROMIUM}")
def test_view_5_states_the_rule_with_the_models_numbers(phone, sizes):  # noqa: F811
    phone.goto(f"{phone.base}#view=mistakes")
    phone.wait_for_selector("[data-testid='dk-table']", timeout=120_000)
    idle(phone)
    rows = list(sizes.values())
    for i, m in enumerate(rows):
        assert phone.get_by_test_id(f"dk-split-{i}").text_content() == \
            f"{m['heads']} × {m['d_k']} = {m['d_model']:,}"
    rule = phone.get_by_test_id("dk-rule").text_content()
    assert "12 heads × 32 = 384" in rule and "√32 ≈ 5.66" in rule, rule
    modern = phone.get_by_test_id("dk-modern").text_content()
    llama = sizes["Llama-2-7B"]
    assert f"{llama['kv_per_token']:,} numbers a token" in modern, modern
    assert "32 layers × 32 heads of d_k = 128" in modern, modern
    assert phone.evaluate("document.documentElement.scrollWidth") <= 390
    assert small_text(phone, "#dk-rule *") == []
    assert_page_clean(phone)
    phone.locator("#dk-rule").screenshot(path=str(SCREENSHOTS / "dk-rule-390.png"))


@pytest.mark.skipif(not os.path.exists(CHROMIUM), reason=f"no {CHROMIUM}")
def test_view_10_puts_the_gpt_among_the_published_models(phone, sizes):  # noqa: F811
    phone.goto(f"{phone.base}#view=gpt")
    phone.wait_for_selector("[data-testid='gpt-scale']", timeout=120_000)
    idle(phone)
    said = phone.get_by_test_id("gpt-scale").text_content()
    gpt = sizes["this GPT (view 10)"]
    assert said.startswith(f"This GPT has {gpt['layers']} layers × {gpt['heads']} heads of "
                           f"d_k = {gpt['d_k']} ({gpt['d_model']:,} wide; its KV cache keeps "
                           f"{gpt['kv_per_token']:,} numbers a token)"), said
    for name in ("GPT-2 small", "GPT-2 XL", "Llama-2-7B"):
        m = sizes[name]
        assert f"{name}, {m['layers']} layers × {m['heads']} heads of d_k = {m['d_k']}" in said
    assert small_text(phone, "#gpt-scale-box *") == []


@pytest.mark.skipif(not os.path.exists(CHROMIUM), reason=f"no {CHROMIUM}")
def test_view_5s_rule_at_1400_px(page, sizes):  # noqa: F811
    page.goto(f"{page.base}#view=mistakes")
    page.wait_for_selector("[data-testid='dk-table']", timeout=120_000)
    idle(page)
    rows = page.locator("[data-testid^='dk-row-']")
    assert rows.count() == len(sizes)
    # the whole table is in view: no sideways scrolling at 1400 px
    assert page.get_by_test_id("dk-table").evaluate(
        "t => t.parentElement.scrollWidth <= t.parentElement.clientWidth")
    assert_page_clean(page)
    page.locator("#dk-rule").screenshot(path=str(SCREENSHOTS / "dk-rule-1400.png"))
