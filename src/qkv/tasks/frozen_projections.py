"""The W's are learned; the power is the three together — measured on view 1's toy.

The lesson: "Attention's expressive power comes from three differently-trained transforms of
the same input feeding into a similarity comparison, not from any one of them individually."
Here the same small task is trained with W_Q, W_K, W_V all learned, then with one of them
frozen (at the identity, or at a fixed random matrix), then with only one of them learned,
and each run is judged on what it outputs and on what its lookup does.

The task is view 1's toy (``scripts/fit_projection_toy.py``): the points of a circle, each
token must output its counter-clockwise neighbour, one head with d_model = d_k = d_v = 2,
out = softmax(X W_Q (X W_K)ᵀ / √2) X W_V, trained by plain gradient descent on the mean
squared error with every gradient from :func:`qkv.attention_backward`. One change makes the
lookup necessary: the circle has 6 to 12 points (all seven shapes trained at once, each its
own sequence). With 8 points only, the neighbour is a fixed 45° turn of the token itself, and
W_V alone could learn the turn and look up nothing; with the count varying, a token cannot
know from itself how far its neighbour lies — it must find it.

Per run: the mean squared error; the tokens (of all 63) whose output lies nearest their
neighbour among their circle's points ("right"); where each token's largest weight falls (on
the neighbour, on itself, elsewhere) and the mean weight on the neighbour — what the lookup
does; and the W's it ended with.

    python -m qkv.tasks.frozen_projections --json out/frozen-projections.json

Deterministic (seeded); seconds on one core. View 1 shows the shipped copy
(``qkv/tasks/data/frozen-projections.json``), docs/lesson.md prints the table.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

import qkv

COMMAND = "python -m qkv.tasks.frozen_projections --json out/frozen-projections.json"
SHIPPED = Path(__file__).parent / "data" / "frozen-projections.json"
POINTS = tuple(range(6, 13))  # circles of 6 … 12 points, trained together
STEPS, LR, SEED = 20_000, 0.5, 0  # 3,000 (the toy script's) leave it turning, not looking up
NAMES = ("q", "k", "v")


@dataclass(frozen=True)
class Setting:
    """Which W's are learned; the others frozen at ``frozen`` ("identity" or "random")."""

    learned: tuple[str, ...]
    frozen: str = "identity"

    @property
    def label(self) -> str:
        fixed = [n for n in NAMES if n not in self.learned]
        if not fixed:
            return "all three learned"
        if not self.learned:
            return f"none learned (all at the {self.frozen})"
        ws = " and ".join(f"W_{n.upper()}" for n in fixed)
        return f"{ws} frozen at {'the identity' if self.frozen == 'identity' else 'random'}"


SETTINGS = (
    Setting(NAMES),
    *(Setting(tuple(m for m in NAMES if m != n), f) for f in ("identity", "random")
      for n in NAMES),
    *(Setting((n,)) for n in NAMES),
    Setting(()),
)


def circle(n: int) -> np.ndarray:
    """(n, 2): n points of the unit circle, the first at (1, 0), counter-clockwise."""
    a = 2 * np.pi * np.arange(n) / n
    return np.stack([np.cos(a), np.sin(a)], axis=1)


def initial(setting: Setting, seed: int = SEED) -> dict[str, np.ndarray]:
    """The starting W's: a learned one I + 0.1·N(0, 1) as the toy's script starts it, a frozen
    one the identity or a fixed N(0, 1/2) matrix (its own generator: the same for every
    setting that freezes it)."""
    rng = np.random.default_rng(seed)
    start = {n: np.eye(2) + 0.1 * rng.standard_normal((2, 2)) for n in NAMES}
    for i, n in enumerate(NAMES):
        if n not in setting.learned:
            start[n] = (np.eye(2) if setting.frozen == "identity" else
                        np.random.default_rng([seed, 7, i]).standard_normal((2, 2)) / np.sqrt(2))
    return start


def _batch() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Every circle at once, padded to the largest: x ``(C, N, 2)``, the targets, the mask
    ``(C, N, N)`` (a query sees its own circle's points only) and which rows are real
    ``(C, N, 1)`` (padding rows are left out of the loss)."""
    N = max(POINTS)
    x = np.zeros((len(POINTS), N, 2))
    target = np.zeros_like(x)
    real = np.zeros((len(POINTS), N, 1))
    for c, n in enumerate(POINTS):
        x[c, :n] = circle(n)
        target[c, :n] = np.roll(circle(n), -1, axis=0)  # token i should output x_{i+1}
        real[c, :n] = 1.0
    keys = np.arange(N)[None, None, :] < np.array(POINTS)[:, None, None]
    return x, target, qkv.allow(np.broadcast_to(keys, (len(POINTS), N, N)).copy()), real


_BATCH = _batch()


def loss_and_grads(w: dict[str, np.ndarray]) -> tuple[float, dict[str, np.ndarray]]:
    """The mean over the circles of each one's mean squared error, and its gradients (one
    masked call of :func:`qkv.attention` and of :func:`qkv.attention_backward` for all)."""
    x, target, mask, real = _BATCH
    q, k, v = x @ w["q"], x @ w["k"], x @ w["v"]  # (C, N, 2)
    out, lse = qkv.attention(q, k, v, mask, return_lse=True)
    diff = (out - target) * real
    per_circle = 1.0 / (real.sum(axis=(1, 2)) * 2 * len(POINTS))  # (C,): mean, then mean
    loss = float(((diff ** 2).sum(axis=(1, 2)) * per_circle).sum())
    dout = 2 * diff * per_circle[:, None, None]
    dq, dk, dv = qkv.attention_backward(q, k, v, out, lse, dout, mask)
    grads = {name: np.einsum("cnd,cne->de", x, d)  # dW = Xᵀ dQ, summed over the circles
             for name, d in zip(NAMES, (dq, dk, dv), strict=True)}
    return loss, grads


def judge(w: dict[str, np.ndarray]) -> dict:
    """What the W's do on every circle: right outputs, where the largest weight falls, the
    mean weight on the neighbour (over all tokens), per circle and in all."""
    per, tot = [], {"tokens": 0, "right": 0, "top_on_neighbour": 0, "top_on_self": 0,
                    "weight_on_neighbour": 0.0}
    for n in POINTS:
        x = circle(n)
        e = qkv.explain(x @ w["q"], x @ w["k"], x @ w["v"])
        nxt = (np.arange(n) + 1) % n
        nearest = ((e.output[:, None, :] - x[None]) ** 2).sum(-1).argmin(axis=1)
        top = e.weights.argmax(axis=1)
        row = {"points": n, "right": int((nearest == nxt).sum()),
               "top_on_neighbour": int((top == nxt).sum()),
               "top_on_self": int((top == np.arange(n)).sum()),
               "weight_on_neighbour": float(e.weights[np.arange(n), nxt].mean())}
        per.append(row)
        tot["tokens"] += n
        for key in ("right", "top_on_neighbour", "top_on_self"):
            tot[key] += row[key]
        tot["weight_on_neighbour"] += row["weight_on_neighbour"] * n
    tot["weight_on_neighbour"] /= tot["tokens"]
    return {**tot, "by_points": per}


def train(setting: Setting, steps: int = STEPS, lr: float = LR, seed: int = SEED) -> dict:
    """One run: plain gradient descent on the learned W's only."""
    w = initial(setting, seed)
    first = loss_and_grads(w)[0]
    for _ in range(steps):
        _, grads = loss_and_grads(w)
        for name in setting.learned:
            w[name] -= lr * grads[name]
    # judged as shipped: the W's rounded to 4 decimals, as view 1 loads and shows them
    w = {n: np.round(m, 4) for n, m in w.items()}
    return {"label": setting.label, "learned": [f"W_{n.upper()}" for n in setting.learned],
            "frozen_at": setting.frozen if len(setting.learned) < 3 else None,
            "mse_start": first, "mse": loss_and_grads(w)[0], **judge(w),
            **{f"w_{n}": w[n].tolist() for n in NAMES}}


def experiment(steps: int = STEPS, settings=SETTINGS) -> dict:
    runs = [train(s, steps) for s in settings]
    return {"command": COMMAND, "task": "each point of a circle of 6 to 12 points outputs its "
            "counter-clockwise neighbour; one head, d_model = d_k = d_v = 2",
            "points": list(POINTS), "steps": steps, "lr": LR, "seed": SEED, "runs": runs}


def shipped() -> dict:
    """The shipped result of :data:`COMMAND` (view 1, docs/lesson.md)."""
    return json.loads(SHIPPED.read_text(encoding="utf-8"))


def main(argv=None) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m qkv.tasks.frozen_projections",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", type=Path, help="write the runs here")
    parser.add_argument("--steps", type=int, default=STEPS)
    args = parser.parse_args(argv)
    result = experiment(args.steps)
    print(f"{'setting':44} {'MSE':>8} {'right':>6} {'top on nbr':>10} {'on self':>8} "
          f"{'w on nbr':>8}")
    for r in result["runs"]:
        print(f"{r['label']:44} {r['mse']:8.4f} {r['right']:>3}/{r['tokens']} "
              f"{r['top_on_neighbour']:>7}/{r['tokens']} {r['top_on_self']:>5}/{r['tokens']} "
              f"{r['weight_on_neighbour']:8.3f}")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
