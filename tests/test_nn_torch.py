"""qkv.nn.MultiHeadAttention against torch (torch==2.13.0, test-only oracle).

1. Backward vs torch autograd of the same computation (projections + SDPA), on random shapes,
   masks and GQA. float64: the two compute the same sums in different orders, so they agree to
   ~1e-14 relative; 1e-11 is a safe bound. float32: ~Dk·eps32 per dot product, amplified by the
   chain of 4 matmuls; we allow 2e-5 relative to each gradient's scale (a bug is O(1)).
2. Interop: from_torch / to_torch with torch.nn.MultiheadAttention give the same outputs under
   its True-means-masked masks, within float32 tolerance.
"""

from __future__ import annotations

import numpy as np
import pytest

import qkv
from qkv import nn

torch = pytest.importorskip("torch")


def _torch_mha(params, x, context, n_heads, n_kv_heads, d_head, allowed):
    """The same MHA written with torch ops; allowed (B, 1|H, Nq, Nk) bool or None."""
    src = x if context is None else context

    def proj(t, n):
        y = t @ params[f"w_{n}"]
        return y + params[f"b_{n}"] if f"b_{n}" in params else y

    def split(t, h):
        return t.reshape(*t.shape[:-1], h, d_head).transpose(-2, -3)

    q = split(proj(x, "q"), n_heads)
    k = split(proj(src, "k"), n_kv_heads)
    v = split(proj(src, "v"), n_kv_heads)
    group = n_heads // n_kv_heads
    k, v = k.repeat_interleave(group, dim=-3), v.repeat_interleave(group, dim=-3)
    s = q @ k.transpose(-1, -2) / np.sqrt(d_head)
    if allowed is not None:
        s = s.masked_fill(~allowed, float("-inf"))
    w = torch.softmax(s, dim=-1)
    if allowed is not None:  # rows with no allowed key: zeros, as qkv defines them
        w = torch.nan_to_num(w, nan=0.0)
    out = (w @ v).transpose(-2, -3).reshape(*x.shape[:-1], n_heads * d_head)
    return proj(out, "o")


CASES = [
    # (B, Nq, Nk | None for self, d_model, H, Hkv, d_head, mask kind, bias)
    (2, 7, None, 16, 4, 4, 4, "none", True),
    (3, 9, None, 12, 4, 2, 3, "causal", True),
    (2, 6, 11, 8, 2, 1, 5, "padding", True),
    (2, 40, None, 16, 4, 1, 4, "window", False),
    (1, 5, 8, 10, 2, 2, 5, "allow", True),
    (2, 33, 70, 24, 6, 3, 4, "padding", False),
]


def _mask(kind, b, nq, nk, g):
    if kind == "none":
        return None, None
    if kind == "causal":
        return qkv.causal(), torch.tensor(qkv.causal().to_dense(nq, nk))[None, None]
    if kind == "window":
        m = qkv.window(5) & qkv.causal()
        return m, torch.tensor(m.to_dense(nq, nk))[None, None]
    if kind == "padding":
        lengths = g.integers(1, nk + 1, b)
        lengths[0] = 0 if b > 1 else lengths[0]  # a batch element with every key padded
        allowed = np.arange(nk)[None, :] < lengths[:, None]
        return qkv.padding(lengths), torch.tensor(allowed[:, None, None, :])
    arr = g.random((b, 1, nq, nk)) < 0.5
    return qkv.allow(arr), torch.tensor(arr)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("case", CASES, ids=[f"{c[7]}-H{c[4]}kv{c[5]}" for c in CASES])
def test_mha_backward_matches_torch_autograd(case, dtype):
    b, nq, nk, d_model, h, hkv, d_head, kind, bias = case
    g = np.random.default_rng(CASES.index(case))
    mha = nn.MultiHeadAttention(d_model, h, hkv, d_head=d_head, bias=bias, rng=g, dtype=dtype)
    for name, p in mha.params.items():
        if name.startswith("b_"):
            p[:] = g.standard_normal(p.shape)
    x = g.standard_normal((b, nq, d_model)).astype(dtype)
    context = None if nk is None else g.standard_normal((b, nk, d_model)).astype(dtype)
    mask, allowed = _mask(kind, b, nq, nq if nk is None else nk, g)
    y, ctx = mha.forward(x, context=context, mask=mask)
    dy = g.standard_normal(y.shape).astype(dtype)
    (dx, dctx), grads = mha.backward(ctx, dy)

    tparams = {n: torch.tensor(p, requires_grad=True) for n, p in mha.params.items()}
    tx = torch.tensor(x, requires_grad=True)
    tc = None if context is None else torch.tensor(context, requires_grad=True)
    ty = _torch_mha(tparams, tx, tc, h, hkv, d_head, allowed)
    ty.backward(torch.tensor(dy))

    rtol = 1e-11 if dtype == np.float64 else 2e-5

    def close(ours, theirs, name):
        theirs = theirs.detach().numpy()
        assert ours.dtype == theirs.dtype == np.dtype(dtype), name
        scale = max(1.0, float(np.abs(theirs).max()))
        err = float(np.abs(ours - theirs).max()) / scale
        assert err < rtol, (name, err)

    close(y, ty, "y")
    close(dx, tx.grad, "dx")
    if tc is not None:
        close(dctx, tc.grad, "dcontext")
    for name in mha.params:
        close(grads[name], tparams[name].grad, name)


@pytest.mark.parametrize("bias", [True, False])
def test_from_torch_matches_torch_multihead_attention(bias):
    torch.manual_seed(0)
    module = torch.nn.MultiheadAttention(16, 4, bias=bias, batch_first=True)
    with torch.no_grad():  # torch initialises the biases to zero; make them matter
        if bias:
            module.in_proj_bias.normal_()
            module.out_proj.bias.normal_()
    module.eval()
    mha = nn.MultiHeadAttention.from_torch(module)
    g = np.random.default_rng(1)
    x = g.standard_normal((3, 6, 16)).astype(np.float32)
    c = g.standard_normal((3, 9, 16)).astype(np.float32)
    # torch's polarity: True = masked out; no row fully masked (torch would return NaN)
    key_padding = np.zeros((3, 9), bool)
    key_padding[1, 5:] = True
    key_padding[2, 2:4] = True
    attn_mask = g.random((6, 9)) < 0.3
    attn_mask[:, 0] = False
    with torch.no_grad():
        want, _ = module(torch.tensor(x), torch.tensor(c), torch.tensor(c),
                         key_padding_mask=torch.tensor(key_padding),
                         attn_mask=torch.tensor(attn_mask), need_weights=False)
    got = mha(x, context=c, mask=nn.masks_from_torch(attn_mask, key_padding))
    # float32: Dk·eps32 per dot product through 3 matmuls, values O(1) → 1e-5 absolute
    np.testing.assert_allclose(got, want.numpy(), rtol=0, atol=1e-5)
    # the same masks written by hand with qkv.deny
    by_hand = qkv.deny(attn_mask) & qkv.deny(key_padding[:, None, None, :])
    np.testing.assert_array_equal(mha(x, context=c, mask=by_hand), got)


def test_to_torch_round_trip_and_self_attention():
    mha = nn.MultiHeadAttention(12, 3, rng=5)
    for name, p in mha.params.items():
        if name.startswith("b_"):
            p[:] = np.random.default_rng(6).standard_normal(p.shape)
    module = mha.to_torch().eval()
    x = np.random.default_rng(7).standard_normal((2, 5, 12)).astype(np.float32)
    causal_torch = torch.triu(torch.ones(5, 5, dtype=torch.bool), diagonal=1)  # True = masked
    with torch.no_grad():
        want, _ = module(*(torch.tensor(x),) * 3, attn_mask=causal_torch, need_weights=False)
    np.testing.assert_allclose(mha(x, mask=qkv.causal()), want.numpy(), rtol=0, atol=1e-5)
    back = nn.MultiHeadAttention.from_torch(module)
    for name, p in mha.params.items():
        np.testing.assert_array_equal(back.params[name], p)


def test_to_torch_refuses_what_torch_cannot_express():
    with pytest.raises(ValueError, match="grouped-query"):
        nn.MultiHeadAttention(8, 4, 2).to_torch()
    with pytest.raises(TypeError, match="MultiheadAttention"):
        nn.MultiHeadAttention.from_torch(torch.nn.Linear(2, 2))
    with pytest.raises(TypeError, match="True = masked out"):
        nn.masks_from_torch(attn_mask=np.zeros((2, 2)))
