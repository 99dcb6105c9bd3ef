"""The far-back task's opt-in selective state-space model (kind "ssm"): it leaves the shipped
three kinds as they were (their generators, and so their weights and runs), ``--kinds`` picks
the models and refuses anything else by name, and the shipped SSM checkpoint re-measured on
the held-out series gives the numbers of docs/figures/farback-ssm.json. (Its gradients are
checked by finite differences with the other kinds' in test_seeds_experiments.)"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from qkv.cli import main
from qkv.tasks import farback as fb

ROOT = Path(__file__).resolve().parents[1]
TINY = fb.FarbackConfig(window=16, n_types=3, n_recent=2, n_anywhere=1, batch=4, steps=3)


def test_the_three_kinds_draw_what_they_drew_before_the_opt_in_kind(monkeypatch):
    """Built with the opt-in kinds gone (ALL_KINDS = KINDS, as before "ssm" existed), each of
    the shipped three has the same initial weights, bit for bit; the SSM's generator
    [seed, 3] is none of theirs."""
    c = fb.FarbackConfig()
    now = {k: fb.FarbackModel(c, k).params for k in fb.KINDS}
    monkeypatch.setattr(fb, "ALL_KINDS", fb.KINDS)
    for kind in fb.KINDS:
        before = fb.FarbackModel(c, kind).params
        assert before.keys() == now[kind].keys()
        assert all(np.array_equal(before[n], now[kind][n]) for n in before), kind
    assert fb.ALL_KINDS.index("gru") == 2
    monkeypatch.undo()
    assert fb.ALL_KINDS.index("ssm") == len(fb.KINDS) and fb.OPT_IN[0] == "ssm"


def test_a_model_s_run_does_not_depend_on_the_kinds_trained_beside_it():
    full, models = fb.experiment(TINY, 3, kinds=fb.ALL_KINDS)
    alone, gru = fb.experiment(TINY, 3, kinds=("gru",))
    assert list(full["models"]) == list(fb.ALL_KINDS) and list(alone["models"]) == ["gru"]
    for key in ("final_loss", "accuracy", "by_lag", "chance_from"):
        assert alone["models"]["gru"][key] == full["models"]["gru"][key], key
    assert all(np.array_equal(gru["gru"].params[n], p) for n, p in models["gru"].params.items())
    assert full["recency_rules"] == alone["recency_rules"]
    ssm = full["models"]["ssm"]
    assert (ssm["d_model"], ssm["n_state"]) == (fb.SSM_WIDTH, fb.SSM_N_STATE)
    with pytest.raises(ValueError, match=r"kinds must be distinct names among .*'ssm'.*"
                                         r"\['lstm'\]"):
        fb.experiment(TINY, 3, kinds=("lstm",))


def test_the_ssm_s_size_sits_between_the_gru_and_attention():
    c = fb.FarbackConfig()
    n = {k: fb.FarbackModel(c, k).num_params for k in fb.ALL_KINDS}
    assert n["gru"] < n["ssm"] < n["attention"]
    ssm = fb.FarbackModel(c, "ssm")
    assert ssm.mamba.ssm.params["a_log"].shape == (fb.SSM_WIDTH, fb.SSM_N_STATE)
    with pytest.raises(ValueError, match=r"only the attention model.*'ssm'"):
        ssm.weights(fb.sample(c, np.random.default_rng(0), 1).x)


def test_the_ssm_s_inference_logits_are_its_forward_s():
    """``logits`` (the block-by-block inference scan, used for scoring) against ``forward``
    (what training differentiates), float64: equal to rounding."""
    model = fb.FarbackModel(TINY, "ssm", dtype=np.float64)
    x = fb.sample(TINY, np.random.default_rng(1), 6).x.astype(np.float64)
    np.testing.assert_allclose(model.logits(x), model.forward(x)[0], rtol=0,
                               atol=64 * np.finfo(np.float64).eps)


@pytest.mark.parametrize(("kinds", "says"), [
    ("lstm", "--kinds takes some of attention, recency, gru, ssm, rnn, got 'lstm' "
             "(unknown 'lstm')"),
    ("ssm,Gru", "(unknown 'Gru')"),
    (",", "(no model named)"),
    ("ssm,ssm", "(a model named twice)"),
])
def test_kinds_outside_the_task_are_refused_by_name(kinds, says):
    with pytest.raises(SystemExit, match=re.escape(says)):
        main(["train", "farback", "--quick", "--kinds", kinds])


def test_the_attention_pictures_need_the_attention_model(tmp_path):
    for flag, path in (("--heatmap", "w.svg"), ("--weights-plot", "w.png")):
        with pytest.raises(SystemExit, match=f"{flag} draws the attention model's weights, but "
                                             f"--kinds 'ssm,gru' leaves it out"):
            main(["train", "farback", "--quick", "--kinds", "ssm,gru", flag,
                  str(tmp_path / path)])


def test_cli_trains_only_the_kinds_asked_and_saves_them(tmp_path, capsys):
    out = tmp_path / "fb.json"
    assert main(["train", "farback", "--quick", "--steps", "2", "--per-bucket", "3",
                 "--no-progress", "--kinds", "ssm", "--json", str(out),
                 "--save-dir", str(tmp_path)]) == 0
    printed = " ".join(capsys.readouterr().out.split())  # unwrapped
    assert "a state of 416 numbers per series" in printed
    assert "largest weight falls on the event" not in printed  # no attention model here
    result = json.loads(out.read_text())
    assert list(result["models"]) == ["ssm"]
    model = fb.FarbackModel.load(tmp_path / "farback-ssm.safetensors")
    assert model.kind == "ssm" and model.metrics == result["models"]["ssm"]
    assert sorted(p.name for p in tmp_path.glob("*.safetensors")) == ["farback-ssm.safetensors"]


def test_load_pretrained_names_a_kind_it_does_not_ship(tmp_path, monkeypatch):
    with pytest.raises(ValueError, match=r"kind must be one of \('attention', 'recency', 'gru', "
                                         r"'ssm', 'rnn'\), got 'lstm'"):
        fb.load_pretrained("lstm")
    monkeypatch.setattr(fb, "DATA", tmp_path)
    with pytest.raises(FileNotFoundError, match=re.escape(
            "no shipped far-back checkpoint of kind 'ssm'") + ".*" + re.escape(fb.SSM_COMMAND)):
        fb.load_pretrained("ssm")


# -- the shipped run --------------------------------------------------------------------------
@pytest.fixture(scope="module")
def shipped():
    pytest.importorskip("safetensors")
    result = json.loads((ROOT / "docs/figures/farback-ssm.json").read_text(encoding="utf-8"))
    return result, fb.load_pretrained("ssm")


def test_the_shipped_ssm_is_the_json_s_run(shipped):
    result, model = shipped
    assert model.config.to_dict() == result["config"] == fb.FarbackConfig().to_dict()
    assert model.metrics == result["models"]["ssm"]
    assert model.metrics["parameters"] == model.num_params


def test_the_shipped_ssm_re_measured_gives_the_json_s_scores(shipped):
    """The checkpoint scored now on the held-out series the run scored (the same generator,
    ``per_bucket`` per lag bucket): every count, accuracy and interval as the JSON has it."""
    result, model = shipped
    s = fb.held_out(model.config, result["per_bucket"])
    assert len(s) == result["held_out"]
    now = fb.evaluate(model, s)
    for key, value in now.items():
        assert result["models"]["ssm"][key] == value, key
    assert now["chance_from"] == fb.chance_lag(now["by_lag"])
