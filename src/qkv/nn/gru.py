"""GRU: a gated recurrent layer over a sequence (Cho et al. 2014), forward and backward.

One step, with torch's gate order (r, z, n) and the lesson's row convention (``x W``)::

    a   = x_t W_ih + b_ih                       (B, 3H)   input part of all three gates
    c   = h W_hh + b_hh                         (B, 3H)   recurrent part
    r   = σ(a_r + c_r)                          reset gate
    z   = σ(a_z + c_z)                          update gate: how much of h to keep
    n   = tanh(a_n + r ⊙ c_n)                   candidate state
    h'  = (1 − z) ⊙ n + z ⊙ h

This is exactly ``torch.nn.GRU`` (one layer, ``batch_first=True``) with
``W_ih = weight_ih_l0.T`` and ``W_hh = weight_hh_l0.T``.

Variable lengths: with ``lengths`` given, a sequence's state stops changing after its last
real step (``h' = h`` where ``t ≥ lengths[b]``), so the final state is the state after the last
real input, and the outputs at padded steps repeat it. The backward is backpropagation through
time: the steps are revisited in reverse, carrying ∂h from step t to step t − 1.
"""

from __future__ import annotations

import numpy as np

from ._base import Layer, as_input, as_rng, check_dtype, check_sequence, positive_int


def _sigmoid(x: np.ndarray) -> np.ndarray:
    # σ(x) = ½(1 + tanh(x/2)): the same function, and no overflow warning for large |x|.
    return 0.5 * (1.0 + np.tanh(0.5 * x))


class GRU(Layer):
    """A one-layer GRU over ``(B, T, d_in)`` sequences.

    Params (row convention): ``w_ih (d_in, 3H)``, ``w_hh (H, 3H)``, ``b_ih (3H,)``,
    ``b_hh (3H,)``; the 3H columns are the gates r, z, n in that order (torch's order).
    Initialised U(−1/√H, 1/√H) like torch.

    Calls: ``gru(x, h0=None, lengths=None)`` with x ``(B, T, d_in)``, h0 ``(B, H)`` (default
    zeros), lengths ``(B,)`` ints in [0, T] → ``(outputs (B, T, H), h_last (B, H))``.
    ``forward`` returns ``((outputs, h_last), ctx)``; ``backward(ctx, (d_outputs, d_h_last))``
    (either may be None) returns ``((dx, dh0), grads)``.
    """

    def __init__(self, d_in: int, d_hidden: int, rng=None, dtype=np.float32):
        self.d_in = positive_int(d_in, "d_in", "GRU")
        self.d_hidden = positive_int(d_hidden, "d_hidden", "GRU")
        self.dtype = check_dtype(dtype)
        gen = as_rng(rng)
        bound = 1.0 / np.sqrt(self.d_hidden)
        h3 = 3 * self.d_hidden

        def init(*shape):
            return gen.uniform(-bound, bound, shape).astype(self.dtype)

        self.params = {"w_ih": init(self.d_in, h3), "w_hh": init(self.d_hidden, h3),
                       "b_ih": init(h3), "b_hh": init(h3)}

    # -- one step (decoding) ----------------------------------------------------------------
    def step(self, x_t, h):
        """One step for inference: x_t ``(B, d_in)``, h ``(B, H)`` → h' ``(B, H)``."""
        x_t = as_input(x_t, "x_t", "GRU.step", self.d_in, self.dtype)
        h = as_input(h, "h", "GRU.step", self.d_hidden, self.dtype)
        p = self.params
        return self._cell(x_t @ p["w_ih"] + p["b_ih"], h)[0]

    def _cell(self, a, h):
        """The gates from the input part ``a (B, 3H)`` and the previous state ``h (B, H)``."""
        H = self.d_hidden
        c = h @ self.params["w_hh"] + self.params["b_hh"]  # (B, 3H)
        r = _sigmoid(a[:, :H] + c[:, :H])
        z = _sigmoid(a[:, H:2 * H] + c[:, H:2 * H])
        n = np.tanh(a[:, 2 * H:] + r * c[:, 2 * H:])
        return (1.0 - z) * n + z * h, (r, z, n, c[:, 2 * H:])

    # -- sequence forward / backward --------------------------------------------------------
    def _check(self, x, h0, lengths):
        return check_sequence(x, h0, lengths, "GRU", self.d_in, self.d_hidden, self.dtype)

    def forward(self, x, h0=None, lengths=None):
        x, h0, lengths = self._check(x, h0, lengths)
        B, T, _ = x.shape
        p = self.params
        a_all = (x.reshape(B * T, -1) @ p["w_ih"] + p["b_ih"]).reshape(B, T, -1)  # (B, T, 3H)
        outs = np.empty((B, T, self.d_hidden), x.dtype)
        h, gates = h0, []
        for t in range(T):
            h_new, g = self._cell(a_all[:, t], h)
            if lengths is not None:
                live = (t < lengths)[:, None]  # (B, 1): still inside the sequence
                h_new = np.where(live, h_new, h)
            gates.append(g)
            h = outs[:, t] = h_new
        return (outs, h), (x, h0, lengths, outs, gates)

    def backward(self, ctx, dy):
        x, h0, lengths, outs, gates = ctx
        d_out, d_last = dy
        B, T, _ = x.shape
        H = self.d_hidden
        p = self.params
        dh = np.zeros((B, H), x.dtype) if d_last is None else np.asarray(d_last, x.dtype).copy()
        da_all = np.empty((B, T, 3 * H), x.dtype)  # ∂ of the input part a at every step
        dc_all = np.empty((B, T, 3 * H), x.dtype)  # ∂ of the recurrent part c at every step
        for t in range(T - 1, -1, -1):
            if d_out is not None:
                dh = dh + d_out[:, t]
            h_prev = h0 if t == 0 else outs[:, t - 1]
            r, z, n, c_n = gates[t]
            if lengths is not None:
                live = (t < lengths)[:, None]
                dh_cell = np.where(live, dh, 0.0)  # padded steps: h' = h, the cell is skipped
                dh_skip = dh - dh_cell
            else:
                dh_cell, dh_skip = dh, 0.0
            # h' = (1 − z) n + z h
            dn = dh_cell * (1.0 - z)
            dz = dh_cell * (h_prev - n)
            dpre_n = dn * (1.0 - n * n)  # through tanh
            dr = dpre_n * c_n
            dpre_r = dr * r * (1.0 - r)  # through σ
            dpre_z = dz * z * (1.0 - z)
            da = np.concatenate([dpre_r, dpre_z, dpre_n], axis=1)  # (B, 3H)
            dc = np.concatenate([dpre_r, dpre_z, dpre_n * r], axis=1)  # (B, 3H)
            da_all[:, t], dc_all[:, t] = da, dc
            dh = dc @ p["w_hh"].T + dh_cell * z + dh_skip  # ∂h_{t−1}
        flat_x = x.reshape(B * T, -1)
        prev = np.concatenate([h0[:, None], outs[:, :-1]], axis=1).reshape(B * T, H)
        da_flat, dc_flat = da_all.reshape(B * T, -1), dc_all.reshape(B * T, -1)
        grads = {"w_ih": flat_x.T @ da_flat, "w_hh": prev.T @ dc_flat,
                 "b_ih": da_flat.sum(axis=0), "b_hh": dc_flat.sum(axis=0)}
        grads = {k: g.astype(self.dtype, copy=False) for k, g in grads.items()}
        dx = (da_flat @ p["w_ih"].T).reshape(B, T, -1)
        return (dx, dh), grads

    # -- torch interop ----------------------------------------------------------------------
    @classmethod
    def from_torch(cls, module, dtype=np.float32) -> GRU:
        """A copy of a one-layer, unidirectional ``torch.nn.GRU`` with biases."""
        if module.num_layers != 1 or module.bidirectional or not module.bias:
            raise ValueError("GRU.from_torch: needs num_layers=1, bidirectional=False, bias=True")
        gru = cls(module.input_size, module.hidden_size, rng=0, dtype=dtype)
        for ours, theirs, transpose in (("w_ih", "weight_ih_l0", True),
                                        ("w_hh", "weight_hh_l0", True),
                                        ("b_ih", "bias_ih_l0", False),
                                        ("b_hh", "bias_hh_l0", False)):
            w = getattr(module, theirs).detach().cpu().numpy()
            gru.params[ours][...] = w.T if transpose else w
        return gru

    def __repr__(self):
        return f"GRU({self.d_in}, {self.d_hidden})"
