"""What "selective" selects (issue 49, item 4): the S6 layer's Δ and decay exp(ΔA) exposed by
``SelectiveSSM.selection`` / ``MambaBlock.selection`` / ``MqarModel.selection`` are the numbers the
scan runs on (the layer's output rebuilt from them), and view 6's answer carries them per token
as the library computes them."""

from __future__ import annotations

import numpy as np
import pytest

from qkv.nn import MambaBlock, SelectiveSSM, linear_scan
from qkv.tasks import mqar

SMALL = mqar.MqarConfig(n_keys=8, n_values=8, train_lengths=(16,), eval_lengths=(16,),
                        eval_pairs=(2, 4), d_model=8, n_heads=2, state_small=2, state_large=3,
                        batch=4, steps=3)


def test_the_ssm_selection_is_what_its_scan_runs_on():
    rng = np.random.default_rng(0)
    ssm = SelectiveSSM(6, 4, rng=rng, dtype=np.float64)
    for p in ssm.params.values():
        p += rng.normal(0, 0.3, p.shape)  # away from the initialisation: Δ varies per token
    x = rng.normal(size=(2, 11, 6))
    s = ssm.selection(x)
    assert s["delta"].shape == (2, 11, 6) and s["decay"].shape == (2, 11, 6, 4)
    assert s["b"].shape == s["c"].shape == (2, 11, 4)
    assert (s["delta"] > 0).all() and ((s["decay"] > 0) & (s["decay"] < 1)).all()
    np.testing.assert_allclose(s["decay"], np.exp(s["delta"][..., None] * ssm.A), rtol=1e-14)
    # the output, rebuilt from the selection alone: h_t = Ā_t h_{t−1} + Δ_t B_t x_t, y = C·h + Dx
    h = linear_scan(s["decay"], (s["delta"] * x)[..., None] * s["b"][:, :, None, :])
    y = np.einsum("btdn,btn->btd", h, s["c"]) + x * ssm.params["d_skip"]
    np.testing.assert_allclose(y, ssm(x), rtol=1e-10, atol=1e-12)
    assert np.ptp(s["delta"], axis=1).max() > 0.01  # selective: Δ differs from token to token


def test_the_block_selects_on_what_it_hands_its_scan():
    rng = np.random.default_rng(1)
    block = MambaBlock(8, 3, rng=rng, dtype=np.float64)
    x = rng.normal(size=(2, 9, 8))
    _, ctx = block.forward(x)
    scan_x = ctx[3][0]  # the forward's S6 context starts with the S6 input
    np.testing.assert_allclose(block.scan_input(x), scan_x, rtol=1e-12)
    want = block.ssm.selection(scan_x)
    got = block.selection(x)
    for name in ("delta", "decay", "b", "c"):
        np.testing.assert_allclose(got[name], want[name], rtol=1e-12)


@pytest.mark.parametrize("kind", ["ssm-small", "ssm-large"])
def test_the_model_s_selection_is_each_layer_s_own_in_the_forward(kind):
    model = mqar.MqarModel(SMALL, kind, dtype=np.float64)
    b = mqar.sample(SMALL, np.random.default_rng(2), 2, 16, 3)
    _, (_, _, ctxs, _, _) = model.forward(b.tokens)
    sel = model.selection(b.tokens)
    assert len(sel) == 2
    for layer, (_, c_mix) in zip(sel, ctxs, strict=True):
        c_ssm = c_mix[3]  # (x, pre, delta, bm, cm, a_bar, h) of the forward's scan
        np.testing.assert_allclose(layer["delta"], c_ssm[2], rtol=1e-12)
        np.testing.assert_allclose(layer["decay"], c_ssm[5], rtol=1e-12)


def test_attention_has_no_selection():
    with pytest.raises(ValueError, match="attention has no state"):
        mqar.MqarModel(SMALL, "attention").selection(np.zeros((1, 4), np.int64))


# -- view 6's answer -------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def client():
    pytest.importorskip("safetensors")
    from fastapi.testclient import TestClient

    from qkv.explore import create_app

    with TestClient(create_app(allowed_hosts=["testserver"])) as c:
        yield c


def test_view_6_carries_each_token_s_role_and_each_layer_s_share_kept(client):
    pairs, asked = [[3, 17], [9, 4], [12, 30], [1, 1], [20, 2]], [12, 3, 20, 1, 9]
    body = client.post("/api/cost/recall", json={"pairs": pairs, "asked": asked}).json()
    config = mqar.load_pretrained("attention").config
    batch = mqar.encode(config, [tuple(p) for p in pairs], asked)
    T = batch.tokens.shape[1]
    want_roles = ["key", "value"] * len(pairs) + ["asked", "blank"] * len(asked)
    assert [t["role"] for t in body["tokens"]] == want_roles
    assert [t["number"] for t in body["tokens"][: 2 * len(pairs)]] == [n for p in pairs for n in p]
    assert [t["number"] for t in body["tokens"][2 * len(pairs)::2]] == asked
    for m in body["models"]:
        if m["kind"] == "attention":
            assert m["selection"] is None
            continue
        model = mqar.load_pretrained(m["kind"])
        assert len(m["selection"]) == len(model.mixers)
        for layer, mixer, got in zip(model.selection(batch.tokens), model.mixers,
                                     m["selection"], strict=True):
            delta = layer["delta"][0].astype(np.float64)  # (T, D)
            A = mixer.ssm.A.astype(np.float64)  # (D, N)
            # the geometric mean of exp(ΔA) over channels and states = exp(mean of Δ·A)
            kept = np.exp((delta[:, :, None] * A).mean(axis=(1, 2)))
            assert len(got["kept"]) == len(got["delta"]) == T
            np.testing.assert_allclose(got["kept"], kept, rtol=1e-5)
            np.testing.assert_allclose(got["delta"], delta.mean(axis=1), rtol=1e-6)
            assert all(0 < k < 1 for k in got["kept"])
