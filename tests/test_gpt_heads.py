"""Switching the GPT's heads off (ablation through named hook points), the head roles' one
definition on constructed cases, and the attention-only model of qkv.tasks.induction."""

from __future__ import annotations

import math

import numpy as np
import pytest

from qkv.nn.gradcheck import max_rel_error, numerical_grad
from qkv.tasks import gpt, induction
from qkv.tasks import gpt_watch as watch

F64 = np.finfo(np.float64).eps
CONFIG = gpt.GPTConfig(n_layer=2, n_head=3, n_embd=12, block_size=10, vocab_size=9, seed=4)


def _randomised(config, dtype=np.float64, seed=1):
    m = gpt.GPT(config, dtype=dtype)
    rng = np.random.default_rng(seed)
    for p in m.params.values():  # non-trivial biases and LayerNorm weights too
        p[...] = rng.normal(0.0, 0.5, p.shape)
    return m


@pytest.fixture(scope="module")
def model():
    return _randomised(CONFIG)


# -- a reference forward written out in float64, independent of the layers ---------------------
def _ln(x, w, b):
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + 1e-5) * w + b


def _gelu_tanh(x):
    return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))


def reference_logits(m, ids, off_heads=(), off_layers=(), z_fill=None, out_fill=None):
    """Logits (N, V) of one sequence, the GPT written out by hand; heads in ``off_heads``
    ((layer, head)) have their output replaced by ``z_fill[(layer, head)]`` (default 0), the
    layers in ``off_layers`` their whole attention output by ``out_fill[layer]`` (default 0)."""
    p = {k: v.astype(np.float64) for k, v in m.params.items()}
    c = m.config
    n, dh = len(ids), c.d_head
    x = p["wte.weight"][ids] + p["wpe.weight"][:n]  # (N, C)
    causal = np.tril(np.ones((n, n), bool))
    for i in range(c.n_layer):
        a = _ln(x, p[f"h.{i}.ln1.weight"], p[f"h.{i}.ln1.bias"])
        q = a @ p[f"h.{i}.attn.w_q"] + p[f"h.{i}.attn.b_q"]
        k = a @ p[f"h.{i}.attn.w_k"] + p[f"h.{i}.attn.b_k"]
        v = a @ p[f"h.{i}.attn.w_v"] + p[f"h.{i}.attn.b_v"]
        heads = []
        for h in range(c.n_head):
            s = slice(h * dh, (h + 1) * dh)
            scores = np.where(causal, q[:, s] @ k[:, s].T / math.sqrt(dh), -np.inf)
            w = np.exp(scores - scores.max(-1, keepdims=True))
            z = (w / w.sum(-1, keepdims=True)) @ v[:, s]  # (N, dh)
            if (i, h) in off_heads:
                z = np.broadcast_to((z_fill or {}).get((i, h), 0.0), z.shape)
            heads.append(z)
        out = np.concatenate(heads, -1) @ p[f"h.{i}.attn.w_o"] + p[f"h.{i}.attn.b_o"]
        if i in off_layers:
            out = np.broadcast_to((out_fill or {}).get(i, 0.0), out.shape)
        x = x + out
        if c.mlp:
            b = _ln(x, p[f"h.{i}.ln2.weight"], p[f"h.{i}.ln2.bias"])
            hid = _gelu_tanh(b @ p[f"h.{i}.mlp.fc1.weight"] + p[f"h.{i}.mlp.fc1.bias"])
            x = x + hid @ p[f"h.{i}.mlp.fc2.weight"] + p[f"h.{i}.mlp.fc2.bias"]
    return _ln(x, p["ln_f.weight"], p["ln_f.bias"]) @ p["wte.weight"].T


IDS = np.array([3, 1, 4, 1, 5, 8, 2, 6])


def test_no_hooks_is_the_forward_bit_for_bit():
    for dtype in (np.float32, np.float64):
        m = _randomised(CONFIG, dtype)
        ids = np.stack([IDS, IDS[::-1]])
        assert np.array_equal(m.run_with_hooks(ids, {}), m.forward(ids)[0])
    shipped, tok = gpt.load_pretrained()
    ids = tok.encode("ROMEO.\nI will not")[None]
    assert np.array_equal(shipped.run_with_hooks(ids, {}), shipped.forward(ids)[0])
    a = watch.ablate(shipped, ids[0], [])
    assert np.array_equal(a.logits_after, a.logits_before)


def test_the_reference_forward_is_the_model(model):
    np.testing.assert_allclose(reference_logits(model, IDS), model(IDS[None])[0],
                               atol=1e4 * F64, rtol=0)


@pytest.mark.parametrize("layer,head", [(0, 0), (0, 2), (1, 1)])
def test_switching_a_head_off_is_the_hand_written_model_without_it(model, layer, head):
    after = watch.ablate(model, IDS, [watch.Ablation(layer, head)])
    expected = reference_logits(model, IDS, off_heads={(layer, head)})[-1]
    np.testing.assert_allclose(after.logits_after, expected, atol=1e4 * F64, rtol=0)
    assert not np.allclose(after.logits_after, after.logits_before)  # it did something


def test_switching_a_layer_off_removes_its_whole_attention(model):
    for layer in range(CONFIG.n_layer):
        after = watch.ablate(model, IDS, [watch.Ablation(layer)])
        expected = reference_logits(model, IDS, off_layers={layer})[-1]
        np.testing.assert_allclose(after.logits_after, expected, atol=1e4 * F64, rtol=0)
    # several at once: two heads of different layers
    both = watch.ablate(model, IDS, [watch.Ablation(0, 1), watch.Ablation(1, 2)])
    np.testing.assert_allclose(both.logits_after,
                               reference_logits(model, IDS, off_heads={(0, 1), (1, 2)})[-1],
                               atol=1e4 * F64, rtol=0)


def test_mean_ablation_puts_the_reference_mean_in_place(model):
    ref = np.random.default_rng(2).integers(0, CONFIG.vocab_size, (5, CONFIG.block_size))
    means = watch.mean_activations(model, ref)
    # the mean of each head's output, recomputed from a capturing hook
    seen = {}
    model.run_with_hooks(ref, {"h.1.attn.z": lambda z: seen.setdefault("z", z) })
    np.testing.assert_allclose(means["h.1.attn.z"], seen["z"].mean(axis=(0, 2)), atol=100 * F64)
    after = watch.ablate(model, IDS, [watch.Ablation(1, 0, "mean")], means)
    expected = reference_logits(model, IDS, off_heads={(1, 0)},
                                z_fill={(1, 0): means["h.1.attn.z"][0]})[-1]
    np.testing.assert_allclose(after.logits_after, expected, atol=1e4 * F64, rtol=0)
    layer = watch.ablate(model, IDS, [watch.Ablation(0, None, "mean")], means)
    expected = reference_logits(model, IDS, off_layers={0}, out_fill={0: means["h.0.attn.out"]})
    np.testing.assert_allclose(layer.logits_after, expected[-1], atol=1e4 * F64, rtol=0)
    with pytest.raises(ValueError, match="needs means"):
        watch.ablate(model, IDS, [watch.Ablation(0, 0, "mean")])


def test_bad_ablations_and_hooks_are_refused_by_name(model):
    for bad, match in ((watch.Ablation(2, 0), "layer must be an int in \\[0, 2\\)"),
                       (watch.Ablation(0, 3), "head must be an int in \\[0, 3\\)"),
                       (watch.Ablation(0, 0, "half"), "kind must be 'zero' or 'mean'")):
        with pytest.raises(ValueError, match=match):
            watch.ablate(model, IDS, [bad])
    with pytest.raises(ValueError, match="unknown hook point"):
        model.run_with_hooks(IDS[None], {"h.0.attn.q": lambda a: a})
    with pytest.raises(ValueError, match="must keep"):
        model.run_with_hooks(IDS[None], {"h.0.attn.z": lambda a: a[..., :1]})


def test_head_effects_are_each_heads_ablation(model):
    e = watch.head_effects(model, IDS)
    base = model(IDS[None])[0, -1]
    assert e.char == int(np.argmax(base))
    p0 = watch.softmax_t(base, 1.0)[e.char]
    assert e.p_before == p0
    for layer in range(CONFIG.n_layer):
        for h in range(CONFIG.n_head):
            a = watch.ablate(model, IDS, [watch.Ablation(layer, h)])
            assert e.drop[layer, h] == p0 - a.probs_after[e.char]
            assert e.total_effect[layer, h] == base[e.char] - a.logits_after[e.char]
        a = watch.ablate(model, IDS, [watch.Ablation(layer)])
        assert e.layer_drop[layer] == p0 - a.probs_after[e.char]


def test_where_a_head_matters_most_is_the_brute_force_best(model):
    text = np.random.default_rng(3).integers(0, CONFIG.vocab_size, 200)
    prompts = watch.candidate_prompts(text, 7, 9)
    assert prompts.shape == (9, 7) and np.array_equal(prompts[0], text[:7])
    assert np.array_equal(prompts[-1], text[-7:])
    w = watch.where_heads_matter(model, prompts)
    for layer in range(CONFIG.n_layer):
        for h in range(CONFIG.n_head):
            drops = []
            for s, prompt in enumerate(prompts):
                a = watch.ablate(model, prompt, [watch.Ablation(layer, h)])
                c = int(np.argmax(a.logits_before))
                assert c == w.chars[s]
                drops.append(a.probs_before[c] - a.probs_after[c])
            assert w.best[layer, h] == int(np.argmax(drops))
            np.testing.assert_allclose(w.drop[layer, h], max(drops), atol=1e3 * F64)
    one = watch.where_heads_matter(model, prompts, heads=[(1, 0)])
    assert one.best[1, 0] == w.best[1, 0] and np.isnan(one.drop[0, 0])


# -- head roles: one definition, checked where the answer is known ----------------------------
def _constructed(ids, rules):
    """Weights (1, 1, H, T, T): head h puts all its weight where rules[h](i) says (None:
    uniform over the allowed keys)."""
    T = len(ids)
    w = np.zeros((1, 1, len(rules), T, T))
    for h, rule in enumerate(rules):
        for i in range(T):
            keys = rule(i)
            if keys is None or not len(keys):
                w[0, 0, h, i, : i + 1] = 1.0 / (i + 1)
            else:
                w[0, 0, h, i, keys] = 1.0 / len(keys)
    return w


def test_role_scores_on_constructed_heads():
    rng = np.random.default_rng(0)
    half = rng.permutation(20)[:8]  # distinct tokens: the only repeats are the second copy
    ids = np.concatenate([half, half])  # (16,)
    T = ids.size

    def induction_keys(i):  # the keys right after earlier copies of token i
        return [j + 1 for j in range(i - 1) if ids[j] == ids[i]]

    w = _constructed(ids, [lambda i: [i - 1] if i else [0], induction_keys, lambda i: None])
    r = watch.role_scores(w, ids[None])
    assert r["previous"][0, 0] == 1.0 and r["induction"][0, 1] == 1.0
    # the previous-token head never looks after an earlier copy (tokens are distinct)
    assert r["induction"][0, 0] == 0.0
    # uniform attention scores what the chance figures say, on both definitions
    assert abs(r["previous"][0, 2] - r["chance_previous"]) < 100 * F64
    assert abs(r["induction"][0, 2] - r["chance_induction"]) < 100 * F64
    assert r["chance_previous"] == np.mean([1 / (i + 1) for i in range(1, T)])
    assert r["n_induction"] == 8 and r["n_previous"] == T - 1
    # the induction head's targets on the second copy are exactly i − half + 1
    assert all(induction_keys(i) == [i - 8 + 1] for i in range(8, T))
    # no repeats: no induction score, said in words
    r = watch.role_scores(w[..., :8, :8], half[None])
    assert np.isnan(r["induction"]).all() and r["n_induction"] == 0


def test_head_roles_and_text_roles_use_the_one_definition(model):
    roles = watch.head_roles(model, n_sequences=4, half=5)
    assert roles.ids.shape == (4, 10) and np.array_equal(roles.ids[:, :5], roles.ids[:, 5:])
    w = np.stack([watch.look(model, s).weights for s in roles.ids])  # (S, L, H, T, T)
    r = watch.role_scores(w, roles.ids)
    np.testing.assert_allclose(roles.previous_token, r["previous"], atol=1e3 * F64)
    np.testing.assert_allclose(roles.induction, r["induction"], atol=1e3 * F64)
    text = np.random.default_rng(4).integers(0, CONFIG.vocab_size, 3 * CONFIG.block_size + 1)
    t = watch.text_roles(model, text, space=8, n_windows=3)
    x = text[: 3 * CONFIG.block_size].reshape(3, CONFIG.block_size)
    w = np.stack([watch.look(model, s).weights for s in x])
    r = watch.role_scores(w, x)
    np.testing.assert_allclose(t.previous_token, r["previous"], atol=1e3 * F64)
    np.testing.assert_allclose(t.induction, r["induction"], atol=1e3 * F64)
    assert "windows of 10 characters of the validation text" in watch.roles_sentence(t)
    assert roles.what == "4 random sequences of 5 characters, each followed by itself"


# -- the attention-only model -----------------------------------------------------------------
def test_attention_only_gradients_match_finite_differences():
    c = gpt.GPTConfig(n_layer=2, n_head=2, n_embd=6, block_size=5, vocab_size=7, mlp=False)
    m = _randomised(c, seed=5)
    assert all(b.mlp is None for b in m.blocks) and not any("mlp" in n for n in m.params)
    ids = np.array([[1, 2, 3, 1, 2], [6, 0, 6, 0, 5]])
    y = np.roll(ids, -1, axis=1)
    _, grads = m.loss(ids, y)
    for name in ("wte.weight", "wpe.weight", "h.0.attn.w_k", "h.1.attn.w_q", "h.1.ln1.weight",
                 "ln_f.bias"):
        numeric = numerical_grad(lambda: m.loss(ids, y)[0], m.params[name])
        assert max_rel_error(grads[name], numeric) < 1e-6, name
    np.testing.assert_allclose(reference_logits(m, ids[0]), m(ids[:1])[0], atol=1e4 * F64)
    a = watch.logit_attribution(m, ids[0])
    assert np.all(a.mlps == 0) and abs(a.total - a.logit) < 1e3 * F64 * max(1, abs(a.logit))


def test_repeat_windows_hold_a_chunk_written_again_and_phase_change_reads_the_history():
    data = np.arange(1000) % 50  # the "text": never repeats within a window of 48
    rng = np.random.default_rng(0)
    x, y, copied = induction.repeat_windows(data, rng, 40, 48, 78)
    assert x.shape == y.shape == copied.shape == (40, 48) and np.array_equal(x[:, 1:], y[:, :-1])
    distances = set()
    for row, nxt, mask in zip(x, y, copied, strict=True):
        full = np.concatenate([row, nxt[-1:]])  # (49,)
        run = np.flatnonzero(mask)
        dst, m = int(run[0]), run.size + 1  # y[t] = full[t + 1]: the copy starts at dst
        assert np.array_equal(run, np.arange(dst, dst + m - 1))
        assert induction.MIN_LENGTH <= m <= induction.MAX_LENGTH
        src = [s for s in range(dst - m + 1) if np.array_equal(full[s:s + m], full[dst:dst + m])]
        assert src, "the chunk at the copy occurs earlier in the window"
        distances.add(dst - src[-1])
    assert len(distances) > 10  # no fixed offset finds the earlier copy
    with pytest.raises(ValueError, match="chunk lengths"):
        induction.repeat_windows(data, rng, 2, 16, 78, min_length=8, max_length=9)
    history = [{"step": s, "repeat": r, "induction": i} for s, r, i in
               ((0, 3.0, 0.05), (100, 2.9, 0.06), (200, 1.0, 0.5), (300, 0.9, 0.7))]
    ph = induction.phase_change(history)
    assert ph["step"] == 200 and ph["induction_at"] == 0.5
    assert (ph["steepest_from"], ph["steepest_to"]) == (100, 200)
    assert induction.phase_change(history[:2])["step"] is None


def test_qkv_train_induction_runs_and_says_what_it_did(tmp_path, capsys):
    from qkv.cli import main

    weights = tmp_path / "w.safetensors"
    assert main(["train", "induction", "--steps", "2", "--eval-every", "1", "--checkpoint",
                 str(tmp_path / "c.safetensors"), "--save-weights", str(weights)]) == 0
    out = capsys.readouterr().out
    assert "step 2: loss" in out and "never reached the threshold" in out
    model, _, meta = gpt.load(weights)
    assert not model.config.mlp and [r["step"] for r in meta["history"]] == [1, 2]
    with pytest.raises(SystemExit, match="qkv train induction: GPTConfig: steps must be"):
        main(["train", "induction", "--steps", "0", "--checkpoint", str(tmp_path / "x")])


def test_the_shipped_induction_model_has_the_induction_head_the_docs_describe():
    model, _, meta = induction.load_pretrained()
    roles = watch.head_roles(model)
    assert roles.induction[1, 0] >= watch.INDUCTION > roles.induction[0].max()
    assert roles.previous_token[0, 0] == roles.previous_token.max()
    ph = induction.phase_change(meta["history"])
    assert ph["step"] == 1700 and meta["step"] == 3000
    shipped, _ = gpt.load_pretrained()  # and the GPT has none, by the same definition
    assert watch.head_roles(shipped).induction.max() < watch.INDUCTION
