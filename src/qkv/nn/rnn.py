"""RNN: the plain (Elman) recurrent layer, tanh, forward and backward — the net the lesson means
by "a recurrent chain", whose memory of an early input fades as more steps pass.

One step, in the lesson's row convention (``x W``)::

    h' = tanh(x_t W_ih + b_ih + h W_hh + b_hh)          (B, H)

No gate decides what to keep: every step rewrites the whole state through the same W_hh and
tanh, so an input's trace is multiplied by W_hh and tanh's slope (< 1) once per later step —
the fade the GRU's update gate (:mod:`qkv.nn.gru`, ``h' = (1 − z) n + z h``) was made to stop.

This is exactly ``torch.nn.RNN`` (one layer, ``nonlinearity="tanh"``, ``batch_first=True``)
with ``W_ih = weight_ih_l0.T`` and ``W_hh = weight_hh_l0.T``. ``lengths`` works as in
:class:`qkv.nn.GRU`: a sequence's state stops changing after its last real step.
"""

from __future__ import annotations

import numpy as np

from ._base import Layer, as_input, as_rng, check_dtype, check_sequence, positive_int


class RNN(Layer):
    """A one-layer tanh RNN over ``(B, T, d_in)`` sequences.

    Params (row convention): ``w_ih (d_in, H)``, ``w_hh (H, H)``, ``b_ih (H,)``, ``b_hh (H,)``.
    Initialised U(−1/√H, 1/√H) like torch.

    Calls: ``rnn(x, h0=None, lengths=None)`` with x ``(B, T, d_in)``, h0 ``(B, H)`` (default
    zeros), lengths ``(B,)`` ints in [0, T] → ``(outputs (B, T, H), h_last (B, H))``.
    ``forward`` returns ``((outputs, h_last), ctx)``; ``backward(ctx, (d_outputs, d_h_last))``
    (either may be None) returns ``((dx, dh0), grads)``.
    """

    def __init__(self, d_in: int, d_hidden: int, rng=None, dtype=np.float32):
        self.d_in = positive_int(d_in, "d_in", "RNN")
        self.d_hidden = positive_int(d_hidden, "d_hidden", "RNN")
        self.dtype = check_dtype(dtype)
        gen = as_rng(rng)
        bound = 1.0 / np.sqrt(self.d_hidden)
        H = self.d_hidden

        def init(*shape):
            return gen.uniform(-bound, bound, shape).astype(self.dtype)

        self.params = {"w_ih": init(self.d_in, H), "w_hh": init(H, H), "b_ih": init(H),
                       "b_hh": init(H)}

    def step(self, x_t, h):
        """One step for inference: x_t ``(B, d_in)``, h ``(B, H)`` → h' ``(B, H)``."""
        x_t = as_input(x_t, "x_t", "RNN.step", self.d_in, self.dtype)
        h = as_input(h, "h", "RNN.step", self.d_hidden, self.dtype)
        p = self.params
        return np.tanh(x_t @ p["w_ih"] + p["b_ih"] + h @ p["w_hh"] + p["b_hh"])

    def _check(self, x, h0, lengths):
        return check_sequence(x, h0, lengths, "RNN", self.d_in, self.d_hidden, self.dtype)

    def forward(self, x, h0=None, lengths=None):
        x, h0, lengths = self._check(x, h0, lengths)
        B, T, _ = x.shape
        p = self.params
        # the input part of every step at once; only h W_hh has to wait for the previous step
        a_all = (x.reshape(B * T, -1) @ p["w_ih"] + (p["b_ih"] + p["b_hh"])).reshape(B, T, -1)
        outs = np.empty((B, T, self.d_hidden), x.dtype)
        h = h0
        for t in range(T):
            h_new = np.tanh(a_all[:, t] + h @ p["w_hh"])
            if lengths is not None:
                h_new = np.where((t < lengths)[:, None], h_new, h)
            h = outs[:, t] = h_new
        return (outs, h), (x, h0, lengths, outs)

    def backward(self, ctx, dy):
        x, h0, lengths, outs = ctx
        d_out, d_last = dy
        B, T, _ = x.shape
        H = self.d_hidden
        w_hh = self.params["w_hh"]
        dh = np.zeros((B, H), x.dtype) if d_last is None else np.asarray(d_last, x.dtype).copy()
        dpre_all = np.empty((B, T, H), x.dtype)  # ∂ of the pre-activation at every step
        for t in range(T - 1, -1, -1):
            if d_out is not None:
                dh = dh + d_out[:, t]
            if lengths is not None:
                live = (t < lengths)[:, None]
                dh_cell = np.where(live, dh, 0.0)  # padded steps: h' = h, the cell is skipped
                dh_skip = dh - dh_cell
            else:
                dh_cell, dh_skip = dh, 0.0
            h = outs[:, t]
            dpre = dh_cell * (1.0 - h * h)  # through tanh: the factor < 1 that fades memory
            dpre_all[:, t] = dpre
            dh = dpre @ w_hh.T + dh_skip  # ∂h_{t−1}
        flat = dpre_all.reshape(B * T, H)
        prev = np.concatenate([h0[:, None], outs[:, :-1]], axis=1).reshape(B * T, H)
        db = flat.sum(axis=0)
        grads = {"w_ih": x.reshape(B * T, -1).T @ flat, "w_hh": prev.T @ flat,
                 "b_ih": db, "b_hh": db.copy()}
        grads = {k: g.astype(self.dtype, copy=False) for k, g in grads.items()}
        dx = (flat @ self.params["w_ih"].T).reshape(B, T, -1)
        return (dx, dh), grads

    @classmethod
    def from_torch(cls, module, dtype=np.float32) -> RNN:
        """A copy of a one-layer, unidirectional, tanh ``torch.nn.RNN`` with biases."""
        if (module.num_layers != 1 or module.bidirectional or not module.bias
                or module.nonlinearity != "tanh"):
            raise ValueError("RNN.from_torch: needs num_layers=1, bidirectional=False, "
                             "bias=True, nonlinearity='tanh'")
        rnn = cls(module.input_size, module.hidden_size, rng=0, dtype=dtype)
        for ours, theirs, transpose in (("w_ih", "weight_ih_l0", True),
                                        ("w_hh", "weight_hh_l0", True),
                                        ("b_ih", "bias_ih_l0", False),
                                        ("b_hh", "bias_hh_l0", False)):
            w = getattr(module, theirs).detach().cpu().numpy()
            rnn.params[ours][...] = w.T if transpose else w
        return rnn

    def __repr__(self):
        return f"RNN({self.d_in}, {self.d_hidden})"
