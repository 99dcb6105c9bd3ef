"""qkv.tasks.frozen_projections: view 1's toy trained with the W's all learned, one frozen, or
one alone. The batched loss is the circles' own losses (each circle through qkv.attention on
its own) and its gradients are finite differences'; a frozen W never moves; the shipped runs'
numbers are what :func:`judge` and the loss give on the shipped W's, and the frozen ones are
the identity or the seeded random matrix; view 1's endpoint serves them."""

from __future__ import annotations

import numpy as np
import pytest

import qkv
from qkv.nn.gradcheck import max_rel_error, numerical_grad
from qkv.tasks import frozen_projections as fp


def test_the_batched_loss_is_the_mean_of_each_circle_s_own():
    w = fp.initial(fp.SETTINGS[0])
    own = []
    for n in fp.POINTS:
        x = fp.circle(n)
        out = qkv.attention(x @ w["q"], x @ w["k"], x @ w["v"])
        own.append(((out - np.roll(x, -1, axis=0)) ** 2).mean())
    assert fp.loss_and_grads(w)[0] == pytest.approx(np.mean(own), rel=1e-12)


def test_the_gradients_are_finite_differences():
    w = fp.initial(fp.Setting(("q", "k", "v")), seed=3)
    _, grads = fp.loss_and_grads(w)
    for name in fp.NAMES:
        numeric = numerical_grad(lambda: fp.loss_and_grads(w)[0], w[name])
        assert max_rel_error(grads[name], numeric) < 1e-6, name


def test_a_frozen_w_never_moves_and_the_settings_cover_the_claim():
    labels = [s.label for s in fp.SETTINGS]
    assert len(set(labels)) == len(labels) == 11
    assert {len(s.learned) for s in fp.SETTINGS} == {0, 1, 2, 3}
    setting = fp.Setting(("q", "k"), "random")
    run = fp.train(setting, steps=5)
    frozen = fp.initial(setting)["v"]
    assert run["w_v"] == np.round(frozen, 4).tolist()
    assert run["w_q"] != np.round(fp.initial(setting)["q"], 4).tolist()  # a learned one moved


@pytest.fixture(scope="module")
def shipped():
    return fp.shipped()


def test_the_shipped_runs_are_what_their_w_s_do(shipped):
    assert shipped["command"] == fp.COMMAND and shipped["points"] == list(fp.POINTS)
    assert [r["label"] for r in shipped["runs"]] == [s.label for s in fp.SETTINGS]
    for setting, run in zip(fp.SETTINGS, shipped["runs"], strict=True):
        w = {n: np.array(run[f"w_{n}"]) for n in fp.NAMES}
        assert run["mse"] == fp.loss_and_grads(w)[0], run["label"]
        judged = fp.judge(w)
        for key, value in judged.items():
            assert run[key] == value, (run["label"], key)
        start = fp.initial(setting)
        for n in fp.NAMES:
            if n not in setting.learned:  # frozen: the identity or the seeded random matrix
                assert run[f"w_{n}"] == np.round(start[n], 4).tolist(), (run["label"], n)


def test_view_1_s_endpoint_serves_the_shipped_runs(shipped):
    from fastapi.testclient import TestClient

    from qkv.explore.app import create_app

    with TestClient(create_app(allowed_hosts=["testserver"])) as client:
        reply = client.post("/api/projections/frozen", json={})
        assert reply.status_code == 200 and reply.json() == shipped
        assert client.post("/api/projections/frozen", json={"steps": 3}).status_code == 422
