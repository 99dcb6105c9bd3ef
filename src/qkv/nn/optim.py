"""Adam (Kingma & Ba, 2015), with optional decoupled weight decay (AdamW)."""

from __future__ import annotations

import numpy as np

from ..engine import has_numba


def _compiled():
    from . import _compiled  # imports Numba: only once it is needed

    return _compiled


class Adam:
    """Updates a dict of parameter arrays **in place** from a dict of gradients.

        m ← β₁ m + (1 − β₁) g            v ← β₂ v + (1 − β₂) g²
        p ← p − lr · ( m̂ / (√v̂ + eps) + weight_decay · p ),   m̂ = m/(1−β₁ᵗ), v̂ = v/(1−β₂ᵗ)

    The moments are float64 whatever the parameters' dtype, so a float32 model's optimiser state
    is not the limit on its precision. ``state_dict()`` / ``load_state_dict()`` give flat named
    arrays (``m.<name>``, ``v.<name>``, ``step``), ready for a safetensors checkpoint.

    With Numba, a float32/float64 parameter is updated by :func:`._compiled.adam_update` in one
    pass (the same operations in the same order: bit for bit the NumPy update below).
    """

    def __init__(self, params: dict[str, np.ndarray], lr: float = 1e-3,
                 betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 0.0):
        if not lr > 0:
            raise ValueError(f"Adam: lr must be > 0, got {lr!r}")
        if not all(0 <= b < 1 for b in betas):
            raise ValueError(f"Adam: betas must lie in [0, 1), got {betas!r}")
        self.params, self.lr, self.betas, self.eps = params, lr, betas, eps
        self.weight_decay = weight_decay
        self.m = {n: np.zeros(p.shape) for n, p in params.items()}
        self.v = {n: np.zeros(p.shape) for n, p in params.items()}
        self.t = 0

    def step(self, grads: dict[str, np.ndarray]) -> None:
        missing = set(self.params) ^ set(grads)
        if missing:
            raise ValueError(f"Adam.step: grads and params differ in {sorted(missing)}")
        self.t += 1
        b1, b2 = self.betas
        c1, c2 = 1 - b1**self.t, 1 - b2**self.t
        update = _compiled().adam_update if has_numba() else numpy_adam_update
        for name, p in self.params.items():
            g = np.asarray(grads[name])
            if g.shape != p.shape:
                raise ValueError(f"Adam.step: grads[{name!r}] has shape {g.shape}, expected the "
                                 f"parameter's {p.shape}")
            compiled = (p.dtype in (np.float32, np.float64) and p.flags.c_contiguous
                        and p.flags.writeable)
            (update if compiled else numpy_adam_update)(
                p, g, self.m[name], self.v[name], betas=self.betas, c1=c1, c2=c2, eps=self.eps,
                lr=self.lr, weight_decay=self.weight_decay)

    def state_dict(self) -> dict[str, np.ndarray]:
        state = {f"m.{n}": a for n, a in self.m.items()}
        state.update({f"v.{n}": a for n, a in self.v.items()})
        state["step"] = np.asarray([self.t], dtype=np.int64)
        return state

    def load_state_dict(self, state: dict[str, np.ndarray]) -> None:
        for n in self.params:
            for kind, store in (("m", self.m), ("v", self.v)):
                arr = state.get(f"{kind}.{n}")
                if arr is None or arr.shape != store[n].shape:
                    raise ValueError(f"Adam.load_state_dict: '{kind}.{n}' missing or of shape "
                                     f"{None if arr is None else arr.shape}, expected "
                                     f"{store[n].shape}")
                store[n][...] = arr
        self.t = int(np.asarray(state["step"]).reshape(-1)[0])


def numpy_adam_update(p, g, m, v, *, betas, c1, c2, eps, lr, weight_decay) -> None:
    """One AdamW update of ``p`` and its float64 moments ``m``, ``v`` in place from the gradient
    ``g``; ``c1``, ``c2`` are the bias corrections 1 − βᵢᵗ. (NumPy; see ``adam_update`` in
    :mod:`._compiled` for the same update in one compiled pass.)"""
    b1, b2 = betas
    g = np.asarray(g, dtype=np.float64)
    m *= b1
    m += (1 - b1) * g
    v *= b2
    v += (1 - b2) * g * g
    update = (m / c1) / (np.sqrt(v / c2) + eps)
    if weight_decay:
        update = update + weight_decay * p
    p -= (lr * update).astype(p.dtype)
