"""nanoGPT's CPU configuration trained by qkv and by torch in one process, side by side.

    python benchmarks/gpt_vs_torch.py                    # 2,000 steps each, ~10–20 min on 2 cores
    python benchmarks/gpt_vs_torch.py --steps 200 --json gpt_vs_torch.json

The same model (4 layers, 4 heads, 128 wide, context 64, batch 12, AdamW, lr warmup + cosine
over 2,000 steps, no dropout; :mod:`qkv.tasks.gpt`), the same initial weights (torch's copy is
made from qkv's, ``benchmarks/gpt_torch.py``'s ``from_qkv``) and the same batches (generator
``[seed, 1]``). The two runs are interleaved in chunks of ``--chunk`` steps so that a competing
load falls on both. Printed: the validation loss each reaches (whole validation text, as
:func:`qkv.tasks.gpt.validation_loss`), the loss curve on the fixed evaluation windows, and the
seconds per training step (time inside the steps only). qkv runs as ``qkv train gpt`` does:
the batch in one shard per core on as many threads, each with a one-thread BLAS
(:func:`qkv.tasks.training.sharded_loss`); torch with its default threads.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time


def main(argv=None) -> int:
    import torch

    import gpt_torch  # beside this script
    from qkv.engine.threads import single_threaded_blas
    from qkv.tasks import corpus as corpus_mod
    from qkv.tasks import gpt

    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=2000)
    ap.add_argument("--chunk", type=int, default=50, help="steps per turn (default 50)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--torch-threads", type=int, default=None,
                    help="torch.set_num_threads (default: torch's own, the core count)")
    ap.add_argument("--json", metavar="PATH", help="write the figures as JSON")
    args = ap.parse_args(argv)
    if args.torch_threads:
        torch.set_num_threads(args.torch_threads)

    corpus = corpus_mod.load()
    # as `qkv train gpt --steps N` does: decay over the run, warm up over its first 5%
    config = gpt.GPTConfig(seed=args.seed, steps=args.steps, decay_steps=args.steps,
                           warmup=min(100, args.steps // 20))
    run = gpt.GPTRun.fresh(config)
    tm = gpt_torch.from_qkv(run.model)
    trun = gpt_torch.TorchRun(tm, config)
    ev = {name: gpt.windows(getattr(corpus, name), config.block_size, config.eval_windows)
          for name in ("train", "val")}
    seconds = 0.0  # qkv's, inside its steps
    curve = []
    print(f"qkv {run.model!r}; torch {torch.__version__} with {torch.get_num_threads()} "
          f"threads; {args.steps} steps each, interleaved every {args.chunk}; load average "
          f"{_load()}", flush=True)

    while run.step < args.steps:
        n = min(args.chunk, args.steps - run.step)
        with single_threaded_blas():
            for _ in range(n):
                t0 = time.perf_counter()
                run.train_step(corpus.train)
                seconds += time.perf_counter() - t0
        for _ in range(n):
            trun.train_step(corpus.train)
        if run.step % config.eval_every == 0 or run.step == args.steps:
            with single_threaded_blas():
                row = {"step": run.step,
                       "qkv": round(gpt.mean_loss(run.model, *ev["val"]), 4),
                       "torch": round(gpt_torch.mean_loss(tm, *ev["val"]), 4)}
            curve.append(row)
            print(f"step {row['step']:>5}: validation loss (fixed {config.eval_windows} windows)"
                  f" qkv {row['qkv']:.4f}  torch {row['torch']:.4f}  ·  s/step so far qkv "
                  f"{seconds / run.step:.4f}  torch {trun.seconds / trun.step:.4f}",
                  flush=True)
    val_q = gpt.validation_loss(run.model, corpus)
    val_t = gpt_torch.mean_loss(tm, *gpt.windows(corpus.val, config.block_size))
    s_q, s_t = seconds / args.steps, trun.seconds / args.steps
    print(f"\n{'':>28}{'qkv':>10}{'torch':>10}")
    print(f"{'validation loss (all val)':>28}{val_q:>10.4f}{val_t:>10.4f}   difference "
          f"{val_q - val_t:+.4f}")
    print(f"{'seconds per step':>28}{s_q:>10.4f}{s_t:>10.4f}   qkv / torch {s_q / s_t:.2f}×")
    print(f"load average at the end: {_load()} (on {os.cpu_count()} cores)")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump({"steps": args.steps, "chunk": args.chunk, "seed": args.seed,
                       "torch_threads": torch.get_num_threads(), "load_end": _load(),
                       "val_loss": {"qkv": val_q, "torch": val_t},
                       "seconds_per_step": {"qkv": s_q, "torch": s_t}, "curve": curve},
                      f, indent=1)
    return 0


def _load() -> str:
    """The 1-minute load average (a shared machine makes every timing here noisy)."""
    try:
        return f"{os.getloadavg()[0]:.1f}"
    except OSError:
        return "unknown"


if __name__ == "__main__":
    sys.exit(main())
