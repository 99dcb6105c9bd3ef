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
