"""One self-contained HTML view of many heads: a layers × heads grid of thumbnails, and a large,
labelled heat map of the head you click.

No script, no CDN, no web font: the click works with CSS alone (each thumbnail is the label of a
hidden radio button; the checked one's large view is displayed). So the file works opened from
disk, offline, and the same markup is a notebook's ``_repr_html_`` (no require.js, and nothing
for a sanitiser to strip but the page's own ``<style>``).
"""

from __future__ import annotations

import itertools
from html import escape

from .heads import Heads
from .png import data_uri, weights_png
from .svg import FONT, NUMBERS_UP_TO, head_svg

VECTOR_UP_TO = 16  # tokens; beyond, the large views are raster (72 heads × N² cells)

_ids = itertools.count()

CSS = """
.{u} {{{font};font-size:13px;color:#222;max-width:100%}}
.{u} h3 {{margin:4px 0 8px 0;font-size:15px}}
.{u} input.pick {{display:none}}
.{u} table.grid {{border-collapse:collapse;margin-bottom:10px}}
.{u} table.grid th {{font-weight:normal;color:#555;padding:2px 4px;font-size:11px}}
.{u} table.grid td {{padding:2px}}
.{u} label {{display:block;cursor:pointer;border:2px solid transparent;line-height:0}}
.{u} label:hover {{border-color:#9ecae1}}
.{u} img.thumb {{image-rendering:pixelated;border:1px solid #ddd}}
.{u} .view {{display:none;overflow-x:auto;max-width:100%}}
.{u} .gridwrap {{overflow-x:auto;max-width:100%}}
.{u} svg {{max-width:none}}
.{u} .view h4 {{margin:4px 0;font-size:14px}}
.{u} .qkv-head .row:hover rect {{stroke:#e6550d;stroke-width:1}}
.{u} .note {{color:#666;font-size:11px;margin:4px 0}}
"""


def fragment(heads: Heads, *, thumb: int = 64) -> str:
    """A ``<div>`` with its own ``<style>``; ids are unique, so several can share a page."""
    uid = f"qkv-show-{next(_ids)}"
    rules = [CSS.format(u=uid, font=FONT)]
    inputs, views = [], []
    nq, nk = heads.weights.shape[-2:]
    # Every head's large view is in the page (that is what lets CSS alone switch them), so
    # their size matters: vector cells up to VECTOR_UP_TO tokens, one PNG per head beyond.
    vector = max(nq, nk) <= VECTOR_UP_TO
    vector_numbers = vector and nk <= NUMBERS_UP_TO
    pairs = [(layer, head) for layer in range(heads.n_layers) for head in range(heads.n_heads)]
    for n, (layer, head) in enumerate(pairs):
        key = f"{uid}-{layer}-{head}"
        inputs.append(f'<input type="radio" class="pick" name="{uid}" id="{key}"'
                      f'{" checked" if n == 0 else ""}>')
        rules.append(f"#{key}:checked ~ .views .v-{layer}-{head} {{display:block}}")
        rules.append(f'#{key}:checked ~ table.grid label[for="{key}"] '
                     "{border-color:#08306b}")
        label = heads.label(layer, head)
        views.append(
            f'<section class="view v-{layer}-{head}" data-layer="{layer}" data-head="{head}">'
            f"<h4>{escape(label)}</h4>"
            + head_svg(heads.weights[layer, head], heads.queries, heads.keys, standalone=False,
                       tooltips=not vector_numbers, raster=not vector,
                       allowed=heads.head_allowed(layer, head))
            + "</section>")
    grid = ['<div class="gridwrap"><table class="grid"><tr><th></th>']
    grid += [f"<th>head {h}</th>" for h in range(heads.n_heads)]
    grid.append("</tr>")
    for layer in range(heads.n_layers):
        grid.append(f"<tr><th>{escape(heads.rows_name)} {layer}</th>")
        for head in range(heads.n_heads):
            key = f"{uid}-{layer}-{head}"
            png = weights_png(heads.weights[layer, head], heads.head_allowed(layer, head))
            grid.append(f'<td><label for="{key}" title="{escape(heads.label(layer, head))}">'
                        f'<img class="thumb" width="{thumb}" height="{thumb}" alt="" '
                        f'src="{data_uri(png)}">'
                        "</label></td>")
        grid.append("</tr>")
    grid.append("</table></div>")
    note = (f"{heads.n_layers} × {heads.n_heads} heads, {nq} queries × {nk} keys. Click a "
            "thumbnail for its heat map: row i is query i's softmax over the keys (each row sums "
            "to 1). " + ("Each cell prints its weight." if vector else
                         f"Past {VECTOR_UP_TO} tokens the large views are pictures, to keep this "
                         "page small; an SVG of one head (Figure.save('head.svg', layer, head) "
                         "or qkv look --svg) has every weight."))
    return (f'<div class="{uid} qkv-show" id="{uid}"><style>{"".join(rules)}</style>'
            f"<h3>{escape(heads.title)}</h3><p class=\"note\">{escape(note)}</p>"
            + "".join(inputs) + "".join(grid) + '<div class="views">' + "".join(views)
            + "</div></div>")


def page(heads: Heads) -> str:
    """A complete HTML document (UTF-8) around :func:`fragment`."""
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
            f"<title>{escape(heads.title)}</title></head><body>{fragment(heads)}</body></html>\n")
