"""Training and decoding speed of qkv.nn, beside torch (CPU, torch==2.13.0), same process.

    python benchmarks/train.py                  # both parts, 3 rounds each
    python benchmarks/train.py --rounds 1 --part decode

1. ``step``: one associative-recall training step (forward, cross-entropy, backward, Adam) of
   the default ``qkv train recall`` model, against the same model in torch (autograd +
   torch.optim.Adam), interleaved round by round; best round of each and their ratio.
2. ``decode``: one KV-cache decoding step of a 2-block transformer at cache lengths n, against
   recomputing the full causal forward over n tokens. The cached step is O(n·d) and the full
   forward O(n²·d): the ratio grows with n.
"""

from __future__ import annotations

import argparse
import time

import numpy as np


def _best(fn, rounds: int, inner: int) -> float:
    times = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        for _ in range(inner):
            fn()
        times.append((time.perf_counter() - t0) / inner)
    return min(times)


def bench_step(rounds: int) -> None:
    import torch

    from qkv.engine.threads import single_threaded_blas
    from qkv.tasks import RecallConfig, RecallTask, Run

    torch.set_num_threads(1)  # the same single BLAS thread qkv's training loop uses
    c = RecallConfig()
    run, task = Run.fresh(c), RecallTask(c)

    # the same model in torch, from the same initial weights
    p = {n: torch.tensor(a, requires_grad=True) for n, a in run.model.params.items()}
    opt = torch.optim.Adam(list(p.values()), lr=c.lr)
    data = np.random.default_rng(5)

    def torch_step():
        b = task.sample(data, c.batch)
        keys, values = torch.tensor(b.keys), torch.tensor(b.values)
        x = p["key_emb.weight"][keys] + p["val_emb.weight"][values]  # (B, S, d)
        xq = x[:, -1:]
        q = xq @ p["attn.w_q"] + p["attn.b_q"]
        k = x @ p["attn.w_k"] + p["attn.b_k"]
        v = x @ p["attn.w_v"] + p["attn.b_v"]
        a = torch.nn.functional.scaled_dot_product_attention(q[:, None], k[:, None], v[:, None])
        h = xq + a[:, 0] @ p["attn.w_o"] + p["attn.b_o"]
        z = torch.nn.functional.layer_norm(h, (c.d_model,), p["ln.weight"], p["ln.bias"])
        logits = z[:, 0] @ p["head.weight"] + p["head.bias"]
        loss = torch.nn.functional.cross_entropy(logits, torch.tensor(b.target))
        opt.zero_grad()
        loss.backward()
        opt.step()

    with single_threaded_blas():
        ours = theirs = float("inf")
        for _ in range(rounds):  # interleaved: a noisy neighbour hurts both
            ours = min(ours, _best(lambda: run.train_step(task), 1, 50))
            theirs = min(theirs, _best(torch_step, 1, 50))
    print(f"recall training step (batch {c.batch}, {c.n_pairs} pairs, d={c.d_model}): "
          f"qkv {ours * 1e3:.2f} ms, torch {theirs * 1e3:.2f} ms, ratio {ours / theirs:.2f}×")


def bench_decode(rounds: int, lengths=(256, 1024, 4096)) -> None:
    import qkv
    from qkv import nn

    d, vocab = 64, 50
    g = np.random.default_rng(0)
    tok = nn.Embedding(vocab, d, rng=g)
    blocks = [nn.TransformerBlock(d, 4, rng=g) for _ in range(2)]

    def forward(x, cache=None):
        for i, block in enumerate(blocks):
            x = block(x, mask=qkv.causal(), cache=None if cache is None else cache[i])
        return x

    print("decoding one token at cache length n (2 blocks, d=64, 4 heads):")
    for n in lengths:
        tokens = g.integers(0, vocab, (1, n + 1))
        x = tok(tokens)
        cache = nn.KVCache(2)
        forward(x[:, :n], cache)  # prefill n positions

        def step(cache=cache, x=x, n=n):
            forward(x[:, n: n + 1], cache)
            for layer in cache.layers:  # drop the new position again: every round sees n
                layer.length = n

        cached = _best(step, rounds, 20)
        full = _best(lambda x=x, n=n: forward(x[:, : n + 1]), rounds, 2)
        print(f"  n={n:5d}: cached step {cached * 1e3:7.2f} ms   full causal forward "
              f"{full * 1e3:8.2f} ms   ratio {full / cached:6.1f}×")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--part", choices=("step", "decode", "all"), default="all")
    args = parser.parse_args()
    if args.part in ("step", "all"):
        bench_step(args.rounds)
    if args.part in ("decode", "all"):
        bench_decode(args.rounds)


if __name__ == "__main__":
    main()
