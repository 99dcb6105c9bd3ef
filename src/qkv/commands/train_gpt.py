"""``qkv train gpt``: a character-level GPT on the shipped Shakespeare, trained by qkv's layers.

  qkv train gpt --seed 0                         nanoGPT's CPU run (2,000 steps) → gpt.safetensors
  qkv train gpt --checkpoint gpt.safetensors --resume --steps 3000
  qkv train gpt --export gpt-hf                  train, then write a transformers GPT-2 folder
  qkv train gpt --shipped --export gpt-hf        export the shipped model, no training

The model, the recipe and the corpus are described in docs/gpt.md and :mod:`qkv.tasks.gpt`.
"""

from __future__ import annotations

import argparse

from ._train_common import BAR, LOSS_WIDTH, exit_on_sigterm, fit_columns

# flag → GPTConfig field, for the flags that define the model and the recipe
CONFIG_FLAGS = {"layers": "n_layer", "heads": "n_head", "width": "n_embd",
                "context": "block_size", "batch": "batch", "lr": "lr",
                "decay_steps": "decay_steps", "eval_every": "eval_every", "seed": "seed"}


def add_parser(sub) -> None:
    p = sub.add_parser("gpt", help="a character-level GPT on Shakespeare (nanoGPT's CPU run)",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=None,
                   help="total training steps, counting a resumed checkpoint's (default 2000)")
    p.add_argument("--seed", type=int, default=None, help="random seed (default 0)")
    p.add_argument("--layers", type=int, default=None, help="transformer blocks (default 4)")
    p.add_argument("--heads", type=int, default=None, help="attention heads (default 4)")
    p.add_argument("--width", type=int, default=None, help="model width n_embd (default 128)")
    p.add_argument("--context", type=int, default=None,
                   help="context length in characters (default 64)")
    p.add_argument("--batch", type=int, default=None, help="windows per step (default 12)")
    p.add_argument("--lr", type=float, default=None, help="peak learning rate (default 1e-3)")
    p.add_argument("--decay-steps", type=int, default=None,
                   help="cosine-decay the rate to lr/10 by this step (default 2000)")
    p.add_argument("--eval-every", type=int, default=None,
                   help="evaluate (and checkpoint) every N steps (default 250)")
    p.add_argument("--corpus", metavar="PATH",
                   help="train on this ASCII text instead of the shipped Shakespeare")
    p.add_argument("--checkpoint", default="gpt.safetensors",
                   help="safetensors checkpoint path (default gpt.safetensors)")
    p.add_argument("--resume", action="store_true",
                   help="continue from --checkpoint (its config, weights, Adam state, batches)")
    p.add_argument("--save-weights", metavar="PATH",
                   help="afterwards, also write the weights alone (no Adam state: a quarter of "
                        "the size; loads with qkv look gpt --checkpoint, cannot be resumed)")
    p.add_argument("--export", metavar="FOLDER",
                   help="afterwards, write a transformers GPT-2 folder (config.json, "
                        "model.safetensors, tokenizer.json)")
    p.add_argument("--shipped", action="store_true",
                   help="no training: use the model shipped with qkv (with --export)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(train_run=run_gpt)
    add_induction_parser(sub)


INDUCTION_DOC = """``qkv train induction``: an attention-only two-layer model on text with repeats,
trained until an induction head forms (Olsson et al. 2022) — the phase change, printed as it
happens.

  qkv train induction --seed 0 --save-weights induction-shakespeare.safetensors
                          the shipped model (src/qkv/tasks/data/induction-shakespeare.safetensors)

  qkv train induction --model gpt --steps 16000 --seed 0 --save-weights gpt-repeats.safetensors
                          the shipped GPT's own recipe on the same windows: it grows one too
  qkv train induction --model gpt --data text --steps 10000 --seed 0
                          the shipped GPT's recipe on plain text, 5× longer: it grows none

Each evaluation prints the loss on held-out windows with repeats (all positions; only the
repeated ones) and on plain text, and the best induction score (layers 1 and up) and layer-0
previous-token score on repeated random sequences. The recipes are qkv.tasks.induction.config
and gpt_config; docs/gpt.md shows the runs, and python -m qkv.tasks.own_heads what they mean.
"""


def add_induction_parser(sub) -> None:
    p = sub.add_parser("induction", help="an attention-only 2-layer model that grows an "
                       "induction head (Olsson et al. 2022)", description=INDUCTION_DOC,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=None, help="training steps (default: the "
                   "recipe's, qkv.tasks.induction.config)")
    p.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    p.add_argument("--eval-every", type=int, default=None,
                   help="evaluate every N steps (default: the recipe's)")
    p.add_argument("--model", choices=("attention-only", "gpt"), default="attention-only",
                   help="attention-only: the 2-layer model (default); gpt: the shipped GPT's "
                        "architecture and recipe (qkv.tasks.induction.gpt_config)")
    p.add_argument("--context", type=int, default=None,
                   help="context length in characters (default: the recipe's, 48 or 64)")
    p.add_argument("--batch", type=int, default=None,
                   help="windows per step (default: the recipe's, 32 or 12)")
    p.add_argument("--data", choices=("repeats", "text"), default="repeats",
                   help="repeats: windows with a chunk written twice (default); text: plain "
                        "Shakespeare windows, as the shipped GPT was trained")
    p.add_argument("--checkpoint", default="induction.safetensors",
                   help="safetensors checkpoint path, with Adam's state (default "
                        "induction.safetensors)")
    p.add_argument("--save-weights", metavar="PATH",
                   help="afterwards, also write the weights and history alone (the shipped "
                        "form)")
    p.set_defaults(train_run=run_induction)


def run_induction(args: argparse.Namespace) -> int:
    from pathlib import Path

    from rich.console import Console

    from qkv.tasks import corpus as corpus_mod
    from qkv.tasks import induction

    console = Console(soft_wrap=True)  # one line per evaluation, also in a log
    path = Path(args.checkpoint)
    if path.is_dir():
        raise SystemExit(f"qkv train induction: --checkpoint {path} is a directory; give a "
                         "file name such as induction.safetensors")
    recipe = induction.config if args.model == "attention-only" else induction.gpt_config
    changes = {"seed": args.seed}
    if args.steps is not None:
        # a short run warms up over its first 5% at most (the recipes: 50 of 3,000, 100 of 2,000)
        changes.update(steps=args.steps, decay_steps=args.steps,
                       warmup=min(recipe().warmup, max(args.steps, 0) // 20))
    for name, field in (("eval_every", "eval_every"), ("context", "block_size"),
                        ("batch", "batch")):
        if getattr(args, name) is not None:
            changes[field] = getattr(args, name)
    try:
        config = recipe(**changes)
    except ValueError as exc:
        raise SystemExit(f"qkv train induction: {exc}") from None
    shortest = 2 * induction.MAX_LENGTH - 1  # a chunk and its copy (evaluated on every run)
    if config.block_size < shortest:
        raise SystemExit(f"qkv train induction: --context {config.block_size} is too short: "
                         f"the windows with repeats hold a chunk of up to "
                         f"{induction.MAX_LENGTH} characters and its copy; give at least "
                         f"{shortest}")
    corpus = corpus_mod.load()
    run = (induction.InductionRun if args.data == "repeats" else induction.TextRun).fresh(config)
    c = run.config
    model = ("attention-only model" if args.model == "attention-only" else
             "the shipped GPT's architecture (with MLPs)")
    data = (f"windows of Shakespeare with a chunk of {induction.MIN_LENGTH}–"
            f"{induction.MAX_LENGTH} characters repeated (in half of them random characters)"
            if args.data == "repeats" else "plain windows of Shakespeare (no repeats written in)")
    console.print(f"{model}: {c.n_layer} layers × {c.n_head} heads, {c.n_embd} wide, context "
                  f"{c.block_size}, {run.model.num_params:,} parameters; {data}; batch "
                  f"{c.batch}, AdamW lr {c.lr}, {c.steps} steps, seed {c.seed}", highlight=False)

    def on_eval(r, row):
        console.print(f"step {row['step']}: loss {row['val']:.4f} (held out), "
                      f"{row['repeat']:.4f} on the repeats, {row['text']:.4f} on plain text · "
                      f"induction {row['induction']:.3f} · previous-token "
                      f"{row['previous']:.3f} · {row['elapsed']:.1f} s", highlight=False)

    try:
        run.train(c.steps, corpus, checkpoint=path, on_eval=on_eval)
    except OSError as exc:
        raise SystemExit(f"qkv train induction: cannot write the checkpoint {path}: "
                         f"{exc.strerror or exc}") from None
    phase = induction.phase_change(run.history)
    where = (f"the induction score first reached {phase['induction_at']:.3f} at step "
             f"{phase['step']}" if phase["step"] is not None else
             "the induction score never reached the threshold")
    console.print(f"{where}; the loss on the repeats fell most between steps "
                  f"{phase['steepest_from']} and {phase['steepest_to']} ({phase['repeat_from']:.4f}"
                  f" → {phase['repeat_to']:.4f}); training time {run.elapsed:.1f} s",
                  highlight=False)
    if args.save_weights:
        try:
            run.save(args.save_weights, corpus.tokenizer.chars, weights_only=True)
        except (OSError, ValueError) as exc:
            raise SystemExit(f"qkv train induction: cannot write {args.save_weights}: "
                             f"{exc}") from None
        console.print(f"weights: {args.save_weights}")
    console.print(f"checkpoint: {path}  (watch it: qkv look --gpt \"abcdefabcdef\" "
                  f"--checkpoint {path} --roles)")
    return 0


def _fail(message: str):
    return SystemExit(f"qkv train gpt: {message}")


def _config(args, corpus, base=None):
    from qkv.tasks.gpt import GPTConfig

    given = {field: getattr(args, flag) for flag, field in CONFIG_FLAGS.items()
             if getattr(args, flag) is not None}
    if base is not None:
        clash = {f: v for f, v in given.items() if getattr(base, f) != v}
        if clash:
            field, value = next(iter(clash.items()))
            raise _fail(f"--resume continues the checkpoint's run, whose {field} is "
                        f"{getattr(base, field)!r}, but {value!r} was given; drop the flag or "
                        "train a new checkpoint")
        return base
    given["vocab_size"] = corpus.tokenizer.vocab_size
    if args.steps is not None:
        given["steps"] = args.steps
        given.setdefault("decay_steps", args.steps)
    # a short run warms up over its first 5% (nanoGPT's 100 of 2,000), never more than 100
    given["warmup"] = min(GPTConfig.warmup, given.get("decay_steps", GPTConfig.decay_steps) // 20)
    try:
        return GPTConfig(**given)
    except ValueError as exc:
        raise _fail(str(exc)) from None


def run_gpt(args: argparse.Namespace) -> int:
    restore = exit_on_sigterm()
    try:
        return _run(args)
    finally:
        restore()


def _export(console, model, tok, folder) -> None:
    from qkv.tasks.gpt_export import export

    try:
        written = export(model, tok, folder)
    except (OSError, ValueError) as exc:
        raise _fail(f"cannot export to {folder}: {exc}") from None
    console.print(f"transformers GPT-2 folder: {written} (AutoModelForCausalLM.from_pretrained; "
                  f"qkv look --model {written} \"ROMEO.\")")


def _run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from rich.console import Console

    from qkv.tasks import corpus as corpus_mod
    from qkv.tasks import gpt

    console = Console()
    if args.shipped:
        if not args.export or args.resume:
            raise _fail("--shipped exports the model shipped with qkv: give --export FOLDER "
                        "(and no --resume)")
        try:
            model, tok = gpt.load_pretrained()
        except (OSError, ValueError) as exc:
            raise _fail(str(exc)) from None
        _export(console, model, tok, args.export)
        return 0
    path = Path(args.checkpoint)
    if path.is_dir():
        raise _fail(f"--checkpoint {path} is a directory; give a file name such as "
                    "gpt.safetensors")
    try:
        corpus = corpus_mod.load(args.corpus)
    except corpus_mod.CorpusError as exc:
        raise _fail(str(exc)) from None
    if args.resume:
        if not path.exists():
            raise _fail(f"no checkpoint at {str(path)!r} to resume; train one with "
                        f"`qkv train gpt --checkpoint {path}`")
        try:
            run, tok = gpt.GPTRun.load(path)
        except (OSError, ValueError) as exc:  # CheckpointError is a ValueError
            raise _fail(str(exc)) from None
        _config(args, corpus, run.config)
        if tok.chars != corpus.tokenizer.chars:
            raise _fail(f"checkpoint {path} was trained on another text ({tok.vocab_size} "
                        f"characters, not this corpus's {corpus.tokenizer.vocab_size}); pass "
                        "the same --corpus")
        console.print(f"resuming {path} at step {run.step}")
    else:
        run = gpt.GPTRun.fresh(_config(args, corpus))
    c = run.config
    steps = args.steps if args.steps is not None else c.steps
    console.print(f"GPT on {'Shakespeare' if args.corpus is None else args.corpus} "
                  f"({len(corpus.train):,} training / {len(corpus.val):,} validation characters,"
                  f" {c.vocab_size} distinct): {c.n_layer} layers × {c.n_head} heads, "
                  f"{c.n_embd} wide, context {c.block_size}, {run.model.num_params:,} parameters;"
                  f" batch {c.batch}, AdamW lr {c.lr} (warmup {c.warmup}, cosine to lr/10 by "
                  f"step {c.decay_steps}), seed {c.seed}", highlight=False)
    if run.step >= steps:
        console.print(f"the checkpoint already has {run.step} ≥ --steps {steps} steps; pass a "
                      "larger --steps to train further")
    else:
        _train(console, args, run, corpus, steps, path)
    if args.save_weights:
        try:
            run.save(args.save_weights, corpus.tokenizer.chars, weights_only=True)
        except (OSError, ValueError) as exc:
            raise _fail(f"cannot write {args.save_weights}: {exc}") from None
        console.print(f"weights: {args.save_weights}")
    if args.export:
        _export(console, run.model, corpus.tokenizer, args.export)
    return 0


def _train(console, args, run, corpus, steps: int, path) -> None:
    progress = _progress(console, steps, disable=args.no_progress)
    tokens = run.config.batch * run.config.block_size
    start_step, start_elapsed = run.step, run.elapsed
    with progress:
        bar = progress.add_task("train", total=steps, completed=run.step, loss=float("nan"),
                                rate=0.0, val="—")

        def on_step(r, loss):
            seconds = r.elapsed - start_elapsed
            progress.update(bar, completed=r.step, loss=loss,
                            rate=(r.step - start_step) * tokens / seconds if seconds else 0.0)

        def on_eval(r, row):
            progress.update(bar, val=f"{row['val']:.4f}")
            if args.no_progress:
                console.print(f"step {row['step']}: loss {row['train']:.4f} (train), "
                              f"{row['val']:.4f} (validation), {row['elapsed']:.1f} s")

        try:
            run.train(steps, corpus, checkpoint=path, on_step=on_step, on_eval=on_eval)
        except OSError as exc:
            raise _fail(f"cannot write the checkpoint {path}: {exc.strerror or exc}") from None
    from qkv.tasks.gpt import validation_loss

    val = validation_loss(run.model, corpus)
    console.print(f"[bold]step {run.step}[/bold]: validation loss [bold]{val:.4f}[/bold] "
                  f"(nats per character over all {len(corpus.val):,} validation characters); "
                  f"training time {run.elapsed:.1f} s, "
                  f"{run.elapsed / max(run.step, 1) * 1000:.1f} ms per step")
    console.print(f"checkpoint: {path}  (watch it: qkv look --gpt \"ROMEO.\" --checkpoint {path})")


def _progress(console, total: int, *, disable: bool):
    """step, bar, loss, validation loss and tokens/s, fitted to the terminal's width."""
    from rich.progress import (
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    n = 2 * len(str(total)) + 1
    step, count = (TextColumn("[bold]step"), 4), (MofNCompleteColumn(), n)
    loss = "loss {task.fields[loss]:.4f}"
    long = TextColumn(loss + " · val {task.fields[val]} · {task.fields[rate]:,.0f} tok/s")
    short = TextColumn(loss + " {task.fields[rate]:,.0f} tok/s")
    w_long, w_short = 5 + LOSS_WIDTH + 9 + 6 + 3 + 7 + 6, 5 + LOSS_WIDTH + 1 + 7 + 6
    elapsed, remaining = (TimeElapsedColumn(), 7), (TimeRemainingColumn(), 7)
    columns = fit_columns(console.width, [
        [step, count, (BAR, 0), (long, w_long), elapsed, remaining],
        [step, count, (BAR, 0), (long, w_long), elapsed],
        [step, count, (long, w_long)],
        [count, (short, w_short)],
    ])
    return Progress(*columns, console=console, disable=disable)
