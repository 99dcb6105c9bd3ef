"""The shipped far-back models against what docs/lesson.md §2 and view 8 say of them, on
held-out series: the recency average right at lag 1 and falling to chance with distance, the
GRU right at short lags (and, trained on lags from 1, at every lag), attention flat; at lag 1
with no distractors all three right; the scores stored in the checkpoints re-measured from the
checkpoints themselves. Every bound is derived from the number of series it rests on."""

from __future__ import annotations

import numpy as np
import pytest

from qkv.explore import farback_service
from qkv.tasks import farback

KINDS = farback.KINDS
Z = 3.29  # a two-sided 99.9% normal quantile: a bound this test fails by chance once in 1,000


@pytest.fixture(scope="module")
def models():
    return {kind: farback.load_pretrained(kind) for kind in KINDS}


@pytest.fixture(scope="module")
def held(models):
    """The held-out set the shipped run scored (500 series per lag bucket), and each model's
    scores on it, re-measured now from the checkpoints."""
    config = models["attention"].config
    per_bucket = models["attention"].metrics["by_lag"][0]["cases"]
    s = farback.held_out(config, per_bucket)
    return s, {kind: farback.evaluate(model, s) for kind, model in models.items()}


def lower(row) -> float:
    """A one-sided lower bound on a bucket's true accuracy from its count (Wilson at Z)."""
    return farback.wilson(row["correct"], row["cases"], Z)[0]


def test_the_stored_scores_are_the_checkpoints_own(models, held):
    _, now = held
    for kind, model in models.items():
        for key, value in now[kind].items():
            assert model.metrics[key] == value, (kind, key)
        assert model.metrics["chance_from"] == farback.chance_lag(model.metrics["by_lag"])


def test_every_baseline_is_right_at_lag_1(held):
    _, now = held
    for kind in KINDS:
        first = now[kind]["by_lag"][0]
        assert first["lags"] == [1, 1]
        assert lower(first) > 0.9, (kind, first)


def test_the_recency_average_falls_to_chance_with_distance(held):
    _, now = held
    rows = now["recency"]["by_lag"]
    # right near the end of the window, a coin flip far from it
    assert lower(rows[0]) > 0.9
    far = rows[-1]
    sigma = np.sqrt(0.25 / far["cases"])
    assert abs(far["accuracy"] - 0.5) < Z * sigma, far
    # it falls to chance at some bucket, and never climbs back out of chance after it
    chance = now["recency"]["chance_from"]
    assert chance is not None and chance[0] > 1
    i = [r["lags"] for r in rows].index(chance)
    for row in rows[i:]:
        assert abs(row["accuracy"] - 0.5) < Z * np.sqrt(0.25 / row["cases"]), row
    # and falls: each doubling of the lag until then costs accuracy beyond sampling noise
    drop = rows[0]["accuracy"] - rows[i]["accuracy"]
    assert drop > Z * np.sqrt(2 * 0.25 / rows[0]["cases"])


def test_attention_is_flat_across_lags(held):
    _, now = held
    rows = now["attention"]["by_lag"]
    assert now["attention"]["chance_from"] is None
    for row in rows:
        assert lower(row) > 0.95, row
    accs = [r["accuracy"] for r in rows]
    # no trend with distance: the farthest half of the buckets as good as the nearest half
    # within two buckets' worth of sampling noise at the observed rate
    p = np.mean(accs)
    half = len(accs) // 2
    gap = abs(np.mean(accs[:half]) - np.mean(accs[half:]))
    assert gap <= Z * np.sqrt(2 * max(p * (1 - p), 1 / rows[0]["cases"]) /
                              (half * rows[0]["cases"]))


def test_the_gru_trained_from_lag_1_holds_the_event_at_every_lag(held, models):
    """What the shipped GRU does, as docs/lesson.md reports it: right at every lag bucket (it
    learns to latch the event); during training its reach grew from the near lags outwards."""
    _, now = held
    assert now["gru"]["chance_from"] is None
    for row in now["gru"]["by_lag"]:
        assert lower(row) > 0.95, row
    prog = models["gru"].metrics["progress"]
    early = prog["chance_from"][0]  # the first recorded step: right only at short lags
    assert early is not None and early[0] > 1
    assert prog["accuracy"][0][0] > 0.5 + Z * np.sqrt(0.25 / prog["per_bucket"])
    assert prog["chance_from"][-1] is None


def test_at_lag_1_with_no_distractors_all_three_are_right(models):
    """Over 400 series (seeds 0–399, as view 8's "event at lag 1, no distractors" builds
    them): every model is right on each, or at worst on all but a handful allowed by a
    99.9% bound on a 1% error rate."""
    config = models["attention"].config
    rows = [farback_service.make_series(seed, 1, None, []) for seed in range(400)]
    x = farback.features(np.stack([r[0] for r in rows]), np.stack([r[1] for r in rows]),
                         np.stack([r[2] for r in rows]), config.n_types)
    truth = np.array([r[2][config.window - 1] > 0 for r in rows])
    for kind, model in models.items():
        wrong = int((model.predict(x) != truth).sum())
        # at most 1% wrong, plus Z binomial standard deviations of 1% of 400
        assert wrong <= 4 + Z * np.sqrt(400 * 0.01 * 0.99), (kind, wrong)


def test_the_tuned_gru_run_is_shipped_with_its_cost():
    tuned = farback.tuned_gru_run()
    assert tuned["config"]["gru_gate_bias"] == 3.0
    assert {k: v for k, v in tuned["config"].items() if k != "gru_gate_bias"} == \
        {k: v for k, v in farback.FarbackConfig().to_dict().items() if k != "gru_gate_bias"}
    run = tuned["run"]
    assert run["parameters"] == farback.FarbackModel(farback.FarbackConfig(), "gru").num_params
    assert run["train_seconds"] > 0 and run["progress"]["steps"][-1] == 600
    assert run["chance_from"] == farback.chance_lag(run["by_lag"])
