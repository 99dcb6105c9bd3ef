"""Train attention from random initialisation in pure NumPy, and look inside what it learned.

  qkv train recall    associative recall — the seeds' library search as a task: a sequence of
                      (key, value) pairs and a query key; output the value stored under it.
                      W_Q, W_K, W_V start random and are learned with qkv's own backward + Adam.
  qkv train explain   for a checkpoint: one held-out query's attention weights over the pairs
                      (landing on the matching key), and over the whole held-out set how often
                      the largest weight falls on the matching key.

Examples:
  qkv train recall --seed 0 --checkpoint recall.safetensors
  qkv train recall --checkpoint recall.safetensors --resume --steps 3000
  qkv train explain --checkpoint recall.safetensors --index 3
"""

from __future__ import annotations

import argparse

HELP = "train attention on associative recall in NumPy; explain a checkpoint's learned lookup"

# flag → RecallConfig field, for the flags that define the model and data
CONFIG_FLAGS = {"keys": "n_keys", "values": "n_values", "pairs": "n_pairs",
                "d_model": "d_model", "heads": "n_heads", "batch": "batch", "lr": "lr",
                "decay_steps": "decay_steps", "seed": "seed"}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="train_command", metavar="TASK", required=True)
    rec = sub.add_parser("recall", help="train on associative recall",
                         description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    rec.add_argument("--steps", type=int, default=1000,
                     help="total training steps (counting steps already in a resumed checkpoint;"
                          " default 1000)")
    rec.add_argument("--seed", type=int, default=None, help="random seed (default 0)")
    rec.add_argument("--keys", type=int, default=None, help="key vocabulary size (default 128)")
    rec.add_argument("--values", type=int, default=None,
                     help="value vocabulary size (default 128)")
    rec.add_argument("--pairs", type=int, default=None,
                     help="(key, value) pairs per sequence (default 32)")
    rec.add_argument("--d-model", type=int, default=None, help="model width (default 64)")
    rec.add_argument("--heads", type=int, default=None, help="attention heads (default 1)")
    rec.add_argument("--batch", type=int, default=None, help="sequences per step (default 128)")
    rec.add_argument("--lr", type=float, default=None, help="Adam learning rate (default 3e-3)")
    rec.add_argument("--decay-steps", type=int, default=None,
                     help="cosine-decay the rate to lr/10 over this many steps (default 1000)")
    rec.add_argument("--eval-every", type=int, default=100,
                     help="evaluate on held-out sequences (and checkpoint) every N steps")
    rec.add_argument("--held-out", type=int, default=2000, help="held-out sequences (2000)")
    rec.add_argument("--stop-at", type=float, default=None,
                     help="stop early once held-out accuracy reaches this fraction, e.g. 0.999")
    rec.add_argument("--checkpoint", default="recall.safetensors",
                     help="safetensors checkpoint path (default recall.safetensors)")
    rec.add_argument("--resume", action="store_true",
                     help="continue from --checkpoint (its config, weights, Adam state, data RNG)")
    rec.add_argument("--no-progress", action="store_true", help="no progress bar")
    rec.set_defaults(train_run=run_recall)

    exp = sub.add_parser("explain", help="show a checkpoint's learned lookup",
                         description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    exp.add_argument("--checkpoint", default="recall.safetensors", help="checkpoint to explain")
    exp.add_argument("--index", type=int, default=0, help="which held-out sequence to show")
    exp.add_argument("--held-out", type=int, default=2000,
                     help="held-out sequences for the hit fraction (2000)")
    exp.set_defaults(train_run=run_explain)


def run(args: argparse.Namespace) -> int:  # dispatched through the subcommand's default
    return args.train_run(args)


def _load(path):
    """Run.load, with a missing or foreign checkpoint reported in one line, not a traceback."""
    from qkv.tasks import Run

    try:
        return Run.load(path)
    except (FileNotFoundError, ValueError) as exc:
        raise SystemExit(f"qkv train: {exc}") from None


def _config_from_args(args, base=None):
    from qkv.tasks import RecallConfig

    given = {field: getattr(args, flag) for flag, field in CONFIG_FLAGS.items()
             if getattr(args, flag) is not None}
    if base is None:
        return RecallConfig(**given)
    clash = {f: v for f, v in given.items() if getattr(base, f) != v}
    if clash:
        field, value = next(iter(clash.items()))
        raise SystemExit(f"qkv train recall: --resume continues the checkpoint's run, whose "
                         f"{field} is {getattr(base, field)!r}, but {value!r} was given; drop the "
                         "flag or train a new checkpoint")
    return base


def run_recall(args: argparse.Namespace) -> int:
    from pathlib import Path

    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    from qkv.tasks import Run

    console = Console()
    path = Path(args.checkpoint)
    if args.resume:
        run = _load(path)
        _config_from_args(args, run.config)
        console.print(f"resuming {path} at step {run.step} "
                      f"(held-out accuracy {run.history[-1]['accuracy']:.4f})"
                      if run.history else f"resuming {path} at step {run.step}")
    else:
        run = Run.fresh(_config_from_args(args))
    c = run.config
    console.print(f"associative recall: {c.n_pairs} pairs per sequence, {c.n_keys} keys, "
                  f"{c.n_values} values; d_model={c.d_model}, heads={c.n_heads}, "
                  f"{run.model_size} parameters; batch {c.batch}, Adam lr {c.lr} (cosine to "
                  f"lr/10 over {c.decay_steps} steps), seed {c.seed}")
    if run.step >= args.steps:
        console.print(f"the checkpoint already has {run.step} ≥ --steps {args.steps} steps; "
                      "pass a larger --steps to train further")
        return 0

    progress = Progress(
        TextColumn("[bold]step"), MofNCompleteColumn(), BarColumn(),
        TextColumn("loss {task.fields[loss]:.4f} · batch acc {task.fields[acc]:.3f} · "
                   "held-out acc {task.fields[held]}"),
        TimeElapsedColumn(), TimeRemainingColumn(), console=console,
        disable=args.no_progress)
    with progress:
        bar = progress.add_task("train", total=args.steps, completed=run.step, loss=float("nan"),
                                acc=0.0, held="—")

        def on_step(r, loss, acc):
            progress.update(bar, completed=r.step, loss=loss, acc=acc)

        def on_eval(r, m):
            progress.update(bar, held=f"{m['accuracy']:.4f}")
            if args.no_progress:
                console.print(f"step {m['step']}: held-out accuracy {m['accuracy']:.4f}, "
                              f"top weight on the matching key {m['top_weight_hit']:.4f}")

        final = run.train(args.steps, eval_every=args.eval_every, held_out=args.held_out,
                          checkpoint=path, stop_at=args.stop_at, on_step=on_step,
                          on_eval=on_eval)
    console.print(f"[bold]step {final['step']}[/bold]: held-out accuracy "
                  f"[bold]{final['accuracy']:.4f}[/bold] on {args.held_out} sequences; the "
                  f"largest attention weight falls on the matching key for "
                  f"{final['top_weight_hit']:.4f} of them; training time "
                  f"{final['elapsed']:.1f} s")
    console.print(f"checkpoint: {path}  (inspect with: qkv train explain --checkpoint {path})")
    return 0


def run_explain(args: argparse.Namespace) -> int:
    import numpy as np
    from rich.console import Console
    from rich.table import Table

    import qkv
    from qkv.tasks import RecallBatch, RecallTask, evaluate

    console = Console()
    run = _load(args.checkpoint)
    model, c = run.model, run.config
    held = RecallTask(c).held_out(args.held_out)
    if not 0 <= args.index < args.held_out:
        raise SystemExit(f"qkv train explain: --index must lie in [0, {args.held_out}), "
                         f"got {args.index}")
    i = args.index
    one = RecallBatch(*(a[i: i + 1] for a in (held.keys, held.values, held.target, held.slot)))
    weights = model.lookup(one)[0]  # (H, S) from qkv.attention_weights
    predicted = int(model.predict(one)[0])
    # The same lookup, traced by the float64 reference: scores, scaled scores, weights.
    x, _ = model._embed(one)
    q, k, v = model.attn.project(x[:, -1:], context=x)  # (1, H, 1, d_head), (1, H, S, d_head)
    trace = qkv.explain(q[0, 0], k[0, 0], v[0, 0])

    query, target, slot = int(one.keys[0, -1]), int(one.target[0]), int(one.slot[0])
    console.rule(f"held-out sequence {i} · checkpoint step {run.step}")
    console.print(f"query key [bold]k{query}[/bold]; stored under it: [bold]v{target}[/bold] "
                  f"(pair {slot}); the model answers [bold]v{predicted}[/bold] "
                  + ("[green]✓[/green]" if predicted == target else "[red]✗[/red]"))
    table = Table(title="the query's attention over the slots (head 0 traced in float64)")
    for col in ("slot", "key", "value", "q·k", "q·k/√d", "weight", ""):
        table.add_column(col, justify="right" if col not in ("", "key", "value") else "left")
    n_slots = one.keys.shape[1]
    for j in range(n_slots):
        key = f"k{one.keys[0, j]}"
        value = "?" if j == n_slots - 1 else f"v{one.values[0, j]}"
        w = float(weights[0, j])
        bar = "█" * round(w * 20)
        mark = " ← match" if j == slot else (" (query)" if j == n_slots - 1 else "")
        style = "bold green" if j == slot else ""
        table.add_row(str(j), key, value, f"{trace.scores[0, j]:.2f}", f"{trace.scaled[0, j]:.2f}",
                      f"{w:.4f}", f"[{style}]{bar}{mark}[/{style}]" if style else bar + mark)
    console.print(table)
    if c.n_heads > 1:
        tops = ", ".join(f"head {h}: slot {int(weights[h].argmax())}" for h in range(c.n_heads))
        console.print(f"largest weight per head — {tops}")
    agree = float(np.abs(trace.weights[0] - weights[0]).max())
    console.print(f"kernel weights vs float64 reference trace: max difference {agree:.1e}")
    from qkv.engine.threads import single_threaded_blas

    with single_threaded_blas():  # small matrices: BLAS threads only slow them down
        metrics = evaluate(model, held)
    console.print(f"over {args.held_out} held-out sequences: the largest weight falls on the "
                  f"matching key for [bold]{metrics['top_weight_hit']:.4f}[/bold] of queries; "
                  f"answer accuracy [bold]{metrics['accuracy']:.4f}[/bold]")
    return 0
