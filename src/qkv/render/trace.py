"""A :class:`qkv.Trace` for people: the text form (``str(trace)``) and the notebook HTML form
(``trace._repr_html_()``). The engine computes the trace; this module only lays it out.

Both forms show the first few (batch, head) planes and rows/columns, numbers to 4 decimals.
Only the weights table is coloured, on the one weight scale of :mod:`qkv.render.colors`;
scores, scaled scores and outputs are not weights and stay uncoloured. Masked pairs are grey
with a "×" — never the white of a zero weight.
"""

from __future__ import annotations

import math
from html import escape

import numpy as np

from .colors import MASKED, MASKED_MARK, hex_color, ink_for, weight_color

# The text and HTML forms show at most this many heads and rows/columns per head.
SHOW_PLANES, SHOW_ROWS = 4, 16


def _planes(trace):
    """The first few (batch, head) indices of the score matrices, and how many there are."""
    lead = trace.weights.shape[:-2]
    planes = list(np.ndindex(*lead)) if lead else [()]
    return planes[:SHOW_PLANES], len(planes)


def steps(trace, index) -> list[tuple[str, str, str, np.ndarray]]:
    """[(title, note, kind, matrix)] of one plane; kind is "weights", "allowed" or "plain"."""
    shown = f"{trace.scale:.4f}"
    if math.isclose(trace.scale, 1 / math.sqrt(trace.q.shape[-1])):
        shown = f"1/√{trace.q.shape[-1]} = {trace.scale:.4f}"
    out = [
        ("scores = Q Kᵀ", "each query's dot product with each key", "plain",
         trace.scores[index]),
        (f"scaled = scores × {shown}" + (" + bias" if trace.has_bias else ""),
         "dividing by √d_k keeps softmax out of its hard-argmax regime", "plain",
         trace.scaled[index]),
    ]
    if trace.mask is not None:
        out.append((f"allowed ({trace.mask})", "1 = may attend, 0 = masked out", "allowed",
                    trace.allowed[index].astype(int)))
    out.append(("weights = softmax(scaled) over the keys", "each row sums to 1; masked keys get 0",
                "weights", trace.weights[index]))
    out.append(("output = weights V", "each query's blend of the values", "output",
                trace.output[index]))
    return [(f"{n} · {title}", note, kind, m) for n, (title, note, kind, m) in enumerate(out, 1)]


def fmt(x) -> str:
    x = float(x)
    if math.isinf(x):
        return "-inf" if x < 0 else "inf"
    return f"{x:.4f}"


def text(trace) -> str:
    """``str(trace)``: every step as a plain-text table."""
    planes, total = _planes(trace)
    nq, nk = trace.weights.shape[-2:]
    lines = [f"Attention trace: {nq} quer{'y' if nq == 1 else 'ies'} × {nk} "
             f"key{'' if nk == 1 else 's'}, Dk = {trace.q.shape[-1]}, Dv = {trace.v.shape[-1]}"]
    for index in planes:
        if index:
            lines.append(f"\n── batch/head {index} ──")
        for title, note, kind, matrix in steps(trace, index):
            lines.append(f"\nStep {title}   ({note})")
            lines.extend(_text_table(matrix, "q", "d" if kind == "output" else "k"))
        lse = trace.lse[index]
        lines.append("\nlse = log Σ exp(scaled): "
                     + ", ".join(fmt(x) for x in np.atleast_1d(lse)[:SHOW_ROWS]))
    if total > len(planes):
        lines.append(f"\n({total - len(planes)} more batch/head planes not shown)")
    return "\n".join(lines)


def html(trace) -> str:
    """``trace._repr_html_()``: offline HTML with inline styles; no scripts, no network."""
    planes, total = _planes(trace)
    parts = ['<div class="qkv-trace" style="font-family:monospace;font-size:12px;'
             'max-width:100%;overflow-x:auto">']
    for index in planes:
        if index:
            parts.append(f"<h4>batch/head {escape(str(index))}</h4>")
        allowed = np.atleast_2d(trace.allowed[index])
        for title, note, kind, matrix in steps(trace, index):
            parts.append(f"<p><b>Step {escape(title)}</b> <i>{escape(note)}</i></p>")
            parts.append(_html_table(matrix, "q", "d" if kind == "output" else "k",
                                     allowed if kind == "weights" else None))
    if total > len(planes):
        parts.append(f"<p>({total - len(planes)} more batch/head planes not shown)</p>")
    parts.append("</div>")
    return "".join(parts)


def _text_table(matrix: np.ndarray, rows: str, cols: str) -> list[str]:
    m = np.atleast_2d(matrix)[:SHOW_ROWS, :SHOW_ROWS]
    cells = [[fmt(x) if m.dtype.kind == "f" else str(x) for x in row] for row in m]
    width = max([len(c) for row in cells for c in row] + [len(f"{cols}{m.shape[1] - 1}")])
    header = " " * 5 + " ".join(f"{cols}{j}".rjust(width) for j in range(m.shape[1]))
    body = [f"{rows}{i}".ljust(5) + " ".join(c.rjust(width) for c in row)
            for i, row in enumerate(cells)]
    more = matrix.shape[-1] > SHOW_ROWS or np.atleast_2d(matrix).shape[0] > SHOW_ROWS
    return [header, *body] + (["  … (truncated for display)"] if more else [])


def _html_table(matrix: np.ndarray, rows: str, cols: str, allowed: np.ndarray | None) -> str:
    """One step as a table; with ``allowed`` (the weights step) cells take the weight scale
    and masked pairs are grey with "×"."""
    m = np.atleast_2d(matrix)[:SHOW_ROWS, :SHOW_ROWS]
    out = ['<table style="border-collapse:collapse;margin:2px 0 8px 0"><tr><th></th>']
    out += [f'<th style="padding:2px 6px">{cols}{j}</th>' for j in range(m.shape[1])]
    out.append("</tr>")
    for i, row in enumerate(m):
        out.append(f'<tr><th style="padding:2px 6px">{rows}{i}</th>')
        for j, x in enumerate(row):
            style = "padding:2px 6px;text-align:right;border:1px solid #ddd"
            text_ = fmt(x) if m.dtype.kind == "f" else str(x)
            if allowed is not None and not allowed[i, j]:
                style += f";background:{hex_color(MASKED)};color:#444"
                text_ = f"{MASKED_MARK} masked"
            elif allowed is not None:
                style += f";background:{weight_color(float(x))};color:{ink_for(float(x))}"
            out.append(f'<td style="{style}">{text_}</td>')
        out.append("</tr>")
    out.append("</table>")
    return "".join(out)
