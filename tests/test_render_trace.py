"""The Trace's text and HTML come from qkv.render: only weights take the weight colour scale,
and masked pairs look different from zero weights in every view."""

from __future__ import annotations

import re

import numpy as np

import qkv
from qkv.render.colors import MASKED, hex_color, scale_spec, weight_color

SEED = ([[1, 0]], [[1, 0], [0, 1], [0.7, 0.7]], [[2, 0], [0, 2], [1, 1]])


def _cells(html: str, step: str) -> list[str]:
    """The <td> style strings of one step's table."""
    part = html.split(step, 1)[1].split("</table>", 1)[0]
    return re.findall(r'<td style="([^"]*)"', part)


def test_trace_html_colours_only_the_weights():
    trace = qkv.explain(*SEED)
    html = trace._repr_html_()
    assert "1.2202" in html  # the output, printed
    for step in ("scores = Q Kᵀ", "output = weights V"):
        assert all("background" not in style for style in _cells(html, step)), step
    weights = _cells(html, "weights = softmax")
    assert [weight_color(w) in s for s, w in zip(weights, trace.weights[0], strict=True)] \
        == [True] * 3
    assert str(trace) == qkv.render.trace.text(trace)


def test_masked_pairs_are_not_drawn_as_zero_weights():
    trace = qkv.explain(*SEED, mask=qkv.padding(2))
    html = trace._repr_html_()
    weights = _cells(html, "weights = softmax")
    assert hex_color(MASKED) in weights[2] and "× masked" in html
    assert weight_color(0.0) not in weights[2]
    svg = qkv.show(trace).svg()
    assert svg.count('class="c masked"') == 1 and "k2: masked" in svg
    # the raster thumbnail paints the masked pixel grey, a zero weight white
    from qkv.render.png import weights_png

    a = weights_png(np.array([[0.5, 0.5, 0.0]]), np.array([[True, True, False]]))
    b = weights_png(np.array([[0.5, 0.5, 0.0]]))
    assert a != b


def test_the_scale_spec_is_the_scale_the_views_use():
    spec = scale_spec()
    assert spec["interpolation"] == "linear" and spec["domain"] == [0.0, 1.0]
    assert spec["low"] == weight_color(0.0) and spec["high"] == weight_color(1.0)
    assert spec["masked"] == hex_color(MASKED)


def _contrast(a, b) -> float:
    def lum(rgb):
        c = [x / 255 for x in rgb]
        c = [x / 12.92 if x <= 0.03928 else ((x + 0.055) / 1.055) ** 2.4 for x in c]
        return 0.2126 * c[0] + 0.7152 * c[1] + 0.0722 * c[2]

    hi, lo = sorted([lum(a), lum(b)], reverse=True)
    return (hi + 0.05) / (lo + 0.05)


def test_text_on_every_weight_cell_meets_wcag_aa():
    from qkv.render.colors import ink_for, weight_rgb

    def rgb(hex_):
        return tuple(int(hex_[i:i + 2], 16) for i in (1, 3, 5))

    worst = min(_contrast(weight_rgb(w / 1000), rgb(ink_for(w / 1000))) for w in range(1001))
    assert worst >= 4.5


def test_the_html_export_has_a_viewport_and_scrolls_instead_of_overflowing():
    page = qkv.show(np.full((3, 3), 1 / 3)).html()
    assert '<meta name="viewport" content="width=device-width, initial-scale=1">' in page
    assert "overflow-x:auto" in page


def test_the_terminal_view_marks_masked_pairs():
    trace = qkv.explain(*SEED, mask=qkv.padding(2))
    text = str(qkv.show(trace))
    row = next(line for line in text.splitlines() if line.strip().startswith("0 q0"))
    assert row.split()[-3:] == ["67", "33", "×"]
    assert "× = masked" in text
