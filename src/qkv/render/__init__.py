"""Views of attention heads: terminal (rich), self-contained HTML, SVG and notebooks.

    fig = qkv.show(weights, tokens)    # weights (layers, heads, n, n), (heads, n, n), (n, n)
    fig = qkv.show(qkv.explain(q, k, v))
    fig                                # in a notebook: thumbnails, click for a large view
    fig.save("heads.html")             # one file, no network needed to open it
    fig.save("head.svg", layer=2, head=5)
    print(fig) / rich.print(fig)       # the terminal heat map (or small multiples)

Views never compute attention: they draw weights that qkv's engine produced.
"""

from __future__ import annotations

from pathlib import Path

from . import html as _html
from . import svg as _svg
from .heads import Heads, as_heads

__all__ = ["Figure", "Heads", "as_heads", "show"]


class Figure:
    """Heads ready to be drawn in any format. Build one with :func:`show`."""

    def __init__(self, heads: Heads):
        self.heads = heads

    # -- formats ------------------------------------------------------------------------------
    def html(self) -> str:
        """A complete, self-contained HTML page: thumbnails of every head, large view on click."""
        return _html.page(self.heads)

    def _repr_html_(self) -> str:  # notebooks (Jupyter, VS Code): offline, CSS only
        return _html.fragment(self.heads)

    def svg(self, layer: int = 0, head: int = 0) -> str:
        """A labelled SVG heat map of one head."""
        return _svg.head_svg(self.heads.head(layer, head), self.heads.queries, self.heads.keys,
                             title=f"{self.heads.title} — {self.heads.label(layer, head)}",
                             allowed=self.heads.head_allowed(layer, head))

    def terminal(self, layer: int = 0, head: int | None = 0):
        """A rich renderable: one head's heat map, or (``head=None``) all heads of ``layer``."""
        from .terminal import Heatmap, small_multiples

        if head is None:
            return small_multiples(self.heads, layer)
        return Heatmap(self.heads.head(layer, head), self.heads.queries, self.heads.keys,
                       title=self.heads.label(layer, head),
                       allowed=self.heads.head_allowed(layer, head))

    def save(self, path, layer: int = 0, head: int = 0) -> Path:
        """Write ``.html`` (every head) or ``.svg`` (one head), chosen by the file's suffix."""
        path = Path(path)
        suffix = path.suffix.lower()
        if suffix in (".html", ".htm"):
            text = self.html()
        elif suffix == ".svg":
            text = self.svg(layer, head)
        else:
            raise ValueError(f"save: path {str(path)!r} must end in .html or .svg")
        path.write_text(text, encoding="utf-8")
        return path

    def __rich__(self):
        return self.terminal(0, 0 if self.heads.n_heads * self.heads.n_layers == 1 else None)

    def __str__(self) -> str:
        from rich.console import Console

        console = Console(width=120, color_system=None, record=True, file=_Null())
        console.print(self.terminal(0, 0))
        return console.export_text()

    def __repr__(self) -> str:
        layers, heads, nq, nk = self.heads.weights.shape
        return f"<qkv Figure: {layers} × {heads} heads, {nq} queries × {nk} keys>"


class _Null:
    def write(self, _text):
        return 0

    def flush(self):
        pass


def show(weights, tokens=None, *, title: str | None = None) -> Figure:
    """A :class:`Figure` of attention weights, ready for the notebook, HTML, SVG or terminal.

    ``weights``: an array ``(layers, heads, Nq, Nk)``, ``(heads, Nq, Nk)`` or ``(Nq, Nk)`` of
    softmax weights, or a :class:`qkv.Trace` (from ``qkv.explain``). ``tokens``: labels for the
    keys (and queries, when Nq == Nk), or ``(query_labels, key_labels)``.
    """
    return Figure(as_heads(weights, tokens, title=title))
