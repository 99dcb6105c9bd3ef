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

Masked pairs (a causal model's future keys) are drawn as masked — grey, "×" — never as a weight
of 0. Without colour (output piped, ``NO_COLOR`` set, ``color_system=None``) the views still
carry the information in characters: small multiples draw one character per weight from a
shade ramp with the row's strongest key as "█" (:data:`SHADES`), and the neuron view draws
vectors as signed bar heights (:data:`BARS`).
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

# Without colour: a weight's character in the small multiples. The row's strongest key is
# STRONGEST; every other key by its weight, from below 5% to at least 50%.
SHADES = ((0.05, "·"), (0.25, "░"), (0.5, "▒"), (float("inf"), "▓"))
STRONGEST = "█"
# Without colour: a vector component x as a bar height, ▁ at −limit … █ at +limit.
BARS = "▁▂▃▄▅▆▇█"


def plain(console) -> bool:
    """True when ``console`` prints no colour (piped output, NO_COLOR, color_system=None)."""
    return bool(console.no_color or console.color_system is None)


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


def _block(weights: np.ndarray, allowed: np.ndarray | None = None):
    """One head as half-block characters: ceil(Nq/2) lines × Nk columns. ``allowed`` (Nq, Nk):
    masked pairs take the masked grey, off the white…blue weight scale."""
    from rich.style import Style
    from rich.text import Text

    w = np.asarray(weights, dtype=np.float64)
    nq, nk = w.shape

    def colour(i, j):
        if allowed is not None and not allowed[i, j]:
            return hex_color(MASKED)
        return hex_color(weight_rgb(w[i, j]))

    out = Text()
    for i in range(0, nq, 2):
        for j in range(nk):
            if i + 1 < nq:
                out.append("▀", Style(color=colour(i, j), bgcolor=colour(i + 1, j)))
            else:
                out.append("▀", Style(color=colour(i, j)))
        if i + 2 < nq:
            out.append("\n")
    return out


def shade(w: float) -> str:
    """The character of a weight that is not its row's strongest (see :data:`SHADES`)."""
    return next(char for bound, char in SHADES if w < bound)


def _plain_block(weights: np.ndarray, allowed: np.ndarray | None = None):
    """One head without colour: Nq lines × Nk characters — the row's strongest allowed key
    ``█``, the others by :func:`shade`, masked pairs ``×``."""
    from rich.text import Text

    w = np.asarray(weights, dtype=np.float64)
    ok = np.ones(w.shape, bool) if allowed is None else np.asarray(allowed, bool)
    lines = []
    for i in range(w.shape[0]):
        row = np.where(ok[i], w[i], -np.inf)
        best = int(np.argmax(row)) if ok[i].any() else -1
        lines.append("".join(MASKED_MARK if not ok[i, j] else STRONGEST if j == best
                             else shade(w[i, j]) for j in range(w.shape[1])))
    return Text("\n".join(lines))


def plain_legend(masked: bool) -> str:
    """What the characters of :func:`_plain_block` mean."""
    parts = [f"{STRONGEST} the row's strongest key"]
    low = 0.0
    for bound, char in SHADES:
        parts.append(f"{char} {'≥' if bound == float('inf') else ''}"
                     + (f"{low:.0%}" if bound == float("inf") else
                        f"<{bound:.0%}" if low == 0 else f"{low:.0%}–{bound:.0%}"))
        low = bound
    if masked:
        parts.append(f"{MASKED_MARK} masked (may not attend)")
    return "rows = queries, columns = keys; " + ", ".join(parts)


class SmallMultiples:
    """Every head of one layer as a small picture, in a grid as wide as the console allows."""

    def __init__(self, heads: Heads, layer: int):
        heads.head(layer, 0)  # checks the layer index
        self.heads, self.layer = heads, layer

    def grid(self, width: int, plain: bool = False):
        """The grid at ``width`` columns; ``plain``: characters instead of colours."""
        from rich.table import Table
        from rich.text import Text

        heads, nk = self.heads, self.heads.weights.shape[-1]
        per_row = max(1, min(heads.n_heads, (width + 2) // (max(nk, 7) + 2)))
        grid = Table.grid(padding=(0, 2))
        for _ in range(per_row):
            grid.add_column(no_wrap=True)
        cells = []
        draw = _plain_block if plain else _block
        for head in range(heads.n_heads):
            cell = Text(f"head {head}\n", style="bold")
            cell.append_text(draw(heads.weights[self.layer, head],
                                  heads.head_allowed(self.layer, head)))
            cells.append(cell)
        for start in range(0, len(cells), per_row):
            row = cells[start: start + per_row]
            grid.add_row(*row, *[""] * (per_row - len(row)))
        return grid

    def __rich_console__(self, console, options):
        from rich.text import Text

        no_colour = plain(console)
        yield self.grid(options.max_width, no_colour)
        masked = self.heads.allowed is not None and not self.heads.allowed[self.layer].all()
        if no_colour:
            yield Text(plain_legend(masked), style="dim")
        elif masked:
            yield Text("grey = masked (may not attend); white → blue = weight 0 → 1",
                       style="dim")


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


def _bars(values: np.ndarray, limit: float):
    """A vector without colour, one component per character: its height from ▁ (−limit) to █
    (+limit), so signs and sizes read in plain text (see :data:`BARS`)."""
    from rich.text import Text

    t = np.zeros(len(values)) if limit <= 0 else np.clip(np.asarray(values) / limit, -1, 1)
    levels = np.minimum(((t + 1) / 2 * len(BARS)).astype(int), len(BARS) - 1)
    return Text("".join(BARS[i] for i in levels))


class NeuronView:
    """:func:`neuron_view`, drawn with colours or, on a console without colour, characters."""

    def __init__(self, trace: Trace, keys: list[str], query: str, title: str = ""):
        q = np.asarray(trace.q, dtype=np.float64).reshape(-1, trace.q.shape[-1])
        if q.shape[0] != 1:
            raise ValueError(f"neuron_view needs a trace of one query, got {q.shape[0]} "
                             "queries: use qkv.explain(q[[i]], k, v)")
        k = np.asarray(trace.k, dtype=np.float64).reshape(-1, q.shape[1])
        if len(keys) != k.shape[0]:
            raise ValueError(f"keys has {len(keys)} labels but the trace has {k.shape[0]} keys")
        self.trace, self.keys, self.query, self.title = trace, keys, query, title
        self.q, self.k = q[0], k  # (Dk,), (Nk, Dk)

    def __rich_console__(self, console, options):
        yield self.group(plain(console), options.max_width)

    def group(self, no_colour: bool = False, width: int | None = None):
        """The view as a rich Group; ``no_colour``: vectors as bar heights, not colours, one
        character per component — the k and q ∘ k columns are left out (and the footer says
        so) when they do not fit ``width``; the numbers always do."""
        from rich import box
        from rich.console import Group
        from rich.table import Table
        from rich.text import Text

        trace, keys, q, k = self.trace, self.keys, self.q, self.k
        scores = np.asarray(trace.scores).reshape(-1)
        scaled = np.asarray(trace.scaled).reshape(-1)
        weights = np.asarray(trace.weights).reshape(-1)
        allowed = np.asarray(trace.allowed, dtype=bool).reshape(-1)
        products = q * k  # (Nk, Dk): summed along Dk they give the dot products
        vec_limit, prod_limit = limit_of(q, k), limit_of(products)
        vector = _bars if no_colour else _vector
        d = q.shape[0]
        head = Text()
        if self.title:
            head.append(self.title + "\n", style="bold")
        head.append(f"query {self.query!r}  q = ")
        head.append_text(vector(q, vec_limit))
        signs = ("bar heights ▁ −max … █ +max" if no_colour else "orange < 0 < blue")
        head.append(f"  (d_k = {d}; {signs}; |q| = {np.linalg.norm(q):.2f})\n", style="dim")
        table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, padding=(0, 1),
                      header_style="bold")
        cells = d if no_colour else (d + 1) // 2
        # key 12, three numbers of 7, the bar and "◀ strongest" 20, and the gaps between columns
        fixed = 12 + 3 * 7 + 20 + 6
        shown = 2 if width is None or fixed + 2 * (cells + 1) <= width else (
            1 if fixed + cells + 1 <= width else 0)
        table.add_column("key", max_width=12, overflow="ellipsis", no_wrap=True)
        for name in ("k", "q ∘ k")[:shown]:
            table.add_column(name, no_wrap=True, min_width=cells)
        for name in ("q · k", "scaled", "softmax"):
            table.add_column(name, justify="right", no_wrap=True, min_width=7)
        table.add_column("", no_wrap=True, min_width=8)
        best = int(np.argmax(np.where(allowed, weights, -np.inf))) if allowed.any() else -1
        for j, key in enumerate(keys):
            w = float(weights[j])
            vectors = [vector(k[j], vec_limit), vector(products[j], prod_limit)][:shown]
            if not allowed[j]:
                table.add_row(key, *vectors, f"{scores[j]:.2f}", MASKED_MARK, MASKED_MARK,
                              Text("masked", style="dim"))
                continue
            bar = Text("█" * round(w * 8), style=weight_color(max(w, 0.35)))
            if no_colour and j == best:
                bar.append(" ◀ strongest")
            table.add_row(key, *vectors, f"{scores[j]:.2f}", f"{scaled[j]:.3f}", f"{w:.4f}", bar)
        note = (f" {MASKED_MARK} = masked key (may not attend): no weight." if not allowed.all()
                else "")
        if shown < 2:
            note += (f" The {' and '.join(('k', 'q ∘ k')[shown:])} column"
                     f"{'s do' if shown == 0 else ' does'} not fit {width} columns: widen the "
                     "terminal to see them.")
        foot = Text(f"q · k sums the {d} products in each row of q ∘ k; the scaled scores are "
                    f"q · k × 1/√{d}; softmax over the keys gives weights summing to "
                    f"{weights.sum():.4f}. Scaled = q · k × {trace.scale:.4f}.{note}",
                    style="dim")
        return Group(head, table, foot)


def neuron_view(trace: Trace, keys: list[str], query: str, title: str = "") -> NeuronView:
    """The neuron view of one query, from ``qkv.explain(q[[i]], k, v)`` (a 1-query Trace).

    Columns: key token, k_j (each component coloured), q ∘ k_j (the products the dot product
    sums), q·k_j, the scaled score (× 1/√d_k) and the softmax weight with a bar. Keys the
    trace's mask denies show "×" instead of a scaled score and a weight. On a console without
    colour the vectors are bar heights (:func:`_bars`) and the strongest key is pointed at.
    """
    return NeuronView(trace, keys, query, title)
