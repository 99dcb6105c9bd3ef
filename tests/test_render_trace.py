"""The Trace's text and HTML come from qkv.render: only weights take the weight colour scale,
and masked pairs look different from zero weights in every view."""

from __future__ import annotations

import re
from html import unescape

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


def _table(html: str, step: str) -> list[list[str]]:
    """The cell texts of one step's table, row by row."""
    part = html.split(step, 1)[1].split("</table>", 1)[0]
    return [re.findall(r"<td[^>]*>([^<]*)</td>", row) for row in part.split("</tr>")[1:-1]]


def test_trace_html_shows_the_inputs_and_the_exp_and_sum_step():
    trace = qkv.explain(*SEED)
    html = trace._repr_html_()
    assert _table(html, "· q (1 × 2)") == [["1.0000", "0.0000"]]
    assert _table(html, "· v (3 × 2)")[2] == ["1.0000", "1.0000"]
    (row,) = _table(html, "e^(scaled − m)")
    # e^(scaled − max) and Σ are the trace's own numbers (the reference's), 4 decimals
    assert row == [f"{x:.4f}" for x in [*trace.exp[0], trace.exp_sum[0]]]
    assert np.allclose(trace.exp / trace.exp_sum[:, None], trace.weights, rtol=1e-15, atol=0)
    assert np.allclose(trace.row_max + np.log(trace.exp_sum), trace.lse, rtol=1e-15, atol=0)
    # the unshifted e^x of the lesson's worked example (2.028, 1, 1.640; Σ 4.668 by hand)
    assert "q0's e^x are 2.0281, 1.0000, 1.6405, Σ = 4.6686" in unescape(html)
    assert "bottom-right" not in html  # no mask: no alignment sentence


def test_alignment_sentence_only_for_a_causal_mask_with_fewer_queries():
    rng = np.random.default_rng(0)
    q, k, v = rng.standard_normal((2, 2)), rng.standard_normal((4, 2)), rng.standard_normal((4, 2))
    html = qkv.explain(q, k, v, mask=qkv.causal())._repr_html_()
    assert ("query i stands at position i + Nk − Nq = i + 2" in html
            and "it may attend to k0, k1, k2 (standing at position 0" in html)
    # masked pairs of the e^x step are grey, like the weights'
    assert "× masked" in html.split("e^(scaled − m)", 1)[1].split("</table>", 1)[0]
    k6, v6 = rng.standard_normal((6, 2)), rng.standard_normal((6, 2))
    assert "i + Nk − Nq = i + 4" in qkv.explain(q, k6, v6, mask=qkv.causal())._repr_html_()
    for html in (qkv.explain(q, k, v)._repr_html_(),  # no mask
                 qkv.explain(k, k, v, mask=qkv.causal())._repr_html_(),  # Nq == Nk
                 qkv.explain(q, k, v, mask=qkv.padding(3))._repr_html_(),  # no positions
                 qkv.explain(q, k, v, mask=qkv.window(0, 1))._repr_html_(),  # sees a later key
                 qkv.explain(q, k, v, mask=~qkv.causal())._repr_html_()):  # q0 sees only k3
        assert "bottom-right" not in html
    # a window's row 0 past k0 still gets the sentence, without the word "causal"
    html = qkv.explain(q, k, v, mask=qkv.window(1, 0))._repr_html_()
    assert "under this mask it may attend to k1, k2 (" in html
    html = qkv.explain(q, k, v, mask=qkv.window(0, 0))._repr_html_()
    assert "under this mask it may attend to k2 (" in html


def test_engine_never_imports_the_views_layer():
    import ast
    from pathlib import Path

    engine = Path(qkv.__file__).parent / "engine"
    for path in engine.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module:
                name = "." * node.level + node.module
                assert not any(part in name.split(".") for part in ("render", "explore",
                                                                    "widgets")), (path, name)


def test_each_plane_shows_the_inputs_its_query_head_reads():
    rng = np.random.default_rng(1)
    q = rng.standard_normal((2, 4, 3, 2))  # (B, Hq, Nq, Dk)
    k, v = rng.standard_normal((2, 2, 5, 2)), rng.standard_normal((2, 2, 5, 3))  # Hkv = 2
    trace = qkv.explain(q, k, v)
    from qkv.render.trace import inputs

    q13, k13, v13 = inputs(trace, (1, 3))
    assert np.array_equal(q13, q[1, 3]) and np.array_equal(k13, k[1, 1])  # GQA: 3 · 2 // 4
    assert np.array_equal(v13, v[1, 1])
    html = trace._repr_html_()
    assert _table(html, "· k (5 × 2)")[0] == [f"{x:.4f}" for x in k[0, 0, 0]]
