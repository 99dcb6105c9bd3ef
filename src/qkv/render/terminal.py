"""Terminal views with rich: a head's heat-map grid, small multiples of many heads, and the
bertviz "neuron view" of one query.

- :func:`heatmap`: tokens down the side and (vertically) along the top; each cell is the weight
  in percent on a background of :func:`qkv.render.colors.weight_color`.
- :func:`small_multiples`: every head of a layer as a tiny picture, two rows of weights per
  character line (the upper half-block ``▀`` takes the upper row as its foreground colour and the
  lower row as its background), so a cell is about square.
- :func:`neuron_view`: for one query token of one head, read from a :class:`qkv.Trace`: the
  query vector, each key vector, their elementwise product (whose sum is the dot product), the
  dot product q·k, the scaled score, and the softmax weight.
"""

from __future__ import annotations

import numpy as np

from ..engine.trace import Trace
from .colors import (
    MASKED,
    MASKED_MARK,
    hex_color,
    ink_for,
    limit_of,
    signed_rgb,
    weight_color,
    weight_rgb,
)
from .heads import Heads


def _short(label: str, width: int) -> str:
    return label if len(label) <= width else label[: width - 1] + "…"


def heatmap(weights: np.ndarray, queries: list[str], keys: list[str], title: str = "",
            max_width: int | None = None, allowed: np.ndarray | None = None):
    """A rich ``Text`` of one head ``(Nq, Nk)``: the weight of each cell in percent (0–100).

    With ``max_width``, only the key columns that fit are drawn, and a note says how many were
    left out (the HTML and SVG views show them all). :class:`Heatmap` passes the console width.
    ``allowed`` (Nq, Nk) bool: masked pairs print "×" on grey, never a weight of 0.
    """
    from rich.text import Text

    w = np.asarray(weights, dtype=np.float64)
    side = min(max(len(q) for q in queries), 14)
    tall = min(max(len(k) for k in keys), 10)
    lead = " " * (side + 5)
    nk = w.shape[1]
    if max_width is not None:
        nk = max(1, min(nk, (max_width - len(lead)) // 3))
    out = Text()
    if title:
        out.append(title + "\n", style="bold")
    # Key labels written vertically, bottom-aligned, one 3-character column per key.
    for r in range(tall):
        out.append(lead)
        for key in keys[:nk]:
            label = _short(key, tall).rjust(tall)
            out.append(f" {label[r]} ")
        out.append("\n")
    for i, query in enumerate(queries):
        out.append(f"{i:>3} {_short(query, side).ljust(side)} ")
        for j in range(nk):
            v = float(w[i, j])
            if allowed is not None and not allowed[i, j]:
                out.append(f"{MASKED_MARK:>3}", style=f"#444444 on {hex_color(MASKED)}")
                continue
            out.append(f"{round(v * 100):>3d}", style=f"{ink_for(v)} on {weight_color(v)}")
        out.append("\n")
    out.append("% of each query's attention; each row sums to 100"
               + (f"; {MASKED_MARK} = masked (may not attend)" if allowed is not None else ""),
               style="dim")
    if nk < w.shape[1]:
        out.append(f"\nkeys {nk}–{w.shape[1] - 1} do not fit this terminal and are not shown; "
                   "widen it, or write the HTML or SVG view", style="yellow")
    return out


class Heatmap:
    """:func:`heatmap` sized to the console it is printed on."""

    def __init__(self, weights: np.ndarray, queries: list[str], keys: list[str], title: str = "",
                 allowed: np.ndarray | None = None):
        self.args = (weights, queries, keys, title)
        self.allowed = allowed

    def __rich_console__(self, console, options):
        yield heatmap(*self.args, max_width=options.max_width, allowed=self.allowed)


def _block(weights: np.ndarray):
    """One head as half-block characters: ceil(Nq/2) lines × Nk columns."""
    from rich.style import Style
    from rich.text import Text

    w = np.asarray(weights, dtype=np.float64)
    nq, nk = w.shape
    out = Text()
    for i in range(0, nq, 2):
        for j in range(nk):
            top = hex_color(weight_rgb(w[i, j]))
            if i + 1 < nq:
                out.append("▀", Style(color=top, bgcolor=hex_color(weight_rgb(w[i + 1, j]))))
            else:
                out.append("▀", Style(color=top))
        if i + 2 < nq:
            out.append("\n")
    return out


class SmallMultiples:
    """Every head of one layer as a small picture, in a grid as wide as the console allows."""

    def __init__(self, heads: Heads, layer: int):
        heads.head(layer, 0)  # checks the layer index
        self.heads, self.layer = heads, layer

    def grid(self, width: int):
        from rich.table import Table
        from rich.text import Text

        heads, nk = self.heads, self.heads.weights.shape[-1]
        per_row = max(1, min(heads.n_heads, (width + 2) // (max(nk, 7) + 2)))
        grid = Table.grid(padding=(0, 2))
        for _ in range(per_row):
            grid.add_column(no_wrap=True)
        cells = []
        for head in range(heads.n_heads):
            cell = Text(f"head {head}\n", style="bold")
            cell.append_text(_block(heads.weights[self.layer, head]))
            cells.append(cell)
        for start in range(0, len(cells), per_row):
            row = cells[start: start + per_row]
            grid.add_row(*row, *[""] * (per_row - len(row)))
        return grid

    def __rich_console__(self, console, options):
        yield self.grid(options.max_width)


def small_multiples(heads: Heads, layer: int) -> SmallMultiples:
    """Every head of ``layer`` as a small picture (half-block characters), in a grid."""
    return SmallMultiples(heads, layer)


def _vector(values: np.ndarray, limit: float):
    """A vector as coloured cells, two components per character (orange < 0 < blue).

    The left-half block ``▌`` takes component 2c as its colour and 2c+1 as its background, so
    a 32-dimensional head vector is 16 characters wide.
    """
    from rich.style import Style
    from rich.text import Text

    out = Text()
    for c in range(0, len(values), 2):
        left = hex_color(signed_rgb(values[c], limit))
        right = (hex_color(signed_rgb(values[c + 1], limit)) if c + 1 < len(values) else None)
        out.append("▌", Style(color=left, bgcolor=right))
    return out


def neuron_view(trace: Trace, keys: list[str], query: str, title: str = ""):
    """The neuron view of one query, from ``qkv.explain(q[[i]], k, v)`` (a 1-query Trace).

    Columns: key token, k_j (each component coloured), q ∘ k_j (the products the dot product
    sums), q·k_j, the scaled score (× 1/√d_k) and the softmax weight with a bar.
    """
    from rich import box
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    q = np.asarray(trace.q, dtype=np.float64).reshape(-1, trace.q.shape[-1])
    if q.shape[0] != 1:
        raise ValueError(f"neuron_view needs a trace of one query, got {q.shape[0]} queries: "
                         "use qkv.explain(q[[i]], k, v)")
    q = q[0]
    k = np.asarray(trace.k, dtype=np.float64).reshape(-1, q.shape[0])
    scores = np.asarray(trace.scores).reshape(-1)
    scaled = np.asarray(trace.scaled).reshape(-1)
    weights = np.asarray(trace.weights).reshape(-1)
    if len(keys) != k.shape[0]:
        raise ValueError(f"keys has {len(keys)} labels but the trace has {k.shape[0]} keys")
    products = q * k  # (Nk, Dk): summed along Dk they give the dot products
    vec_limit, prod_limit = limit_of(q, k), limit_of(products)
    d = q.shape[0]
    head = Text()
    if title:
        head.append(title + "\n", style="bold")
    head.append(f"query {query!r}  q = ")
    head.append_text(_vector(q, vec_limit))
    head.append(f"  (d_k = {d}; orange < 0 < blue; |q| = {np.linalg.norm(q):.2f})\n", style="dim")
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, padding=(0, 1),
                  header_style="bold")
    table.add_column("key", max_width=12, overflow="ellipsis", no_wrap=True)
    table.add_column("k", no_wrap=True, min_width=(d + 1) // 2)
    table.add_column("q ∘ k", no_wrap=True, min_width=(d + 1) // 2)
    for name in ("q · k", "scaled", "softmax"):
        table.add_column(name, justify="right", no_wrap=True, min_width=7)
    table.add_column("", no_wrap=True, min_width=8)
    for j, key in enumerate(keys):
        w = float(weights[j])
        table.add_row(key, _vector(k[j], vec_limit), _vector(products[j], prod_limit),
                      f"{scores[j]:.2f}", f"{scaled[j]:.3f}", f"{w:.4f}",
                      Text("█" * round(w * 8), style=weight_color(max(w, 0.35))))
    foot = Text(f"q · k sums the {d} products in each row of q ∘ k; the scaled scores are "
                f"q · k × 1/√{d}; softmax over the keys gives weights summing to "
                f"{weights.sum():.4f}. Scaled = q · k × {trace.scale:.4f}.", style="dim")
    return Group(head, table, foot)
