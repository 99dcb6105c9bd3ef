"""The far-back task's plain (tanh) RNN, kind "rnn": the recurrent chain the lesson says decays,
on the GRU's parameter budget, trained as the GRU was (same config, batches and steps). The
shipped checkpoint re-measured on the held-out series gives its stored scores; its memory
fades with the lag beyond sampling noise, where the GRU's does not; view 8's curves serve it.
Every bound is derived from the number of series it rests on."""

from __future__ import annotations

import numpy as np
import pytest

from qkv.explore import farback_service
from qkv.tasks import farback as fb

Z = 3.29  # a two-sided 99.9% normal quantile: a bound this test fails by chance once in 1,000


@pytest.fixture(scope="module")
def rnn():
    return fb.load_pretrained("rnn")


def test_the_rnn_has_the_gru_s_budget_and_its_training():
    c = fb.FarbackConfig()
    n = {k: fb.FarbackModel(c, k).num_params for k in ("gru", "rnn")}
    assert abs(n["rnn"] - n["gru"]) <= 0.01 * n["gru"], n
    # one more unit would be further from the budget: the width is the closest to it
    d_in = c.d_in
    size = lambda h: h * (d_in + h + 2) + 2 * h + 2  # noqa: E731  RNN + linear read-out
    assert size(fb.RNN_WIDTH) == n["rnn"]
    assert abs(size(fb.RNN_WIDTH + 1) - n["gru"]) > abs(n["rnn"] - n["gru"])
    assert fb.ALL_KINDS.index("rnn") > fb.ALL_KINDS.index("ssm")  # the others' seeds unchanged


def test_the_shipped_rnn_was_trained_as_the_gru_was(rnn):
    gru = fb.load_pretrained("gru")
    assert rnn.config == gru.config
    assert "--kinds rnn" in fb.RNN_COMMAND and "--save-dir" in fb.RNN_COMMAND
    assert rnn.metrics["progress"]["steps"][-1] == gru.config.steps


def test_the_stored_scores_are_the_checkpoint_s_own(rnn):
    s = fb.held_out(rnn.config, rnn.metrics["by_lag"][0]["cases"])
    now = fb.evaluate(rnn, s)
    for key, value in now.items():
        assert rnn.metrics[key] == value, key


def test_the_plain_rnn_fades_with_distance_where_the_gru_does_not(rnn):
    rows = rnn.metrics["by_lag"]
    first, last = rows[0], rows[-1]
    lower = fb.wilson(first["correct"], first["cases"], Z)[0]
    assert lower > 0.9, first  # right where it can be: the event is the latest trade
    # farther is worse: the far bucket below the near one beyond sampling noise
    drop = first["accuracy"] - last["accuracy"]
    assert drop > Z * np.sqrt(2 * 0.25 / first["cases"]), (first, last)
    # and the GRU on the same budget holds it there
    gru_last = fb.load_pretrained("gru").metrics["by_lag"][-1]
    assert fb.wilson(gru_last["correct"], gru_last["cases"], Z)[0] > \
        fb.wilson(last["correct"], last["cases"], Z)[1]


def test_view_8_curves_serve_the_rnn_beside_the_others(rnn):
    c = farback_service.curves()
    run = c["models"]["rnn"]
    assert run["by_lag"] == rnn.metrics["by_lag"]
    assert run["units"] == fb.RNN_WIDTH and c["models"]["gru"]["units"] == rnn.config.d_model
    assert run["parameters"] == rnn.num_params and c["rnn_command"] == fb.RNN_COMMAND
