"""Features the peers' users expect (issue 15), checked against torch autograd and the reference."""

import numpy as np
import pytest
import torch

import qkv
from helpers import BACKEND_PARAMS, grad_atols
from qkv.engine import kernel_config

RNG = np.random.default_rng(15)


@pytest.mark.parametrize("backend", BACKEND_PARAMS)
@pytest.mark.parametrize("small", [0, 1 << 30])
def test_gradient_through_lse_matches_torch_autograd(backend, small):
    # loss = Σ out·dout + Σ lse·dlse, as a loss that uses the log-sum-exp (e.g. z-loss) has.
    q, k, v = (RNG.standard_normal((2, 3, 300, 16)) for _ in range(3))
    dout, dlse = RNG.standard_normal((2, 3, 300, 16)), RNG.standard_normal((2, 3, 300))
    mask = qkv.causal()
    with kernel_config(backend=backend, small=small, tile_q=64, tile_k=64):
        out, lse = qkv.attention(q, k, v, mask=mask, return_lse=True)
        grads = qkv.attention_backward(q, k, v, out, lse, dout, mask=mask, dlse=dlse)
    tq, tk, tv = (torch.tensor(x, requires_grad=True) for x in (q, k, v))
    scores = (tq @ tk.transpose(-1, -2) / 4).masked_fill(
        ~torch.tensor(mask.to_dense(300, 300)), -torch.inf)
    loss = ((torch.softmax(scores, -1) @ tv) * torch.tensor(dout)).sum() + (
        torch.logsumexp(scores, -1) * torch.tensor(dlse)).sum()
    loss.backward()
    for ours, theirs in zip(grads, (tq, tk, tv), strict=True):
        np.testing.assert_allclose(ours, theirs.grad.numpy(), atol=1e-12, rtol=0)
    ref = qkv.reference.attention_backward(q, k, v, dout, mask=mask, dlse=dlse)
    for ours, want in zip(grads, ref, strict=True):
        np.testing.assert_allclose(ours, want, atol=1e-12, rtol=0)


def test_dlse_is_checked():
    q, k, v = (RNG.standard_normal((5, 4)) for _ in range(3))
    out, lse = qkv.attention(q, k, v, return_lse=True)
    with pytest.raises(ValueError, match="dlse has shape"):
        qkv.attention_backward(q, k, v, out, lse, out, dlse=np.zeros(4))
    with pytest.raises(ValueError, match="dlse contains NaN"):
        qkv.attention_backward(q, k, v, out, lse, out, dlse=np.full(5, np.nan))


@pytest.mark.parametrize("backend", BACKEND_PARAMS)
def test_deterministic_backward_is_bitwise_across_runs_and_threads(backend):
    q, k, v, dout = (RNG.standard_normal((1, 4, 600, 32)).astype(np.float32) for _ in range(4))
    mask = qkv.causal() & qkv.window(300)
    results = []
    for workers in (1, 2, 2, 1, 2):
        with kernel_config(backend=backend, workers=workers, thread_min_work=0, tile_q=64,
                           tile_k=64, small=0):
            out, lse = qkv.attention(q, k, v, mask=mask, return_lse=True)
            results.append(qkv.attention_backward(q, k, v, out, lse, dout, mask=mask,
                                                  deterministic=True))
    for other in results[1:]:
        for a, b in zip(results[0], other, strict=True):
            np.testing.assert_array_equal(a, b)
    ref = qkv.reference.attention_backward(q, k, v, dout, mask=mask)
    for got, want, atol in zip(results[0], ref, grad_atols(q, k, v, dout), strict=True):
        np.testing.assert_allclose(got, want, atol=atol, rtol=0)


def _torch_softcapped(q, k, v, dout, mask, cap):
    tq, tk, tv = (torch.tensor(x, requires_grad=True) for x in (q, k, v))
    scores = tq @ tk.transpose(-1, -2) / np.sqrt(q.shape[-1])
    scores = (cap * torch.tanh(scores / cap)).masked_fill(
        ~torch.tensor(mask.to_dense(q.shape[-2], k.shape[-2])), -torch.inf)
    out = torch.softmax(scores, -1) @ tv
    (out * torch.tensor(dout)).sum().backward()
    return out.detach().numpy(), [t.grad.numpy() for t in (tq, tk, tv)]


@pytest.mark.parametrize("small", [0, 1 << 30])
def test_softcap_forward_backward_and_weights_match_torch(small):
    # Gemma 2 / flash-attn's softcap: c·tanh(s/c), with its gradient through the tanh.
    q, k, v = (RNG.standard_normal((2, 3, 300, 16)) * 3 for _ in range(3))
    dout = RNG.standard_normal((2, 3, 300, 16))
    mask, cap = qkv.causal(), 5.0
    want_out, want_grads = _torch_softcapped(q, k, v, dout, mask, cap)
    with kernel_config(small=small, tile_q=64, tile_k=64):
        out, lse = qkv.attention(q, k, v, mask=mask, return_lse=True, softcap=cap)
        grads = qkv.attention_backward(q, k, v, out, lse, dout, mask=mask, softcap=cap)
        weights = qkv.attention_weights(q, k, mask=mask, softcap=cap)
    np.testing.assert_allclose(out, want_out, atol=1e-12, rtol=0)
    for got, want in zip(grads, want_grads, strict=True):
        np.testing.assert_allclose(got, want, atol=1e-12, rtol=0)
    np.testing.assert_allclose(weights, qkv.reference.attention_weights(
        q, k, mask=mask, softcap=cap), atol=1e-14, rtol=0)
    assert np.abs(qkv.reference.attention(q, k, v, softcap=cap) - qkv.reference(q, k, v)).max() \
        > 1e-2  # the cap changes the answer: the test above is not vacuous


@pytest.mark.parametrize("backend", BACKEND_PARAMS)
def test_softcap_float32_on_each_step(backend):
    q, k, v, dout = (RNG.standard_normal((1, 2, 500, 32)).astype(np.float32) * 2 for _ in range(4))
    mask, cap = qkv.window(100), 10.0
    with kernel_config(backend=backend, small=0, tile_q=64, tile_k=128):
        out, lse = qkv.attention(q, k, v, mask=mask, return_lse=True, softcap=cap)
        grads = qkv.attention_backward(q, k, v, out, lse, dout, mask=mask, softcap=cap)
    # the capped scores are bounded by the cap: the dtype's error bound uses it
    atol = 8 * 2**-24 * (1 + cap + 32 * 4 * np.abs(q).max() * np.abs(k).max() / np.sqrt(32))
    np.testing.assert_allclose(out, qkv.reference.attention(q, k, v, mask=mask, softcap=cap),
                               atol=atol * np.abs(v).max(), rtol=0)
    ref = qkv.reference.attention_backward(q, k, v, dout, mask=mask, softcap=cap)
    for got, want, bound in zip(grads, ref, grad_atols(q, k, v, dout), strict=True):
        np.testing.assert_allclose(got, want, atol=bound, rtol=0)


@pytest.mark.parametrize("bad", [0, -1.0, float("inf"), "5", True])
def test_softcap_is_checked(bad):
    q = RNG.standard_normal((3, 4))
    with pytest.raises((TypeError, ValueError), match="softcap must be a positive"):
        qkv.attention(q, q, q, softcap=bad)


def literal_aligned(nq, nk, klen, qlen, before=None, after=0, prefix=None):
    """Per-sequence bottom-right alignment written as loops: query i at i + klen − qlen."""
    out = np.zeros((nq, nk), dtype=bool)
    for i in range(nq):
        pos = i + klen - qlen
        for j in range(nk):
            ok = j <= pos + after if after is not None else True
            ok = ok and (before is None or j >= pos - before)
            out[i, j] = ok or (prefix is not None and j < prefix)
    return out


def test_per_sequence_alignment_is_the_literal_rule():
    klen, qlen = np.array([7, 3, 5]), np.array([2, 3, 1])
    masks = {
        "causal": (qkv.causal(key_lengths=klen, query_lengths=qlen), {}),
        "window": (qkv.window(2, 1, key_lengths=klen, query_lengths=qlen),
                   {"before": 2, "after": 1}),
        "prefix": (qkv.prefix(np.array([1, 0, 2]), key_lengths=klen, query_lengths=qlen),
                   {"prefix": [1, 0, 2]}),
    }
    for name, (mask, kw) in masks.items():
        dense = mask.to_dense(4, 8)
        assert dense.shape == (3, 1, 4, 8), name
        for b in range(3):
            args = dict(kw)
            if "prefix" in args:
                args["prefix"] = args["prefix"][b]
            np.testing.assert_array_equal(dense[b, 0], literal_aligned(
                4, 8, klen[b], qlen[b], **args), err_msg=f"{name}, sequence {b}")


@pytest.mark.parametrize("backend", BACKEND_PARAMS)
def test_ragged_kv_cache_decoding_needs_no_hand_built_mask(backend):
    # flash-attn's cache_seqlens: one new query per sequence against caches holding 9, 4 and 1
    # valid keys of 9 slots (the rest stale garbage); each sees exactly its own valid keys.
    seqlens = np.array([9, 4, 1])
    q = RNG.standard_normal((3, 2, 1, 16)).astype(np.float32)
    k, v = (RNG.standard_normal((3, 2, 9, 16)).astype(np.float32) for _ in range(2))
    k[1, :, 4:], v[1, :, 4:] = 1e30, np.nan  # stale slots past the lengths
    mask = qkv.causal(key_lengths=seqlens) & qkv.padding(seqlens)
    with kernel_config(backend=backend):
        out = qkv.attention(q, k, v, mask=mask, check_finite=False)
    for b, n in enumerate(seqlens):
        want = qkv.reference(q[b], k[b, :, :n], v[b, :, :n])
        np.testing.assert_allclose(out[b], want, atol=1e-5, rtol=0)


@pytest.mark.parametrize("backend", BACKEND_PARAMS)
def test_per_sequence_masks_and_alibi_on_the_tiled_kernel(backend):
    klen, qlen = np.array([300, 180]), np.array([300, 120])
    q, k, v = (RNG.standard_normal((2, 4, 300, 16)).astype(np.float32) for _ in range(3))
    slopes = RNG.uniform(0.01, 0.2, (2, 4))  # per sequence and head
    mask = qkv.window(64, key_lengths=klen, query_lengths=qlen) & qkv.padding(klen, qlen)
    bias = qkv.alibi(slopes, key_lengths=klen, query_lengths=qlen)
    stats = qkv.engine.TileStats()
    with kernel_config(backend=backend, small=0, tile_q=32, tile_k=32, stats=stats):
        out = qkv.attention(q, k, v, mask=mask, bias=bias)
    ref = qkv.reference(q, k, v, mask=mask, bias=bias)
    np.testing.assert_allclose(out, ref, atol=2e-5, rtol=0)
    assert stats.skipped > stats.computed  # the window still skips most tiles per sequence
    # and the bias really is per sequence and aligned per sequence, against a literal one
    b = 1
    pos = np.arange(300)[:, None] + klen[b] - qlen[b]
    literal = -slopes[b][:, None, None] * np.abs(pos - np.arange(300)[None, :])
    dense = bias.bind(qkv.masks.Layout((2,), 4, 300, 300)).dense(np.arange(300), np.arange(300))
    np.testing.assert_allclose(dense[b], literal)


def max_exact_boundaries(max_exact: int, buckets: int, max_distance: int) -> dict[int, int]:
    """{distance: bucket} for the distances whose log bucket is a whole number before the floor
    — max_exact + log(d / max_exact) / log(max_distance / max_exact) · (buckets − max_exact) —
    computed exactly: d = max_exact · r^j with r^(buckets − max_exact) = max_distance /
    max_exact, kept where d is an integer below max_distance."""
    from fractions import Fraction

    span, ratio = buckets - max_exact, Fraction(max_distance, max_exact)
    out = {}
    for j in range(span):
        for d in range(max_exact, max_distance):  # d^span == max_exact^span · ratio^j, exactly
            if Fraction(d, max_exact) ** span == ratio**j:
                out[d] = max_exact + j
    return out


def test_relative_position_buckets_are_t5s():
    from transformers.models.t5.modeling_t5 import T5Attention

    for bidirectional in (True, False):
        for nq, nk in ((300, 300), (1, 50)):
            positions = torch.arange(nk)[None, :] - (torch.arange(nq) + nk - nq)[:, None]
            want = T5Attention._relative_position_bucket(positions, bidirectional=bidirectional)
            got = qkv.relative_position_buckets(nq, nk, bidirectional=bidirectional)
            # Where the log bucket lands exactly on a boundary (distance = max_exact · 2^(j/2),
            # so 2·log2(d/8)·… is a whole number), each side's float log rounding decides it:
            # compared there with exact integer arithmetic instead of with the peer.
            half = 16 if bidirectional else 32  # buckets on one side; max_exact = half // 2
            exact_at = max_exact_boundaries(half // 2, half, 128)
            pos = positions.numpy()
            d = np.abs(pos) if bidirectional else np.maximum(-pos, 0)  # T5's distance
            on_boundary = np.isin(d, list(exact_at))
            np.testing.assert_array_equal(got[~on_boundary], want.numpy()[~on_boundary])
            offset = (pos > 0) * half if bidirectional else 0
            exact = np.vectorize(lambda x, at=exact_at: at.get(x, -1))(d)
            np.testing.assert_array_equal(got[on_boundary], (offset + exact)[on_boundary])
            assert on_boundary.any()  # the boundaries are there to be checked


@pytest.mark.parametrize("backend", BACKEND_PARAMS)
@pytest.mark.parametrize("small", [0, 1 << 30])
def test_learnable_t5_bias_gradient_matches_torch_autograd(backend, small):
    # A T5-style learnable bias: a (H, buckets) table gathered by relative position, causal.
    heads, n = 3, 200
    q, k, v = (RNG.standard_normal((2, heads, n, 16)) for _ in range(3))
    dout = RNG.standard_normal((2, heads, n, 16))
    table = RNG.standard_normal((heads, 32))
    buckets = qkv.relative_position_buckets(n, n, bidirectional=False)
    bias, mask = table[:, buckets], qkv.causal()  # (H, Nq, Nk), broadcast over the batch
    with kernel_config(backend=backend, small=small, tile_q=64, tile_k=64):
        out, lse = qkv.attention(q, k, v, mask=mask, bias=bias, return_lse=True)
        *grads, dbias = qkv.attention_backward(q, k, v, out, lse, dout, mask=mask, bias=bias,
                                               return_dbias=True)
    assert dbias.shape == bias.shape
    dtable = np.zeros_like(table)
    np.add.at(dtable, (slice(None), buckets), dbias)
    tq, tk, tv = (torch.tensor(x, requires_grad=True) for x in (q, k, v))
    ttable = torch.tensor(table, requires_grad=True)
    scores = tq @ tk.transpose(-1, -2) / 4 + ttable[:, torch.tensor(buckets)]
    scores = scores.masked_fill(~torch.tensor(mask.to_dense(n, n)), -torch.inf)
    ((torch.softmax(scores, -1) @ tv) * torch.tensor(dout)).sum().backward()
    np.testing.assert_allclose(dtable, ttable.grad.numpy(), atol=1e-11, rtol=0)
    for ours, theirs in zip(grads, (tq, tk, tv), strict=True):
        np.testing.assert_allclose(ours, theirs.grad.numpy(), atol=1e-12, rtol=0)
    ref = qkv.reference.attention_backward(q, k, v, dout, mask=mask, bias=bias,
                                           return_dbias=True)
    np.testing.assert_allclose(dbias, ref[3], atol=1e-12, rtol=0)


def test_dbias_needs_an_array_bias():
    q = RNG.standard_normal((4, 8))
    out, lse = qkv.attention(q, q, q, return_lse=True)
    with pytest.raises(ValueError, match="return_dbias=True needs an array bias"):
        qkv.attention_backward(q, q, q, out, lse, out, return_dbias=True)


@pytest.mark.parametrize("backend", BACKEND_PARAMS)
@pytest.mark.parametrize("small", [0, 1 << 30])
def test_dropout_is_seeded_tiling_independent_and_its_backward_matches_torch(backend, small):
    q, k, v = (RNG.standard_normal((2, 3, 300, 16)) for _ in range(3))
    dout = RNG.standard_normal((2, 3, 300, 16))
    mask, kw = qkv.causal(), {"dropout": 0.3, "dropout_seed": 7}
    with kernel_config(backend=backend, small=small, tile_q=64, tile_k=32):
        out, lse = qkv.attention(q, k, v, mask=mask, return_lse=True, **kw)
        grads = qkv.attention_backward(q, k, v, out, lse, dout, mask=mask, **kw)
    # The same pairs are dropped on any path and tiling: equal to the reference, which draws
    # the whole mask at once, and to torch autograd given that mask explicitly.
    np.testing.assert_allclose(out, qkv.reference(q, k, v, mask=mask, **kw), atol=1e-12)
    keep = qkv.engine.dropout_scales(q, k, mask=mask, **kw)  # Z / (1 − rate)
    assert 0.66 < (keep > 0).mean() < 0.74
    tq, tk, tv = (torch.tensor(x, requires_grad=True) for x in (q, k, v))
    scores = (tq @ tk.transpose(-1, -2) / 4).masked_fill(
        ~torch.tensor(mask.to_dense(300, 300)), -torch.inf)
    want = (torch.softmax(scores, -1) * torch.tensor(keep)) @ tv
    (want * torch.tensor(dout)).sum().backward()
    np.testing.assert_allclose(out, want.detach().numpy(), atol=1e-12, rtol=0)
    for ours, theirs in zip(grads, (tq, tk, tv), strict=True):
        np.testing.assert_allclose(ours, theirs.grad.numpy(), atol=1e-12, rtol=0)
    np.testing.assert_allclose(lse, qkv.attention(q, k, v, mask=mask, return_lse=True)[1])


def test_dropout_seeds_differ_and_arguments_are_checked():
    q = RNG.standard_normal((50, 8))
    a, b = (qkv.attention(q, q, q, dropout=0.5, dropout_seed=s) for s in (1, 2))
    assert np.abs(a - b).max() > 1e-3
    np.testing.assert_array_equal(a, qkv.attention(q, q, q, dropout=0.5, dropout_seed=1))
    with pytest.raises(ValueError, match="dropout must be a rate"):
        qkv.attention(q, q, q, dropout=1.0, dropout_seed=1)
    with pytest.raises(ValueError, match="dropout_seed must be an int"):
        qkv.attention(q, q, q, dropout=0.1)


@pytest.mark.parametrize("backend", BACKEND_PARAMS)
@pytest.mark.parametrize("small", [0, 1 << 30])
def test_score_mod_runs_per_tile_like_flexattention(backend, small):
    # FlexAttention's relative-position example: score + (q_idx − k_idx), here per head.
    q, k, v = (RNG.standard_normal((2, 3, 200, 16)).astype(np.float32) for _ in range(3))
    seen = set()

    def rel_bias(scores, b, h, q_idx, k_idx):
        seen.add((int(b), int(h)))
        return scores + (h + 1) * 0.01 * (q_idx - k_idx)

    with kernel_config(backend=backend, small=small, tile_q=64, tile_k=64):
        out = qkv.attention(q, k, v, mask=qkv.causal(), score_mod=rel_bias)
        rows = qkv.attention_weights(q, k, mask=qkv.causal(), score_mod=rel_bias, rows=[5, 150])
    assert seen == {(b, h) for b in range(2) for h in range(3)}
    i, j = np.arange(200)[:, None], np.arange(200)[None, :]
    bias = (np.arange(1, 4) * 0.01)[:, None, None] * (i - j)  # the same rule as a dense bias
    want = qkv.reference(q, k, v, mask=qkv.causal(), bias=bias.astype(np.float32))
    np.testing.assert_allclose(out, want, atol=2e-5, rtol=0)
    np.testing.assert_allclose(rows, qkv.reference.attention_weights(
        q, k, mask=qkv.causal(), bias=bias, rows=[5, 150]), atol=2e-6, rtol=0)
    np.testing.assert_allclose(qkv.reference(q, k, v, mask=qkv.causal(), score_mod=rel_bias),
                               qkv.reference(q, k, v, mask=qkv.causal(), bias=bias), atol=1e-12)


def test_score_mod_is_checked_and_its_backward_refused():
    q = RNG.standard_normal((6, 4))
    with pytest.raises(ValueError, match="score_mod must return float scores"):
        qkv.attention(q, q, q, score_mod=lambda s, b, h, i, j: s[:1])
    with pytest.raises(ValueError, match="NaN or \\+inf"):
        qkv.attention(q, q, q, score_mod=lambda s, b, h, i, j: s * np.nan)
    with pytest.raises(TypeError, match="score_mod must be a callable"):
        qkv.attention(q, q, q, score_mod=3)
    out, lse = qkv.attention(q, q, q, return_lse=True)
    with pytest.raises(ValueError, match="cannot differentiate an arbitrary score_mod"):
        qkv.attention_backward(q, q, q, out, lse, out, score_mod=lambda s, *_: s)
