"""Does the shipped GPT grow an induction head? Four training runs and what copying is worth.

The shipped GPT (:mod:`qkv.tasks.gpt`) has no induction head. Olsson et al. (2022) find them in
every model of two or more layers trained long enough on text; this module holds the measured
answer for this GPT, from runs of ``qkv train induction`` (each evaluation: the best induction
score in layers 1 and up, the best layer-0 previous-token score, the loss on held-out windows
with repeats — all positions and the repeated ones — and on plain validation text):

- ``attention-only``: the 2-layer attention-only model (:mod:`qkv.tasks.induction`), on
  windows with repeats — the phase change;
- ``gpt-repeats``: the shipped GPT's architecture and recipe (4 layers with MLPs, 128 wide,
  context 64, batch 12) on the same kind of windows;
- ``gpt-text``: the same GPT on plain Shakespeare, as shipped, but trained 5× longer;
- ``gpt-text-256``: as ``gpt-text`` with a context of 256 characters (batch 3, so that a step
  reads the same 768 characters): the same text, with 4× the room for it to repeat itself.

Why plain text does not build one is counted by :mod:`qkv.tasks.copy_payoff` (how often the
window's own earlier characters tell the next one something the text's statistics do not, per
context length) and by :func:`worth`: what the induction heads of the GPT that has them are
worth, switched off, on plain text and on repeats.

``python -m qkv.tasks.own_heads`` prints every figure docs/gpt.md quotes.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from . import copy_payoff, induction
from .gpt import GPT, windows
from .gpt import load as load_gpt

DATA = Path(__file__).with_name("data")
MATCH = 2  # the copy rule reads two characters: what a previous-token head and an induction
# head read together (the character before, and this one)
CONTEXTS = (64, 256, 1024, 4096)  # the GPT's context, and longer ones it never had
WORTH_CHARS = 16_384  # validation characters for :func:`worth`, cut into the model's windows


@dataclass(frozen=True)
class Run:
    """One shipped training run: its file, the command that made it, what it was fed."""

    name: str
    path: Path
    command: str
    words: str  # the run, in the learner's words

    def load(self) -> tuple[GPT, object, dict]:
        if not self.path.exists():
            raise OSError(f"{self.path} is missing; reinstall qkv, or rebuild it with: "
                          f"{self.command}")
        return load_gpt(self.path)


RUNS = (
    Run("attention-only", induction.PRETRAINED, induction.COMMAND,
        "the 2-layer attention-only model, text with repeats"),
    Run("gpt-repeats", DATA / "gpt-repeats.safetensors",
        "qkv train induction --model gpt --steps 16000 --seed 0 --save-weights "
        "gpt-repeats.safetensors", "the GPT's recipe, text with repeats"),
    Run("gpt-text", DATA / "gpt-text-long.safetensors",
        "qkv train induction --model gpt --data text --steps 10000 --seed 0 --save-weights "
        "gpt-text-long.safetensors", "the GPT's recipe, plain text, 5× longer"),
    Run("gpt-text-256", DATA / "gpt-text-256.safetensors",
        "qkv train induction --model gpt --data text --context 256 --batch 3 --steps 10000 "
        "--seed 0 --save-weights gpt-text-256.safetensors",
        "the GPT's recipe, plain text, 5× longer, context 256 (batch 3: the same characters "
        "a step)"),
)
WORTH_RUNS = ("gpt-repeats", "gpt-text", "gpt-text-256")  # their heads are switched off


def run(name: str) -> Run:
    for r in RUNS:
        if r.name == name:
            return r
    raise ValueError(f"no run {name!r}; the runs are {[r.name for r in RUNS]}")


def history(model: GPT, meta: dict) -> list[dict]:
    """The run's evaluations, each with ``chars``: training characters seen by then (the runs'
    batches differ, 32 × 48 and 12 × 64, so characters are their common clock)."""
    per_step = model.config.batch * model.config.block_size
    return [{**row, "chars": row["step"] * per_step} for row in meta["history"]]


def first_reached(rows: list[dict], threshold: float) -> dict | None:
    """The first evaluation whose induction score reaches ``threshold`` (None: never)."""
    return next((r for r in rows if r["induction"] >= threshold), None)


def induction_heads(model: GPT, threshold: float | None = None) -> list[tuple[int, int]]:
    """Heads of layers 1 and up whose induction score on repeated random sequences
    (:func:`qkv.tasks.gpt_watch.head_roles`, as the page measures) reaches ``threshold``."""
    from .gpt_watch import INDUCTION, head_roles

    threshold = INDUCTION if threshold is None else threshold
    scores = head_roles(model).induction  # (L, H)
    return [(int(layer), int(head)) for layer, head in zip(*np.nonzero(scores >= threshold),
                                                           strict=True) if layer >= 1]


def worth(model: GPT, heads, corpus, table: dict[int, int] | None = None) -> dict:
    """What ``heads`` are worth to ``model``: the mean loss (nats per character) with them and
    with each mean-ablated (its output replaced by its mean over the plain windows, TransformerLens'
    convention), on :data:`WORTH_CHARS` characters of plain validation text in the model's
    windows (all positions; the
    *news* positions of :mod:`qkv.tasks.copy_payoff`; the *wrong* ones, where copying would
    mislead) and on as many held-out windows with repeats (the positions a copy can
    predict)."""
    from .gpt_watch import Ablation, ablation_hooks, mean_activations

    c = model.config
    vocab = c.vocab_size
    table = copy_payoff.next_table(corpus.train, MATCH, vocab) if table is None else table
    n = WORTH_CHARS // c.block_size  # the same text for every context
    x, y = windows(corpus.val, c.block_size, n)
    news, wrong = copy_payoff.copy_positions(x, y, MATCH, table, vocab)
    rng = np.random.default_rng([0, 7, 2])  # as the training runs' held-out windows
    rx, ry, copied = induction.repeat_windows(corpus.val, rng, n, c.block_size, vocab)
    means = mean_activations(model, x)
    hooks = ablation_hooks(model, [Ablation(layer, head, "mean") for layer, head in heads], means)
    out = {"heads": [list(h) for h in heads], "windows": n, "news_share": float(news.mean()),
           "wrong_share": float(wrong.mean())}
    for tag, h in (("with", {}), ("without", hooks)):
        plain = copy_payoff.position_losses(model, x, y, h)
        repeats = copy_payoff.position_losses(model, rx, ry, h)
        out[tag] = {"plain": float(plain.mean()), "news": float(plain[news].mean()),
                    "wrong": float(plain[wrong].mean()),
                    "repeats": float(repeats[copied].mean())}
    return out


def payoff(corpus, contexts=CONTEXTS, table: dict[int, int] | None = None) -> list[dict]:
    """:func:`qkv.tasks.copy_payoff.copy_counts` of the validation text in windows of each of
    ``contexts`` characters, and of the training windows with repeats (context 64: the
    held-out kind, 1,024 windows), as fractions of all positions."""
    vocab = corpus.tokenizer.vocab_size
    table = copy_payoff.next_table(corpus.train, MATCH, vocab) if table is None else table
    rows = []
    for n in contexts:
        k = copy_payoff.text_counts(corpus, n, MATCH, table)
        rows.append({"what": f"plain text, {n} characters", "context": n, "repeats": False,
                     **_shares(k)})
    rng = np.random.default_rng([0, 7, 2])
    x, y, _ = induction.repeat_windows(corpus.val, rng, 1024, contexts[0], vocab)
    k = copy_payoff.copy_counts(x, y, MATCH, table, vocab)
    rows.append({"what": f"text with repeats, {contexts[0]} characters", "context": contexts[0],
                 "repeats": True, **_shares(k)})
    return rows


def _shares(k: copy_payoff.CopyCounts) -> dict:
    return {"positions": k.positions, "found": k.share("found"), "right": k.share("right"),
            "news": k.share("news"), "stats_right": k.share("stats_right")}


def measure(corpus=None, load=None) -> dict:
    """Every figure of the GPT's own heads, once: ``runs`` (each :data:`RUNS` entry's shape,
    history on the characters clock, first evaluation with an induction head or None, best
    evaluation), ``payoff`` (:func:`payoff`) and ``worth`` (:func:`worth` of each
    :data:`WORTH_RUNS` model's induction heads, or else its best-scoring head, with
    ``induction_heads`` saying which). ``load(run)`` loads a run (default ``run.load()``)."""
    from .corpus import load as load_corpus
    from .gpt_watch import INDUCTION

    corpus = load_corpus() if corpus is None else corpus
    runs, models = [], {}
    for r in RUNS:
        model, _, meta = r.load() if load is None else load(r)
        models[r.name] = model
        c = model.config
        rows = history(model, meta)
        runs.append({"name": r.name, "words": r.words, "command": r.command,
                     "layers": c.n_layer, "heads": c.n_head, "width": c.n_embd,
                     "context": c.block_size, "batch": c.batch, "params": model.num_params,
                     "mlp": c.mlp, "history": rows, "first": first_reached(rows, INDUCTION),
                     "best": max(rows, key=lambda row: row["induction"])})
    table = copy_payoff.next_table(corpus.train, MATCH, corpus.tokenizer.vocab_size)
    worths = []
    for name in WORTH_RUNS:
        found = induction_heads(models[name])
        w = worth(models[name], found or [best_head(models[name])], corpus, table)
        worths.append({"name": name, "induction_heads": bool(found), **w})
    return {"threshold": INDUCTION, "match": MATCH, "runs": runs,
            "payoff": payoff(corpus, table=table), "worth": worths}


def report() -> str:
    """Every figure of docs/gpt.md's section on the GPT's own heads, as printed there."""
    m = measure()
    lines = ["run                 steps   characters  first induction ≥ 0.3       best score"]
    for r in m["runs"]:
        hit, best, end = r["first"], r["best"], r["history"][-1]
        when = (f"step {hit['step']:,} ({hit['chars'] / 1e6:.2f} M chars)" if hit else "never")
        lines.append(f"{r['name']:<18} {end['step']:>6,} {end['chars'] / 1e6:>8.2f} M  "
                     f"{when:<27} {best['induction']:.3f} at step {best['step']:,}")
    lines += ["", f"copy rule (the last {MATCH} characters seen earlier in the window) as % of "
              "all positions:", "what                          found   right    news  "
              "statistics right"]
    for row in m["payoff"]:
        lines.append(f"{row['what']:<29} {100 * row['found']:5.1f} {100 * row['right']:7.1f} "
                     f"{100 * row['news']:7.2f} {100 * row['stats_right']:10.1f}")
    lines += ["", "heads switched off (mean): its induction heads, or else its best-scoring head;",
              "loss in nats per character (with → without):",
              "model        heads     ind. plain text     news           copy wrong     repeats"]
    for w in m["worth"]:
        cols = "  ".join(f"{w['with'][k]:.3f} → {w['without'][k]:.3f}"
                         for k in ("plain", "news", "wrong", "repeats"))
        names = " ".join(f"L{a}H{b}" for a, b in w["heads"])
        lines.append(f"{w['name']:<12} {names:<9} {'yes' if w['induction_heads'] else 'no':<4} "
                     f"{cols}")
    return "\n".join(lines)


def best_head(model: GPT) -> tuple[int, int]:
    """The head of layers 1 and up with the highest induction score (a model without one)."""
    from .gpt_watch import head_roles

    scores = head_roles(model).induction[1:]
    layer, head = np.unravel_index(int(np.argmax(scores)), scores.shape)
    return int(layer) + 1, int(head)


if __name__ == "__main__":
    print(report())
