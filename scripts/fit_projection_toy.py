"""Train the 2-D toy behind the explorer's "learned" preset, and write its W_Q, W_K, W_V.

Task: X is the 8 points of the unit circle; each token must look up its neighbour
counter-clockwise, i.e. output_i ≈ x_{i+1}. The model is one head of attention with d_model =
d_k = d_v = 2: Q = X W_Q, K = X W_K, V = X W_V, out = softmax(Q Kᵀ/√2) V. Trained by plain
gradient descent on the mean squared error, every gradient from ``qkv.attention_backward``.
It takes a second; the result is committed as src/qkv/explore/static/learned_2d.json.

    python scripts/fit_projection_toy.py            # writes the file (deterministic)
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

import qkv

OUT = Path(__file__).resolve().parent.parent / "src/qkv/explore/static/learned_2d.json"
N, STEPS, LR = 8, 3000, 0.5


def circle(n: int = N) -> np.ndarray:
    """(n, 2): the explorer's circle shape (rounded to 4 decimals, as the page sends it)."""
    a = 2 * np.pi * np.arange(n) / n
    return np.round(np.stack([np.cos(a), np.sin(a)], axis=1), 4)


def loss_and_grads(x, target, w):
    q, k, v = x @ w["q"], x @ w["k"], x @ w["v"]  # (n, 2) each
    out, lse = qkv.attention(q, k, v, return_lse=True)
    diff = out - target
    loss = float((diff ** 2).mean())
    dout = 2 * diff / diff.size
    dq, dk, dv = qkv.attention_backward(q, k, v, out, lse, dout)
    return loss, {"q": x.T @ dq, "k": x.T @ dk, "v": x.T @ dv}  # dW = Xᵀ dQ, …


def main() -> None:
    x = circle()
    target = np.roll(x, -1, axis=0)  # token i should fetch x_{i+1}
    rng = np.random.default_rng(0)
    w = {name: np.eye(2) + 0.1 * rng.standard_normal((2, 2)) for name in "qkv"}
    first = loss = loss_and_grads(x, target, w)[0]
    for _ in range(STEPS):
        loss, grads = loss_and_grads(x, target, w)
        for name in w:
            w[name] -= LR * grads[name]
    weights = qkv.explain(x @ w["q"], x @ w["k"], x @ w["v"]).weights
    hits = int((weights.argmax(axis=1) == (np.arange(N) + 1) % N).sum())
    result = {
        "source": (f"a 2-D toy trained by scripts/fit_projection_toy.py: each of the {N} points "
                   f"of the circle looks up its counter-clockwise neighbour; mean squared error "
                   f"{first:.3f} → {loss:.4f} in {STEPS} steps; {hits} of {N} tokens attend most "
                   "to their neighbour"),
        "shape": "circle", "loss": loss, "hits": hits,
        **{f"w_{name}": np.round(w[name], 4).tolist() for name in "qkv"},
    }
    assert math.isfinite(loss)
    OUT.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    print(result["source"])
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
