"""``qkv look --gpt "PROMPT"``: the shipped character-level GPT (or ``--checkpoint``) predicting
the next character — every head's causal attention over the prompt (future keys masked ×), the
next-character distribution, each head's direct push on the chosen character, head roles, and
step-by-step generation through the KV cache. The numbers come from :mod:`qkv.tasks.gpt_watch`;
this module only prints them.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

# how a character is written as a label: the invisible ones get a visible stand-in
VISIBLE = {"\n": "⏎", " ": "␣", "\t": "⇥"}


def count(text: str) -> int:
    """A whole number ≥ 0, or argparse's error naming the option ("argument --generate: …")."""
    try:
        n = int(text)
    except ValueError:
        n = -1
    if n < 0:
        raise argparse.ArgumentTypeError(f"give a whole number of characters ≥ 0, not {text!r}")
    return n


def add_arguments(parser: argparse.ArgumentParser) -> None:
    g = parser.add_argument_group("the character-level GPT (--gpt)")
    g.add_argument("--gpt", action="store_true",
                   help="look at qkv's character-level GPT predicting the next character of "
                        "the sentence (the shipped model, or --checkpoint)")
    g.add_argument("--checkpoint", metavar="PATH",
                   help="with --gpt: a checkpoint from qkv train gpt (default: the shipped one)")
    g.add_argument("--temperature", type=float, default=1.0,
                   help="with --gpt: softmax temperature of the next-character bars (default 1)")
    g.add_argument("--generate", type=count, default=0, metavar="N",
                   help="with --gpt: append N characters one at a time through the KV cache, "
                        "showing what each head read")
    g.add_argument("--roles", action="store_true",
                   help="with --gpt: every head's previous-token and induction scores")
    g.add_argument("--induction", action="store_true",
                   help="with --gpt: the shipped attention-only model that grew an induction "
                        "head (qkv train induction) instead of the GPT")
    g.add_argument("--ablate", metavar="L.H,L", default="",
                   help="with --gpt: switch off these heads (layer.head) or whole layers' "
                        "attention (layer) and show the next-character bars before → after")
    g.add_argument("--mean", action="store_true",
                   help="with --ablate/--effects: replace the output by its mean over 40 "
                        "windows of the validation text instead of zero")
    g.add_argument("--effects", action="store_true",
                   help="with --gpt: switch off every head in turn; the fall in the predicted "
                        "character's probability, beside each head's direct push (attribution)")
    g.add_argument("--where", action="store_true",
                   help="with --gpt: for every head, the prompt (of 96 windows of the "
                        "validation text) where switching it off matters most")


def label(ch: str) -> str:
    return VISIBLE.get(ch, ch)


def _fail(message: str) -> int:
    print(f"qkv look: {message}", file=sys.stderr)
    return 2


def run(args: argparse.Namespace) -> int:
    from rich.console import Console

    from qkv.render import Figure, as_heads
    from qkv.tasks import gpt
    from qkv.tasks import gpt_watch as watch

    if args.checkpoint and not Path(args.checkpoint).exists():
        return _fail(f"no checkpoint at {args.checkpoint!r}; train one with `qkv train gpt "
                     f"--checkpoint {args.checkpoint}`, or leave out --checkpoint for the "
                     "shipped model")
    if args.induction and args.checkpoint:
        return _fail("--induction looks at the shipped attention-only model; leave out "
                     "--checkpoint (or give the checkpoint without --induction)")
    try:
        if args.checkpoint:
            model, tok, _ = gpt.load(args.checkpoint)
        elif args.induction:
            from qkv.tasks import induction

            model, tok, _ = induction.load_pretrained()
        else:
            model, tok = gpt.load_pretrained()
    except (OSError, ValueError) as exc:
        return _fail(str(exc))
    c = model.config
    if not 0 <= args.layer < c.n_layer:
        return _fail(f"--layer must lie in [0, {c.n_layer}), got {args.layer}")
    if not 0 <= args.head < c.n_head:
        return _fail(f"--head must lie in [0, {c.n_head}), got {args.head}")
    try:
        ids = tok.encode(args.sentence)
        seen = watch.look(model, ids, args.temperature)
        steps = watch.generate(model, ids, args.generate, args.temperature, seed=0)
        kind = "mean" if args.mean else "zero"
        ablations = [_ablation(part, kind) for part in args.ablate.split(",") if part.strip()]
        for a in ablations:
            a.check(model)
    except ValueError as exc:
        return _fail(str(exc))
    means = None
    if args.mean and (ablations or args.effects or args.where):
        means = _means(model, tok)
        if means is None:
            return _fail("--mean needs the validation text of the model's own characters; "
                         "this model reads others")
    console = Console()
    chars = [label(ch) for ch in args.sentence]
    console.print(f"[bold]character-level GPT[/bold] on qkv · {c.n_layer} layers × {c.n_head} "
                  f"heads · {len(chars)} of {c.block_size} characters · masked (future) keys ×",
                  highlight=False)
    fig = Figure(as_heads(seen.weights, chars, title=f"GPT on qkv: {args.sentence!r}",
                          allowed=seen.allowed))
    if args.all:
        console.print(f"[bold]layer {args.layer}: all {c.n_head} heads[/bold]")
        console.print(fig.terminal(args.layer, None))
    else:
        console.print(fig.terminal(args.layer, args.head))
    _bars(console, tok, seen)
    attribution = watch.logit_attribution(model, ids)
    _attribution(console, tok, attribution)
    if ablations:
        _ablated(console, tok, watch.ablate(model, ids, ablations, means, args.temperature))
    if args.effects:
        _effects(console, tok, watch.head_effects(model, ids, kind=kind, means=means),
                 attribution)
    if args.where:
        from qkv.tasks.corpus import load as load_corpus

        prompts = watch.candidate_prompts(load_corpus().val, 32, 96)
        _where(console, tok, watch.where_heads_matter(model, prompts, kind, means))
    if steps:
        _generation(console, tok, args.sentence, steps)
    if args.roles:
        from qkv.tasks.corpus import load as load_corpus

        try:
            corpus = load_corpus()
        except ValueError as exc:
            return _fail(str(exc))
        # real text only where the model reads the shipped corpus's characters
        same = tok.chars == corpus.tokenizer.chars
        _roles(console, watch.head_roles(model),
               watch.text_roles(model, corpus.val, tok.chars.index(" ")) if same else None)
    return 0


def _ablation(part: str, kind: str):
    """"1.2" → head 2 of layer 1; "3" → layer 3's whole attention."""
    from qkv.tasks.gpt_watch import Ablation

    layer, _, head = part.strip().partition(".")
    try:
        return Ablation(int(layer), int(head) if head else None, kind)
    except ValueError:
        raise ValueError(f"--ablate takes layer.head or layer, separated by commas (e.g. "
                         f"0.1,2), got {part.strip()!r}") from None


def _means(model, tok):
    """Mean outputs over 40 windows of the validation text (None if the model reads other
    characters than the shipped corpus's)."""
    from qkv.tasks import gpt_watch as watch
    from qkv.tasks.corpus import load as load_corpus
    from qkv.tasks.gpt import windows

    corpus = load_corpus()
    if corpus.tokenizer.chars != tok.chars:
        return None
    return watch.mean_activations(model, windows(corpus.val, model.config.block_size, 40)[0])


def _ablated(console, tok, a, top: int = 8) -> None:
    how = "replaced by its mean" if a.ablations[0].kind == "mean" else "zeroed"
    names = ", ".join(x.label for x in a.ablations)
    c0, c1 = int(np.argmax(a.probs_before)), int(np.argmax(a.probs_after))
    change = (f"the most likely next character {label(tok.chars[c0])!r} "
              f"{a.probs_before[c0]:.1%} → {label(tok.chars[c1])!r} {a.probs_after[c1]:.1%}"
              if c1 != c0 else f"the most likely next character stays "
              f"{label(tok.chars[c0])!r}: {a.probs_before[c0]:.1%} → {a.probs_after[c0]:.1%}")
    console.print(f"[bold]switched off[/bold] {names} ({how}, T = {a.temperature:g}): {change}",
                  highlight=False)
    for i in np.argsort(-a.probs_before, kind="stable")[:top]:
        console.print(f"  {label(tok.chars[i])!s:>2} {a.probs_before[i]:7.2%} → "
                      f"{a.probs_after[i]:7.2%}", highlight=False)


def _effects(console, tok, e, attribution) -> None:
    console.print(f"[bold]each head switched off alone[/bold] ({e.kind}): the fall in "
                  f"p({label(tok.chars[e.char])!r}) = {e.p_before:.1%} at T = 1, in percentage "
                  "points, beside its direct push and its total effect on the logit",
                  highlight=False)
    console.print("  head   change (points)   direct push   total effect", highlight=False)
    L, H = e.drop.shape
    for layer in range(L):
        for h in range(H):
            console.print(f"  L{layer}H{h}   {-100 * e.drop[layer, h]:+15.1f}   "
                          f"{attribution.heads[layer, h]:+11.2f}   "
                          f"{e.total_effect[layer, h]:+12.2f}", highlight=False)
    for layer in range(L):
        console.print(f"  L{layer} (all its attention) {-100 * e.layer_drop[layer]:+.1f}",
                      highlight=False)


def _where(console, tok, w) -> None:
    console.print(f"[bold]where each head matters most[/bold], of {len(w.prompts)} windows of "
                  f"{w.prompts.shape[1]} characters of the validation text ({w.kind}):",
                  highlight=False)
    L, H = w.best.shape
    for layer in range(L):
        for h in range(H):
            s = int(w.best[layer, h])
            text = "".join(label(c) for c in tok.decode(w.prompts[s]))
            console.print(f"  L{layer}H{h} {-100 * w.drop[layer, h]:+6.1f} points of "
                          f"{label(tok.chars[w.chars[s]])!r} after {text}", highlight=False)


def _bars(console, tok, seen, top: int = 8) -> None:
    order = np.argsort(-seen.probs)[:top]
    console.print(f"[bold]next character[/bold] (softmax of the logits / T, T = "
                  f"{seen.temperature:g}; the {top} most likely):", highlight=False)
    for i in order:
        p = float(seen.probs[i])
        console.print(f"  {label(tok.chars[i])!s:>2} {p:7.2%} {'█' * round(p * 40)}",
                      highlight=False)


def _attribution(console, tok, a) -> None:
    flat = [(float(a.heads[layer, h]), layer, h) for layer in range(a.heads.shape[0])
            for h in range(a.heads.shape[1])]
    flat.sort(reverse=True)
    pushes = ", ".join(f"L{layer}H{h} {v:+.2f}" for v, layer, h in flat[:3])
    against = ", ".join(f"L{layer}H{h} {v:+.2f}" for v, layer, h in flat[-2:])
    console.print(f"[bold]why {label(tok.chars[a.char])!r}?[/bold] its logit {a.logit:.2f} = "
                  f"heads {a.heads.sum():+.2f} + MLPs {a.mlps.sum():+.2f} + embeddings "
                  f"{a.embeddings:+.2f} + biases {a.attn_bias.sum() + a.ln_bias:+.2f}; "
                  f"the heads pushing it most: {pushes}; most against: {against}",
                  highlight=False)


def _generation(console, tok, prompt: str, steps) -> None:
    n0 = len(prompt)
    console.print(f"[bold]generation[/bold], one character per step through the KV cache: each "
                  f"step projects only the new character, and its query reads the n cached "
                  f"keys (O(n·d)); n went from {n0} to {n0 + len(steps) - 1}", highlight=False)
    text = prompt
    for s in steps:
        reads = []
        for layer in range(s.weights.shape[0]):
            for h in range(s.weights.shape[1]):
                j = int(np.argmax(s.weights[layer, h]))
                reads.append(f"L{layer}H{h}→{j}{label(text[j])} {s.weights[layer, h, j]:.0%}")
        console.print(f"  {label(tok.chars[s.char])!s:>2} p={s.probs[s.char]:.2f} · read most: "
                      + " ".join(reads[:4]) + (" …" if len(reads) > 4 else ""),
                      highlight=False)
        text += tok.chars[s.char]
    console.print(f"  text: {text!r}", highlight=False)


def _roles(console, roles, text) -> None:
    from rich.table import Table

    from qkv.tasks import gpt_watch as watch

    L, H = roles.previous_token.shape
    table = Table(title=f"head roles on {roles.n_sequences} random sequences of "
                        f"{roles.half} characters, each repeated (Olsson et al. 2022)")
    table.add_column("layer")
    for h in range(H):
        table.add_column(f"head {h}\nprev · induct", justify="right")
    for layer in range(L):
        table.add_row(str(layer), *(f"{roles.previous_token[layer, h]:.2f} · "
                                    f"{roles.induction[layer, h]:.2f}" for h in range(H)))
    console.print(table)
    console.print(watch.roles_sentence(roles), highlight=False)
    if text is None:
        console.print("(the model reads other characters than the shipped Shakespeare, so its "
                      "heads are not measured on that text)")
        return
    table = Table(title=f"the same scores on {text.what}, and the mean weight on the most "
                        "recent space")
    table.add_column("layer")
    for h in range(H):
        table.add_column(f"head {h}\nprev · induct · space", justify="right")
    for layer in range(L):
        table.add_row(str(layer), *(f"{text.previous_token[layer, h]:.2f} · "
                                    f"{text.induction[layer, h]:.2f} · "
                                    f"{text.last_space[layer, h]:.2f}" for h in range(H)))
    console.print(table)
    console.print(watch.roles_sentence(text), highlight=False)
