"""Every qkv.nn layer's backward against float64 central finite differences.

Loss L = Σ layer(x) ⊙ R for a fixed random R, so the cotangent passed to backward is R.
Tolerance 1e-7 (relative to max(1, |grad|)): the finite-difference error itself is ~1e-9
(measured 5e-10 to 3e-9; see qkv.nn.gradcheck); 1e-7 leaves room for the kernel's float64
rounding summed over tiles, and any real bug (a missing term, a transpose) shows up at 1e-2 or
larger.
"""

from __future__ import annotations

import numpy as np
import pytest

import qkv
from qkv import nn
from qkv.nn.gradcheck import max_rel_error, numerical_grad

TOL = 1e-7
F64 = np.float64


def rng(seed=0):
    return np.random.default_rng(seed)


def check(layer, inputs: dict, call, backward_inputs):
    """Compare layer.backward with finite differences for every param and every float input.

    ``call(**inputs)`` returns (y, ctx); ``backward_inputs(dx_result)`` maps the backward's
    input-gradient result to a dict name → gradient for the entries of ``inputs``.
    """
    y, ctx = call(**inputs)
    cot = rng(99).standard_normal(y.shape)

    def loss():
        return float((call(**inputs)[0] * cot).sum())

    dinputs, grads = layer.backward(ctx, cot)
    assert set(grads) == set(layer.params)
    errors = {}
    for name, p in layer.params.items():
        assert grads[name].shape == p.shape, name
        errors[name] = max_rel_error(grads[name], numerical_grad(loss, p))
    for name, g in backward_inputs(dinputs).items():
        assert g.shape == inputs[name].shape, name
        errors[name] = max_rel_error(g, numerical_grad(loss, inputs[name]))
    worst = max(errors, key=errors.get)
    assert errors[worst] < TOL, errors
    return errors


def test_linear():
    layer = nn.Linear(5, 3, rng=1, dtype=F64)
    layer.params["bias"][:] = rng(2).standard_normal(3)
    check(layer, {"x": rng(3).standard_normal((2, 4, 5))}, layer.forward, lambda d: {"x": d})


def test_linear_without_bias():
    layer = nn.Linear(5, 3, bias=False, rng=1, dtype=F64)
    assert set(layer.params) == {"weight"}
    check(layer, {"x": rng(3).standard_normal((4, 5))}, layer.forward, lambda d: {"x": d})


def test_layernorm():
    layer = nn.LayerNorm(6, dtype=F64)
    layer.params["weight"][:] = rng(1).standard_normal(6)
    layer.params["bias"][:] = rng(2).standard_normal(6)
    check(layer, {"x": 3 * rng(3).standard_normal((2, 3, 6)) + 1}, layer.forward,
          lambda d: {"x": d})


def test_layernorm_matches_definition():
    x = rng(4).standard_normal((3, 8))
    y = nn.LayerNorm(8, dtype=F64)(x)
    want = (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + 1e-5)
    np.testing.assert_allclose(y, want, rtol=0, atol=1e-14)


def test_embedding_with_repeated_ids():
    layer = nn.Embedding(7, 4, rng=1, dtype=F64)
    ids = np.array([[1, 3, 1], [6, 0, 1]])
    y, ctx = layer.forward(ids)
    np.testing.assert_array_equal(y, layer.params["weight"][ids])
    cot = rng(5).standard_normal(y.shape)
    _, grads = layer.backward(ctx, cot)
    num = numerical_grad(lambda: float((layer(ids) * cot).sum()), layer.params["weight"])
    assert max_rel_error(grads["weight"], num) < TOL
    np.testing.assert_allclose(grads["weight"][1], cot[0, 0] + cot[0, 2] + cot[1, 2])


def test_gelu_is_the_erf_form_and_its_derivative():
    from scipy.stats import norm

    x = np.linspace(-5, 5, 41)
    np.testing.assert_allclose(nn.gelu(x), x * norm.cdf(x), rtol=1e-14, atol=1e-15)
    assert nn.gelu(np.float32([1.0])).dtype == np.float32
    xs = rng(6).standard_normal(10)
    dy = rng(7).standard_normal(10)
    num = numerical_grad(lambda: float((nn.gelu(xs) * dy).sum()), xs)
    assert max_rel_error(nn.gelu_backward(xs, dy), num) < TOL


def test_mlp():
    layer = nn.MLP(4, 6, rng=1, dtype=F64)
    for name in ("fc1.bias", "fc2.bias"):
        layer.params[name][:] = rng(2).standard_normal(layer.params[name].shape)
    check(layer, {"x": rng(3).standard_normal((2, 3, 4))}, layer.forward, lambda d: {"x": d})


def _mha(n_heads=2, n_kv_heads=None, d_model=6, d_head=None, bias=True):
    layer = nn.MultiHeadAttention(d_model, n_heads, n_kv_heads, d_head=d_head, bias=bias,
                                  rng=1, dtype=F64)
    g = rng(2)
    for name, p in layer.params.items():
        if name.startswith("b_"):
            p[:] = g.standard_normal(p.shape)
    return layer


@pytest.mark.parametrize("mask", [None, "causal", "padding", "allow"])
def test_mha_self_attention(mask):
    layer = _mha()
    x = rng(3).standard_normal((2, 5, 6))
    masks = {None: None, "causal": qkv.causal(), "padding": qkv.padding(np.array([5, 2])),
             "allow": qkv.allow(rng(4).random((2, 1, 5, 5)) < 0.6)}
    check(layer, {"x": x}, lambda x: layer.forward(x, mask=masks[mask]),
          lambda d: {"x": d[0]})


@pytest.mark.parametrize("dtype", [np.float32, F64])
@pytest.mark.parametrize("n_kv_heads, bias, n", [(None, True, 5), (2, False, 5), (None, True, 400)])
def test_mha_head_views_give_the_bits_of_contiguous_heads(dtype, n_kv_heads, bias, n):
    # MiniLM's encoder reads q, k, v as strided views of the projections (head_views): the
    # engine must give the bits of contiguous heads, forward and backward, GQA and a tiled size
    layer = nn.MultiHeadAttention(8, 4, n_kv_heads, bias=bias, rng=1, dtype=dtype)
    x = rng(3).standard_normal((2, n, 8)).astype(dtype)
    dy = rng(5).standard_normal((2, n, 8)).astype(dtype)
    runs = []
    for views in (False, True):
        layer.head_views = views
        q, k, v = layer.project(x)
        assert q.flags.c_contiguous != views  # views: rows H·d apart, not copied
        y, ctx = layer.forward(x, mask=qkv.causal())
        (dx, _), grads = layer.backward(ctx, dy)
        runs.append((q, k, v, y, dx, *grads.values()))
    for a, b in zip(*runs, strict=True):
        np.testing.assert_array_equal(a, b)


def test_mha_gqa_cross_attention_and_fully_masked_rows():
    layer = _mha(n_heads=4, n_kv_heads=2, d_model=6, d_head=3)
    x, c = rng(3).standard_normal((2, 3, 6)), rng(4).standard_normal((2, 5, 6))
    # batch 1 sees no key at all: its rows output b_o only and get no attention gradient
    mask = qkv.padding(np.array([4, 0]))
    errors = check(layer, {"x": x, "context": c},
                   lambda x, context: layer.forward(x, context=context, mask=mask),
                   lambda d: {"x": d[0], "context": d[1]})
    assert set(errors) >= {"w_q", "w_k", "w_v", "w_o", "x", "context"}


def test_mha_context_broadcast_over_batch_and_no_bias():
    layer = _mha(n_heads=3, n_kv_heads=1, d_model=6, bias=False)
    x, c = rng(3).standard_normal((3, 2, 6)), rng(4).standard_normal((1, 4, 6))
    check(layer, {"x": x, "context": c},
          lambda x, context: layer.forward(x, context=context),
          lambda d: {"x": d[0], "context": d[1]})


def test_mha_unbatched_input():
    layer = _mha()
    check(layer, {"x": rng(3).standard_normal((4, 6))},
          lambda x: layer.forward(x, mask=qkv.causal()), lambda d: {"x": d[0]})


def test_mha_forward_is_the_formula():
    """Y = concat_h softmax(Q_h K_gᵀ/√d_head) V_g · W_O + b_o, written out with the reference."""
    layer = _mha(n_heads=4, n_kv_heads=2, d_model=8)
    x = rng(3).standard_normal((2, 5, 8))
    p = layer.params
    heads = []
    for h in range(4):
        g = h // 2
        cols_q = slice(h * 2, (h + 1) * 2)
        cols_kv = slice(g * 2, (g + 1) * 2)
        q = x @ p["w_q"][:, cols_q] + p["b_q"][cols_q]
        k = x @ p["w_k"][:, cols_kv] + p["b_k"][cols_kv]
        v = x @ p["w_v"][:, cols_kv] + p["b_v"][cols_kv]
        s = q @ np.swapaxes(k, -1, -2) / np.sqrt(2)
        w = np.exp(s - s.max(-1, keepdims=True))
        heads.append((w / w.sum(-1, keepdims=True)) @ v)
    want = np.concatenate(heads, axis=-1) @ p["w_o"] + p["b_o"]
    np.testing.assert_allclose(layer(x), want, rtol=0, atol=1e-13)
    weights = layer.attention_weights(x)
    assert weights.shape == (2, 4, 5, 5)
    np.testing.assert_allclose(weights.sum(-1), 1.0, atol=1e-14)


def test_mha_param_shapes_and_project():
    layer = nn.MultiHeadAttention(12, 4, 2, d_head=5)
    shapes = {n: p.shape for n, p in layer.params.items()}
    assert shapes == {"w_q": (12, 20), "w_k": (12, 10), "w_v": (12, 10), "w_o": (20, 12),
                      "b_q": (20,), "b_k": (10,), "b_v": (10,), "b_o": (12,)}
    assert all(p.dtype == np.float32 for p in layer.params.values())
    q, k, v = layer.project(np.zeros((3, 7, 12), np.float32), np.zeros((3, 9, 12), np.float32))
    assert (q.shape, k.shape, v.shape) == ((3, 4, 7, 5), (3, 2, 9, 5), (3, 2, 9, 5))


def test_transformer_block():
    block = nn.TransformerBlock(6, 2, d_hidden=8, n_kv_heads=1, rng=1, dtype=F64)
    g = rng(2)
    for p in block.params.values():
        p += 0.1 * g.standard_normal(p.shape)
    check(block, {"x": rng(3).standard_normal((2, 4, 6))},
          lambda x: block.forward(x, mask=qkv.causal()), lambda d: {"x": d})


def test_softmax_cross_entropy():
    logits = rng(1).standard_normal((3, 4, 5))
    targets = rng(2).integers(0, 5, (3, 4))
    loss, grad = nn.softmax_cross_entropy(logits, targets)
    p = np.exp(logits) / np.exp(logits).sum(-1, keepdims=True)
    want = -np.log(np.take_along_axis(p, targets[..., None], -1)).mean()
    assert abs(loss - want) < 1e-14
    num = numerical_grad(lambda: nn.softmax_cross_entropy(logits, targets)[0], logits)
    assert max_rel_error(grad, num) < TOL
    # huge logits neither overflow nor lose the answer
    big, _ = nn.softmax_cross_entropy(np.array([[1000.0, 0.0]]), np.array([1]))
    assert abs(big - 1000.0) < 1e-12


def test_adam_matches_the_update_rule_and_torch():
    torch = pytest.importorskip("torch")
    p0 = rng(1).standard_normal((3, 2))
    params = {"w": p0.copy()}
    opt = nn.Adam(params, lr=0.1, weight_decay=0.0)
    tp = torch.tensor(p0, requires_grad=True)
    topt = torch.optim.Adam([tp], lr=0.1)
    for step in range(5):
        g = rng(10 + step).standard_normal((3, 2))
        opt.step({"w": g})
        tp.grad = torch.tensor(g)
        topt.step()
    np.testing.assert_allclose(params["w"], tp.detach().numpy(), rtol=0, atol=1e-14)


def test_adam_state_round_trip():
    params = {"w": np.ones(3)}
    opt = nn.Adam(params, lr=0.1)
    opt.step({"w": np.arange(3.0)})
    other = nn.Adam({"w": params["w"].copy()}, lr=0.1)
    other.load_state_dict(opt.state_dict())
    opt.step({"w": np.ones(3)})
    other.step({"w": np.ones(3)})
    np.testing.assert_array_equal(other.params["w"], params["w"])


@pytest.mark.parametrize(("make", "message"), [
    (lambda: nn.MultiHeadAttention(10, 3), "not divisible by n_heads=3"),
    (lambda: nn.MultiHeadAttention(8, 4, 3), "multiple of n_kv_heads=3"),
    (lambda: nn.MultiHeadAttention(0, 1), "d_model must be a positive int"),
    (lambda: nn.Linear(3, 2, rng="x"), "rng must be"),
    (lambda: nn.LayerNorm(4, eps=0), "eps must be a positive number"),
])
def test_bad_construction_names_the_argument(make, message):
    with pytest.raises((ValueError, TypeError), match=message):
        make()


def test_bad_calls_name_the_argument():
    mha = nn.MultiHeadAttention(8, 2)
    with pytest.raises(ValueError, match=r"x has shape \(2, 5, 7\).*last dim must be 8"):
        mha(np.zeros((2, 5, 7), np.float32))
    with pytest.raises(TypeError, match="x must be a float array"):
        mha(np.zeros((2, 5, 8), np.int64))
    with pytest.raises(TypeError, match="polarity"):
        mha(np.zeros((5, 8), np.float32), mask=np.ones((5, 5), bool))
    with pytest.raises(ValueError, match=r"ids must lie in \[0, 4\)"):
        nn.Embedding(4, 2)(np.array([4]))
    with pytest.raises(ValueError, match="logits"):
        nn.softmax_cross_entropy(np.zeros((3, 4)), np.zeros(2, int))
    y, ctx = mha.forward(np.zeros((1, 8), np.float32), mask=qkv.causal(),
                         cache=nn.KVCache(1)[0])
    with pytest.raises(ValueError, match="KV cache"):
        mha.backward(ctx, y)
