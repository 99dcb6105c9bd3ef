"""SVG of one attention head: a labelled heat map.

Plain SVG 1.1 with inline attributes — no fonts to fetch, no scripts — so a file opens anywhere,
prints, and drops into a paper. Every cell carries its weight: ``data-w`` (6 decimals, for
machines), a ``<title>`` tooltip (4 decimals) and, on heat maps small enough to read, the weight
printed in the cell (2 decimals, as ".27"). The colour is :func:`qkv.render.colors.weight_color`.
"""

from __future__ import annotations

from html import escape

import numpy as np

from .colors import MASKED, MASKED_MARK, hex_color, ink_for, weight_color

FONT = "font-family:ui-monospace,Menlo,Consolas,monospace"
NUMBERS_UP_TO = 24  # print the weights in the cells when a head has at most this many keys


def shown(w: float) -> str:
    """A weight as printed in a cell: 2 decimals, no leading zero (".27"), so it fits."""
    text = f"{w:.2f}"
    return text[1:] if text.startswith("0.") else text


def _text_width(labels: list[str], px: float) -> float:
    return max((len(s) for s in labels), default=1) * px * 0.62 + 6


def head_svg(weights: np.ndarray, queries: list[str], keys: list[str], *, title: str = "",
             cell: int = 26, numbers: bool | None = None, tooltips: bool = True,
             raster: bool = False, standalone: bool = True,
             allowed: np.ndarray | None = None) -> str:
    """A heat map of one head ``(Nq, Nk)``: query tokens down the left, key tokens along the top.

    Row i is query i's softmax over the keys, so each row sums to 1.

    - ``numbers``: print the weights in the cells (default: when Nk ≤ 24).
    - ``tooltips``: a ``<title>`` per cell, "query → key: weight".
    - ``raster``: draw the cells as one embedded PNG (one pixel per weight) instead of one
      ``<rect>`` each — for long sentences in HTML, where Nq × Nk elements per head would be
      megabytes. Vector output (the default) is for papers.
    - ``standalone``: add the XML namespace, for a file of its own.
    - ``allowed``: ``(Nq, Nk)`` bool; a masked pair (False) is drawn grey with "×" and titled
      "masked", so it never looks like a weight of 0.
    """
    w = np.asarray(weights, dtype=np.float64)
    nq, nk = w.shape
    numbers = (nk <= NUMBERS_UP_TO if numbers is None else numbers) and not raster
    font = max(9, min(13, cell // 2))
    left = round(_text_width(queries, font) + 4)
    top = round(_text_width(keys, font) + 4 + (22 if title else 0))
    width, height = left + nk * cell + 8, top + nq * cell + 34
    width = max(width, round(len(title) * font * 0.62 + 12))  # room for the title
    xmlns = ' xmlns="http://www.w3.org/2000/svg"' if standalone else ""
    out = [f'<svg{xmlns} class="qkv-head" width="{width}" height="{height}" '
           f'viewBox="0 0 {width} {height}" data-nq="{nq}" data-nk="{nk}" '
           f'style="{FONT};font-size:{font}px">'
           f"<style>.qkv-head rect.c{{stroke:#fff;stroke-width:.5}}"
           f".qkv-head text.w{{font-size:{font - 2}px;text-anchor:middle;pointer-events:none}}"
           "</style>"]
    if title:
        out.append(f'<text class="title" x="4" y="15" font-weight="bold">{escape(title)}</text>')
    # Key labels, rotated to read bottom-up above their column.
    for j, key in enumerate(keys):
        x, y = left + j * cell + cell / 2 + font / 3, top - 4
        out.append(f'<text class="key" data-j="{j}" x="{x:.1f}" y="{y}" '
                   f'transform="rotate(-90 {x:.1f} {y})">{escape(key)}</text>')
    if raster:
        from .png import data_uri, weights_png

        href = data_uri(weights_png(w, allowed))
        out.append(f'<image class="cells" x="{left}" y="{top}" width="{nk * cell}" '
                   f'height="{nq * cell}" preserveAspectRatio="none" '
                   f'style="image-rendering:pixelated" href="{href}"/>')
    for i, query in enumerate(queries):
        y = top + i * cell
        out.append(f'<g class="row" data-i="{i}">')
        out.append(f'<text class="query" x="{left - 4}" y="{y + cell / 2 + font / 3:.1f}" '
                   f'text-anchor="end">{escape(query)}</text>')
        for j in range(0 if raster else nk):
            v = float(w[i, j])
            x = left + j * cell
            masked = allowed is not None and not allowed[i, j]
            said = "masked" if masked else f"{v:.4f}"
            tip = (f"<title>{escape(query)} → {escape(keys[j])}: {said}</title></rect>"
                   if tooltips else "</rect>")
            fill = hex_color(MASKED) if masked else weight_color(v)
            out.append(f'<rect class="c{" masked" if masked else ""}" x="{x}" y="{y}" '
                       f'width="{cell}" height="{cell}" fill="{fill}" data-w="{v:.6f}">{tip}')
            if masked:
                out.append(f'<text class="w" x="{x + cell / 2:.1f}" '
                           f'y="{y + cell / 2 + font / 3:.1f}" fill="#444">{MASKED_MARK}</text>')
            elif numbers:
                out.append(f'<text class="w" x="{x + cell / 2:.1f}" '
                           f'y="{y + cell / 2 + font / 3:.1f}" fill="{ink_for(v)}">'
                           f"{shown(v)}</text>")
        out.append("</g>")
    out.append(_legend(left, top + nq * cell + 10, min(nk * cell, 160)))
    out.append("</svg>")
    return "".join(out)


def _legend(x: float, y: float, length: float) -> str:
    """A colour bar from 0 to 1 under the heat map."""
    steps = 10
    parts = ['<g class="legend">']
    for s in range(steps):
        parts.append(f'<rect x="{x + s * length / steps:.1f}" y="{y:.1f}" '
                     f'width="{length / steps + 0.5:.1f}" height="8" '
                     f'fill="{weight_color((s + 0.5) / steps)}"/>')
    parts.append(f'<text x="{x:.1f}" y="{y + 20:.1f}" font-size="9px">0</text>')
    parts.append(f'<text x="{x + length:.1f}" y="{y + 20:.1f}" font-size="9px" '
                 'text-anchor="end">1</text>')
    parts.append("</g>")
    return "".join(parts)
