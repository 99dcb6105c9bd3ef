"""A :class:`qkv.Trace` for people: the text form (``str(trace)``) and the notebook HTML form
(``trace._repr_html_()``). The engine computes the trace; this module only lays it out.

Both forms show the inputs q, k, v, then each step of softmax(QKᵀ/√d_k)V as the seed works it by
hand — scores, scaled, (allowed,) e^(scaled − row max) with each row's Σ, weights, output — for
the first few (batch, head) planes and rows/columns, numbers to 4 decimals. Every sentence about
the numbers is written from them (the e^x example row, the bottom-right alignment of a mask when
Nq < Nk). Only the weights table is coloured, on the one weight scale of :mod:`qkv.render.colors`;
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


def inputs(trace, index) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """q (Nq, Dk), k (Nk, Dk), v (Nk, Dv) of one plane; a query head reads kv head
    h · Hkv // Hq (grouped-query attention), and batch dims broadcast."""
    if not index:
        return trace.q, trace.k, trace.v
    lead = trace.weights.shape[:-3]  # (*batch), without the query heads
    *batch, h = index
    out = [np.broadcast_to(trace.q, (*lead, *trace.q.shape[-3:]))[(*batch, h)]]
    for x in (trace.k, trace.v):
        hkv = x.shape[-3]
        full = np.broadcast_to(x, (*lead, *x.shape[-3:]))
        out.append(full[(*batch, h * hkv // trace.q.shape[-3])])
    return out[0], out[1], out[2]


def alignment(trace, index) -> str | None:
    """Why q0 sees keys past k0 under a causal-style mask when Nq < Nk, from the allowed pairs:
    queries align bottom-right (query i stands at position i + Nk − Nq). None when the mask has
    no position rule (``trace.positional``), Nq ≥ Nk, a pair breaks the causal rule
    j ≤ i + Nk − Nq, or q0 sees no key past k0."""
    nq, nk = trace.weights.shape[-2:]
    if not trace.positional or nq == 0 or nq >= nk:
        return None
    allowed = np.atleast_2d(trace.allowed[index])  # (Nq, Nk)
    shift = nk - nq
    i, j = np.indices(allowed.shape)
    if (allowed & (j > i + shift)).any():
        return None  # not a causal-style mask: some query sees a key after its position
    seen = np.flatnonzero(allowed[0])
    if not (seen > 0).any():
        return None
    causal = bool((allowed == (j <= i + shift)).all())
    listed = ", ".join(f"k{x}" for x in seen)
    return (f"Nq = {nq} < Nk = {nk}: masks align queries bottom-right, so query i stands at "
            f"position i + Nk − Nq = i + {shift} and the last query q{nq - 1} lines up with the "
            f"last key k{nk - 1} (as when decoding with a KV cache: the new queries come after "
            f"the cached keys). So q0 stands at position {shift}, and "
            + ("under the causal rule (key j ≤ position) " if causal else "under this mask ")
            + f"it may attend to {listed} (standing at position 0, it could see no key past k0).")


def exp_note(trace, index) -> str:
    """The e^x step in words, from the first row's numbers: the shift by the row max m, and the
    unshifted e^x the lesson writes by hand (when e^m is finite)."""
    row_max = np.atleast_1d(trace.row_max[index])
    exp = np.atleast_2d(trace.exp[index])
    total = np.atleast_1d(trace.exp_sum[index])
    allowed = np.atleast_2d(trace.allowed[index])
    note = ("softmax subtracts each row's largest allowed score m before e^x (the same weights, "
            "no overflow); weights = e^(x − m) / Σ")
    if allowed.shape[0] == 0:
        return note + "; there are no queries, so there are no rows"
    if allowed.shape[1] == 0:
        return note + "; there are no keys, so every Σ is 0 and there are no weights"
    if not allowed[0].any():
        return note + "; q0 has no allowed key, so its Σ is 0 and its weights are 0"
    first = [j for j in range(exp.shape[1]) if allowed[0, j]]
    j = first[0]
    note += (f". Row q0: m = {fmt(row_max[0])}, Σ = {fmt(total[0])}, so w(q0, k{j}) = "
             f"{fmt(exp[0, j])} / {fmt(total[0])} = {fmt(exp[0, j] / total[0])}")
    if row_max[0] <= 700:  # e^m is a float: show the unshifted exponentials as well
        factor = math.exp(row_max[0])
        plain = ", ".join(fmt(exp[0, x] * factor) for x in first[:SHOW_ROWS])
        note += (f". Unshifted (× e^m = {fmt(factor)}), q0's e^x are {plain}, "
                 f"Σ = {fmt(total[0] * factor)}: the factor cancels in the ratio")
    return note


def weights_note(trace, index) -> str:
    """What the weights' rows sum to, from the allowed pairs: 1, or 0 for a row with no
    allowed key (then the row is all 0 and its lse is −inf)."""
    allowed = np.atleast_2d(trace.allowed[index])  # (Nq, Nk)
    nq = allowed.shape[0]
    if nq == 0:
        return "there are no queries, so there are no rows"
    empty = int((~allowed.any(axis=1)).sum())
    if empty == 0:
        return "each row sums to 1" + ("; masked keys get 0" if trace.mask is not None else "")
    if empty == nq:
        return ("no query has an allowed key, so every row is 0 (not 1) and every lse is −inf"
                if nq > 1 else "q0 has no allowed key, so its row is 0 (not 1) and its lse is −inf")
    rows = "row" if empty == 1 else "rows"
    return (f"each row with an allowed key sums to 1; {empty} {rows} with no allowed key "
            f"{'is' if empty == 1 else 'are'} 0 (lse −inf); masked keys get 0")


def steps(trace, index) -> list[tuple[str, str, str, np.ndarray]]:
    """[(title, note, kind, matrix)] of one plane; kind is "input", "weights", "allowed", "exp"
    (e^(x − m) with each row's Σ as a last column), "output" or "plain"."""
    shown = f"{trace.scale:.4f}"
    if math.isclose(trace.scale, 1 / math.sqrt(trace.q.shape[-1])):
        shown = f"1/√{trace.q.shape[-1]} = {trace.scale:.4f}"
    q, k, v = inputs(trace, index)
    exp = np.atleast_2d(trace.exp[index])  # (Nq, Nk)
    exp_sum = np.atleast_1d(trace.exp_sum[index])[:, None]  # (Nq, 1)
    out = [
        (f"q ({q.shape[0]} × {q.shape[1]})", "the inputs: one query per row", "input", q),
        (f"k ({k.shape[0]} × {k.shape[1]})", "one key per row", "input", k),
        (f"v ({v.shape[0]} × {v.shape[1]})", "one value per row", "input", v),
        ("scores = Q Kᵀ", "each query's dot product with each key", "plain",
         trace.scores[index]),
        (f"scaled = scores × {shown}" + (" + bias" if trace.has_bias else ""),
         "dividing by √d_k keeps softmax out of its hard-argmax regime", "plain",
         trace.scaled[index]),
    ]
    if trace.mask is not None:
        why = alignment(trace, index)
        out.append((f"allowed ({trace.mask})", "1 = may attend, 0 = masked out"
                    + (f". {why}" if why else ""), "allowed", trace.allowed[index].astype(int)))
    out.append(("e^(scaled − m), m = each row's max; last column Σ", exp_note(trace, index),
                "exp", np.hstack([exp, exp_sum])))
    out.append(("weights = softmax(scaled) over the keys", weights_note(trace, index),
                "weights", trace.weights[index]))
    out.append(("output = weights V", "each query's blend of the values", "output",
                trace.output[index]))
    numbered = [("0", *step) for step in out[:3]] + [
        (str(n), *step) for n, step in enumerate(out[3:], 1)]
    return [(f"{n} · {title}", note, kind, m) for n, title, note, kind, m in numbered]


def _columns(kind: str) -> str:
    """The column prefix of a step's table: features for inputs and outputs, keys otherwise."""
    return "d" if kind in ("input", "output") else "k"


def _rows(kind: str, title: str) -> str:
    return title.split(" ")[2][0] if kind == "input" else "q"  # "0 · k (3 × 2)" → "k"


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
    if total == 0:
        lines.append(f"(no batch/head planes: the weights have shape {trace.weights.shape})")
    for index in planes:
        if index:
            lines.append(f"\n── batch/head {index} ──")
        for title, note, kind, matrix in steps(trace, index):
            lines.append(f"\nStep {title}   ({note})")
            lines.extend(_text_table(matrix, _rows(kind, title), _columns(kind),
                                     "Σ" if kind == "exp" else None))
        lse = np.atleast_1d(trace.lse[index])
        lines.append("\nlse = log Σ exp(scaled): "
                     + (", ".join(fmt(x) for x in lse[:SHOW_ROWS]) if lse.size else "(no queries)"))
    if total > len(planes):
        lines.append(f"\n({total - len(planes)} more batch/head planes not shown)")
    return "\n".join(lines)


def html(trace) -> str:
    """``trace._repr_html_()``: offline HTML with inline styles; no scripts, no network."""
    planes, total = _planes(trace)
    parts = ['<div class="qkv-trace" style="font-family:monospace;font-size:12px;'
             'max-width:100%;overflow-x:auto">']
    if total == 0:
        parts.append(f"<p>(no batch/head planes: the weights have shape "
                     f"{escape(str(trace.weights.shape))})</p>")
    for index in planes:
        if index:
            parts.append(f"<h4>batch/head {escape(str(index))}</h4>")
        allowed = np.atleast_2d(trace.allowed[index])
        for title, note, kind, matrix in steps(trace, index):
            parts.append(f"<p><b>Step {escape(title)}</b> <i>{escape(note)}</i></p>")
            parts.append(_html_table(matrix, _rows(kind, title), _columns(kind),
                                     allowed if kind in ("weights", "exp") else None,
                                     colour=kind == "weights",
                                     last="Σ" if kind == "exp" else None))
    if total > len(planes):
        parts.append(f"<p>({total - len(planes)} more batch/head planes not shown)</p>")
    parts.append("</div>")
    return "".join(parts)


def _shown(matrix: np.ndarray, last: str | None) -> tuple[np.ndarray, list[str]]:
    """The displayed corner of a matrix and its column labels; with ``last`` the matrix's last
    column (e.g. a row's Σ) is kept, labelled ``last``."""
    m = np.atleast_2d(matrix)
    if last is None:
        return m[:SHOW_ROWS, :SHOW_ROWS], []
    return np.hstack([m[:SHOW_ROWS, :-1][:, :SHOW_ROWS], m[:SHOW_ROWS, -1:]]), [last]


def _text_table(matrix: np.ndarray, rows: str, cols: str, last: str | None = None) -> list[str]:
    m, extra = _shown(matrix, last)
    cells = [[fmt(x) if m.dtype.kind == "f" else str(x) for x in row] for row in m]
    labels = [f"{cols}{j}" for j in range(m.shape[1] - len(extra))] + extra
    width = max([len(c) for row in cells for c in row] + [len(x) for x in labels], default=1)
    header = " " * 5 + " ".join(x.rjust(width) for x in labels)
    body = [f"{rows}{i}".ljust(5) + " ".join(c.rjust(width) for c in row)
            for i, row in enumerate(cells)]
    more = matrix.shape[-1] > SHOW_ROWS or np.atleast_2d(matrix).shape[0] > SHOW_ROWS
    full = np.atleast_2d(matrix).shape
    empty = ([f"  (no {'rows' if full[0] == 0 else 'columns'}: "
              f"{full[0]} × {full[1] - len(extra)})"] if 0 in m.shape else [])
    return [header, *body] + empty + (["  … (truncated for display)"] if more else [])


def _html_table(matrix: np.ndarray, rows: str, cols: str, allowed: np.ndarray | None,
                colour: bool = True, last: str | None = None) -> str:
    """One step as a table; with ``allowed`` masked pairs are grey with "×", and with
    ``colour`` (the weights step) the other cells take the weight scale. ``last`` labels a
    last column kept past the key columns (the e^x step's Σ)."""
    m, extra = _shown(matrix, last)
    labels = [f"{cols}{j}" for j in range(m.shape[1] - len(extra))] + extra
    out = ['<table style="border-collapse:collapse;margin:2px 0 8px 0"><tr><th></th>']
    out += [f'<th style="padding:2px 6px">{escape(x)}</th>' for x in labels]
    out.append("</tr>")
    for i, row in enumerate(m):
        out.append(f'<tr><th style="padding:2px 6px">{rows}{i}</th>')
        for j, x in enumerate(row):
            style = "padding:2px 6px;text-align:right;border:1px solid #ddd"
            text_ = fmt(x) if m.dtype.kind == "f" else str(x)
            in_keys = j < m.shape[1] - len(extra)
            if allowed is not None and in_keys and not allowed[i, j]:
                style += f";background:{hex_color(MASKED)};color:#444"
                text_ = f"{MASKED_MARK} masked"
            elif allowed is not None and in_keys and colour:
                style += f";background:{weight_color(float(x))};color:{ink_for(float(x))}"
            out.append(f'<td style="{style}">{text_}</td>')
        out.append("</tr>")
    out.append("</table>")
    return "".join(out)
