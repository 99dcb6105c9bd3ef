"""A selective state-space model: Mamba's S6 scan and the Mamba block around it, forward and
backward in NumPy (Gu & Dao 2023, "Mamba: Linear-Time Sequence Modeling with Selective State
Spaces", §3 and Algorithm 2).

Per channel d of the input x ``(B, T, D)`` a state of N numbers is carried along the sequence.
A is diagonal, real and negative (S4D-real initialisation A_n = −(n + 1), stored as
``a_log = log(−A)``); the step Δ, the input map B and the read-out C depend on the input at
each step — the *selection* that lets the model decide what to write into its state and what
to forget::

    Δ_t = softplus(x_t W_Δ + b_Δ)          (B, T, D)    one step size per channel
    B_t = x_t W_B,   C_t = x_t W_C          (B, T, N)    shared by the channels
    Ā_t = exp(Δ_t A)                         (B, T, D, N) the decay, in (0, 1)
    B̄_t = Δ_t B_t                            (B, T, D, N) (the paper's simplified discretisation)
    h_t = Ā_t ⊙ h_{t−1} + B̄_t x_t            (B, T, D, N) h_{−1} = 0
    y_t = C_t · h_t + D ⊙ x_t                (B, T, D)

The state h_t ``(D, N)`` per sequence has the same size whatever T is: everything the layer
knows about the past must fit in it. Time is O(T·D·N); ``forward`` keeps every h_t for the
backward (O(T·D·N) memory), calling the layer (inference) keeps one block of steps' states at
a time (O(block·D·N), plus x and y). Mamba's own code projects Δ through a
low-rank map (dt_rank = ⌈d_model/16⌉); here W_Δ is a full ``(D, D)`` matrix.

The recurrence is solved by :func:`linear_scan`, a chunked scan: all chunks of L steps are
scanned at once from a zero state (L vectorised steps over chunks, batch, channels and states),
then joined left to right by the state each carries. The backward runs the
same scan in reverse time for ∂h (∂h_t = C_t ∂y_t + Ā_{t+1} ∂h_{t+1}).

:class:`MambaBlock` wraps the scan as the paper's block: input projection to (x, z), a short
causal depthwise convolution on x, SiLU, the S6 scan, gating by SiLU(z), output projection.
"""

from __future__ import annotations

import numpy as np

from ._base import (
    Layer,
    as_input,
    as_rng,
    check_dtype,
    matmul_rows,
    outer_sum,
    positive_int,
    prefixed,
    sum_to_last,
)
from .linear import Linear


def _sigmoid(x: np.ndarray) -> np.ndarray:
    # σ(x) = ½(1 + tanh(x/2)): the same function, and no overflow for large |x|.
    return 0.5 * (1.0 + np.tanh(0.5 * x))


def softplus(x: np.ndarray) -> np.ndarray:
    """log(1 + eˣ), without overflow for large x."""
    return np.logaddexp(0.0, x).astype(x.dtype, copy=False)


def silu(x: np.ndarray) -> np.ndarray:
    """x · σ(x) (Swish), Mamba's activation."""
    return x * _sigmoid(x)


def silu_backward(x: np.ndarray, dy: np.ndarray) -> np.ndarray:
    s = _sigmoid(x)
    return dy * s * (1.0 + x * (1.0 - s))


def linear_scan(a: np.ndarray, u: np.ndarray, h0: np.ndarray | None = None,
                chunk: int | None = None) -> np.ndarray:
    """All states of h_t = a_t ⊙ h_{t−1} + u_t along axis 1 (time), h_{−1} = ``h0`` (or 0).

    Shapes: a, u ``(B, T, ...)``; h0 ``(B, ...)`` → h ``(B, T, ...)``.

    A chunked scan: time is cut into chunks of L = ``chunk`` steps (default ⌈√T⌉). First
    every chunk is scanned from a zero state, all chunks at once (L vectorised steps, each over
    all chunks, the batch and the trailing axes), keeping the product of the decays since the
    chunk began; then the chunks are joined left to right (one step per chunk carries the state
    across), and each chunk's incoming state, times those products, is added in one pass. So
    the Python loop runs L + T/L ≈ 2√T times, not T, and no step is ever a Python loop over
    elements. Only products of decays in (0, 1] are formed, never their inverses: nothing
    overflows however strong the decay (unlike the cumulative sum of log-decays).

    (A Hillis–Steele doubling scan inside the chunks was tried and measured 4× slower here:
    NumPy is memory-bound on these arrays and doubling reads them log₂ L times.)
    """
    if a.shape != u.shape or a.ndim < 2:
        raise ValueError(f"linear_scan: a and u must have one shape (B, T, ...), got {a.shape} "
                         f"and {u.shape}")
    Bsz, T = a.shape[:2]
    rest = a.shape[2:]
    if T == 0:
        return np.zeros_like(u)
    L = min(T, int(np.ceil(np.sqrt(T))) if chunk is None
            else positive_int(chunk, "chunk", "linear_scan"))
    n_chunks = -(-T // L)
    pad = n_chunks * L - T
    if pad:  # decay 1 and input 0 past the end: the padded states are cut off below
        a = np.concatenate([a, np.ones((Bsz, pad, *rest), a.dtype)], axis=1)
        u = np.concatenate([u, np.zeros((Bsz, pad, *rest), u.dtype)], axis=1)
    h = u.reshape(Bsz, n_chunks, L, *rest).copy()  # (B, C, L, ...) states from a zero start
    prod = a.reshape(Bsz, n_chunks, L, *rest).copy()  # (B, C, L, ...) decays since the start
    for t in range(1, L):  # every chunk at once
        h[:, :, t] += prod[:, :, t] * h[:, :, t - 1]
        prod[:, :, t] *= prod[:, :, t - 1]
    if n_chunks > 1 or h0 is not None:
        incoming = np.empty((Bsz, n_chunks, *rest), h.dtype)  # (B, C, ...) state before each
        state = (np.zeros((Bsz, *rest), h.dtype) if h0 is None
                 else np.asarray(h0, dtype=h.dtype))
        for c in range(n_chunks):
            incoming[:, c] = state
            state = h[:, c, -1] + prod[:, c, -1] * state
        h += prod * incoming[:, :, None]
    return h.reshape(Bsz, n_chunks * L, *rest)[:, :T]


def _read(h: np.ndarray, c: np.ndarray) -> np.ndarray:
    """Σ_n h[..., d, n] c[..., n]: h ``(B, T, D, N)``, c ``(B, T, N)`` → ``(B, T, D)``, as
    batched matrix–vector products (4× faster than the einsum here)."""
    return np.matmul(h, c[..., None])[..., 0]


def _check_seq(x, d: int, owner: str, dtype) -> np.ndarray:
    x = as_input(x, "x", owner, d, dtype)
    if x.ndim != 3:
        raise ValueError(f"{owner}: x must have shape (B, T, {d}) — batch, steps, channels — "
                         f"got {x.shape}; add a batch axis with x[None] for one sequence")
    return x


class SelectiveSSM(Layer):
    """Mamba's selective scan S6 over ``(B, T, D)`` sequences with N states per channel.

    Params: ``w_delta (D, D)``, ``b_delta (D,)``, ``w_b (D, N)``, ``w_c (D, N)``,
    ``a_log (D, N)`` (A = −exp(a_log), initialised to A_n = −(n + 1)), ``d_skip (D,)``
    (ones). Δ's bias is initialised as in Mamba: softplus(b_Δ) log-uniform in
    [dt_min, dt_max] = [0.001, 0.1], so the state starts out remembering over ~10–1000 steps.

    Calls: ``ssm(x)`` with x ``(B, T, D)`` → y ``(B, T, D)``; ``forward(x)`` → ``(y, ctx)``;
    ``backward(ctx, dy)`` → ``(dx, grads)``. ``states(x)`` → every h_t ``(B, T, D, N)``.
    ``chunk``: the scan's chunk length (default ⌈√T⌉; the result does not depend on it).
    """

    def __init__(self, d: int, n_state: int = 16, rng=None, dtype=np.float32, *,
                 chunk: int | None = None, dt_min: float = 1e-3, dt_max: float = 0.1):
        owner = "SelectiveSSM"
        self.d = positive_int(d, "d", owner)
        self.n_state = positive_int(n_state, "n_state", owner)
        self.chunk = None if chunk is None else positive_int(chunk, "chunk", owner)
        self.dtype = check_dtype(dtype)
        if not 0 < dt_min <= dt_max:
            raise ValueError(f"{owner}: need 0 < dt_min ≤ dt_max, got dt_min={dt_min!r}, "
                             f"dt_max={dt_max!r}")
        gen = as_rng(rng)
        D, N = self.d, self.n_state

        def init(d_in, d_out):
            return (gen.standard_normal((d_in, d_out)) / np.sqrt(d_in)).astype(self.dtype)

        dt = np.exp(gen.uniform(np.log(dt_min), np.log(dt_max), D))  # softplus(b_Δ) = dt
        self.params = {
            "w_delta": (init(D, D) * 0.1).astype(self.dtype),  # Δ starts near softplus(b_Δ)
            "b_delta": (dt + np.log(-np.expm1(-dt))).astype(self.dtype),  # softplus⁻¹(dt)
            "w_b": init(D, N),
            "w_c": init(D, N),
            "a_log": np.log(np.tile(np.arange(1, N + 1, dtype=np.float64), (D, 1))
                            ).astype(self.dtype),  # (D, N): A_n = −(n + 1)
            "d_skip": np.ones(D, dtype=self.dtype),
        }

    @property
    def A(self) -> np.ndarray:
        """The diagonal of A per channel, ``(D, N)``, all negative."""
        return -np.exp(self.params["a_log"])

    def _inputs(self, x):
        """Δ, B, C, Ā and the scan's input B̄x from x ``(B, T, D)``."""
        p = self.params
        pre = matmul_rows(x, p["w_delta"]) + p["b_delta"]  # (B, T, D)
        delta = softplus(pre)  # (B, T, D)
        bm = matmul_rows(x, p["w_b"])  # (B, T, N)
        cm = matmul_rows(x, p["w_c"])  # (B, T, N)
        a_bar = np.exp(delta[..., None] * self.A)  # (B, T, D, N)
        u = (delta * x)[..., None] * bm[:, :, None, :]  # (B, T, D, N): B̄_t x_t
        return pre, delta, bm, cm, a_bar, u

    def selection(self, x) -> dict[str, np.ndarray]:
        """What the layer selects at each step of x ``(B, T, D)``, the numbers its scan uses:
        ``delta`` Δ_t ``(B, T, D)``, ``decay`` Ā_t = exp(Δ_t A) ``(B, T, D, N)`` (the share of
        each state number kept from the step before: near 1, the past is kept and little is
        written; near 0, it is forgotten and Δ_t B_t x_t written over it), ``b`` B_t and
        ``c`` C_t ``(B, T, N)``."""
        x = _check_seq(x, self.d, "SelectiveSSM", self.dtype)
        _, delta, bm, cm, a_bar, _ = self._inputs(x)
        return {"delta": delta, "decay": a_bar, "b": bm, "c": cm}

    def states(self, x) -> np.ndarray:
        """Every state h_t ``(B, T, D, N)`` of the scan over x ``(B, T, D)``."""
        x = _check_seq(x, self.d, "SelectiveSSM", self.dtype)
        _, _, _, _, a_bar, u = self._inputs(x)
        return linear_scan(a_bar, u, chunk=self.chunk)

    def __call__(self, x, block: int = 256):
        """Inference: y ``(B, T, D)`` of :meth:`forward`, computed ``block`` steps at a time
        with the state carried between blocks, so memory holds one block's states
        ``(B, block, D, N)`` — not all T of them — and grows with T only through x and y."""
        x = _check_seq(x, self.d, "SelectiveSSM", self.dtype)
        block = positive_int(block, "block", "SelectiveSSM")
        y = np.empty_like(x)
        carry = None
        for t0 in range(0, x.shape[1], block):
            xb = x[:, t0: t0 + block]
            _, _, _, cm, a_bar, u = self._inputs(xb)
            h = linear_scan(a_bar, u, carry, chunk=self.chunk)  # (B, block, D, N)
            y[:, t0: t0 + block] = _read(h, cm) + xb * self.params["d_skip"]
            carry = h[:, -1].copy()  # (B, D, N): all that passes to the next block
            del h, a_bar, u
        return y

    def forward(self, x):
        x = _check_seq(x, self.d, "SelectiveSSM", self.dtype)
        pre, delta, bm, cm, a_bar, u = self._inputs(x)
        h = linear_scan(a_bar, u, chunk=self.chunk)  # (B, T, D, N)
        y = _read(h, cm) + x * self.params["d_skip"]  # (B, T, D)
        return y, (x, pre, delta, bm, cm, a_bar, h)

    def backward(self, ctx, dy):
        x, pre, delta, bm, cm, a_bar, h = ctx
        p = self.params
        dy = np.asarray(dy, dtype=x.dtype)
        A = self.A.astype(x.dtype, copy=False)  # (D, N)
        # y = C·h + D ⊙ x
        d_cm = np.matmul(dy[:, :, None, :], h)[:, :, 0]  # (B, T, N): Σ_d ∂y h
        d_skip = sum_to_last(dy * x)
        dx = dy * p["d_skip"]
        g = dy[..., None] * cm[:, :, None, :]  # (B, T, D, N): ∂y/∂h_t's part of ∂h_t
        # ∂h_t = g_t + Ā_{t+1} ∂h_{t+1}: the same scan, in reverse time
        a_next = np.concatenate([a_bar[:, 1:], np.zeros_like(a_bar[:, :1])], axis=1)
        dh = linear_scan(a_next[:, ::-1], g[:, ::-1], chunk=self.chunk)[:, ::-1]
        h_prev = np.concatenate([np.zeros_like(h[:, :1]), h[:, :-1]], axis=1)
        d_dA = dh * h_prev * a_bar  # (B, T, D, N): ∂ of ΔA, through Ā = exp(ΔA)
        d_delta = (d_dA * A).sum(axis=-1)  # (B, T, D)
        dA = np.einsum("btdn,btd->dn", d_dA, delta)  # (D, N)
        # u = (Δ x) ⊗ B: ∂(Δx) = Σ_n ∂u B,  ∂B = Σ_d ∂u (Δx)
        s = delta * x
        ds = _read(dh, bm)  # (B, T, D)
        d_bm = np.matmul(s[:, :, None, :], dh)[:, :, 0]  # (B, T, N)
        d_delta += ds * x
        dx += ds * delta
        d_pre = d_delta * _sigmoid(pre)  # softplus' = σ
        dx += matmul_rows(d_pre, p["w_delta"].T)
        dx += matmul_rows(d_bm, p["w_b"].T)
        dx += matmul_rows(d_cm, p["w_c"].T)
        grads = {"w_delta": outer_sum(x, d_pre), "b_delta": sum_to_last(d_pre),
                 "w_b": outer_sum(x, d_bm), "w_c": outer_sum(x, d_cm),
                 "a_log": dA * A,  # A = −exp(a_log) ⇒ ∂A/∂a_log = A
                 "d_skip": d_skip}
        return dx, {k: g.astype(self.dtype, copy=False) for k, g in grads.items()}

    def __repr__(self):
        return f"SelectiveSSM(d={self.d}, n_state={self.n_state})"


class CausalConv(Layer):
    """A causal depthwise convolution over time: y_t = Σ_{j<K} w_j ⊙ x_{t−j} + b (x_{<0} = 0).

    Params: ``weight (K, D)`` (w_0 multiplies the current step), ``bias (D,)``.
    Shapes: x ``(B, T, D)`` → y ``(B, T, D)``. torch's ``nn.Conv1d(D, D, K, groups=D,
    padding=K − 1)`` truncated to the first T outputs has ``weight[c, 0, k] = w_{K−1−k}[c]``.
    """

    def __init__(self, d: int, kernel: int = 4, rng=None, dtype=np.float32):
        self.d = positive_int(d, "d", "CausalConv")
        self.kernel = positive_int(kernel, "kernel", "CausalConv")
        self.dtype = check_dtype(dtype)
        bound = 1.0 / np.sqrt(self.kernel)  # torch's U(±1/√fan_in), fan_in = K per channel
        gen = as_rng(rng)
        self.params = {"weight": gen.uniform(-bound, bound, (self.kernel, self.d)
                                             ).astype(self.dtype),
                       "bias": gen.uniform(-bound, bound, self.d).astype(self.dtype)}

    def forward(self, x):
        x = _check_seq(x, self.d, "CausalConv", self.dtype)
        w = self.params["weight"]
        T = x.shape[1]
        y = np.broadcast_to(self.params["bias"], x.shape).astype(x.dtype)  # (B, T, D)
        for j in range(min(self.kernel, T)):  # K ≤ 4 shifted adds, each over all of (B, T, D)
            y[:, j:] += w[j] * x[:, : T - j]
        return y, x

    def backward(self, x, dy):
        w = self.params["weight"]
        T = x.shape[1]
        dx = np.zeros_like(x)
        dw = np.zeros_like(w)
        for j in range(min(self.kernel, T)):
            dx[:, : T - j] += w[j] * dy[:, j:]
            dw[j] = (dy[:, j:] * x[:, : T - j]).sum(axis=(0, 1))
        return dx, {"weight": dw, "bias": sum_to_last(dy).astype(self.dtype, copy=False)}

    def __repr__(self):
        return f"CausalConv({self.d}, kernel={self.kernel})"


class MambaBlock(Layer):
    """The Mamba block (Gu & Dao 2023, Fig. 3): ``(B, T, d_model) → (B, T, d_model)``.

        x, z = split(u W_in)                    (B, T, E) each, E = expand · d_model
        x    = SiLU(conv(x))                    short causal depthwise conv (kernel 4)
        y    = S6(x) ⊙ SiLU(z)                  the selective scan, gated
        out  = y W_out                          (B, T, d_model)

    Params: ``in_proj.weight (d_model, 2E)``, ``conv.weight (K, E)``, ``conv.bias (E,)``,
    ``ssm.*`` (see :class:`SelectiveSSM`, D = E), ``out_proj.weight (E, d_model)``. No biases
    on the projections (as in Mamba). The residual and the norm around it are the caller's.
    """

    def __init__(self, d_model: int, n_state: int = 16, expand: int = 1, kernel: int = 4,
                 rng=None, dtype=np.float32, *, chunk: int | None = None):
        owner = "MambaBlock"
        self.d_model = positive_int(d_model, "d_model", owner)
        self.expand = positive_int(expand, "expand", owner)
        self.d_inner = self.d_model * self.expand
        gen = as_rng(rng)
        E = self.d_inner
        self.in_proj = Linear(self.d_model, 2 * E, bias=False, rng=gen, dtype=dtype)
        self.conv = CausalConv(E, kernel, rng=gen, dtype=dtype)
        self.ssm = SelectiveSSM(E, n_state, rng=gen, dtype=dtype, chunk=chunk)
        self.out_proj = Linear(E, self.d_model, bias=False, rng=gen, dtype=dtype)
        self.parts = {"in_proj": self.in_proj, "conv": self.conv, "ssm": self.ssm,
                      "out_proj": self.out_proj}
        self.params = {n: a for name, layer in self.parts.items()
                       for n, a in prefixed(name, layer.params).items()}

    @property
    def n_state(self) -> int:
        return self.ssm.n_state

    def __call__(self, x):
        """Inference: :meth:`forward`'s output without keeping the states for a backward
        (the scan runs block by block, see :meth:`SelectiveSSM.__call__`)."""
        x = _check_seq(x, self.d_model, "MambaBlock", self.in_proj.dtype)
        xz = self.in_proj(x)  # (B, T, 2E)
        E = self.d_inner
        xs = silu(self.conv(np.ascontiguousarray(xz[..., :E])))
        return self.out_proj(self.ssm(xs) * silu(xz[..., E:]))

    def scan_input(self, x) -> np.ndarray:
        """What the block hands its S6 scan, SiLU(conv(x W_in's x half)) ``(B, T, E)``."""
        x = _check_seq(x, self.d_model, "MambaBlock", self.in_proj.dtype)
        xi = self.in_proj(x)[..., : self.d_inner]
        return silu(self.conv(np.ascontiguousarray(xi)))

    def selection(self, x) -> dict[str, np.ndarray]:
        """The scan's Δ, Ā = exp(ΔA), B and C at each step of x ``(B, T, d_model)``
        (:meth:`SelectiveSSM.selection` of :meth:`scan_input`)."""
        return self.ssm.selection(self.scan_input(x))

    def forward(self, x):
        x = _check_seq(x, self.d_model, "MambaBlock", self.in_proj.dtype)
        xz, c_in = self.in_proj.forward(x)  # (B, T, 2E)
        E = self.d_inner
        xi, z = xz[..., :E], xz[..., E:]
        xc, c_conv = self.conv.forward(np.ascontiguousarray(xi))  # (B, T, E)
        xs = silu(xc)
        ys, c_ssm = self.ssm.forward(xs)  # (B, T, E)
        gate = silu(z)
        out, c_out = self.out_proj.forward(ys * gate)  # (B, T, d_model)
        return out, (c_in, c_conv, xc, c_ssm, ys, z, gate, c_out)

    def backward(self, ctx, dy):
        c_in, c_conv, xc, c_ssm, ys, z, gate, c_out = ctx
        dg, g_out = self.out_proj.backward(c_out, dy)  # (B, T, E)
        dys = dg * gate
        dz = silu_backward(z, dg * ys)
        dxs, g_ssm = self.ssm.backward(c_ssm, dys)
        dxc = silu_backward(xc, dxs)
        dxi, g_conv = self.conv.backward(c_conv, dxc)
        dx, g_in = self.in_proj.backward(c_in, np.concatenate([dxi, dz], axis=-1))
        grads = {**prefixed("in_proj", g_in), **prefixed("conv", g_conv),
                 **prefixed("ssm", g_ssm), **prefixed("out_proj", g_out)}
        return dx, grads

    def __repr__(self):
        return (f"MambaBlock(d_model={self.d_model}, n_state={self.n_state}, "
                f"expand={self.expand}, kernel={self.conv.kernel})")
