"""What "selective" selects in the shipped MQAR state-space models (docs/lesson.md §4, view 6).

Mamba's scan is selective because Δ, B and C are computed from each token: the decay
Ā_t = exp(Δ_t A) says how much of the state survives token t (near 1: held; near 0: forgotten,
and Δ_t B_t x_t written in its place). For each shipped state-space model and layer this reports
the share of the state kept per token — the geometric mean of exp(ΔA) over channels and states,
exp(mean Δ·A), as view 6 draws it — averaged (geometrically) over the tokens where the pairs are
read and over the tokens after them (the questions and the random tokens between), on the
held-out sequences of one (length, pairs) cell; and the half-life in tokens, ln ½ / ln kept.
Δ and the decay come from qkv.nn's own layer (``MqarModel.selection``)::

    python -m qkv.tasks.mqar_selection --length 64 --pairs 8
"""

from __future__ import annotations

import math

import numpy as np

from . import mqar


def kept_per_token(model: mqar.MqarModel, tokens: np.ndarray) -> list[np.ndarray]:
    """Per layer, the share of the state kept at each token ``(B, T)``: exp of the mean over
    channels and states of log exp(ΔA) = Δ·A, from the layer's own selection."""
    out = []
    for s in model.selection(tokens):
        decay = s["decay"].astype(np.float64)  # (B, T, D, N)
        out.append(np.exp(np.log(np.maximum(decay, np.finfo(np.float64).tiny))
                          .mean(axis=(2, 3))))
    return out


def measure(length: int = 64, pairs: int = 8, sequences: int = 100) -> dict:
    """The table's numbers for the shipped models on the held-out sequences of one cell."""
    rows = []
    for kind in ("ssm-small", "ssm-large"):
        model = mqar.load_pretrained(kind)
        batch = mqar.held_out(model.config, length, pairs, sequences)
        for layer, kept in enumerate(kept_per_token(model, batch.tokens)):
            log_k = np.log(kept)  # (B, T)
            k_pairs = float(np.exp(log_k[:, : 2 * pairs].mean()))
            k_after = float(np.exp(log_k[:, 2 * pairs:].mean()))
            rows.append({"kind": kind, "n_state": model.config.n_state(kind), "layer": layer + 1,
                         "kept_pairs": k_pairs, "kept_after": k_after,
                         "half_life_pairs": math.log(0.5) / math.log(k_pairs),
                         "half_life_after": math.log(0.5) / math.log(k_after)})
    return {"length": length, "pairs": pairs, "sequences": sequences, "rows": rows}


def main(argv=None) -> int:
    import argparse
    import json

    parser = argparse.ArgumentParser(prog="python -m qkv.tasks.mqar_selection",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--length", type=int, default=64)
    parser.add_argument("--pairs", type=int, default=8)
    parser.add_argument("--sequences", type=int, default=100)
    parser.add_argument("--json", metavar="FILE", help="write the numbers as JSON")
    args = parser.parse_args(argv)
    r = measure(args.length, args.pairs, args.sequences)
    print(f"share of the state kept per token (geometric mean of exp(ΔA)), {r['sequences']} "
          f"held-out sequences, length {r['length']}, {r['pairs']} pairs")
    print("model, layer | kept, pairs | kept, after | half-life, pairs | half-life, after")
    for row in r["rows"]:
        print(f"N = {row['n_state']}, layer {row['layer']} | {row['kept_pairs']:.3f} | "
              f"{row['kept_after']:.3f} | {row['half_life_pairs']:.1f} | "
              f"{row['half_life_after']:.1f}")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(r, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
