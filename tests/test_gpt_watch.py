"""Watching the GPT: attention, head roles, logit attribution, KV-cache generation, and the
CLI's one-line errors."""

from __future__ import annotations

import numpy as np
import pytest

from qkv.cli import main
from qkv.tasks import gpt
from qkv.tasks import gpt_watch as watch

F64 = np.finfo(np.float64).eps
CONFIG = gpt.GPTConfig(n_layer=2, n_head=2, n_embd=16, block_size=12, vocab_size=11, seed=5)


@pytest.fixture(scope="module")
def model():
    m = gpt.GPT(CONFIG, dtype=np.float64)
    rng = np.random.default_rng(1)
    for p in m.params.values():  # non-trivial biases and LayerNorm weights too
        p[...] = rng.normal(0.0, 0.4, p.shape)
    return m


def test_look_is_causal_and_its_rows_are_distributions(model):
    ids = np.arange(9) % CONFIG.vocab_size
    seen = watch.look(model, ids, temperature=0.5)
    assert seen.weights.shape == (2, 2, 9, 9)
    assert np.array_equal(seen.allowed, np.tril(np.ones((9, 9), bool)))
    assert np.all(seen.weights[..., ~seen.allowed] == 0)
    np.testing.assert_allclose(seen.weights.sum(-1), 1.0, atol=100 * F64)
    logits = model(ids[None])[0, -1]
    np.testing.assert_allclose(seen.logits, logits, atol=100 * F64)
    z = np.exp(logits / 0.5 - (logits / 0.5).max())
    np.testing.assert_allclose(seen.probs, z / z.sum(), atol=100 * F64)
    with pytest.raises(ValueError, match=r"temperature must be a number ≥ 0\.001"):
        watch.look(model, ids, temperature=0)


def test_logit_attribution_sums_to_the_logit(model):
    ids = np.array([3, 1, 4, 1, 5, 9, 2, 6])
    for char, position in ((None, -1), (7, 3)):
        a = watch.logit_attribution(model, ids, char=char, position=position)
        logits = model(ids[None])[0, position]
        assert a.char == (int(np.argmax(logits)) if char is None else char)
        assert abs(a.logit - logits[a.char]) < 100 * F64
        assert abs(a.total - a.logit) < 1e3 * F64 * max(1.0, abs(a.logit))
        assert a.heads.shape == (2, 2) and np.all(a.heads != 0)


def test_generation_through_the_cache_equals_the_full_forward(model):
    prompt = np.array([2, 7, 1])
    steps = watch.generate(model, prompt, 20, greedy=True)
    assert len(steps) == CONFIG.block_size - prompt.size + 1  # stops at the context
    text = list(prompt)
    for s in steps:
        full = model(np.array(text)[None])[0, -1]
        assert s.char == int(np.argmax(full))
        seen = watch.look(model, np.array(text))
        # the cached step's query read the same weights as the full forward's last row
        np.testing.assert_allclose(s.weights, seen.weights[:, :, -1, :], atol=1e3 * F64)
        text.append(s.char)
    sampled = watch.generate(model, prompt, 5, temperature=0.7, seed=3)
    assert [s.char for s in sampled] == [s.char for s in watch.generate(model, prompt, 5,
                                                                          temperature=0.7, seed=3)]


def test_head_roles_induction_is_the_weight_after_the_earlier_copy(model):
    """On a repeated sequence whose first copy has no repeats, the induction score is the mean
    weight from each second-copy token on the token after its first occurrence (Olsson et al.;
    the general definition is checked in tests/test_gpt_heads.py)."""
    roles = watch.head_roles(model, n_sequences=4, half=5)
    assert roles.ids.shape == (4, 10) and np.array_equal(roles.ids[:, :5], roles.ids[:, 5:])
    distinct = [s for s in roles.ids if len(set(s[:5])) == 5]
    assert distinct
    for seq in distinct:
        w = watch.look(model, seq).weights  # (L, H, 10, 10)
        one = watch.role_scores(w[None], seq[None])
        expected = np.mean([w[..., i, i - 4] for i in range(5, 10)], axis=0)
        np.testing.assert_allclose(one["induction"], expected, atol=1e3 * F64)
        np.testing.assert_allclose(one["previous"], np.mean(
            [w[..., i, i - 1] for i in range(1, 10)], axis=0), atol=1e3 * F64)


@pytest.fixture(scope="module")
def tiny_checkpoint(tmp_path_factory):
    path = tmp_path_factory.mktemp("gpt") / "tiny.safetensors"
    run = gpt.GPTRun.fresh(CONFIG)
    run.save(path, "abcdefghij ")
    return path


def _one_line_error(capsys, argv, expected):
    with pytest.raises(SystemExit) as info:
        code = main(argv)
        raise SystemExit(code) if code else AssertionError("no error")
    err = str(info.value.code) if not isinstance(info.value.code, int) else capsys.readouterr().err
    assert expected in err and len(err.strip().splitlines()) == 1, err


def test_cli_errors_are_one_line(tmp_path, capsys, tiny_checkpoint):
    _one_line_error(capsys, ["train", "gpt", "--corpus", str(tmp_path / "none.txt"),
                             "--checkpoint", str(tmp_path / "g.safetensors")],
                    "qkv train gpt: corpus")
    bad = tmp_path / "bad.safetensors"
    bad.write_bytes(b"\x08\x00\x00\x00\x00\x00\x00\x00{}garbage")
    _one_line_error(capsys, ["train", "gpt", "--resume", "--checkpoint", str(bad)],
                    "qkv train gpt: checkpoint")
    _one_line_error(capsys, ["look", "--gpt", "x", "--checkpoint", str(bad)], "qkv look: ")
    _one_line_error(capsys, ["look", "--gpt", "abc " * 4, "--checkpoint", str(tiny_checkpoint)],
                    "prompt has 16 characters but the model's context is 12")
    _one_line_error(capsys, ["look", "--gpt", "xyz", "--checkpoint", str(tiny_checkpoint)],
                    "never saw")


def test_cli_look_prints_what_the_model_computes(capsys, tiny_checkpoint):
    assert main(["look", "--gpt", "abc a", "--checkpoint", str(tiny_checkpoint), "--all",
                 "--generate", "3", "--roles"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    m, tok, _ = gpt.load(tiny_checkpoint)
    seen = watch.look(m, tok.encode("abc a"))
    top = int(np.argmax(seen.probs))
    assert f"{seen.probs[top]:.2%}" in out
    a = watch.logit_attribution(m, tok.encode("abc a"))
    assert f"its logit {a.logit:.2f}" in out
    roles = watch.head_roles(m)
    assert f"{roles.previous_token[0, 0]:.2f} · {roles.induction[0, 0]:.2f}" in out


def test_text_roles_are_the_weights_on_the_previous_char_and_the_last_space(model):
    ids = np.random.default_rng(4).integers(0, CONFIG.vocab_size, 3 * CONFIG.block_size + 1)
    space = 10
    roles = watch.text_roles(model, ids, space, n_windows=3)
    prev, on_space, count = np.zeros((2, 2)), np.zeros((2, 2)), 0
    T = CONFIG.block_size
    for s in range(3):
        seq = ids[s * T:(s + 1) * T]
        w = watch.look(model, seq).weights
        prev += np.mean([w[..., i, i - 1] for i in range(1, T)], axis=0) / 3
        for i in range(T):
            spaces = np.flatnonzero(seq[: i + 1] == space)
            if spaces.size:
                on_space += w[..., i, spaces[-1]]
                count += 1
    np.testing.assert_allclose(roles.previous_token, prev, atol=1e3 * F64)
    np.testing.assert_allclose(roles.last_space, on_space / count, atol=1e3 * F64)
