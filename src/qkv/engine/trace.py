"""``qkv.explain``: every intermediate of softmax(QKᵀ/√d_k)V, for a person to read.

A :class:`Trace` is computed by the float64 reference (the formula written literally), so what a
person reads is the oracle itself. Its arrays keep full precision; only the text and HTML forms
round numbers (to 4 decimals) for display. Views (the terminal viewer, the web explorer) render
traces; they never compute attention their own way.
"""

from __future__ import annotations

import html
import math
from dataclasses import dataclass

import numpy as np

from . import reference
from .problem import prepare

__all__ = ["Trace", "explain"]

# explain() materialises every matrix; past this many weights, use attention_weights(rows=...).
MAX_WEIGHTS = 1_000_000
# The text and HTML forms show at most this many heads and rows/columns per head.
SHOW_PLANES, SHOW_ROWS = 4, 16


@dataclass(frozen=True)
class Trace:
    """Each step of attention for one call. Shapes, for inputs q (..., Hq, Nq, Dk):

    - ``q, k, v``: the inputs, float64; k and v ``(..., Hkv, Nk, D)``
    - ``scores``  ``(..., Hq, Nq, Nk)``: q · k, the raw dot products (Q Kᵀ)
    - ``scale``   float: the factor applied, 1/√Dk unless given
    - ``scaled``  ``(..., Hq, Nq, Nk)``: scores · scale (+ bias)
    - ``allowed`` ``(..., Hq, Nq, Nk)`` bool: True where the query may attend to the key
    - ``weights`` ``(..., Hq, Nq, Nk)``: softmax of ``scaled`` over allowed keys; rows sum to 1
      (rows with no allowed key are all 0)
    - ``output``  ``(..., Hq, Nq, Dv)``: weights @ v
    - ``lse``     ``(..., Hq, Nq)``: log Σ_j exp(scaled) over allowed keys (−inf: none allowed)

    2-D inputs (one head, as in the seeds) give 2-D arrays, without the head axis.
    """

    q: np.ndarray
    k: np.ndarray
    v: np.ndarray
    scores: np.ndarray
    scale: float
    scaled: np.ndarray
    allowed: np.ndarray
    weights: np.ndarray
    output: np.ndarray
    lse: np.ndarray
    mask: str | None = None
    has_bias: bool = False

    # -- machine-readable -------------------------------------------------------------------
    def to_dict(self) -> dict:
        """A JSON-safe dict (``json.dumps(..., allow_nan=False)`` works): arrays become nested
        lists; an lse of −inf (a row with no allowed key) becomes None."""

        def finite_or_none(x):
            if isinstance(x, list):
                return [finite_or_none(i) for i in x]
            return None if isinstance(x, float) and not math.isfinite(x) else x

        arrays = ("q", "k", "v", "scores", "scaled", "allowed", "weights", "output", "lse")
        d = {name: finite_or_none(getattr(self, name).tolist()) for name in arrays}
        d.update(scale=float(self.scale), mask=self.mask, has_bias=self.has_bias,
                 shape={"q": list(self.q.shape), "k": list(self.k.shape),
                        "v": list(self.v.shape)})
        return d

    # -- for people -------------------------------------------------------------------------
    def _planes(self):
        """(label, index) for the first few (batch, head) planes of the score matrices."""
        lead = self.weights.shape[:-2]
        planes = list(np.ndindex(*lead)) if lead else [()]
        return planes[:SHOW_PLANES], len(planes)

    def _steps(self, index):
        nq, nk = self.weights.shape[-2:]
        shown = f"{self.scale:.4f}"
        if math.isclose(self.scale, 1 / math.sqrt(self.q.shape[-1])):
            shown = f"1/√{self.q.shape[-1]} = {self.scale:.4f}"
        steps = [
            ("scores = Q Kᵀ", "each query's dot product with each key", self.scores[index]),
            (f"scaled = scores × {shown}" + (" + bias" if self.has_bias else ""),
             "dividing by √d_k keeps softmax out of its hard-argmax regime", self.scaled[index]),
        ]
        if self.mask is not None:
            steps.append((f"allowed ({self.mask})", "1 = may attend, 0 = masked out",
                          self.allowed[index].astype(int)))
        steps.append(("weights = softmax(scaled) over the keys",
                      "each row sums to 1; masked keys get 0", self.weights[index]))
        steps.append(("output = weights V", "each query's blend of the values",
                      self.output[index]))
        return [(f"{n} · {title}", note, m) for n, (title, note, m) in enumerate(steps, 1)], nq, nk

    def __str__(self) -> str:
        planes, total = self._planes()
        nq, nk = self.weights.shape[-2:]
        lines = [f"Attention trace: {nq} quer{'y' if nq == 1 else 'ies'} × {nk} "
                 f"key{'' if nk == 1 else 's'}, Dk = {self.q.shape[-1]}, Dv = {self.v.shape[-1]}"]
        for index in planes:
            if index:
                lines.append(f"\n── batch/head {index} ──")
            steps, *_ = self._steps(index)
            for title, note, matrix in steps:
                cols = "d" if "output" in title else "k"
                lines.append(f"\nStep {title}   ({note})")
                lines.extend(_text_table(matrix, "q", cols))
            lse = self.lse[index]
            lines.append("\nlse = log Σ exp(scaled): "
                         + ", ".join(_fmt(x) for x in np.atleast_1d(lse)[:SHOW_ROWS]))
        if total > len(planes):
            lines.append(f"\n({total - len(planes)} more batch/head planes not shown)")
        return "\n".join(lines)

    def _repr_html_(self) -> str:
        """Offline HTML for notebooks: tables with inline styles; no scripts, no network."""
        planes, total = self._planes()
        parts = ['<div class="qkv-trace" style="font-family:monospace;font-size:12px">']
        for index in planes:
            if index:
                parts.append(f"<h4>batch/head {html.escape(str(index))}</h4>")
            steps, *_ = self._steps(index)
            for title, note, matrix in steps:
                heat = "weights" in title
                cols = "d" if "output" in title else "k"
                parts.append(f"<p><b>Step {html.escape(title)}</b> "
                             f"<i>{html.escape(note)}</i></p>")
                parts.append(_html_table(matrix, "q", cols, heat))
        if total > len(planes):
            parts.append(f"<p>({total - len(planes)} more batch/head planes not shown)</p>")
        parts.append("</div>")
        return "".join(parts)


def _fmt(x) -> str:
    x = float(x)
    if math.isinf(x):
        return "-inf" if x < 0 else "inf"
    return f"{x:.4f}"


def _text_table(matrix: np.ndarray, rows: str, cols: str) -> list[str]:
    m = np.atleast_2d(matrix)[:SHOW_ROWS, :SHOW_ROWS]
    cells = [[_fmt(x) if m.dtype.kind == "f" else str(x) for x in row] for row in m]
    width = max([len(c) for row in cells for c in row] + [len(f"{cols}{m.shape[1] - 1}")])
    header = " " * 5 + " ".join(f"{cols}{j}".rjust(width) for j in range(m.shape[1]))
    body = [f"{rows}{i}".ljust(5) + " ".join(c.rjust(width) for c in row)
            for i, row in enumerate(cells)]
    more = matrix.shape[-1] > SHOW_ROWS or np.atleast_2d(matrix).shape[0] > SHOW_ROWS
    return [header, *body] + (["  … (truncated for display)"] if more else [])


def _html_table(matrix: np.ndarray, rows: str, cols: str, heat: bool) -> str:
    m = np.atleast_2d(matrix)[:SHOW_ROWS, :SHOW_ROWS]
    out = ['<table style="border-collapse:collapse;margin:2px 0 8px 0"><tr><th></th>']
    out += [f'<th style="padding:2px 6px">{cols}{j}</th>' for j in range(m.shape[1])]
    out.append("</tr>")
    for i, row in enumerate(m):
        out.append(f'<tr><th style="padding:2px 6px">{rows}{i}</th>')
        for x in row:
            style = "padding:2px 6px;text-align:right;border:1px solid #ddd"
            if heat:
                style += f";background:rgba(31,119,180,{float(x):.3f})"
                style += ";color:#fff" if float(x) > 0.5 else ""
            text = _fmt(x) if m.dtype.kind == "f" else str(x)
            out.append(f'<td style="{style}">{text}</td>')
        out.append("</tr>")
    out.append("</table>")
    return "".join(out)


def explain(q, k, v, mask=None, bias=None, scale=None) -> Trace:
    """A :class:`Trace` of every intermediate, computed by the float64 reference.

    Accepts the arguments of :func:`qkv.attention` (lists are fine: ``explain([[1, 0]], ...)``).
    For small inputs: past a million weights it asks you to pick rows with
    ``qkv.attention_weights(..., rows=...)`` instead.
    """
    p = prepare(q, k, v, mask, bias, scale)
    n_weights = p.batch_size * p.hq * p.nq * p.nk
    if n_weights > MAX_WEIGHTS:
        raise ValueError(
            f"explain is for small inputs: this call has {n_weights:,} weights (more than "
            f"{MAX_WEIGHTS:,}); use qkv.attention_weights(q, k, ..., rows=[...]) for a few rows"
        )
    steps = reference.intermediates(p)
    present = p.present
    return Trace(
        q=present(p.q.astype(np.float64)), k=present(p.k.astype(np.float64)),
        v=present(p.v.astype(np.float64)), scores=present(steps["scores"]), scale=p.scale,
        scaled=present(steps["scaled"]), allowed=present(steps["allowed"]),
        weights=present(steps["weights"]), output=present(steps["output"]),
        lse=present(steps["lse"], -2), mask=None if mask is None else repr(mask),
        has_bias=bias is not None,
    )
