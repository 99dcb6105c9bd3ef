"""qkv.nn.RNN (Elman, tanh): backward vs float64 central differences, and forward/backward vs
torch.nn.RNN.

Finite differences (h = 1e-6, float64) have error ~1e-9 on these O(1) losses; 1e-6 is a safe
bound that a wrong term (O(1) relative) cannot meet. Against torch in float64 the two compute
the same sums in different orders: they agree to ~1e-14; 1e-10 is a safe bound.
"""

from __future__ import annotations

import numpy as np
import pytest

from qkv import nn
from qkv.nn.gradcheck import max_rel_error, numerical_grad


def _loss_and_grads(rnn, x, h0, lengths, r_out, r_last):
    (outs, last), ctx = rnn.forward(x, h0, lengths)
    loss = float((outs * r_out).sum() + (last * r_last).sum())
    (dx, dh0), grads = rnn.backward(ctx, (r_out, r_last))
    return loss, dx, dh0, grads


@pytest.mark.parametrize("lengths", [None, [5, 2, 0]])
def test_rnn_backward_matches_finite_differences(lengths):
    rng = np.random.default_rng(0)
    B, T, d_in, H = 3, 5, 4, 6
    rnn = nn.RNN(d_in, H, rng=1, dtype=np.float64)
    x = rng.standard_normal((B, T, d_in))
    h0 = rng.standard_normal((B, H)) * 0.5
    r_out, r_last = rng.standard_normal((B, T, H)), rng.standard_normal((B, H))
    lengths = None if lengths is None else np.asarray(lengths)
    _, dx, dh0, grads = _loss_and_grads(rnn, x, h0, lengths, r_out, r_last)

    def loss():
        (outs, last), _ = rnn.forward(x, h0, lengths)
        return float((outs * r_out).sum() + (last * r_last).sum())

    for name, p in rnn.params.items():
        assert max_rel_error(grads[name], numerical_grad(loss, p)) < 1e-6, name
    assert max_rel_error(dx, numerical_grad(loss, x)) < 1e-6
    assert max_rel_error(dh0, numerical_grad(loss, h0)) < 1e-6
    if lengths is not None:  # a padded step changes nothing: its input gets no gradient
        assert np.all(dx[1, 2:] == 0) and np.all(dx[2] == 0)


def test_rnn_variable_lengths_equal_separate_runs():
    rng = np.random.default_rng(3)
    rnn = nn.RNN(3, 5, rng=2, dtype=np.float64)
    x = rng.standard_normal((2, 6, 3))
    (outs, last), _ = rnn.forward(x, lengths=np.array([6, 4]))
    (_, last_short), _ = rnn.forward(x[1:, :4])
    np.testing.assert_allclose(last[1], last_short[0], rtol=1e-13, atol=1e-13)
    np.testing.assert_array_equal(outs[1, 4:], np.stack([last[1], last[1]]))


def test_rnn_step_equals_sequence():
    rng = np.random.default_rng(4)
    rnn = nn.RNN(3, 4, rng=5, dtype=np.float64)
    x = rng.standard_normal((2, 3, 3))
    (outs, _), _ = rnn.forward(x)
    h = np.zeros((2, 4))
    for t in range(3):
        h = rnn.step(x[:, t], h)
        np.testing.assert_allclose(h, outs[:, t], rtol=1e-14, atol=1e-14)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_rnn_matches_torch(dtype):
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    B, T, d_in, H = 3, 7, 5, 8
    tdtype = torch.float64 if dtype == np.float64 else torch.float32
    module = torch.nn.RNN(d_in, H, batch_first=True).to(tdtype)
    rnn = nn.RNN.from_torch(module, dtype=dtype)
    rng = np.random.default_rng(6)
    x = rng.standard_normal((B, T, d_in)).astype(dtype)
    h0 = rng.standard_normal((B, H)).astype(dtype)
    r_out = rng.standard_normal((B, T, H)).astype(dtype)
    r_last = rng.standard_normal((B, H)).astype(dtype)

    xt = torch.tensor(x, requires_grad=True)
    h0t = torch.tensor(h0[None], requires_grad=True)
    outs_t, last_t = module(xt, h0t)
    (outs_t * torch.tensor(r_out)).sum().add((last_t[0] * torch.tensor(r_last)).sum()).backward()

    _, dx, dh0, grads = _loss_and_grads(rnn, x, h0, None, r_out, r_last)
    (outs, last), _ = rnn.forward(x, h0)
    tol = 1e-10 if dtype == np.float64 else 2e-5
    assert max_rel_error(outs, outs_t.detach().numpy()) < tol
    assert max_rel_error(last, last_t[0].detach().numpy()) < tol
    assert max_rel_error(dx, xt.grad.numpy()) < tol
    assert max_rel_error(dh0, h0t.grad[0].numpy()) < tol
    for ours, theirs, transpose in (("w_ih", "weight_ih_l0", True), ("w_hh", "weight_hh_l0", True),
                                    ("b_ih", "bias_ih_l0", False), ("b_hh", "bias_hh_l0", False)):
        g = getattr(module, theirs).grad.numpy()
        assert max_rel_error(grads[ours], g.T if transpose else g) < tol, ours


def test_rnn_bad_inputs():
    rnn = nn.RNN(3, 4, rng=0)
    with pytest.raises(ValueError, match="d_hidden"):
        nn.RNN(3, 0)
    with pytest.raises(ValueError, match=r"x must have shape \(B, T, 3\)"):
        rnn.forward(np.zeros((5, 3), np.float32))
    with pytest.raises(ValueError, match="last dim must be 3"):
        rnn.forward(np.zeros((1, 5, 2), np.float32))
    with pytest.raises(ValueError, match="lengths"):
        rnn.forward(np.zeros((2, 5, 3), np.float32), lengths=np.array([6, 1]))
    with pytest.raises(TypeError, match="lengths must be integers"):
        rnn.forward(np.zeros((2, 5, 3), np.float32), lengths=np.array([1.0, 1.0]))


def test_rnn_from_torch_refuses_relu():
    torch = pytest.importorskip("torch")
    with pytest.raises(ValueError, match="nonlinearity='tanh'"):
        nn.RNN.from_torch(torch.nn.RNN(3, 4, nonlinearity="relu"))


def test_rnn_forgets_an_early_input_as_steps_pass():
    """The fade the lesson names, at initialisation: the gradient of the last state with
    respect to an input shrinks the further back the input lies (tanh' ≤ 1 and a W_hh of
    spectral radius < 1 multiply it once per later step)."""
    rng = np.random.default_rng(7)
    rnn = nn.RNN(4, 16, rng=8, dtype=np.float64)
    x = rng.standard_normal((64, 40, 4))
    (_, last), ctx = rnn.forward(x)
    (dx, _), _ = rnn.backward(ctx, (None, rng.standard_normal(last.shape)))
    reach = np.abs(dx).mean(axis=(0, 2))  # (T,) how much each step's input moves the end
    assert reach[-1] > 100 * reach[-20] > 100 * 100 * reach[0]
