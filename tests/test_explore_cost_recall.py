"""View 6's new parts through the API, against the library: the memory row (what qkv's kernel
holds, measured by tracemalloc), the shipped MQAR run's curves (its JSON), and the shipped
models' answers on an edited sequence (the models called directly); the task's verdict by an
oracle of its own; and the 422s in the learner's words."""

from __future__ import annotations

import numpy as np
import pytest
from fastapi.testclient import TestClient

from qkv.explore import create_app
from qkv.tasks import mqar, scaling

pytest.importorskip("safetensors")


@pytest.fixture(scope="module")
def client():
    with TestClient(create_app(allowed_hosts=["testserver"])) as c:
        yield c


# -- the memory row: the path the kernel takes, not a tile it never allocates --------------------
@pytest.mark.parametrize("n", [16, 64, 256, 1024, 4096])
def test_qkv_memory_is_within_a_small_factor_of_what_the_kernel_allocates(client, n):
    body = client.post("/api/cost", json={"n": n, "mask": "none"}).json()
    rows, cols = body["block"]
    one_worker = rows * cols * 4 + n * 65 * 4  # the row's figure with one worker at work
    assert body["qkv_bytes"] == body["workers_in_use"] * rows * cols * 4 + n * 65 * 4
    # the traced peak of one dense call with one worker, beyond its inputs (scaling.measure)
    _, peak = scaling.measure(scaling.call("qkv dense", scaling.make_inputs(
        n, 64, np.float32, np.random.default_rng(0))), 0)
    # the row counts the scores and the output; the call also copies q scaled and the like
    assert one_worker <= peak <= 5 * one_worker, (n, one_worker, peak)
    assert body["small_problem"] == (n * n <= body["small_limit"])
    if body["small_problem"]:  # issue 34: 2.0 KB naive against 2.0 MB "qkv" at n = 16
        assert body["block"] == [n, n] and body["qkv_bytes"] < body["naive_bytes"]


def test_at_n_16_the_memory_row_no_longer_claims_a_tile_of_two_megabytes(client):
    body = client.post("/api/cost", json={"n": 16, "mask": "causal"}).json()
    assert body["qkv_bytes"] == 16 * 16 * 4 + 16 * 65 * 4
    assert body["naive_bytes"] == 2 * 16 * 16 * 4 + 16 * 64 * 4


# -- the recall curves: the shipped run's JSON -----------------------------------------------------
def test_recall_curves_are_the_shipped_json(client):
    body = client.post("/api/cost/recall/curves", json={}).json()
    data = mqar.shipped()
    assert body["command"] == mqar.SHIPPED_COMMAND and body["per_cell"] == data["per_cell"]
    assert [m["kind"] for m in body["models"]] == list(mqar.KINDS)
    for m in body["models"]:
        run = data["models"][m["kind"]]
        assert m["parameters"] == run["parameters"] and m["n_state"] == run["n_state"]
        assert [(c["length"], c["pairs"], c["accuracy"]) for c in m["cells"]] == [
            (c["length"], c["pairs"], c["accuracy"]) for c in run["cells"]]


# -- the live answers: the shipped models called directly ----------------------------------------
def library_answers(pairs, asked) -> dict[str, list]:
    """Each model's answer at each asked key, from the checkpoints, without the service."""
    config = mqar.load_pretrained("attention").config
    batch = mqar.encode(config, [tuple(p) for p in pairs], asked)
    out = {}
    for kind in mqar.KINDS:
        pred = mqar.load_pretrained(kind).predict(batch.tokens)[0]
        out[kind] = [int(pred[j]) - config.n_keys if pred[j] > config.n_keys else None
                     for j in np.flatnonzero(batch.target[0] >= 0)]
    return out


def test_recall_answers_are_the_models_own_on_an_edited_sequence(client):
    pairs, asked = [[3, 17], [9, 4], [12, 30], [1, 1]], [12, 3, 1, 9]
    body = client.post("/api/cost/recall", json={"pairs": pairs, "asked": asked}).json()
    want = library_answers(pairs, asked)
    stored = dict(map(tuple, pairs))
    assert body["length"] == 2 * len(pairs) + 2 * len(asked)
    for m in body["models"]:
        assert [a["answer"] for a in m["answers"]] == want[m["kind"]]
        assert [a["expected"] for a in m["answers"]] == [stored[k] for k in asked]
        assert m["correct"] == sum(a == stored[k] for a, k in zip(want[m["kind"]], asked,
                                                                    strict=True))


def test_a_random_example_is_the_task_s_own_sampler_and_every_key_is_asked(client):
    body = client.post("/api/cost/recall", json={"seed": 3, "n_pairs": 12}).json()
    assert len(body["pairs"]) == 12 and sorted(body["asked"]) == sorted(k for k, _ in
                                                                         body["pairs"])
    want = library_answers(body["pairs"], body["asked"])
    for m in body["models"]:
        assert [a["answer"] for a in m["answers"]] == want[m["kind"]]


def task_done(body) -> bool:
    """The view's task, judged from the answers: attention right on every asked key, the small
    state wrong on at least one."""
    by = {m["kind"]: m for m in body["models"]}
    return (by["attention"]["correct"] == by["attention"]["total"]
            and by["ssm-small"]["correct"] < by["ssm-small"]["total"])


def test_the_task_is_reachable_and_judged_by_the_library(client):
    """Over random sequences of 1 … 16 pairs, the oracle (the library's answers) and the
    service's verdict agree; and some pair count makes the task done, so the page can reach it."""
    reached = []
    for n in (1, 2, 4, 8, 16):
        body = client.post("/api/cost/recall", json={"seed": 0, "n_pairs": n}).json()
        want = library_answers(body["pairs"], body["asked"])
        stored = dict(map(tuple, body["pairs"]))
        oracle = (all(a == stored[k] for a, k in zip(want["attention"], body["asked"],
                                                     strict=True))
                  and not all(a == stored[k] for a, k in zip(want["ssm-small"], body["asked"],
                                                             strict=True)))
        assert task_done(body) == oracle
        reached.append(oracle)
    assert any(reached)


@pytest.mark.parametrize("body, says", [
    ({"pairs": [[3, 17], [3, 4]], "asked": [3]}, "pairs (key:value): key 3 is stored twice"),
    ({"pairs": [[3, 17]], "asked": [9]}, "asked keys: key 9 is asked but no pair stores it"),
    ({"pairs": [[99, 1]], "asked": [99]}, "pairs (key:value): a key must be a number from 1 to"),
    ({"pairs": [[1, 99]], "asked": [1]}, "pairs (key:value): a value must be a number from 1 to"),
    ({"n_pairs": 0}, "n_pairs"),
    ({"n_pairs": 65}, "n_pairs"),
    ({"pairs": []}, "pairs"),
])
def test_bad_recall_input_is_a_422_in_words(client, body, says):
    response = client.post("/api/cost/recall", json=body)
    assert response.status_code == 422
    assert says in response.json()["detail"]
