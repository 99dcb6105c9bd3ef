"""Train attention from random initialisation in pure NumPy, and look inside what it learned.

  qkv train recall    associative recall — the lesson's library search as a task: a sequence of
                      (key, value) pairs and a query key; output the value stored under it.
                      W_Q, W_K, W_V start random and are learned with qkv's own backward + Adam.
  qkv train explain   for a checkpoint: one held-out query's attention weights over the pairs
                      (landing on the matching key), and over the whole held-out set how often
                      the largest weight falls on the matching key.
  qkv train seq2seq   the lesson's bottleneck: a GRU encoder–decoder with one fixed context
                      vector vs the same model with attention, reversing random symbols;
                      accuracy per input length (docs/lesson.md).
  qkv train farback   one event 1 to 256 steps back in a window, among distractors: attention
                      vs a learned exponential decay vs a GRU, accuracy per lag; with
                      --kinds ssm, a selective state-space model (Mamba block) too, with
                      --kinds rnn a plain tanh RNN on the GRU's parameter budget.
  qkv train mqar      multi-query associative recall (Zoology): key–value pairs, then every key
                      asked; attention vs a Mamba-style selective state-space model at two
                      state sizes, accuracy per sequence length and number of pairs.
  qkv train gpt       a character-level GPT on Shakespeare, nanoGPT's CPU run (docs/gpt.md).

Examples:
  qkv train recall --seed 0 --checkpoint recall.safetensors
  qkv train recall --checkpoint recall.safetensors --resume --steps 3000
  qkv train explain --checkpoint recall.safetensors --index 3
  qkv train seq2seq --seed 0 --json seq2seq.json --plot seq2seq.png --heatmap align.svg
  qkv train farback --seed 0 --json farback.json --plot farback.png --heatmap weights.svg
  qkv train farback --seed 0 --kinds ssm --json farback-ssm.json --save-dir DIR
  qkv train farback --seed 0 --kinds rnn --json farback-rnn.json --save-dir DIR
  qkv train mqar --seed 0 --json mqar.json --plot mqar.png --save-dir DIR
  qkv train gpt --seed 0 --checkpoint gpt.safetensors --export gpt-hf
"""

from __future__ import annotations

import argparse
import pathlib
import textwrap

from ._train_common import BAR, LOSS_WIDTH, MIN_BAR  # noqa: F401  (train_gpt's, others')
from ._train_common import exit_on_sigterm as _exit_on_sigterm
from ._train_common import fit_columns as _fit_columns


def _description(task: str) -> str:
    """The module docstring's paragraph for ``task`` and its examples: ``qkv train TASK --help``
    shows that task, not the overview of all four."""
    lines = __doc__.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"  qkv train {task} "))
    end = start + 1
    while end < len(lines) and lines[end].startswith(" " * 6):
        end += 1
    examples = [line for line in lines if line.startswith(f"  qkv train {task} -")
                or (task == "explain" and line.startswith("  qkv train explain --"))]
    first = lines[start].split(task, 1)[1].strip()
    body = " ".join([first, *(line.strip() for line in lines[start + 1:end])])
    return (textwrap.fill(body[0].upper() + body[1:], width=88) + "\n\nExamples:\n"
            + "\n".join(examples))


def _task_help(task: str) -> dict:
    """``add_parser`` keywords giving ``task`` its own description."""
    return {"description": _description(task),
            "formatter_class": argparse.RawDescriptionHelpFormatter}


HELP = ("train attention in NumPy: associative recall, the lesson's seq2seq and far-back "
        "experiments, MQAR against a state-space model, a character-level GPT; explain a "
        "checkpoint")

# flag → RecallConfig field, for the flags that define the model and data
CONFIG_FLAGS = {"keys": "n_keys", "values": "n_values", "pairs": "n_pairs",
                "d_model": "d_model", "heads": "n_heads", "batch": "batch", "lr": "lr",
                "decay_steps": "decay_steps", "seed": "seed"}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="train_command", metavar="TASK", required=True)
    rec = sub.add_parser("recall", help="train on associative recall",
                         **_task_help("recall"))
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
                         **_task_help("explain"))
    exp.add_argument("--checkpoint", default="recall.safetensors", help="checkpoint to explain")
    exp.add_argument("--index", type=int, default=0,
                     help="which held-out example to show (≥ 0; example i is drawn from its own "
                          "generator [seed, 0xE7A1, 1, i], so it does not depend on --held-out)")
    exp.add_argument("--held-out", type=int, default=2000,
                     help="held-out sequences for the hit fraction and accuracy (default 2000; "
                          "generator [seed, 0xE7A1], as training's evaluations)")
    exp.set_defaults(train_run=run_explain)
    _add_seq2seq(sub)
    _add_farback(sub)
    _add_mqar(sub)
    from . import train_gpt

    train_gpt.add_parser(sub)


def _add_outputs(p, what: str) -> None:
    p.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    p.add_argument("--steps", type=int, default=None,
                   help="Adam steps per model (default: the config's; --quick: fewer)")
    p.add_argument("--batch", type=int, default=None, help="sequences per step")
    p.add_argument("--lr", type=float, default=None, help="Adam learning rate")
    p.add_argument("--quick", action="store_true",
                   help="a small, fast configuration (for tests and a first look)")
    p.add_argument("--json", metavar="PATH", help="write the numbers as JSON")
    p.add_argument("--plot", metavar="PATH",
                   help=f"write {what} as an image (.png/.svg/.pdf; needs matplotlib: qkv[plot])")
    p.add_argument("--heatmap", metavar="PATH",
                   help="write attention weights as a heat map (.svg or .html, drawn by "
                        "qkv.render)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")


def _add_seq2seq(sub) -> None:
    p = sub.add_parser("seq2seq", help="fixed context vector vs attention, accuracy vs length",
                       **_task_help("seq2seq"))
    _add_outputs(p, "accuracy vs input length")
    p.add_argument("--min-len", type=int, default=None, help="shortest input (default 4)")
    p.add_argument("--max-len", type=int, default=None, help="longest input (default 40)")
    p.add_argument("--symbols", type=int, default=None, help="symbol vocabulary (default 16)")
    p.add_argument("--hidden", type=int, default=None, help="GRU hidden size (default 128)")
    p.add_argument("--per-bucket", type=int, default=None,
                   help="held-out sequences per length bucket (default 1000)")
    p.add_argument("--save-dir", metavar="DIR",
                   help="save both models as DIR/seq2seq-{fixed,attention}.safetensors")
    p.set_defaults(train_run=run_seq2seq)


def _add_farback(sub) -> None:
    p = sub.add_parser("farback", help="a far-back event among recent distractors: "
                       "attention vs recency vs GRU",
                       **_task_help("farback"))
    _add_outputs(p, "accuracy vs lag")
    p.add_argument("--window", type=int, default=None, help="window length (default 256)")
    p.add_argument("--per-bucket", type=int, default=None,
                   help="held-out series per lag bucket (1, 2–3, 4–7, …; default 500)")
    p.add_argument("--min-lag", type=int, default=None,
                   help="the event's shortest lag in training (default 1; the held-out "
                        "buckets still start at lag 1)")
    p.add_argument("--gru-gate-bias", type=float, default=None,
                   help="add this to the GRU's update-gate bias at initialisation (default 0; "
                        "3 makes it keep its state by default)")
    p.add_argument("--weights-plot", metavar="PATH",
                   help="write the attention weights over the window for six held-out series "
                        "as line plots (.png/.svg; needs matplotlib)")
    p.add_argument("--kinds", default=None,
                   help="comma-separated models to train (default the shipped three: attention,"
                        "recency,gru; also ssm, a selective state-space model, and rnn, a "
                        "plain tanh RNN)")
    p.add_argument("--save-dir", metavar="DIR",
                   help="save the models as DIR/farback-KIND.safetensors")
    p.set_defaults(train_run=run_farback)


def _add_mqar(sub) -> None:
    p = sub.add_parser("mqar", help="multi-query associative recall: attention vs a selective "
                       "state-space model", **_task_help("mqar"))
    _add_outputs(p, "accuracy vs pairs, per sequence length")
    p.add_argument("--per-cell", type=int, default=None,
                   help="held-out sequences per (length, pairs) cell (default 100)")
    p.add_argument("--kinds", default=None,
                   help="comma-separated models to train (default all: attention,ssm-small,"
                        "ssm-large)")
    p.add_argument("--save-dir", metavar="DIR",
                   help="save the models as DIR/mqar-{attention,ssm-small,ssm-large}"
                        ".safetensors")
    p.add_argument("--generator", default=None,
                   help="how sequences are drawn: zoology (default; Zoology's multiquery_ar: "
                        "distinct values, random-token filler, queries bunched near the "
                        "pairs) or uniform (the first generator: constant filler, queries "
                        "anywhere after the pairs)")
    p.set_defaults(train_run=run_mqar)


def run(args: argparse.Namespace) -> int:  # dispatched through the subcommand's default
    return args.train_run(args)


def _load(path):
    """Run.load, with a missing, unreadable, foreign, truncated or edited checkpoint reported
    in one line (naming the file), not a traceback."""
    from qkv.tasks import Run

    try:
        return Run.load(path)
    except (OSError, ValueError) as exc:  # CheckpointError is a ValueError
        raise SystemExit(f"qkv train: {exc}") from None


def _config_from_args(args, base=None):
    from qkv.tasks import RecallConfig

    given = {field: getattr(args, flag) for flag, field in CONFIG_FLAGS.items()
             if getattr(args, flag) is not None}
    if base is None:
        return _config(RecallConfig, "recall", given)
    clash = {f: v for f, v in given.items() if getattr(base, f) != v}
    if clash:
        field, value = next(iter(clash.items()))
        raise SystemExit(f"qkv train recall: --resume continues the checkpoint's run, whose "
                         f"{field} is {getattr(base, field)!r}, but {value!r} was given; drop the "
                         "flag or train a new checkpoint")
    return base


def run_recall(args: argparse.Namespace) -> int:
    restore = _exit_on_sigterm()
    try:
        return _run_recall(args)
    finally:
        restore()


def _run_recall(args: argparse.Namespace) -> int:
    from pathlib import Path

    from qkv._install import require

    for flag in ("steps", "eval_every", "held_out"):
        if getattr(args, flag) < 1:
            raise SystemExit(f"qkv train recall: --{flag.replace('_', '-')} must be ≥ 1, got "
                             f"{getattr(args, flag)}")
    # the checkpoint is written with safetensors: check it now, not after the training
    require("qkv train recall", "rich", "safetensors", extra="train")
    from rich.console import Console

    from qkv.tasks import Run

    console = Console()
    path = Path(args.checkpoint)
    if path.is_dir():
        raise SystemExit(f"qkv train recall: --checkpoint {path} is a directory; give a file "
                         "name such as recall.safetensors")
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

    progress = _recall_progress(console, args.steps, disable=args.no_progress)
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

        try:
            final = run.train(args.steps, eval_every=args.eval_every, held_out=args.held_out,
                              checkpoint=path, stop_at=args.stop_at, on_step=on_step,
                              on_eval=on_eval)
        except OSError as exc:  # the checkpoint cannot be written: say so in one line
            raise SystemExit(f"qkv train recall: cannot write the checkpoint {path}: "
                             f"{exc.strerror or exc}") from None
    console.print(f"[bold]step {final['step']}[/bold]: held-out accuracy "
                  f"[bold]{final['accuracy']:.4f}[/bold] on {args.held_out} sequences; the "
                  f"largest attention weight falls on the matching key for "
                  f"{final['top_weight_hit']:.4f} of them; training time "
                  f"{final['elapsed']:.1f} s")
    console.print(f"checkpoint: {path}  (inspect with: qkv train explain --checkpoint {path})")
    return 0


def run_explain(args: argparse.Namespace) -> int:
    from qkv._install import require

    require("qkv train explain", "rich", "safetensors", extra="train")
    import numpy as np
    from rich.console import Console
    from rich.table import Table

    import qkv
    from qkv.tasks import RecallTask, evaluate

    console = Console()
    if args.index < 0:
        raise SystemExit(f"qkv train explain: --index must be ≥ 0, got {args.index}")
    if args.held_out < 1:
        raise SystemExit(f"qkv train explain: --held-out must be ≥ 1, got {args.held_out}")
    run = _load(args.checkpoint)
    model, c = run.model, run.config
    i = args.index
    one = RecallTask(c).example(i)  # independent of --held-out: its own generator
    weights = model.lookup(one)[0]  # (H, S) from qkv.attention_weights
    predicted = int(model.predict(one)[0])
    # The same lookup, traced by the float64 reference: scores, scaled scores, weights.
    x, _ = model._embed(one)
    q, k, v = model.attn.project(x[:, -1:], context=x)  # (1, H, 1, d_head), (1, H, S, d_head)
    trace = qkv.explain(q[0, 0], k[0, 0], v[0, 0])

    query, target, slot = int(one.keys[0, -1]), int(one.target[0]), int(one.slot[0])
    console.rule(f"held-out example {i} · checkpoint step {run.step}")
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
        metrics = evaluate(model, RecallTask(c).held_out(args.held_out))
    console.print(f"over {args.held_out} held-out sequences: the largest weight falls on the "
                  f"matching key for [bold]{metrics['top_weight_hit']:.4f}[/bold] of queries; "
                  f"answer accuracy [bold]{metrics['accuracy']:.4f}[/bold]")
    return 0


# -- the lesson's experiments -------------------------------------------------------------------
QUICK_SEQ2SEQ = {"max_len": 12, "d_hidden": 64, "d_attn": 8, "steps": 800}
QUICK_FARBACK = {"window": 64, "steps": 200}
QUICK_MQAR = {"train_lengths": (32,), "eval_lengths": (32, 64), "eval_pairs": (2, 4, 8),
              "d_model": 16, "steps": 30, "batch": 8}


def _recall_progress(console, total: int, *, disable: bool):
    """Progress for ``qkv train recall``: step, loss, batch accuracy, held-out accuracy."""
    from rich.progress import (
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    n = 2 * len(str(total)) + 1  # "1000/1000"
    t = 7  # "0:00:12"
    step = (TextColumn("[bold]step"), 4)
    count = (MofNCompleteColumn(), n)
    loss = "loss {task.fields[loss]:.4f}"
    long = TextColumn(loss + " · batch acc {task.fields[acc]:.3f} · held-out acc "
                      "{task.fields[held]}")
    mid = TextColumn(loss + " · acc {task.fields[acc]:.3f} · held-out {task.fields[held]}")
    short = TextColumn(loss + " acc {task.fields[acc]:.3f} held {task.fields[held]}")
    tiny = TextColumn(loss + " acc {task.fields[acc]:.3f}")
    w_long, w_mid, w_short, w_tiny = (5 + LOSS_WIDTH + 13 + 5 + 16 + 6,
                                      5 + LOSS_WIDTH + 7 + 5 + 12 + 6,
                                      5 + LOSS_WIDTH + 5 + 5 + 6 + 6, 5 + LOSS_WIDTH + 5 + 5)
    elapsed, remaining = (TimeElapsedColumn(), t), (TimeRemainingColumn(), t)
    columns = _fit_columns(console.width, [
        [step, count, (BAR, 0), (long, w_long), elapsed, remaining],
        [step, count, (BAR, 0), (mid, w_mid), elapsed, remaining],
        [step, count, (BAR, 0), (mid, w_mid), elapsed],
        [step, count, (short, w_short), elapsed],
        [count, (short, w_short)],
        [count, (tiny, w_tiny)],
    ])
    return Progress(*columns, console=console, disable=disable)


def _experiment_progress(console, total: int, disable: bool):
    """Progress for ``qkv train seq2seq|farback``: one bar per model, with its loss."""
    from rich.progress import (
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    name = (TextColumn("[bold]{task.description:>9}"), 9)  # "attention"
    count = (MofNCompleteColumn(), 2 * len(str(total)) + 1)  # "1200/1200"
    loss = (TextColumn("loss {task.fields[loss]:.4f}"), 5 + LOSS_WIDTH)
    elapsed, remaining = (TimeElapsedColumn(), 7), (TimeRemainingColumn(), 7)
    columns = _fit_columns(console.width, [
        [name, count, (BAR, 0), loss, elapsed, remaining],
        [name, count, (BAR, 0), loss, elapsed],
        [name, count, loss, elapsed],
        [name, count, loss],
    ])
    return Progress(*columns, console=console, disable=disable)


def _experiment_config(args, name: str, cls, quick: dict, flags: dict):
    """The experiment's config: its defaults, then --quick's, then the flags given (the shared
    --seed/--steps/--batch/--lr and the task's own ``flags``, field → value or None)."""
    given = dict(quick) if args.quick else {}
    given.update({k: v for k, v in {"seed": args.seed, "steps": args.steps, "batch": args.batch,
                                    "lr": args.lr, **flags}.items() if v is not None})
    _check_outputs(args, name)
    return _config(cls, name, given)


def _count(args, dest: str, name: str, *, quick: int, full: int) -> int:
    """A held-out size flag: its value, or the default for --quick or a full run; ≥ 1."""
    value = getattr(args, dest)
    n = value if value is not None else (quick if args.quick else full)
    if n < 1:
        raise SystemExit(f"qkv train {name}: --{dest.replace('_', '-')} must be ≥ 1, got {n}")
    return n


def _train_with_progress(console, args, task, config, n_held, kinds=None):
    """``task.experiment(config, n_held)`` with one progress bar per model of ``task.KINDS``
    (or of ``kinds``, passed on to the experiment)."""
    progress = _experiment_progress(console, config.steps, args.no_progress)
    bars = {}
    extra = {} if kinds is None else {"kinds": kinds}
    with progress:
        for kind in kinds or task.KINDS:
            bars[kind] = progress.add_task(kind, total=config.steps, loss=float("nan"))
        return task.experiment(
            config, n_held, **extra,
            on_step=lambda k, step, loss: progress.update(bars[k], completed=step, loss=loss))


def _kinds(args, name: str, default: tuple[str, ...], known: tuple[str, ...]):
    """``--kinds``: the comma-separated models to train, each one of ``known`` and none
    twice; ``default`` when not given. Anything else is refused by name."""
    if args.kinds is None:
        return default
    kinds = tuple(k.strip() for k in args.kinds.split(",") if k.strip())
    unknown = [k for k in kinds if k not in known]
    if unknown or not kinds or len(set(kinds)) != len(kinds):
        why = (f"unknown {', '.join(map(repr, unknown))}" if unknown else
               "no model named" if not kinds else "a model named twice")
        raise SystemExit(f"qkv train {name}: --kinds takes some of {', '.join(known)}, got "
                         f"{args.kinds!r} ({why})")
    return kinds


def _config(cls, name: str, given: dict):
    try:
        return cls(**{k: v for k, v in given.items() if v is not None})
    except ValueError as exc:
        raise SystemExit(f"qkv train {name}: {exc}") from None


def _outputs(console, args, result, plot_fn, name: str) -> None:
    import json
    from pathlib import Path

    if args.json:
        path = Path(args.json)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
        console.print(f"numbers: {path}")
    if args.plot:
        console.print(f"plot: {plot_fn(result, args.plot)}")


def _save_models(console, args, result, models, name: str) -> None:
    """``--save-dir DIR``: each model as DIR/<name>-<kind>.safetensors, its held-out scores as
    the checkpoint's metrics."""
    if not args.save_dir:
        return
    for kind, model in models.items():
        target = pathlib.Path(args.save_dir) / f"{name}-{kind}.safetensors"
        try:
            path = model.save(target, result["models"][kind])
        except (OSError, ValueError) as exc:
            raise SystemExit(f"qkv train {name}: cannot write the checkpoint {target}: "
                             f"{getattr(exc, 'strerror', None) or exc}") from None
        console.print(f"checkpoint: {path}")


def _check_outputs(args, name: str) -> None:
    if args.heatmap and not args.heatmap.lower().endswith((".svg", ".html", ".htm")):
        raise SystemExit(f"qkv train {name}: --heatmap must end in .svg or .html, got "
                         f"{args.heatmap!r}")
    from qkv._install import require

    require(f"qkv train {name}", "rich")
    if getattr(args, "save_dir", None):  # checkpoints are written with safetensors
        require(f"qkv train {name} --save-dir", "safetensors")
    if args.plot or getattr(args, "weights_plot", None):
        require(f"qkv train {name} --plot", "matplotlib")


def run_seq2seq(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table

    import qkv
    from qkv.tasks import plots
    from qkv.tasks import seq2seq as s2s

    config = _experiment_config(args, "seq2seq", s2s.Seq2SeqConfig, QUICK_SEQ2SEQ, {
        "min_len": args.min_len, "max_len": args.max_len, "n_symbols": args.symbols,
        "d_hidden": args.hidden})
    per_bucket = _count(args, "per_bucket", "seq2seq", quick=200, full=1000)
    console = Console()
    sizes = {k: s2s.Seq2SeqModel(config, k).num_params for k in s2s.KINDS}
    console.print(f"reverse {config.min_len}–{config.max_len} random symbols (vocabulary "
                  f"{config.n_symbols}); GRU encoder–decoder, hidden {config.d_hidden}; "
                  f"{config.steps} Adam steps of {config.batch} per model, seed {config.seed}")
    console.print("parameters: " + ", ".join(f"{k} {n:,}" for k, n in sizes.items())
                  + f" (attention/fixed = {sizes['attention'] / sizes['fixed']:.3f})")
    result, models = _train_with_progress(console, args, s2s, config, per_bucket)
    table = Table(title=f"held-out, greedy decoding, {per_bucket} sequences per bucket")
    table.add_column("input length")
    for kind in s2s.KINDS:
        table.add_column(f"{kind}\ntoken acc", justify="right")
        table.add_column(f"{kind}\nexact", justify="right")
    for i, (lo, hi) in enumerate(s2s.buckets(config)):
        cells = []
        for kind in s2s.KINDS:
            row = result["models"][kind]["buckets"][i]
            cells += [f"{row['token_accuracy']:.3f}", f"{row['exact_match']:.3f}"]
        table.add_row(f"{lo}–{hi}", *cells)
    console.print(table)
    _outputs(console, args, result, plots.seq2seq_plot, "seq2seq")
    if args.heatmap:
        model = models["attention"]
        n = min(24, config.max_len)
        src, out, weights = s2s.alignment_example(model, n)
        fig = qkv.show(weights, ([f"{t}:{o}" for t, o in enumerate(out)],
                                 [f"{j}:{x}" for j, x in enumerate(src)]),
                       title=f"attention model: output step (row) reads input position (column), "
                             f"reversing {n} symbols")
        console.print(f"alignment heat map: {fig.save(args.heatmap)}")
    _save_models(console, args, result, models, "seq2seq")
    return 0


def run_farback(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table

    import qkv
    from qkv.tasks import farback as fb
    from qkv.tasks import plots

    config = _experiment_config(args, "farback", fb.FarbackConfig, QUICK_FARBACK, {
        "window": args.window, "gru_gate_bias": args.gru_gate_bias, "min_lag": args.min_lag})
    per_bucket = _count(args, "per_bucket", "farback", quick=100, full=500)
    kinds = _kinds(args, "farback", fb.KINDS, fb.ALL_KINDS)
    for flag, value in (("--heatmap", args.heatmap), ("--weights-plot", args.weights_plot)):
        if value and "attention" not in kinds:
            raise SystemExit(f"qkv train farback: {flag} draws the attention model's weights, "
                             f"but --kinds {args.kinds!r} leaves it out; add attention to "
                             f"--kinds or drop {flag}")
    console = Console()
    console.print(f"a type-0 block trade at lag {config.min_lag}–{config.window} (log-uniform) "
                  f"in a {config.window}-step window; up to {config.n_recent} larger blocks of "
                  f"other types after it and {config.n_anywhere} anywhere; {config.steps} Adam "
                  f"steps of {config.batch} per model, seed {config.seed}"
                  + (f"; GRU update-gate bias +{config.gru_gate_bias}"
                     if config.gru_gate_bias else ""))
    if "ssm" in kinds:
        console.print(f"ssm: a Mamba block of width {fb.SSM_WIDTH}, {fb.SSM_N_STATE} states per "
                      f"channel: a state of {fb.SSM_WIDTH * fb.SSM_N_STATE} numbers per series")
    if "rnn" in kinds:
        console.print(f"rnn: a plain tanh RNN of {fb.RNN_WIDTH} units, no gates (the GRU's "
                      f"parameter budget)")
    result, models = _train_with_progress(console, args, fb, config, per_bucket,
                                          None if kinds == fb.KINDS else kinds)
    table = Table(title=f"held-out accuracy by lag ({per_bucket} series per lag bucket)")
    table.add_column("model / rule", no_wrap=True)
    table.add_column("params", justify="right")
    for lo, hi in fb.lag_buckets(config):
        table.add_column(f"lag\n{lo}–{hi}" if hi > lo else f"lag\n{lo}", justify="right")
    table.add_column("all", justify="right")
    table.add_column("chance\nfrom", justify="right")

    def chance(r):
        return "—" if r["chance_from"] is None else "–".join(map(str, sorted(set(
            r["chance_from"]))))

    for kind, run in result["models"].items():
        table.add_row(kind, f"{run['parameters']:,}",
                      *(f"{r['accuracy']:.3f}" for r in run["by_lag"]), f"{run['accuracy']:.3f}",
                      chance(run))
    for name, rule in result["recency_rules"].items():
        table.add_row(f"[dim]rule: {name}[/dim]", "—",
                      *(f"{r['accuracy']:.3f}" for r in rule["by_lag"]),
                      f"{rule['accuracy']:.3f}", chance(rule))
    console.print(table)
    console.print("chance from: the shortest lag bucket whose accuracy's 95% (Wilson) interval "
                  "contains 0.5")
    console.print("train seconds: " + ", ".join(
        f"{k} {r['train_seconds']} s" for k, r in result["models"].items()))
    att = result["models"].get("attention")
    if att is not None:
        console.print(f"attention: the largest weight falls on the event in "
                      f"{att['top_weight_on_event']:.3f} of held-out series (mean weight there "
                      f"{att['mean_weight_on_event']:.3f})")
    _outputs(console, args, result, plots.farback_plot, "farback")
    if args.heatmap:
        weights, labels, s = fb.weight_examples(models["attention"])
        lags = [config.window - j for j in range(config.window)]
        fig = qkv.show(weights, (labels, [str(lag) for lag in lags]),
                       title="attention weights over the window (columns: lag), one held-out "
                             "series per row: lag, sign, right?")
        path = fig.save(args.heatmap)
        console.print(f"attention weights heat map: {path}")
    if args.weights_plot:
        weights, labels, s = fb.weight_examples(models["attention"])
        console.print(f"attention weights plot: "
                      f"{plots.farback_weights_plot(weights, labels, s, args.weights_plot)}")
    _save_models(console, args, result, models, "farback")
    return 0


def run_mqar(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table

    from qkv.tasks import mqar, plots

    if args.heatmap:
        raise SystemExit("qkv train mqar: --heatmap is not drawn for this task (the state-space "
                         "models have no attention weights); use --json and --plot")
    config = _experiment_config(args, "mqar", mqar.MqarConfig, QUICK_MQAR,
                                {"generator": args.generator})
    per_cell = _count(args, "per_cell", "mqar", quick=20, full=100)
    kinds = _kinds(args, "mqar", mqar.KINDS, mqar.KINDS)
    console = Console()
    sizes = {k: mqar.MqarModel(config, k) for k in kinds}
    console.print(f"multi-query associative recall: {config.n_keys} keys, {config.n_values} "
                  f"values; trained on lengths {', '.join(map(str, config.train_lengths))}, "
                  f"1 to length/4 pairs (log-uniform), {config.generator} generator; "
                  f"{config.steps} Adam steps of "
                  f"{config.batch} per model, seed {config.seed}")
    console.print("parameters (all / the two mixers): " + ", ".join(
        f"{k} {m.num_params:,} / {m.mixer_params:,}" for k, m in sizes.items()))
    progress = _experiment_progress(console, config.steps, args.no_progress)
    with progress:
        bars = {k: progress.add_task(k, total=config.steps, loss=float("nan")) for k in kinds}
        result, models = mqar.experiment(
            config, per_cell, kinds=kinds,
            on_step=lambda k, step, loss: progress.update(bars[k], completed=step, loss=loss))
    table = Table(title=f"held-out accuracy at the asked keys ({per_cell} sequences per cell)")
    table.add_column("length")
    table.add_column("pairs", justify="right")
    for kind in kinds:
        n = config.n_state(kind)
        table.add_column(kind if n is None else f"{kind}\nN = {n}", justify="right")
    for T, P in config.grid():
        table.add_row(str(T), str(P), *(f"{mqar.cell(result['models'][k], T, P)['accuracy']:.3f}"
                                        for k in kinds))
    console.print(table)
    _outputs(console, args, result, plots.mqar_plot, "mqar")
    _save_models(console, args, result, models, "mqar")
    return 0
