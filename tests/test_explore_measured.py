"""The explorer's measured claims, against the library: the far-back view's predictions and
weights against the shipped models called directly, its accuracy-by-lag and the
encoder–decoder's accuracy-by-length against ``farback.evaluate`` / ``seq2seq.evaluate`` on the
held-out sets, the cost view's slopes against ``scaling.slope``; and each endpoint's 422s."""

from __future__ import annotations

import numpy as np
import pytest
from fastapi.testclient import TestClient

from qkv.explore import create_app, seq2seq_service
from qkv.tasks import checkpoint as ckpt
from qkv.tasks import farback, scaling, seq2seq


@pytest.fixture(scope="module")
def client():
    with TestClient(create_app(allowed_hosts=["testserver"])) as c:
        yield c


def features_of(body) -> np.ndarray:
    """The task's features ``(1, W, n_types + 3)`` rebuilt from the response's series."""
    n_types = farback.load_pretrained("attention").config.n_types
    types, sizes, signs = (np.array(body[k]) for k in ("types", "sizes", "signs"))
    x = np.concatenate([np.eye(n_types)[types], sizes[:, None], signs[:, None],
                        (signs * sizes)[:, None]], axis=-1)
    return x[None].astype(np.float32)


# -- far back: the shipped checkpoints -----------------------------------------------------------
def test_shipped_farback_models_load_with_their_held_out_scores():
    for kind in farback.KINDS:
        model = farback.load_pretrained(kind)
        assert model.kind == kind and model.config == farback.FarbackConfig()
        assert set(model.metrics["by_lag"][0]) == {"lags", "cases", "correct", "accuracy",
                                                   "interval"}
    with pytest.raises(ValueError, match="kind must be one of"):
        farback.load_pretrained("lstm")


def test_farback_checkpoint_round_trip_and_refusals(tmp_path):
    model = farback.FarbackModel(farback.FarbackConfig(window=32, d_model=8), "gru")
    back = farback.FarbackModel.load(model.save(tmp_path / "m.safetensors", {"a": 1}))
    assert back.metrics == {"a": 1} and back.config == model.config
    for name, p in model.params.items():
        np.testing.assert_array_equal(back.params[name], p)
    with pytest.raises(ckpt.CheckpointError, match="not 'farback'"):
        farback.FarbackModel.load(seq2seq.DATA / "seq2seq-fixed.safetensors")


# -- far back: one series ------------------------------------------------------------------------
def test_farback_series_as_sampled_is_read_as_the_models_read_it(client):
    body = client.post("/api/farback", json={"seed": 5}).json()
    config = farback.load_pretrained("attention").config
    s = farback.sample(config, np.random.default_rng([5, 0xFA4B]), 1)  # the service's draw
    np.testing.assert_array_equal(features_of(body), s.x)
    assert body["event"]["lag"] == int(s.lag[0])
    assert body["event"]["sign"] == (1 if s.target[0] else -1)
    for kind in farback.KINDS:
        model = farback.load_pretrained(kind)
        logits = model.forward(s.x)[0][0].astype(np.float64)
        got = body["models"][kind]
        assert got["prediction"] == (1 if logits[1] > logits[0] else -1)
        np.testing.assert_allclose(got["p_plus"], 1 / (1 + np.exp(logits[0] - logits[1])),
                                   rtol=1e-12)
        assert got["correct"] == (got["prediction"] == body["event"]["sign"])
    w = farback.load_pretrained("attention").weights(s.x)[0]
    np.testing.assert_array_equal(np.array(body["weights"], np.float32), w)
    W, lag = body["window"], body["event"]["lag"]
    assert body["attention"]["top_lag"] == W - int(np.argmax(w))
    assert body["attention"]["weight_on_event"] == float(w[W - lag])


def test_farback_edits_keep_the_task_rule_and_are_read_by_the_models(client):
    edit = {"seed": 2, "event_lag": 240, "event_sign": -1, "distractor_lags": [1, 3, 9, 100]}
    body = client.post("/api/farback", json=edit).json()
    W = body["window"]
    types, sizes = np.array(body["types"]), np.array(body["sizes"])
    big = sizes >= 3.0
    assert np.flatnonzero(big & (types == 0)).tolist() == [W - 240]  # one event, there
    assert sorted(W - np.flatnonzero(big & (types != 0))) == [1, 3, 9, 100]
    assert body["distractor_lags"] == [1, 3, 9, 100]
    assert body["event"] == {"lag": 240, "sign": -1, "size": sizes[W - 240]}
    x = features_of(body)
    for kind in farback.KINDS:
        pred = int(farback.load_pretrained(kind).predict(x)[0])
        assert body["models"][kind]["prediction"] == (1 if pred == 1 else -1)
    w = farback.load_pretrained("attention").weights(x)[0].astype(np.float64)
    np.testing.assert_array_equal(np.array(body["weights"]), w)
    dis = [W - d for d in (1, 3, 9, 100)]
    assert body["attention"]["weight_on_distractors"] == pytest.approx(w[dis].sum(), rel=1e-12)


@pytest.mark.parametrize("body, says", [
    ({"seed": -1}, "seed"),
    ({"seed": 1.5}, "seed"),
    ({"event_lag": 0}, "event_lag"),
    ({"event_lag": 257}, "Event lag: lags run from 1"),
    ({"event_sign": 0}, "event_sign"),
    ({"event_lag": 20, "distractor_lags": [20]}, "is the event's"),
    ({"distractor_lags": [4, 4]}, "each lag may be typed once"),
    ({"distractor_lags": list(range(1, 70))}, "distractor_lags"),
    ({"lag": 3}, "lag"),
])
def test_farback_refuses_bad_input_with_a_422(client, body, says):
    response = client.post("/api/farback", json=body)
    assert response.status_code == 422
    assert says in response.json()["detail"]


# -- curves --------------------------------------------------------------------------------------
def test_farback_curves_are_the_shipped_runs_scores(client):
    body = client.post("/api/farback/curves", json={}).json()
    config = farback.load_pretrained("attention").config
    buckets = farback.lag_buckets(config)
    assert body["per_bucket"] == 500 and body["held_out"] == 500 * len(buckets)
    assert body["command"] == farback.SHIPPED_COMMAND and body["window"] == config.window
    for kind in farback.KINDS:  # the scores stored at training (tests/test_farback_shipped.py
        stored = farback.load_pretrained(kind).metrics  # re-measures them from the checkpoints)
        got = body["models"][kind]
        assert got["by_lag"] == stored["by_lag"] and got["accuracy"] == stored["accuracy"]
        assert got["chance_from"] == stored["chance_from"]
        assert got["chance_from"] == farback.chance_lag(stored["by_lag"])
        assert got["parameters"] == farback.FarbackModel(config, kind).num_params
        assert got["steps"] == config.steps
        assert got["progress"]["steps"][-1] == config.steps
    tuned = farback.tuned_gru_run()
    assert body["gru_tuned"]["gate_bias"] == tuned["config"]["gru_gate_bias"] == 3.0
    assert body["gru_tuned"]["by_lag"] == tuned["run"]["by_lag"]
    assert body["gru_tuned"]["command"] == farback.TUNED_COMMAND
    assert body["top_weight_on_event"] == \
        farback.load_pretrained("attention").metrics["top_weight_on_event"]


def test_farback_sweep_is_each_lag_read_on_its_own(client):
    """The sweep's answer at each lag is the answer of the series with the event moved there:
    checked against /api/farback at a spread of lags, and at the lag shown."""
    edit = {"seed": 3, "event_lag": 40, "distractor_lags": [2, 5, 60]}
    body = client.post("/api/farback", json=edit).json()
    sweep = body["sweep"]
    assert sweep["lags"] == list(range(1, body["window"] + 1))
    for kind in farback.KINDS:  # the lag shown: the same series, the same answer
        assert sweep["models"][kind]["p_plus"][39] == body["models"][kind]["p_plus"]
    for lag in (1, 2, 3, 5, 17, 60, 128, 256):
        one = client.post("/api/farback", json={
            **edit, "event_lag": lag,
            "distractor_lags": [d for d in edit["distractor_lags"] if d != lag]}).json()
        x = features_of(one)
        for kind in farback.KINDS:
            p = float(farback.p_plus(farback.load_pretrained(kind), x)[0])
            assert sweep["models"][kind]["p_plus"][lag - 1] == pytest.approx(p, rel=1e-6)
            assert sweep["models"][kind]["correct"][lag - 1] == \
                ((p > 0.5) == (one["event"]["sign"] > 0))
        assert sweep["truth"][lag - 1] == one["event"]["sign"]


def test_farback_at_lag_1_with_no_distractors_all_three_are_right(client):
    for seed in range(12):
        body = client.post("/api/farback", json={"seed": seed, "event_lag": 1,
                                                 "distractor_lags": []}).json()
        assert all(body["models"][k]["correct"] for k in farback.KINDS), (seed, body["models"])


def test_curves_take_an_empty_body(client):
    for path in ("/api/farback/curves", "/api/seq2seq/curves"):
        response = client.post(path, json={"n": 5})
        assert response.status_code == 422 and response.json()["detail"].startswith("n: ")


def test_seq2seq_curves_are_evaluate_on_the_held_out_set(client):
    body = client.post("/api/seq2seq/curves", json={}).json()
    # by default: the scores stored in the checkpoints, view 6's figures from the same source
    stored = seq2seq.load_pretrained("attention").metrics["buckets"]
    assert body["per_bucket"] == stored[0]["sequences"] == 1000 and len(body["long_example"]) == 40
    for kind in ("attention", "fixed"):
        assert body["models"][kind] == seq2seq.load_pretrained(kind).metrics["buckets"]
    assert "qkv train seq2seq --seed 0" in body["run"]
    small = seq2seq_service.curves(12)
    config = seq2seq.load_pretrained("fixed").config
    for kind in ("attention", "fixed"):
        want = seq2seq.evaluate(seq2seq.load_pretrained(kind), seq2seq.held_out(config, 12))
        assert small["models"][kind] == want
        assert [b["lengths"] for b in body["models"][kind]] == [list(b) for b in
                                                               seq2seq.buckets(config)]


# -- cost: time against n ------------------------------------------------------------------------
def test_growth_slopes_are_scaling_slope_of_the_points_shown(client):
    body = client.post("/api/cost/growth", json={"max_n": 512, "repeats": 1}).json()
    for run, source in ((body["live"], "live"), (body["shipped"], "shipped")):
        assert [m["method"] for m in run["methods"]] == ["qkv dense", "qkv causal",
                                                         "qkv window", "ssm scan"]
        for series in run["methods"]:
            assert all(p["source"] == source for p in series["points"])
            fit = [p for p in series["points"] if p["n"] >= run["fit_from"]]
            assert series["slope"] == scaling.slope([p["n"] for p in fit],
                                                    [p["seconds"] for p in fit])
    live = body["live"]["methods"][0]["points"]
    assert [p["n"] for p in live] == [64, 128, 256, 512][:len(live)] and live
    assert body["live"]["fit_from"] == 128  # the last three of 64 … 512
    shipped = scaling.shipped()
    for series in body["shipped"]["methods"]:
        assert [(p["n"], p["seconds"]) for p in series["points"]] == [
            (p["n"], p["seconds"]) for p in shipped["methods"][series["method"]]["points"]]
    assert "evidence" not in body  # what the n² buys: /api/cost/recall (test_explore_cost_recall)


@pytest.mark.parametrize("body, says", [
    ({"max_n": 4096}, "max_n"), ({"max_n": 10}, "max_n"), ({"budget": 2}, "budget"),
    ({"budget": 0}, "budget"), ({"repeats": 4}, "repeats"), ({"n": 4}, "n: "),
])
def test_growth_refuses_bad_input_with_a_422(client, body, says):
    response = client.post("/api/cost/growth", json=body)
    assert response.status_code == 422
    assert response.json()["detail"].startswith(says)
