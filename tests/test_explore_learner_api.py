"""Issue 51, the server's side: what the explorer's API says is true and in the learner's words.

- View 6 (cost): the tile grid, its count and the memory row speak of the tile the kernel runs
  with (no mask: wider key tiles), so "64 of 64 tiles" never sits beside "one 512 × 1024 tile".
- Refusals name the control as it is labelled ("asked keys", "pairs (key:value)"), each refused
  symbol, and what is allowed; a tab in a GPT prompt is named as a tab, never shown as a blank.
- The CLI: a bad --generate names --generate; a misspelled option gets the command's own usage
  and the nearest option it has.
"""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest
from fastapi.testclient import TestClient

import qkv
from qkv import engine
from qkv.explore import create_app


@pytest.fixture(scope="module")
def client():
    with TestClient(create_app(), base_url="http://127.0.0.1") as c:
        yield c


@pytest.mark.parametrize("mask", ["none", "causal", "window", "documents"])
@pytest.mark.parametrize("n", [2048, 4096, 65536])
def test_cost_grid_and_memory_speak_of_the_same_tile(client, n, mask):
    body = client.post("/api/cost", json={"n": n, "mask": mask}).json()
    config = engine.current()
    tile = [config.tile_q, config.key_tile(mask != "none")]
    assert body["tile"] == tile
    assert body["block"] == [min(tile[0], n), min(tile[1], n)]
    rows, cols = len(body["grid"]), len(body["grid"][0])
    assert (rows, cols) == (-(-n // tile[0]), -(-n // tile[1]))
    assert body["tiles"]["total"] == rows * cols
    masks = {"none": None, "causal": qkv.causal(), "window": qkv.window(max(1, n // 8)),
             "documents": qkv.documents(np.arange(n) * 4 // n)}
    grid = engine.block_map(masks[mask], n, n, tile=tuple(tile))
    assert body["grid"] == ["".join(str(c) for c in row) for row in grid]


def test_the_unmasked_grid_at_4096_is_the_kernels_512_by_1024_tiles(client):
    """The case the issue found: 8 × 4 tiles of 512 × 1024, not 64 tiles of 512 × 512."""
    config = engine.current()
    if (config.tile_q, config.key_tile(False)) != (512, 1024):
        pytest.skip("the kernel's default tiles are not 512 × 1024 here")
    body = client.post("/api/cost", json={"n": 4096, "mask": "none"}).json()
    assert body["tiles"]["total"] == 32 and body["block"] == [512, 1024]


@pytest.mark.parametrize(("body", "says"), [
    ({"pairs": [[3, 17]], "asked": [9]}, "asked keys: key 9 is asked but no pair stores it"),
    ({"pairs": [[3, 17], [3, 4]], "asked": [3]}, "pairs (key:value): key 3 is stored twice"),
])
def test_recall_refusals_name_the_control_as_labelled(client, body, says):
    r = client.post("/api/cost/recall", json=body)
    assert r.status_code == 422 and says in r.json()["detail"], r.json()


def test_a_refused_sequence_names_each_symbol_and_what_is_allowed(client):
    r = client.post("/api/seq2seq", json={"input": "xyz"})
    if r.status_code == 503:
        pytest.skip("the seq2seq module is not installed")
    said = r.json()["detail"]
    assert "'x', 'y', 'z' are not symbols" in said and "letters a to p" in said, said
    said = client.post("/api/seq2seq", json={"input": "ab c"}).json()["detail"]
    assert "a space is not a symbol" in said, said


def test_a_tab_in_the_prompt_is_named_not_shown_as_a_blank(client):
    r = client.post("/api/gpt/predict", json={"prompt": "To be,\tor"})
    if r.status_code == 503:
        pytest.skip("the GPT is not installed")
    said = r.json()["detail"]
    assert r.status_code == 422 and "a tab (⇥)" in said and "“\t”" not in said, said


def _qkv(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "NO_COLOR": "1", "COLUMNS": "100"}
    return subprocess.run([sys.executable, "-m", "qkv", *args], capture_output=True, text=True,
                          env=env, timeout=120)


def test_a_bad_generate_names_generate():
    run = _qkv("look", "--gpt", "ROMEO.", "--generate", "-3")
    assert run.returncode == 2
    assert "usage: qkv look" in run.stderr
    assert "argument --generate: give a whole number of characters ≥ 0, not '-3'" in run.stderr


@pytest.mark.parametrize(("args", "near"), [
    (["look", "x", "--layr", "2"], "--layr (did you mean --layer?)"),
    (["look", "x", "--hed", "3"], "--hed (did you mean --head?)"),
    (["train", "recall", "--sed", "0"], "--sed (did you mean --seed?)"),
])
def test_a_misspelled_option_gets_the_commands_usage_and_the_nearest_option(args, near):
    run = _qkv(*args)
    assert run.returncode == 2
    assert f"usage: qkv {args[0]}" in run.stderr, run.stderr
    assert near in run.stderr, run.stderr
