"""Sentences per second: all-MiniLM-L6-v2 on qkv beside sentence-transformers, same run, same cores.

    python benchmarks/minilm.py                      # 1,000 sentences of ~20 tokens, 3 rounds
    python benchmarks/minilm.py --sentences 200 --rounds 1
    python benchmarks/minilm.py --profile            # where qkv's time goes (no peer, one thread)

Both encoders get the same sentences, interleaved round by round (qkv, then the peer), so a
noisy neighbour hurts both; the best round of each is reported, with their ratio. The peer is
sentence-transformers on torch (CPU, the installed torch==2.13.0), run offline from the wheel's
model folder. Also printed: the largest difference between the two sets of embeddings, a check
that the two are doing the same work.
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np

WORDS = ("the a cat dog sat ran on under mat tree because it was tired happy small large red "
         "blue house river city people time year day night work play model attention query key "
         "value token sentence every each weight vector layer head softmax learns reads writes "
         "quickly slowly again never always near far old new good bad").split()


def make_sentences(n: int, seed: int = 0) -> list[str]:
    """``n`` sentences of 16–20 common words: about 20 WordPiece tokens with [CLS] and [SEP]."""
    rng = np.random.default_rng(seed)
    return [" ".join(rng.choice(WORDS, size=int(rng.integers(16, 21)))).capitalize() + "."
            for _ in range(n)]


def best_of(fn, rounds_done: list[float]) -> np.ndarray:
    start = time.perf_counter()
    out = fn()
    rounds_done.append(time.perf_counter() - start)
    return out


# cProfile rows (file, function) → the part of the encoder they are; the rest is "other"
PARTS = {("_base.py", "matmul_rows"): "GEMMs", ("engine/gemm.py", None): "GEMMs",
         ("_compiled.py", "_gelu_erf32"): "GELU", ("_compiled.py", "_gelu_erf_bias32"): "GELU",
         ("activations.py", "_erf"): "GELU", ("activations.py", "numpy_gelu"): "GELU",
         ("norm.py", None): "LayerNorm", ("_compiled.py", "_layer_norm"): "LayerNorm",
         ("engine/kernel/", None): "attention",
         ("engine/problem.py", None): "attention", ("step", "online_softmax"): "attention",
         ("tokenizer.py", None): "tokenizer", ("tokenizers.Tokenizer", None): "tokenizer"}


def _part(file: str, function: str) -> str:
    for (where, name), part in PARTS.items():
        if where in file and (name is None or name == function):
            return part
    if "online_softmax" in function or "encode_batch" in function:
        return "attention" if "online_softmax" in function else "tokenizer"
    return "other"


def profile(model, sentences: list[str], batch_size: int) -> None:
    """Where qkv's ``encode`` spends its time: a one-thread cProfile, by part (self time, so
    LayerNorm's ``mean`` calls count as "other"), the encoder's GFLOP and the GELU's cost."""
    import cProfile
    import pstats

    from qkv.nn import activations

    os.environ["QKV_NUM_THREADS"] = "1"  # one batch at a time: self times add up to the wall
    model.encode(sentences[:batch_size])
    prof = cProfile.Profile()
    start = time.perf_counter()
    prof.enable()
    model.encode(sentences, batch_size=batch_size)
    prof.disable()
    wall = time.perf_counter() - start
    shares: dict[str, float] = {}
    for (file, _line, function), row in pstats.Stats(prof).stats.items():
        shares[_part(file, function)] = shares.get(_part(file, function), 0.0) + row[2]
    total = sum(shares.values())
    print(f"qkv encode on one thread under cProfile: {wall:.2f} s")
    for part, t in sorted(shares.items(), key=lambda kv: -kv[1]):
        print(f"  {part:10s} {t:6.2f} s  {100 * t / total:5.1f}%")
    c = model.config
    lengths = np.sort(model.tokenize(sentences).lengths)[::-1]  # as encode batches them
    tokens = int(sum(len(chunk) * chunk[0] for chunk in
                     (lengths[i: i + batch_size] for i in range(0, len(lengths), batch_size))))
    flops = 2 * tokens * c.n_layers * (4 * c.d_model * c.d_model + 2 * c.d_model * c.d_ff)
    print(f"  the encoder's GEMMs: {flops / 1e9:.0f} GFLOP on {tokens} token rows (padding "
          f"included), {flops / 1e9 / shares.get('GEMMs', 1):.0f} GFLOP/s under cProfile")
    gemms_alone(c, rows=batch_size * 21, flops=flops)
    x = np.random.default_rng(0).standard_normal((64 * 21, c.d_ff)).astype(np.float32)
    for name, fn in (("compiled", activations.gelu), ("scipy", activations.numpy_gelu)):
        fn(x)
        best = min(_timed(fn, x) for _ in range(5))
        print(f"  GELU ({name}): {best / x.size * 1e9:.2f} ns an element")
    bias = np.random.default_rng(1).standard_normal(c.d_ff).astype(np.float32)
    times = {}
    for name, fn in (("the bias in its pass", lambda a: activations.gelu(a, bias=bias)),
                     ("gelu(x + bias)", lambda a: activations.gelu(a + bias))):
        fn(x)
        times[name] = min(_timed(fn, x) for _ in range(5)) / x.size * 1e9
    print("  GELU with the feed-forward's bias: " + ", ".join(
        f"{name} {t:.2f} ns an element" for name, t in times.items()))


def gemms_alone(c, rows: int, flops: float) -> None:
    """The encoder's GEMM shapes alone on one thread — ``rows`` token rows (a batch) by each
    weight, on the GEMM the encoder's layers use and on torch's ``linear`` — and the time the
    encoder's ``flops`` take at qkv's rate: the part of ``encode`` no other change can cut."""
    import threadpoolctl

    from qkv.engine import current, gemm

    use = current().resolved_gemm()
    rng = np.random.default_rng(2)
    shapes = [(c.d_model, c.d_model), (c.d_model, c.d_ff), (c.d_ff, c.d_model)]
    try:
        import torch
    except ImportError:
        torch = None
    ours, theirs = [], []
    with threadpoolctl.threadpool_limits(1, "blas"):
        for d_in, d_out in shapes:
            x = rng.standard_normal((rows, d_in), dtype=np.float32)
            w = rng.standard_normal((d_in, d_out), dtype=np.float32)
            work = 2 * rows * d_in * d_out
            gemm.matmul(x, w, use=use)
            ours.append(work / min(_timed(lambda a, w=w: gemm.matmul(a, w, use=use), x)
                                   for _ in range(20)))
            if torch is not None:
                threads = torch.get_num_threads()
                torch.set_num_threads(1)
                xt, wt = torch.from_numpy(x), torch.from_numpy(np.ascontiguousarray(w.T))
                torch.nn.functional.linear(xt, wt)
                theirs.append(work / min(_timed(
                    lambda a, wt=wt: torch.nn.functional.linear(a, wt), xt)
                                         for _ in range(20)))
                torch.set_num_threads(threads)
    names = [f"{a}→{b}" for a, b in shapes]
    print(f"  the same GEMMs alone, {rows} rows, one thread ({use}): " + ", ".join(
        f"{n} {r / 1e9:.0f}" for n, r in zip(names, ours, strict=True)) + " GFLOP/s" + (
        "; torch's linear: " + ", ".join(f"{r / 1e9:.0f}" for r in theirs) if theirs else ""))
    # a layer's FLOP by shape: q, k, v and o are d → d, the feed-forward d → d_ff → d
    share = np.array([4 * c.d_model * c.d_model, c.d_model * c.d_ff, c.d_ff * c.d_model], float)
    rate = 1 / float(np.sum(share / share.sum() / np.array(ours)))
    print(f"  at that rate ({rate / 1e9:.0f} GFLOP/s) the encoder's GEMMs take {flops / rate:.2f} "
          f"s on one core, {flops / rate / 2:.2f} s on two")


def _timed(fn, x) -> float:
    start = time.perf_counter()
    fn(x)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sentences", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--torch-threads", type=int, default=None,
                        help="torch.set_num_threads for the peer (default: torch's own choice)")
    parser.add_argument("--batch-size", type=int, default=64,
                        help="qkv's batch size (sentence-transformers keeps its default, 32)")
    parser.add_argument("--profile", action="store_true",
                        help="profile qkv's encode alone (one thread) instead of the race")
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    if args.profile:
        from qkv.models import MiniLM

        profile(MiniLM.load(), make_sentences(args.sentences), args.batch_size)
        return

    import torch
    from sentence_transformers import SentenceTransformer

    from qkv.models import MiniLM

    if args.torch_threads:
        torch.set_num_threads(args.torch_threads)
    model = MiniLM.load()
    peer = SentenceTransformer(str(model.folder), device="cpu")
    sentences = make_sentences(args.sentences)
    lengths = model.tokenize(sentences).lengths
    print(f"{len(sentences)} sentences, {lengths.mean():.1f} tokens on average "
          f"(min {lengths.min()}, max {lengths.max()}); {os.cpu_count()} cores, "
          f"torch {torch.__version__} with {torch.get_num_threads()} threads")

    model.encode(sentences[:64])  # warm-up: first calls pay for imports and allocations
    peer.encode(sentences[:64])
    ours_t, peer_t = [], []
    for _ in range(args.rounds):
        ours = best_of(lambda: model.encode(sentences, batch_size=args.batch_size), ours_t)
        theirs = best_of(lambda: peer.encode(sentences, convert_to_numpy=True), peer_t)
    ours_rate, peer_rate = len(sentences) / min(ours_t), len(sentences) / min(peer_t)
    print(f"qkv                   {ours_rate:8.1f} sentences/s   (best of {args.rounds}: "
          f"{min(ours_t):.2f} s; rounds {', '.join(f'{t:.2f}' for t in ours_t)})")
    print(f"sentence-transformers {peer_rate:8.1f} sentences/s   (best of {args.rounds}: "
          f"{min(peer_t):.2f} s; rounds {', '.join(f'{t:.2f}' for t in peer_t)})")
    print(f"ratio qkv / sentence-transformers = {ours_rate / peer_rate:.2f}")
    print(f"max |embedding difference| = {np.abs(ours - theirs).max():.2e}")


if __name__ == "__main__":
    main()
