"""The GPT task: the model against torch autograd in float64, its decoding, determinism,
checkpoints and the corpus."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import numpy as np
import pytest

from helpers import gelu_reference
from qkv import nn
from qkv.engine.tiles import cpu_workers
from qkv.tasks import checkpoint as ckpt
from qkv.tasks import corpus as corpus_mod
from qkv.tasks import gpt, training

torch = pytest.importorskip("torch")
# the torch twin lives beside the benchmark it is the peer of, outside the package
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
import gpt_torch  # noqa: E402

TINY = gpt.GPTConfig(n_layer=2, n_head=2, n_embd=16, block_size=8, vocab_size=11, batch=3,
                     steps=6, warmup=2, decay_steps=6, eval_every=3, eval_windows=4, seed=3)
F64 = np.finfo(np.float64).eps


def _tiny_corpus(n=500, seed=0):
    tok = corpus_mod.CharTokenizer("abcdefghij ")
    ids = np.random.default_rng(seed).integers(0, tok.vocab_size, n)
    return corpus_mod.Corpus(tok, ids[: int(0.9 * n)], ids[int(0.9 * n):])


def _randomise(model, seed=1):
    """Non-trivial biases and LayerNorm weights too (a fresh model has zeros and ones there,
    which would hide a wrong gradient)."""
    rng = np.random.default_rng(seed)
    for p in model.params.values():
        p[...] = rng.normal(0.0, 0.3, p.shape)


def test_gelu_tanh_matches_the_reference_and_torch_and_its_derivative():
    """qkv's float64 tanh GELU within a few roundings at max(1, |x|) of a 30-digit reference;
    torch only loosely (1e-12: the same form and constants — erf and tanh GELU differ by ~1e-3),
    since its own float64 rounding is a peer's, and differs by CPU."""
    x = np.linspace(-6, 6, 241)
    dy = np.cos(3 * x)
    y_ref, slope = gelu_reference(x, "tanh")
    bound = F64 * np.maximum(1.0, np.abs(x))
    assert (np.abs(nn.gelu_tanh(x) - y_ref) <= 8 * bound).all()
    assert (np.abs(nn.gelu_tanh_backward(x, dy) - dy * slope) <= 24 * bound).all()
    tx = torch.tensor(x, requires_grad=True)
    ty = torch.nn.functional.gelu(tx, approximate="tanh")
    ty.backward(torch.tensor(dy))
    np.testing.assert_allclose(nn.gelu_tanh(x), ty.detach().numpy(), rtol=0, atol=1e-12)
    np.testing.assert_allclose(nn.gelu_tanh_backward(x, dy), tx.grad.numpy(), rtol=0, atol=1e-12)
    assert nn.gelu_tanh_backward(np.float32(x), np.float32(dy)).dtype == np.float32
    with pytest.raises(ValueError, match="activation must be one of"):
        nn.MLP(4, 8, activation="swish")


def test_whole_model_loss_and_every_gradient_match_torch_float64():
    model = gpt.GPT(TINY, dtype=np.float64)
    _randomise(model)
    rng = np.random.default_rng(0)
    x = rng.integers(0, TINY.vocab_size, (3, TINY.block_size))
    y = rng.integers(0, TINY.vocab_size, (3, TINY.block_size))
    loss, grads = model.loss(x, y)
    tm = gpt_torch.from_qkv(model, torch.float64)
    logits, tloss = tm(torch.from_numpy(x), torch.from_numpy(y))
    tloss.backward()
    np.testing.assert_allclose(model(x), logits.detach().numpy(), rtol=0, atol=1e3 * F64)
    assert abs(loss - tloss.item()) < 1e3 * F64
    tgrads = gpt_torch.grads_as_qkv(tm)
    assert set(grads) == set(tgrads) == set(model.params)
    for name, g in grads.items():
        scale = max(1.0, float(np.abs(tgrads[name]).max()))
        np.testing.assert_allclose(g, tgrads[name], rtol=0, atol=1e3 * F64 * scale,
                                   err_msg=name)


def test_kv_cache_decoding_equals_the_full_forward():
    model = gpt.GPT(TINY, dtype=np.float64)
    _randomise(model)
    ids = np.random.default_rng(2).integers(0, TINY.vocab_size, (2, TINY.block_size))
    full = model(ids)  # (2, T, V)
    cache = model.new_cache()
    steps = [model.step(ids[:, :3], cache)]  # a prompt of 3, then one at a time
    steps += [model.step(ids[:, t: t + 1], cache) for t in range(3, TINY.block_size)]
    np.testing.assert_allclose(np.concatenate(steps, axis=1), full, rtol=0, atol=100 * F64)
    with pytest.raises(ValueError, match="exceed the context of 8"):
        model.step(ids[:, :1], cache)


def test_a_seed_gives_the_same_run_and_resume_continues_bit_for_bit(tmp_path):
    corpus = _tiny_corpus()
    a = gpt.GPTRun.fresh(TINY)
    a.train(TINY.steps, corpus)
    b = gpt.GPTRun.fresh(TINY)
    b.train(3, corpus, checkpoint=tmp_path / "half.safetensors")
    resumed, tok = gpt.GPTRun.load(tmp_path / "half.safetensors")
    assert tok.chars == corpus.tokenizer.chars and resumed.step == 3
    resumed.train(TINY.steps, corpus)
    for name, p in a.model.params.items():
        assert np.array_equal(p, resumed.model.params[name]), name
    assert [h["val"] for h in a.history] == [h["val"] for h in resumed.history]
    other = gpt.GPTRun.fresh(dataclasses.replace(TINY, seed=4))
    other.train(1, corpus)
    assert not np.array_equal(other.model.params["wte.weight"], a.model.params["wte.weight"])


def test_sharded_batches_give_the_unsharded_loss_and_gradients_float64():
    """training.sharded_loss: the batch's rows in slices on threads, summed in a fixed order —
    the whole batch's loss and gradients to float64 rounding (the shards' sums reassociate a
    batch-sized sum: a few ulps at the largest gradient's size), and the same bits each time."""
    config = dataclasses.replace(TINY, batch=5)
    model = gpt.GPT(config, dtype=np.float64)
    _randomise(model)
    rng = np.random.default_rng(2)
    x, y = (rng.integers(0, config.vocab_size, (5, config.block_size)) for _ in range(2))
    loss, grads = model.loss(x, y)
    for shards in (2, 3, 5):
        s_loss, s_grads = training.sharded_loss(model.loss, x, y, shards)
        assert s_grads.keys() == grads.keys() and abs(s_loss - loss) <= 8 * F64 * loss
        for name, g in grads.items():
            scale = max(1.0, float(np.abs(g).max()))
            np.testing.assert_allclose(s_grads[name], g, rtol=0, atol=8 * F64 * scale,
                                       err_msg=f"{name}, {shards} shards")
        again = training.sharded_loss(model.loss, x, y, shards)
        assert again[0] == s_loss and all(
            np.array_equal(again[1][n], g) for n, g in s_grads.items())
    assert training.sharded_loss(model.loss, x, y, 1)[0] == loss  # one shard: the call itself
    for bad in (0, 6, 2.0, True):
        with pytest.raises(ValueError, match=r"shards must be an int in \[1, 5\]"):
            training.sharded_loss(model.loss, x, y, bad)


def test_a_run_keeps_its_shard_count_through_a_checkpoint(tmp_path):
    corpus = _tiny_corpus()
    runs = [gpt.GPTRun.fresh(TINY) for _ in range(2)]
    assert runs[0].shards == min(cpu_workers(), TINY.batch)
    for run in runs:
        run.shards = 3
        run.train(2, corpus)
    assert all(np.array_equal(p, runs[1].model.params[n]) for n, p in runs[0].model.params.items())
    runs[0].save(tmp_path / "run.safetensors", corpus.tokenizer.chars)
    assert gpt.GPTRun.load(tmp_path / "run.safetensors")[0].shards == 3
    runs[0].shards = TINY.batch + 1  # more shards than rows: refused on the header
    runs[0].save(tmp_path / "bad.safetensors", corpus.tokenizer.chars)
    with pytest.raises(ckpt.CheckpointError, match=r"shards must be an int in \[1, batch=3\]"):
        gpt.GPTRun.load(tmp_path / "bad.safetensors")


def test_checkpoint_round_trip_weights_only_and_damage(tmp_path):
    corpus = _tiny_corpus()
    run = gpt.GPTRun.fresh(TINY)
    run.train(2, corpus)
    full, light = tmp_path / "full.safetensors", tmp_path / "light.safetensors"
    run.save(full, corpus.tokenizer.chars)
    run.save(light, corpus.tokenizer.chars, weights_only=True)
    model, tok, meta = gpt.load(light)
    for name, p in run.model.params.items():
        assert np.array_equal(p, model.params[name]) and p.dtype == model.params[name].dtype
    assert meta["step"] == 2 and tok.chars == corpus.tokenizer.chars
    with pytest.raises(ckpt.CheckpointError, match=r"weights only .* cannot be resumed"):
        gpt.GPTRun.load(light)
    blob = bytearray(full.read_bytes())
    blob[-5] ^= 0xFF  # a flipped byte in the last tensor
    (tmp_path / "bad.safetensors").write_bytes(bytes(blob))
    with pytest.raises(ckpt.CheckpointError, match="SHA-256 does not match"):
        gpt.GPTRun.load(tmp_path / "bad.safetensors")
    from qkv.tasks import Run  # a recall run's loader refuses a GPT checkpoint, and vice versa
    with pytest.raises(ckpt.CheckpointError, match="task 'gpt', not 'recall'"):
        Run.load(full)


def test_the_corpus_is_checked_and_split_as_documented(tmp_path, monkeypatch):
    c = corpus_mod.load()
    text = corpus_mod.load_text()
    assert len(text) == 1_159_547 and c.tokenizer.vocab_size == 78 == gpt.GPTConfig().vocab_size
    assert len(c.train) == int(0.9 * len(text)) and len(c.train) + len(c.val) == len(text)
    assert c.tokenizer.decode(c.val[-30:]) == text[-30:]
    assert c.tokenizer.decode(c.tokenizer.encode("ROMEO.\n")) == "ROMEO.\n"
    with pytest.raises(ValueError, match="never saw"):
        c.tokenizer.encode("café")
    altered = tmp_path / "shakespeare.txt"
    altered.write_bytes(corpus_mod.PATH.read_bytes()[:-1] + b"!")
    with pytest.raises(corpus_mod.CorpusError, match="cannot read"):
        corpus_mod.load_text(tmp_path / "missing.txt")
    monkeypatch.setattr(corpus_mod, "PATH", altered)
    with pytest.raises(corpus_mod.CorpusError, match="the file was altered"):
        corpus_mod.load_text()


@pytest.mark.slow
def test_the_shipped_model_reaches_the_documented_validation_loss():
    """docs/gpt.md's figure, re-measured: `qkv train gpt --seed 0` on the whole validation
    text (115,955 characters); the file holds the weights only, a few MB."""
    from pathlib import Path

    model, tok = gpt.load_pretrained()
    _, _, meta = gpt.load(gpt.PRETRAINED)
    assert model.config == gpt.GPTConfig() and meta["step"] == 2000
    assert gpt.PRETRAINED.stat().st_size < 4_000_000
    figure = f"{gpt.validation_loss(model):.4f}"
    assert figure == "1.9610"
    doc = (Path(__file__).parents[1] / "docs" / "gpt.md").read_text(encoding="utf-8")
    assert f"validation loss **{figure}**" in doc
    assert tok.chars == corpus_mod.load().tokenizer.chars
