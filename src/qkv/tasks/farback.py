"""Far back: one relevant event anywhere in a long window, among more recent distractors.

The seed: "any position can attend directly to any other position in one step, with no decay
over distance — useful when a relevant piece of context (a macro print, a large block trade)
could be arbitrarily far back in the window and needs to be found on its merits, not on its
recency."

The series (``window`` steps, a trade per step; features per step, ``d_in = n_types + 3``)::

    x_t = [onehot(type_t) (n_types) , size_t , sign_t , sign_t · size_t]

Most trades are small (size in [0.1, 1)), of a random type and sign. Exactly one is a *block
trade of type 0* (size in [3, 5)) at lag L (L = 1 is the last step), L log-uniform in
[min_lag, window] (min_lag 1 by default: each doubling of the lag about equally likely, so
near events are trained on as much as far ones). The target is its sign. Between it and the
end of the window sit up to ``n_recent`` block trades of other types (sizes in [3, 8): as
large or larger, random signs) and then a small trade of type 0 — as many as there is room
for in the L − 1 later steps; ``n_anywhere`` more blocks of other types lie anywhere. So once
the event is more than ``n_recent + 1`` steps back:

- the most recent block trade is not the answer (it is a distractor, of another type);
- the most recent type-0 trade is not the answer (it is a small one, of random sign);
- the event is singled out only by the *conjunction* "type 0 and large" — its merits.

At lag 1 the event is the latest trade of every kind: every model, and every recency rule,
can be right there. Held-out scores are by lag bucket (1, 2–3, 4–7, …), with 95% Wilson
intervals and the bucket where a model falls to chance (:func:`chance_lag`).

Three models, trained the same way (same batches, Adam, steps):

- ``attention``: a learned query vector attends over the window once, through
  ``qkv.nn.MultiHeadAttention`` (learned W_Q, W_K, W_V; no positions: distance plays no
  role); a linear read-out of the attended vector gives the logits.
- ``recency``: an exponential moving average of a linear map of each step,
  Σ_t (1 − λ) λ^lag_t (x_t W), with λ = σ(θ) learned per channel, then a small MLP.
- ``gru``: the GRU of :mod:`qkv.nn` over the window; its last state feeds a linear read-out.
  ``gru_gate_bias`` > 0 starts its update gate near "keep the state" (default 0: torch's init).

One more, trained only when asked for (``OPT_IN``; ``qkv train farback --kinds ssm``), so the
three above — their generators, checkpoints and figures — are what they were without it:

- ``ssm``: a selective state-space model (:class:`qkv.nn.MambaBlock`, Mamba's S6 scan) over a
  linear embedding of each step; its output at the last step — a read of its fixed-size state,
  ``SSM_WIDTH × SSM_N_STATE`` numbers per series whatever the window — feeds a linear read-out.
  Its width is chosen so its parameters (4,500) sit between the GRU's and attention's.
- ``rnn``: a plain (Elman, tanh) RNN (:class:`qkv.nn.RNN`) over the window, no gates; its
  last state feeds a linear read-out. ``RNN_WIDTH`` units give it about the GRU's parameters
  (4,368 vs 4,386): the recurrent chain the lesson says decays, trained as the GRU is
  (``qkv train farback --kinds rnn``).
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from ..nn import (
    GRU,
    RNN,
    Linear,
    MambaBlock,
    MultiHeadAttention,
    relu,
    relu_backward,
    softmax_cross_entropy,
)
from ..nn._base import Layer, as_rng, check_dtype, positive_int, prefixed
from . import checkpoint as ckpt
from .training import cosine_lr, train_each, train_steps

KINDS = ("attention", "recency", "gru")  # the shipped run (view 8, `qkv train farback`)
OPT_IN = ("ssm", "rnn")  # trained only by name (--kinds); seeded after KINDS: KINDS unchanged
ALL_KINDS = KINDS + OPT_IN
# The state-space model's width and state size: N = 16 is Mamba's default; width 26 puts its
# parameters (4,500 with the embedding and read-out) between the GRU's (4,386) and
# attention's (4,706). Its state is 26 × 16 = 416 numbers per series (plus the convolution's
# last 3 inputs), the GRU's is 32. Constants, not config fields: the config (and so the three
# shipped checkpoints' headers) stays as it was; a checkpoint's shapes pin them.
SSM_WIDTH = 26
SSM_N_STATE = 16
# The plain RNN's units: 59 × (11 + 59 + 2) + 59 × 2 + 2 = 4,368 parameters, the GRU's budget
# (4,386) less 18 — a 60th unit would overshoot it by 132. A constant, as SSM_WIDTH is.
RNN_WIDTH = 59
SSM_CHUNK = 100  # series per forward when scoring the SSM: its states are (B, W, 26, 16)
TASK = "farback"
DATA = Path(__file__).parent / "data"
PROGRESS_PER_BUCKET = 100  # held-out series per lag bucket for the accuracy during training


@dataclass(frozen=True)
class FarbackConfig:
    window: int = 256
    n_types: int = 8
    n_recent: int = 4  # block trades of other types, more recent than the event
    n_anywhere: int = 8  # block trades of other types anywhere in the window
    min_lag: int = 1  # the event's shortest lag: 1 = the last step
    d_model: int = 32
    batch: int = 64
    steps: int = 600
    lr: float = 3e-3
    # Added to the GRU's update-gate bias at initialisation: > 0 makes it keep its state by
    # default ("remember unless told otherwise", like an LSTM's forget-gate bias of 1). 0 is
    # torch's initialisation.
    gru_gate_bias: float = 0.0
    seed: int = 0

    def __post_init__(self):
        for name in ("window", "n_types", "min_lag", "d_model", "batch", "steps"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"FarbackConfig: {name} must be a positive int, got {value!r}")
        for name in ("n_recent", "n_anywhere"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"FarbackConfig: {name} must be a non-negative int, got "
                                 f"{value!r}")
        if self.n_types < 2:
            raise ValueError(f"FarbackConfig: n_types must be ≥ 2 (type 0 and a distractor "
                             f"type), got {self.n_types}")
        if not self.min_lag <= self.window:
            raise ValueError(f"FarbackConfig: min_lag must be ≤ window={self.window}, got "
                             f"{self.min_lag}")
        if not self.lr > 0:
            raise ValueError(f"FarbackConfig: lr must be > 0, got {self.lr!r}")

    @property
    def d_in(self) -> int:
        return self.n_types + 3

    def lr_at(self, step: int) -> float:
        """Cosine decay from lr to lr/10 over the run."""
        return cosine_lr(self.lr, step, self.steps)

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class Series:
    x: np.ndarray  # (B, window, d_in) features
    types: np.ndarray  # (B, window)
    sizes: np.ndarray  # (B, window)
    signs: np.ndarray  # (B, window) ±1
    lag: np.ndarray  # (B,) the event's lag: 1 = the last step
    target: np.ndarray  # (B,) 1 if the event's sign is +1 else 0

    def __len__(self) -> int:
        return len(self.lag)

    @property
    def position(self) -> np.ndarray:
        return self.types.shape[1] - self.lag  # (B,) index of the event in the window


def sample(config: FarbackConfig, rng: np.random.Generator, n: int,
           lag: np.ndarray | None = None) -> Series:
    """``n`` series of the task; the event's lag is drawn from the config's lag distribution
    (:func:`draw_lags`) unless ``lag`` ``(n,)`` fixes it (the held-out set's buckets)."""
    c, W = config, config.window
    rows = np.arange(n)
    types = rng.integers(1, c.n_types, (n, W))  # small trades: any type but 0 for now ...
    small0 = rng.random((n, W)) < 1.0 / c.n_types  # ... and type 0 at its usual rate
    types[small0] = 0
    sizes = rng.uniform(0.1, 1.0, (n, W))
    signs = rng.choice(np.array([-1.0, 1.0]), (n, W))
    lag = draw_lags(c, rng, n) if lag is None else np.asarray(lag, dtype=np.int64)
    if lag.shape != (n,) or lag.min(initial=1) < 1 or lag.max(initial=1) > W:
        raise ValueError(f"sample: lag must be ({n},) ints in [1, {W}], got shape {lag.shape}")
    pos = W - lag  # (n,)

    def block(cols, kinds, where):  # distractors: as large as the event or larger
        r, cols, kinds = rows[where], cols[where], kinds[where]
        types[r, cols] = kinds
        sizes[r, cols] = rng.uniform(3.0, 8.0, len(r))

    # up to n_recent + 1 distinct random steps after the event: as many as there is room for
    # (lag − 1 steps), so an event at lag 1 has nothing after it
    after = pos[:, None] + 1 + np.argsort(rng.random((n, W)), axis=1)  # (n, W) candidates
    slots = np.full((n, c.n_recent + 1), -1)
    for b in range(n):
        ok = after[b][after[b] < W][: c.n_recent + 1]
        slots[b, : len(ok)] = ok
    for _ in range(c.n_anywhere):  # blocks of other types anywhere (but not on the event)
        cols = rng.integers(0, W, n)
        cols = np.where(cols == pos, (cols + 1) % W, cols)
        block(cols, rng.integers(1, c.n_types, n), rows >= 0)
    for j in range(c.n_recent):  # the recent distractors, where there is room
        block(slots[:, j], rng.integers(1, c.n_types, n), slots[:, j] >= 0)
    last = slots[:, c.n_recent]  # a small type-0 trade more recent than the event, if room
    has = last >= 0
    types[rows[has], last[has]] = 0
    sizes[rows[has], last[has]] = rng.uniform(0.1, 1.0, int(has.sum()))
    # no other type-0 block anywhere: small type-0 trades only
    sizes = np.where((types == 0) & (sizes >= 1.0), rng.uniform(0.1, 1.0, (n, W)), sizes)
    types[rows, pos] = 0
    sizes[rows, pos] = rng.uniform(3.0, 5.0, n)
    target = (signs[rows, pos] > 0).astype(np.int64)
    return Series(features(types, sizes, signs, c.n_types), types, sizes, signs, lag, target)


def draw_lags(config: FarbackConfig, rng: np.random.Generator, n: int) -> np.ndarray:
    """``n`` event lags in [min_lag, window], log-uniform: each doubling of the lag (1, 2–3,
    4–7, …) is about equally likely, so short lags are as well represented in training as
    long ones."""
    lo, hi = np.log(config.min_lag), np.log(config.window + 1)
    return np.clip(np.floor(np.exp(rng.uniform(lo, hi, n))), config.min_lag,
                   config.window).astype(np.int64)


def features(types, sizes, signs, n_types: int) -> np.ndarray:
    """The per-step features ``(B, W, n_types + 3)`` float32 of series given as types, sizes
    and signs ``(B, W)``: [onehot(type), size, sign, sign · size]."""
    return np.concatenate([np.eye(n_types)[types], sizes[..., None], signs[..., None],
                           (signs * sizes)[..., None]], axis=-1).astype(np.float32)


def lag_buckets(config: FarbackConfig) -> list[tuple[int, int]]:
    """Lag buckets that double: [1, 1], [2, 3], [4, 7], … up to the window (the last bucket
    ends at the window) — the scale on which a memory fades. They start at 1 whatever the
    training's min_lag, so a model trained on far events only is still scored near the end."""
    lo, out = 1, []
    while lo <= config.window:
        hi = 2 * lo - 1  # lo is a power of two: the end of its doubling
        hi = config.window if 2 * hi + 1 > config.window else hi
        out.append((lo, hi))
        lo = hi + 1
    return out


def held_out(config: FarbackConfig, per_bucket: int = 500) -> Series:
    """The held-out set: ``per_bucket`` series in each lag bucket (lags uniform within it),
    from the generator ``[seed, 0xE7A1]`` — never a training batch (those come from
    ``[seed, 1]``)."""
    if isinstance(per_bucket, bool) or not isinstance(per_bucket, int) or per_bucket < 1:
        raise ValueError(f"held_out: per_bucket must be a positive int, got {per_bucket!r}")
    rng = np.random.default_rng([config.seed, 0xE7A1])
    lags = np.concatenate([rng.integers(lo, hi + 1, per_bucket)
                           for lo, hi in lag_buckets(config)])
    return sample(config, rng, len(lags), lag=lags)


def wilson(correct: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """The Wilson score interval (95% for z = 1.96) of a proportion ``correct / n``, clipped
    to [0, 1] (at 0 or n correct one end is 0 or 1 up to rounding)."""
    p = correct / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * np.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return float(max(centre - half, 0.0)), float(min(centre + half, 1.0))


def chance_lag(by_lag: list[dict]) -> list[int] | None:
    """The lag bucket where a model falls to chance: the first (shortest-lag) bucket whose
    accuracy's 95% interval contains 0.5; None if no bucket's does."""
    for row in by_lag:
        lo, hi = row["interval"]
        if lo <= 0.5 <= hi:
            return row["lags"]
    return None


# -- recency rules: what "most recent wins" would answer -------------------------------------
def recency_rules(s: Series) -> dict[str, np.ndarray]:
    """Predictions (B,) of hand-written recency rules: right where the event is the latest
    trade of their kind (lag 1), at chance once distractors come after it."""
    W = s.types.shape[1]
    big = s.sizes >= 3.0
    idx = np.arange(W)

    def last_where(cond):
        return np.where(cond, idx, -1).max(axis=1)

    rows = np.arange(len(s))
    preds = {
        "latest block trade": s.signs[rows, last_where(big)] > 0,
        "latest type-0 trade": s.signs[rows, last_where(s.types == 0)] > 0,
    }
    for lam in (0.9, 0.99, 0.999):
        ema = ((s.signs * s.sizes) * lam ** (W - 1 - idx)).sum(axis=1)
        preds[f"EMA λ={lam}"] = ema > 0
    return {k: v.astype(np.int64) for k, v in preds.items()}


# -- the recency model's one new layer --------------------------------------------------------
class ExpDecayPool(Layer):
    """y = Σ_t (1 − λ) λ^(T−1−t) x_t per channel, with λ = σ(θ) learned: an exponential moving
    average read at the last step.

    Params: ``theta (d,)`` (λ = σ(θ), initialised so λ spreads from 0.5 to 0.999).
    Shapes: x ``(B, T, d)`` → y ``(B, d)``.
    """

    def __init__(self, d: int, dtype=np.float32):
        self.d = positive_int(d, "d", "ExpDecayPool")
        self.dtype = check_dtype(dtype)
        lam = np.linspace(0.5, 0.999, self.d)
        self.params = {"theta": np.log(lam / (1 - lam)).astype(self.dtype)}

    def _weights(self, T):
        lam = 1.0 / (1.0 + np.exp(-self.params["theta"].astype(np.float64)))  # (d,)
        lag = np.arange(T - 1, -1, -1, dtype=np.float64)[:, None]  # (T, 1)
        w = (1.0 - lam) * lam**lag  # (T, d)
        # ∂w/∂λ = −λ^lag + (1 − λ)·lag·λ^(lag−1);  ∂λ/∂θ = λ(1 − λ)
        dw = (-(lam**lag) + (1.0 - lam) * lag * lam ** np.maximum(lag - 1, 0)) * lam * (1 - lam)
        return w, dw

    def forward(self, x):
        x = np.asarray(x)
        w, dw = self._weights(x.shape[1])
        y = np.einsum("btd,td->bd", x, w.astype(x.dtype))  # (B, d)
        return y, (x, dw)

    def backward(self, ctx, dy):
        x, dw = ctx
        w, _ = self._weights(x.shape[1])
        dx = dy[:, None, :] * w[None].astype(x.dtype)  # (B, T, d)
        dtheta = np.einsum("bd,btd,td->d", dy, x, dw.astype(x.dtype))
        return dx, {"theta": dtheta.astype(self.dtype)}

    def lam(self) -> np.ndarray:
        return 1.0 / (1.0 + np.exp(-self.params["theta"].astype(np.float64)))


# -- the models -------------------------------------------------------------------------
class FarbackModel:
    """``kind`` in ALL_KINDS ("attention", "recency", "gru", "ssm", "rnn"); ``forward(x) → logits
    (B, 2)``. Each kind draws its initial weights from the generator ``[seed, index]``, its
    index in ALL_KINDS (the opt-in kinds after the shipped three)."""

    def __init__(self, config: FarbackConfig, kind: str, dtype=np.float32):
        if kind not in ALL_KINDS:
            raise ValueError(f"FarbackModel: kind must be one of {ALL_KINDS}, got {kind!r}")
        c = config
        gen = as_rng(np.random.default_rng([c.seed, ALL_KINDS.index(kind)]))
        self.config, self.kind = c, kind
        d = c.d_model
        if kind == "attention":
            self.embed = Linear(c.d_in, d, rng=gen, dtype=dtype)
            self.attn = MultiHeadAttention(d, 1, rng=gen, dtype=dtype)
            query = gen.standard_normal((1, 1, d)) / np.sqrt(d)
            self.layers = {"embed": self.embed, "attn": self.attn}
            self.extra = {"query": query.astype(dtype)}  # (1, 1, d): the learned question
        elif kind == "recency":
            self.embed = Linear(c.d_in, d, rng=gen, dtype=dtype)
            self.pool = ExpDecayPool(d, dtype=dtype)
            self.hidden = Linear(d, d, rng=gen, dtype=dtype)
            self.layers = {"embed": self.embed, "pool": self.pool, "hidden": self.hidden}
            self.extra = {}
        elif kind == "gru":
            self.gru = GRU(c.d_in, d, rng=gen, dtype=dtype)
            self.gru.params["b_hh"][d: 2 * d] += c.gru_gate_bias  # the update gate z
            self.layers = {"gru": self.gru}
            self.extra = {}
        elif kind == "rnn":
            d = RNN_WIDTH
            self.rnn = RNN(c.d_in, d, rng=gen, dtype=dtype)
            self.layers = {"rnn": self.rnn}
            self.extra = {}
        else:
            d = SSM_WIDTH
            self.embed = Linear(c.d_in, d, rng=gen, dtype=dtype)
            self.mamba = MambaBlock(d, SSM_N_STATE, rng=gen, dtype=dtype)
            self.layers = {"embed": self.embed, "mamba": self.mamba}
            self.extra = {}
        self.head = Linear(d, 2, rng=gen, dtype=dtype)
        self.layers["head"] = self.head
        self.params = {n: a for name, layer in self.layers.items()
                       for n, a in prefixed(name, layer.params).items()}
        self.params.update(self.extra)

    @property
    def num_params(self) -> int:
        return sum(int(p.size) for p in self.params.values())

    def forward(self, x):
        B = x.shape[0]
        if self.kind == "attention":
            e, c1 = self.embed.forward(x)  # (B, W, d)
            q = np.broadcast_to(self.extra["query"], (B, 1, self.config.d_model))
            a, c2 = self.attn.forward(q, context=e)  # (B, 1, d)
            z, c3 = a[:, 0], None
        elif self.kind == "recency":
            e, c1 = self.embed.forward(x)  # (B, W, d)
            p, c2 = self.pool.forward(e)  # (B, d)
            h, c3 = self.hidden.forward(p)
            z = relu(h)
            c3 = (c3, h)
        elif self.kind == "gru":
            (_, z), c1 = self.gru.forward(x)  # (B, d): the last state
            c2 = c3 = None
        elif self.kind == "rnn":
            (_, z), c1 = self.rnn.forward(x)  # (B, RNN_WIDTH): the last state
            c2 = c3 = None
        else:
            e, c1 = self.embed.forward(x)  # (B, W, d)
            m, c2 = self.mamba.forward(e)  # (B, W, d)
            z, c3 = m[:, -1], m.shape  # (B, d): the last step's read of the state
        logits, c4 = self.head.forward(z)
        return logits, (c1, c2, c3, c4)

    def backward(self, cache, dlogits) -> dict[str, np.ndarray]:
        c1, c2, c3, c4 = cache
        dz, g = self.head.backward(c4, dlogits)
        grads = prefixed("head", g)
        if self.kind == "attention":
            (dq, de), g_att = self.attn.backward(c2, dz[:, None, :])
            _, g_emb = self.embed.backward(c1, de)
            grads.update(prefixed("attn", g_att))
            grads.update(prefixed("embed", g_emb))
            grads["query"] = dq.sum(axis=0, keepdims=True).astype(self.extra["query"].dtype)
        elif self.kind == "recency":
            c_hidden, h = c3
            dp, g_h = self.hidden.backward(c_hidden, relu_backward(h, dz))
            de, g_pool = self.pool.backward(c2, dp)
            _, g_emb = self.embed.backward(c1, de)
            grads.update(prefixed("hidden", g_h))
            grads.update(prefixed("pool", g_pool))
            grads.update(prefixed("embed", g_emb))
        elif self.kind == "gru":
            _, g_gru = self.gru.backward(c1, (None, dz))
            grads.update(prefixed("gru", g_gru))
        elif self.kind == "rnn":
            _, g_rnn = self.rnn.backward(c1, (None, dz))
            grads.update(prefixed("rnn", g_rnn))
        else:
            dm = np.zeros(c3, dtype=dz.dtype)  # (B, W, d): only the last step is read
            dm[:, -1] = dz
            de, g_mamba = self.mamba.backward(c2, dm)
            _, g_emb = self.embed.backward(c1, de)
            grads.update(prefixed("mamba", g_mamba))
            grads.update(prefixed("embed", g_emb))
        return grads

    def logits(self, x) -> np.ndarray:
        """``forward(x)``'s logits ``(B, 2)`` without a backward's cache: the SSM runs its
        inference scan (one block of states at a time, see :meth:`MambaBlock.__call__`)."""
        if self.kind != "ssm":
            return self.forward(x)[0]
        return self.head(self.mamba(self.embed(x))[:, -1])

    def predict(self, x) -> np.ndarray:
        return self.logits(x).argmax(axis=-1)

    def weights(self, x) -> np.ndarray:
        """Attention model only: the query's weights over the window ``(B, W)``."""
        if self.kind != "attention":
            raise ValueError(f"weights: only the attention model has attention weights, this is "
                             f"the {self.kind!r} model")
        e = self.embed(x)
        q = np.broadcast_to(self.extra["query"], (x.shape[0], 1, self.config.d_model))
        return self.attn.attention_weights(q, context=e)[:, 0, 0]

    # -- checkpoints ------------------------------------------------------------------------
    def save(self, path, metrics: dict | None = None) -> Path:
        return ckpt.save_model(path, self, TASK, metrics)

    @staticmethod
    def pinned_shapes(config: FarbackConfig, kind: str) -> dict[str, tuple[int, ...]]:
        """The parameter shapes that fix the sizes in ``config`` the model allocates (d_in
        through n_types, d_model), checked in a checkpoint's header before a model is built.
        The window is not among them: every model reads a series of any length."""
        c, d = config, config.d_model
        if kind == "ssm":  # its width and state size are the module's (SSM_WIDTH, SSM_N_STATE)
            return {"embed.weight": (c.d_in, SSM_WIDTH),
                    "mamba.ssm.a_log": (SSM_WIDTH, SSM_N_STATE), "head.weight": (SSM_WIDTH, 2)}
        if kind == "rnn":  # its width is the module's (RNN_WIDTH)
            return {"rnn.w_ih": (c.d_in, RNN_WIDTH), "rnn.w_hh": (RNN_WIDTH, RNN_WIDTH),
                    "head.weight": (RNN_WIDTH, 2)}
        first = {"gru": ("gru.w_ih", (c.d_in, 3 * d))}.get(kind, ("embed.weight", (c.d_in, d)))
        return {first[0]: first[1], "head.weight": (d, 2)}

    @classmethod
    def load(cls, path) -> FarbackModel:
        """The model saved at ``path``; a :class:`~qkv.tasks.checkpoint.CheckpointError` naming
        the file for anything truncated, edited or inconsistent."""
        return ckpt.load_model(path, cls, TASK, ALL_KINDS, FarbackConfig)


def load_pretrained(kind: str = "attention") -> FarbackModel:
    """The shipped model of ``kind``: "attention", "recency" or "gru", trained by
    ``qkv train farback --seed 0 --save-dir DIR``, or "ssm" or "rnn", by ``SSM_COMMAND`` or
    ``RNN_COMMAND`` (with ``--save-dir DIR``), copied into ``qkv/tasks/data`` (see
    docs/lesson.md §2); ``.metrics``
    holds its held-out scores by lag. A kind whose checkpoint is not in this installation is a
    FileNotFoundError naming the kind and the command that trains it."""
    if kind not in ALL_KINDS:
        raise ValueError(f"load_pretrained: kind must be one of {ALL_KINDS}, got {kind!r}")
    path = DATA / f"farback-{kind}.safetensors"
    if not path.is_file():
        command = SHIPPED_COMMAND if kind in KINDS else OPT_IN_COMMANDS[kind]
        raise FileNotFoundError(f"load_pretrained: no shipped far-back checkpoint of kind "
                                f"{kind!r} ({path} is missing); train one with `{command}` "
                                f"(it writes out/farback-{kind}.safetensors) and load it "
                                f"with FarbackModel.load")
    return FarbackModel.load(path)


def train(model: FarbackModel, on_step=None) -> list[float]:
    """Adam for ``config.steps`` steps on batches from the generator ``[seed, 1]`` — the same
    batches for all three models — with the global gradient norm clipped to 1 (the GRU's
    spikes)."""
    c = model.config

    def loss_and_grads(rng):
        s = sample(c, rng, c.batch)
        logits, cache = model.forward(s.x)
        loss, dlogits = softmax_cross_entropy(logits, s.target)
        return loss, model.backward(cache, dlogits)

    return train_steps(model, c, loss_and_grads, clip=1.0, on_step=on_step)


def accuracy_by_lag(config: FarbackConfig, s: Series, pred: np.ndarray) -> list[dict]:
    """Per lag bucket: the lags, the number of series, the accuracy and its 95% Wilson
    interval."""
    rows = []
    for lo, hi in lag_buckets(config):
        sel = (s.lag >= lo) & (s.lag <= hi)
        n, right = int(sel.sum()), int((pred[sel] == s.target[sel]).sum())
        rows.append({"lags": [lo, hi], "cases": n, "correct": right,
                     "accuracy": right / n if n else None,
                     "interval": list(wilson(right, n)) if n else None})
    return rows


def scores(config: FarbackConfig, s: Series, pred: np.ndarray) -> dict:
    """Accuracy over all of ``s``, by lag bucket, and the bucket where it falls to chance."""
    by_lag = accuracy_by_lag(config, s, pred)
    return {"accuracy": float((pred == s.target).mean()), "by_lag": by_lag,
            "chance_from": chance_lag(by_lag)}


def p_plus(model: FarbackModel, x: np.ndarray) -> np.ndarray:
    """The model's probability ``(B,)`` that the event's sign is +, in float64."""
    logits = model.logits(x).astype(np.float64)  # (B, 2)
    return 1.0 / (1.0 + np.exp(logits[:, 0] - logits[:, 1]))


def evaluate(model: FarbackModel, s: Series, chunk: int = 500) -> dict:
    """Held-out scores of ``model`` on ``s`` (:func:`scores`), ``chunk`` series at a time
    (``SSM_CHUNK`` for the SSM, whose states are 416 numbers per step); the attention model's
    weight on the event too."""
    from ..engine.threads import single_threaded_blas

    if model.kind == "ssm":
        chunk = min(chunk, SSM_CHUNK)
    with single_threaded_blas():
        pred = np.concatenate([model.predict(s.x[i: i + chunk]) for i in range(0, len(s), chunk)])
        out = scores(model.config, s, pred)
        if model.kind == "attention":
            w = np.concatenate([model.weights(s.x[i: i + chunk])
                                for i in range(0, len(s), chunk)])
            out["top_weight_on_event"] = float((w.argmax(axis=1) == s.position).mean())
            out["mean_weight_on_event"] = float(w[np.arange(len(s)), s.position].mean())
    return out


def experiment(config: FarbackConfig, per_bucket: int = 500, *, kinds=KINDS, on_start=None,
               on_step=None, on_done=None) -> tuple[dict, dict[str, FarbackModel]]:
    """Train the models of ``kinds`` (default the shipped three; any of ALL_KINDS) on the same
    batches; score them and the recency rules on the same held-out series (``per_bucket`` per
    lag bucket). Returns ``(result, models)``; ``result`` is JSON-able. A model's initial
    weights depend on its kind only, not on which other kinds are trained with it.

    Each model's run also holds ``progress``: its accuracy by lag bucket at every
    ``config.steps // 12``-th step, on a smaller held-out set (``PROGRESS_PER_BUCKET`` series
    per bucket) — how a model's reach grows with training. ``train_seconds`` leaves out the
    time those evaluations took.
    """
    kinds = tuple(kinds)
    bad = [k for k in kinds if k not in ALL_KINDS]
    if bad or not kinds or len(set(kinds)) != len(kinds):
        raise ValueError(f"farback.experiment: kinds must be distinct names among {ALL_KINDS}, "
                         f"got {list(kinds)}")
    s = held_out(config, per_bucket)
    small = held_out(config, min(PROGRESS_PER_BUCKET, per_bucket))
    rules = {name: scores(config, s, pred) for name, pred in recency_rules(s).items()}
    every = max(1, config.steps // 12)
    progress: dict[str, dict] = {}

    def train_watched(model, hook):
        log = progress[model.kind] = {"per_bucket": min(PROGRESS_PER_BUCKET, per_bucket),
                                      "steps": [], "accuracy": [], "chance_from": [],
                                      "seconds": 0.0}

        def watch(step, loss):
            if step % every == 0 or step == config.steps:
                t0 = time.perf_counter()
                r = evaluate(model, small)
                log["steps"].append(step)
                log["accuracy"].append([row["accuracy"] for row in r["by_lag"]])
                log["chance_from"].append(r["chance_from"])
                log["seconds"] += time.perf_counter() - t0
            if hook:
                hook(step, loss)

        return train(model, watch)

    def score(model):
        out = evaluate(model, s)
        if model.kind == "recency":
            out["learned_lambda"] = [round(float(v), 4) for v in model.pool.lam()]
        if model.kind == "ssm":  # the fixed-size state: width × states per channel
            out["d_model"], out["n_state"] = SSM_WIDTH, SSM_N_STATE
        if model.kind == "rnn":
            out["d_model"] = RNN_WIDTH
        return out

    runs, models = train_each(kinds, lambda kind: FarbackModel(config, kind), train_watched,
                              score, on_start=on_start, on_step=on_step, on_done=on_done)
    for kind, run in runs.items():
        log = progress[kind]
        run["train_seconds"] = round(max(run["train_seconds"] - log.pop("seconds"), 0.0), 1)
        run["progress"] = log
    return {"task": "farback", "config": config.to_dict(), "held_out": len(s),
            "per_bucket": per_bucket, "recency_rules": rules, "models": runs}, models


def weight_examples(model: FarbackModel, n: int = 6) -> tuple[np.ndarray, list[str], list]:
    """The attention weights ``(n, window)`` over ``n`` held-out series (one per lag bucket,
    round robin, oldest event first), a label per row ("lag L ± ✓") and per row
    ``(types, sizes, lag)`` of its series."""
    s = held_out(model.config, 50)
    buckets = lag_buckets(model.config)[-n:]
    picks: list[int] = []
    for j in range(n):
        lo, hi = buckets[j % len(buckets)]
        cands = [i for i in np.flatnonzero((s.lag >= lo) & (s.lag <= hi)) if i not in picks]
        picks.append(int(cands[0]))
    picks.sort(key=lambda i: -int(s.lag[i]))
    w = model.weights(s.x[picks])
    pred = model.predict(s.x[picks])
    labels = [f"lag {int(s.lag[i])} {'+' if s.target[i] else '−'} "
              f"{'✓' if pred[j] == s.target[i] else '✗'}" for j, i in enumerate(picks)]
    return w, labels, [(s.types[i], s.sizes[i], int(s.lag[i])) for i in picks]


SHIPPED_COMMAND = ("qkv train farback --seed 0 --json out/farback.json --plot out/farback.png "
                   "--weights-plot out/farback-weights.png --heatmap out/farback-weights.html "
                   "--save-dir out")
SSM_COMMAND = ("qkv train farback --seed 0 --kinds ssm --json out/farback-ssm.json "
               "--plot out/farback-ssm.png --save-dir out")
RNN_COMMAND = ("qkv train farback --seed 0 --kinds rnn --json out/farback-rnn.json "
               "--plot out/farback-rnn.png --save-dir out")
OPT_IN_COMMANDS = {"ssm": SSM_COMMAND, "rnn": RNN_COMMAND}
TUNED_COMMAND = ("qkv train farback --seed 0 --gru-gate-bias 3 --json "
                 "out/farback-gru-tuned.json --plot out/farback-gru-tuned.png")


def tuned_gru_run() -> dict:
    """The counter-case shipped beside the models: the GRU of ``TUNED_COMMAND`` (update-gate
    bias +3 at initialisation, everything else the shipped run's), as that command's JSON
    wrote it — ``{"command", "config", "run"}``, ``run`` as a model's entry in
    :func:`experiment`'s result."""
    import json

    result = json.loads((DATA / "farback-gru-tuned.json").read_text(encoding="utf-8"))
    return {"command": TUNED_COMMAND, "config": result["config"], "run": result["models"]["gru"]}
