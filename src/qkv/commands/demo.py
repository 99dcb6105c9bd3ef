"""Walk through softmax(Q Kᵀ / √d_k) V step by step, on the worked examples of the seed texts.

1. The librarian search: one query against three keys — dot products, scaled scores, softmax
   weights — and the blended output, checked against the numbers the lesson prints.
2. Why divide by √d_k: softmax([8, 0]) against softmax([1, 0]), and the spread of scores of
   random 64-dimensional vectors with and without the scale.
3. Masks decide which pairs may attend: a causal mask, rows renormalising, a fully masked row.

Every number is computed by qkv (the traces come from its float64 reference, and the kernel is
checked against it); the lesson's printed values are shown beside them, and rounding differences
are explained where they appear.
"""

from __future__ import annotations

import argparse

import numpy as np

HELP = "walk through the lesson's worked example of attention, step by step"

# The lesson's worked example (Worked examples 1 and 2) and the numbers it prints.
QUERY = [[1.0, 0.0]]
KEYS = [[1.0, 0.0], [0.0, 1.0], [0.7, 0.7]]
VALUES = [[2.0, 0.0], [0.0, 2.0], [1.0, 1.0]]
SEED_WEIGHTS = (0.434, 0.214, 0.351)
SEED_OUTPUT = (1.219, 0.779)  # blended from the *rounded* weights
SEED_SOFTMAX = {(8.0, 0.0): (0.9997, 0.0003), (1.0, 0.0): (0.731, 0.269)}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--seed", type=int, default=0,
                        help="random seed for the 64-dimensional example (default 0)")


def _agrees(value: float, printed: float) -> bool:
    """Does ``value`` round to the lesson's printed number (at the lesson's precision)?"""
    decimals = len(f"{printed}".split(".")[1])
    return round(value, decimals) == printed


def _check(ok: bool) -> str:
    return "[green]✓[/green]" if ok else "[red]✗[/red]"


def run(args: argparse.Namespace) -> int:
    import qkv
    from qkv.render.plain import console_kit

    # rich (the [cli] extra) when installed; plain text otherwise: the demo needs NumPy only
    Console, Table, Panel = console_kit()

    console = Console()
    trace = qkv.explain(QUERY, KEYS, VALUES)
    ok = True

    console.print(Panel.fit(
        "Attention(Q, K, V) = softmax(Q Kᵀ / √d_k) V\n"
        "Each token asks with a query, offers a key, and provides a value.",
        title="qkv demo"))

    # -- 1. the lookup ---------------------------------------------------------------------
    console.rule("1 · The librarian search: q = (1, 0) against three keys")
    table = Table(title=f"d_k = 2, so scale = 1/√2 = {trace.scale:.4f}")
    for col in ("key", "k", "q · k", "scaled", "exp(scaled)", "weight", "seed says", ""):
        table.add_column(col, justify="right")
    exps = np.exp(trace.scaled[0])
    for j, key in enumerate(KEYS):
        weight = trace.weights[0, j]
        good = _agrees(weight, SEED_WEIGHTS[j])
        ok &= good
        table.add_row(f"k{j}", str(tuple(key)), f"{trace.scores[0, j]:.3f}",
                      f"{trace.scaled[0, j]:.3f}", f"{exps[j]:.3f}", f"{weight:.3f}",
                      f"{SEED_WEIGHTS[j]}", _check(good))
    console.print(table)
    hand = float(np.round(exps, 3).sum())
    console.print(f"sum of exp = {exps.sum():.3f} (the lesson adds the rounded values "
                  f"{' + '.join(f'{e:.3f}' for e in exps)} = {hand:.3f} by hand, so it prints "
                  f"{hand:.3f}); weights = exp / sum sum to {trace.weights[0].sum():.4f}. Keys are "
                  "numbered from 0 here, as in qkv explore and Python (the lesson's k₁, k₂, k₃ are "
                  "k0, k1, k2). k0 matches best and gets the most weight, but k2, a partial "
                  "match, still earns a real share: a soft lookup.")

    # -- 2. the blend ----------------------------------------------------------------------
    console.rule("2 · Blending the values with those weights")
    exact = trace.output[0]
    rounded = np.round(trace.weights[0], 3) @ np.asarray(VALUES)
    kernel_out = qkv.attention(np.asarray(QUERY, np.float32), np.asarray(KEYS, np.float32),
                               np.asarray(VALUES, np.float32))[0]
    blend = Table()
    for col in ("", "output", "seed says", ""):
        blend.add_column(col, justify="right")
    seed_ok = all(_agrees(r, s) for r, s in zip(rounded, SEED_OUTPUT, strict=True))
    ok &= seed_ok and bool(np.allclose(kernel_out, exact, atol=1e-6))
    blend.add_row("from the rounded weights (as the seed does)",
                  f"({rounded[0]:.3f}, {rounded[1]:.3f})", str(SEED_OUTPUT), _check(seed_ok))
    blend.add_row("exact (float64 reference)", f"({exact[0]:.4f}, {exact[1]:.4f})", "", "")
    blend.add_row("qkv.attention, float32 tiled kernel",
                  f"({kernel_out[0]:.4f}, {kernel_out[1]:.4f})", "",
                  _check(bool(np.allclose(kernel_out, exact, atol=1e-6))))
    console.print(blend)
    console.print("The seed blends the weights rounded to 3 decimals, (0.434, 0.214, 0.351), "
                  f"and gets {SEED_OUTPUT}; with unrounded weights the output is "
                  f"({exact[0]:.4f}, {exact[1]:.4f}). Neither is any single value: it is a blend.")

    # -- 3. why √d_k -----------------------------------------------------------------------
    console.rule("3 · Why divide by √d_k")
    soft = Table(title="softmax of two scores")
    for col in ("scores", "softmax", "seed says", ""):
        soft.add_column(col, justify="right")
    for scores, printed in SEED_SOFTMAX.items():
        # A softmax over two keys is attention of a 1-d query against two 1-d keys, scale 1.
        weights = qkv.attention_weights([[1.0]], [[scores[0]], [scores[1]]], scale=1.0)[0]
        decimals = len(str(printed[1]).split(".")[1])
        good = all(_agrees(w, s) for w, s in zip(weights, printed, strict=True))
        ok &= good
        soft.add_row(str(list(scores)), f"[{weights[0]:.{decimals}f}, {weights[1]:.{decimals}f}]",
                     str(list(printed)), _check(good))
    console.print(soft)
    rng = np.random.default_rng(args.seed)
    d_k = 64
    q = rng.standard_normal((256, d_k))
    k = rng.standard_normal((256, d_k))
    raw = qkv.explain(q, k, k, scale=1.0)
    scaled = qkv.explain(q, k, k)
    spread = Table(title=f"256 random queries × 256 random keys, d_k = {d_k}, entries ~ N(0, 1)")
    for col in ("", "std of scores", "mean largest weight"):
        spread.add_column(col, justify="right")
    spread.add_row("q · k (no scale)", f"{raw.scaled.std():.2f}",
                   f"{raw.weights.max(axis=-1).mean():.3f}")
    spread.add_row(f"q · k / √{d_k}", f"{scaled.scaled.std():.2f}",
                   f"{scaled.weights.max(axis=-1).mean():.3f}")
    console.print(spread)
    console.print(f"The dot product of two such vectors has variance d_k, so its std is "
                  f"√{d_k} = 8: softmax becomes nearly a hard argmax. Dividing by √d_k brings the "
                  "std back to about 1, and every key keeps a share of weight and of gradient.")

    # -- 4. masks --------------------------------------------------------------------------
    console.rule("4 · Masks decide which pairs may attend (True = may attend)")
    x = np.asarray([[1.0, 0.0], [0.0, 1.0], [0.7, 0.7], [1.0, 1.0]])
    masked = qkv.explain(x, x, x, mask=qkv.causal())
    grid = Table(title="causal(): token i sees tokens 0..i; each row still sums to 1")
    grid.add_column("query")
    for j in range(4):
        grid.add_column(f"k{j}", justify="right")
    for i in range(4):
        grid.add_row(f"q{i}", *[f"{w:.3f}" if masked.allowed[i, j] else "[dim]·[/dim]"
                                for j, w in enumerate(masked.weights[i])])
    console.print(grid)
    none = qkv.attention(x, x, x, mask=qkv.padding(0))
    console.print(f"A query with no allowed key (padding(0) hides every key) returns "
                  f"{none[0].tolist()} — zeros, not NaN.")

    console.rule("Check yourself")
    ten = qkv.attention_weights(np.ones((10, 4)), np.ones((10, 4)))
    console.print(f"The weight matrix of 10 tokens has shape {ten.shape}: one row per query.")
    console.print("[bold green]All numbers agree with the lesson.[/bold green]" if ok
                  else "[bold red]Some numbers disagree with the lesson.[/bold red]")
    return 0 if ok else 1
