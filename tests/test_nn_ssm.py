"""qkv.nn's selective state-space model (Mamba's S6 and block): the chunked scan against the
step-by-step recurrence, every gradient against central finite differences (float64) and
against torch autograd of the same equations written here, shapes, and bad input."""

from __future__ import annotations

import numpy as np
import pytest

from qkv.nn import CausalConv, MambaBlock, SelectiveSSM, linear_scan
from qkv.nn.gradcheck import max_rel_error, numerical_grad

torch = pytest.importorskip("torch")

# float64 central differences with h = 1e-6 on O(1) losses: error ~1e-9 (gradcheck.py)
FD_TOL = 1e-6
F64_TOL = 1e-10  # the same float64 arithmetic in two libraries, a few hundred roundings apart


def recurrence(a, u, h0=None):
    """h_t = a_t h_{t−1} + u_t, one step at a time in float64: the oracle of linear_scan."""
    h = np.zeros_like(u[:, 0]) if h0 is None else h0.astype(np.float64)
    out = []
    for t in range(a.shape[1]):
        h = a[:, t] * h + u[:, t]
        out.append(h)
    return np.stack(out, 1)


@pytest.mark.parametrize("T", [1, 2, 7, 16, 37])
@pytest.mark.parametrize("chunk", [None, 1, 3, 16, 64])
def test_linear_scan_equals_the_recurrence_for_any_chunk(T, chunk):
    rng = np.random.default_rng(T)
    a = rng.uniform(0.0, 1.0, (2, T, 3, 4))
    u = rng.standard_normal((2, T, 3, 4))
    h0 = rng.standard_normal((2, 3, 4))
    for start in (None, h0):
        want = recurrence(a, u, start)
        got = linear_scan(a, u, start, chunk=chunk)
        assert got.shape == want.shape
        assert np.abs(got - want).max() <= 1e-13 * max(1.0, np.abs(want).max())


def test_linear_scan_does_not_overflow_under_strong_decay():
    # decays of e^-200 per step: the cumulative-sum-of-logs trick would form e^+thousands
    a = np.full((1, 50, 2), np.exp(-200.0))
    u = np.ones((1, 50, 2))
    h = linear_scan(a, u, chunk=10)
    assert np.isfinite(h).all() and np.allclose(h, 1.0)


def test_linear_scan_refuses_mismatched_shapes():
    with pytest.raises(ValueError, match=r"a and u must have one shape \(B, T, ...\)"):
        linear_scan(np.ones((1, 4, 2)), np.ones((1, 5, 2)))
    with pytest.raises(ValueError, match="chunk must be a positive int"):
        linear_scan(np.ones((1, 4, 2)), np.ones((1, 4, 2)), chunk=0)


def fd_check(layer, x, rng):
    """Every gradient of Σ layer(x) ⊙ R against central differences."""
    y, ctx = layer.forward(x)
    R = rng.standard_normal(y.shape)
    dx, grads = layer.backward(ctx, R)
    assert set(grads) == set(layer.params)

    def loss():
        return float((layer.forward(x)[0] * R).sum())

    assert max_rel_error(dx, numerical_grad(loss, x)) < FD_TOL
    for name, p in layer.params.items():
        assert grads[name].shape == p.shape and grads[name].dtype == p.dtype
        assert max_rel_error(grads[name], numerical_grad(loss, p)) < FD_TOL, name


def test_selective_ssm_gradients_match_finite_differences():
    rng = np.random.default_rng(0)
    layer = SelectiveSSM(5, 3, rng=1, dtype=np.float64, chunk=3)
    for name in ("w_b", "w_c"):  # larger B, C: the state's part of y is not a rounding error
        layer.params[name] *= 3
    fd_check(layer, rng.standard_normal((2, 8, 5)), rng)


def test_causal_conv_and_mamba_block_gradients_match_finite_differences():
    rng = np.random.default_rng(1)
    fd_check(CausalConv(3, 4, rng=2, dtype=np.float64), rng.standard_normal((2, 6, 3)), rng)
    fd_check(MambaBlock(4, 3, expand=2, rng=3, dtype=np.float64, chunk=4),
             rng.standard_normal((2, 7, 4)), rng)


# -- torch: the same equations, differentiated by autograd ---------------------------------------
def torch_s6(x, p):
    """Mamba's S6 written literally in torch, one step at a time (selective_scan_ref's loop)."""
    pre = x @ p["w_delta"] + p["b_delta"]
    delta = torch.nn.functional.softplus(pre)  # (B, T, D)
    bm, cm = x @ p["w_b"], x @ p["w_c"]  # (B, T, N)
    A = -torch.exp(p["a_log"])  # (D, N)
    h = torch.zeros(x.shape[0], x.shape[2], A.shape[1], dtype=x.dtype)
    ys = []
    for t in range(x.shape[1]):
        a_bar = torch.exp(delta[:, t, :, None] * A)
        h = a_bar * h + (delta[:, t] * x[:, t])[:, :, None] * bm[:, t, None, :]
        ys.append((h * cm[:, t, None, :]).sum(-1))
    return torch.stack(ys, 1) + x * p["d_skip"]


def torch_block(x, p, kernel):
    """The Mamba block in torch: in_proj, nn.Conv1d (groups = channels, causal), SiLU, S6,
    SiLU gate, out_proj."""
    E = p["conv.bias"].shape[0]
    xz = x @ p["in_proj.weight"]
    xi, z = xz[..., :E], xz[..., E:]
    conv = torch.nn.functional.conv1d(xi.transpose(1, 2),
                                      p["conv.weight"].flip(0).T[:, None, :],
                                      p["conv.bias"], padding=kernel - 1, groups=E)
    xc = conv[..., : x.shape[1]].transpose(1, 2)
    ssm = {k[4:]: v for k, v in p.items() if k.startswith("ssm.")}
    y = torch_s6(torch.nn.functional.silu(xc), ssm) * torch.nn.functional.silu(z)
    return y @ p["out_proj.weight"]


@pytest.mark.parametrize("which", ["s6", "block"])
def test_forward_and_every_gradient_match_torch_autograd(which):
    rng = np.random.default_rng(2)
    if which == "s6":
        layer = SelectiveSSM(6, 4, rng=5, dtype=np.float64)
        x = rng.standard_normal((3, 11, 6))
    else:
        layer = MambaBlock(5, 4, expand=2, kernel=3, rng=6, dtype=np.float64)
        x = rng.standard_normal((3, 11, 5))
    y, ctx = layer.forward(x)
    dy = rng.standard_normal(y.shape)
    dx, grads = layer.backward(ctx, dy)
    tx = torch.tensor(x, requires_grad=True)
    tp = {k: torch.tensor(v, requires_grad=True) for k, v in layer.params.items()}
    ty = torch_s6(tx, tp) if which == "s6" else torch_block(tx, tp, layer.conv.kernel)
    ty.backward(torch.tensor(dy))
    assert np.abs(y - ty.detach().numpy()).max() < F64_TOL
    assert np.abs(dx - tx.grad.numpy()).max() < F64_TOL
    for name, g in grads.items():
        assert np.abs(g - tp[name].grad.numpy()).max() < F64_TOL * max(
            1.0, float(np.abs(g).max())), name


def test_float32_forward_is_the_float64_one_to_float32_rounding():
    rng = np.random.default_rng(3)
    layer64 = MambaBlock(8, 4, rng=7, dtype=np.float64)
    layer32 = MambaBlock(8, 4, rng=7, dtype=np.float32)
    x = rng.standard_normal((2, 40, 8))
    want = layer64(x)
    got = layer32(x.astype(np.float32))
    assert got.dtype == np.float32
    # 40 steps of a few float32 operations each: a few hundred ulps of the output's scale
    assert np.abs(got - want).max() < 500 * np.finfo(np.float32).eps * np.abs(want).max()


def test_inference_call_equals_forward_and_keeps_no_states():
    rng = np.random.default_rng(4)
    layer = SelectiveSSM(4, 3, rng=8, dtype=np.float64)
    x = rng.standard_normal((2, 50, 4))
    y, _ = layer.forward(x)
    for block in (1, 7, 50, 64):
        assert np.abs(layer(x, block=block) - y).max() < 1e-12
    block = MambaBlock(4, 3, rng=9, dtype=np.float64)
    assert np.abs(block(x) - block.forward(x)[0]).max() < 1e-12


def test_shapes_init_and_state_size():
    layer = SelectiveSSM(6, 4, rng=0)
    assert {k: v.shape for k, v in layer.params.items()} == {
        "w_delta": (6, 6), "b_delta": (6,), "w_b": (6, 4), "w_c": (6, 4), "a_log": (6, 4),
        "d_skip": (6,)}
    assert np.allclose(layer.A, -np.arange(1, 5)[None, :].repeat(6, 0))  # S4D-real
    dt = np.logaddexp(0, layer.params["b_delta"].astype(np.float64))
    assert (dt >= 1e-3 * 0.999).all() and (dt <= 0.1 * 1.001).all()
    x = np.random.default_rng(0).standard_normal((2, 9, 6)).astype(np.float32)
    assert layer.states(x).shape == (2, 9, 6, 4)  # (B, T, D, N): the state is D × N per step
    block = MambaBlock(8, 16, expand=2, rng=0)
    assert block(np.zeros((1, 5, 8), np.float32)).shape == (1, 5, 8)
    assert block.params["ssm.a_log"].shape == (16, 16)


def test_the_state_is_causal():
    rng = np.random.default_rng(5)
    block = MambaBlock(4, 3, rng=1, dtype=np.float64)
    x = rng.standard_normal((1, 12, 4))
    later = x.copy()
    later[:, 7:] += 1.0
    assert np.abs(block(x)[:, :7] - block(later)[:, :7]).max() == 0.0
    assert np.abs(block(x)[:, 7:] - block(later)[:, 7:]).max() > 0.0


@pytest.mark.parametrize("make, x, error, says", [
    (lambda: SelectiveSSM(4, 2), np.zeros((3, 4)), ValueError, r"x must have shape \(B, T, 4\)"),
    (lambda: SelectiveSSM(4, 2), np.zeros((1, 3, 5)), ValueError, "last dim must be 4"),
    (lambda: SelectiveSSM(4, 2), np.zeros((1, 3, 4), int), TypeError, "must be a float array"),
    (lambda: MambaBlock(4, 2), [["a"]], TypeError, "x"),
    (lambda: CausalConv(4, 2), np.zeros((2, 4)), ValueError, r"\(B, T, 4\)"),
])
def test_bad_input_is_refused_by_name(make, x, error, says):
    with pytest.raises(error, match=says):
        make()(x)


@pytest.mark.parametrize("make, says", [
    (lambda: SelectiveSSM(0, 2), "d must be a positive int"),
    (lambda: SelectiveSSM(4, 0), "n_state must be a positive int"),
    (lambda: SelectiveSSM(4, 2, dt_min=0.2, dt_max=0.1), "dt_min ≤ dt_max"),
    (lambda: MambaBlock(4, 2, expand=0), "expand must be a positive int"),
    (lambda: CausalConv(4, 0), "kernel must be a positive int"),
])
def test_bad_sizes_are_refused_by_name(make, says):
    with pytest.raises(ValueError, match=says):
        make()
