"""The renderers draw exactly the weights they are given: parse every format and read them back.

SVG and HTML are parsed (xml.etree / html.parser); the PNG thumbnails are decoded; the terminal
views are rendered with rich and their text and colours read. Numbers shown are compared at the
precision they are displayed with; colours must be the shared scale's colour of each weight.
"""

from __future__ import annotations

import base64
import re
import struct
import xml.etree.ElementTree as ET
import zlib
from html.parser import HTMLParser

import numpy as np
import pytest

import qkv
from qkv.render import as_heads, show
from qkv.render.colors import hex_color, signed_rgb, weight_color, weight_rgb
from qkv.render.svg import head_svg, shown
from qkv.render.terminal import _block, _vector, heatmap, neuron_view, small_multiples

SVG = "{http://www.w3.org/2000/svg}"
TOKENS = ["[CLS]", "the", "cat", "<sat>", "&", "[SEP]"]  # markup characters must be escaped


def random_weights(shape, seed=0):
    x = np.random.default_rng(seed).standard_normal((*shape[:-1], 8))
    return qkv.attention_weights(x, x)  # genuine softmax rows, (…, n, n)


# -- input handling ---------------------------------------------------------------------------
def test_as_heads_accepts_every_shape_and_traces():
    w = random_weights((2, 3, 6, 6))
    assert as_heads(w).weights.shape == (2, 3, 6, 6)
    assert as_heads(w[0]).weights.shape == (1, 3, 6, 6)
    assert as_heads(w[0, 0]).weights.shape == (1, 1, 6, 6)
    x = np.random.default_rng(1).standard_normal((2, 4, 5, 8))
    heads = as_heads(qkv.explain(x, x, x))
    assert heads.weights.shape == (2, 4, 5, 5) and heads.rows_name == "batch"
    np.testing.assert_array_equal(heads.weights, qkv.explain(x, x, x).weights)
    one = as_heads(qkv.explain(x[0, 0, [2]], x[0, 0], x[0, 0]), (["q2"], list("abcde")))
    assert one.weights.shape == (1, 1, 1, 5) and one.queries == ["q2"]


def test_as_heads_refuses_bad_input():
    w = random_weights((6, 6))
    with pytest.raises(ValueError, match="expected"):
        as_heads(w[None, None, None])
    with pytest.raises(ValueError, match="lie in"):
        as_heads(w * 3)
    with pytest.raises(ValueError, match="tokens has 2 labels but the weights have 6"):
        as_heads(w, ["a", "b"])
    with pytest.raises(ValueError, match="NaN"):
        as_heads(np.full((2, 2), np.nan))
    with pytest.raises(TypeError, match="real numbers"):
        as_heads(np.ones((2, 2), dtype=bool))
    with pytest.raises(ValueError, match="tokens=\\(query_labels, key_labels\\)"):
        as_heads(np.full((2, 3), 1 / 3), ["a", "b", "c"])
    fig = show(w)
    with pytest.raises(ValueError, match=r"head must lie in \[0, 1\)"):
        fig.svg(0, 1)
    with pytest.raises(ValueError, match=r"must end in \.html or \.svg"):
        fig.save("out.png")


# -- SVG --------------------------------------------------------------------------------------
def check_svg_head(svg_root, weights, queries, keys, numbers=True):
    """Every cell of a parsed head SVG shows its weight: data-w, colour, tooltip and number."""
    ns = SVG if svg_root.tag.startswith(SVG) else ""
    rects = [r for r in svg_root.iter(f"{ns}rect") if r.get("class") == "c"]
    assert len(rects) == weights.size
    for n, rect in enumerate(rects):
        i, j = divmod(n, weights.shape[1])
        w = weights[i, j]
        assert abs(float(rect.get("data-w")) - w) <= 5e-7
        assert rect.get("fill") == weight_color(w)
        tip = rect.find(f"{ns}title").text
        assert tip == f"{queries[i]} → {keys[j]}: {w:.4f}"
    texts = {t.get("class"): [] for t in svg_root.iter(f"{ns}text")}
    for t in svg_root.iter(f"{ns}text"):
        texts[t.get("class")].append(t.text)
    assert texts["query"] == queries and texts["key"] == keys
    if numbers:
        assert texts["w"] == [shown(w) for w in weights.ravel()]
        assert all(abs(float(s) - w) <= 0.005 for s, w in zip(texts["w"], weights.ravel(),
                                                              strict=True))


def test_svg_of_one_head_shows_its_weights(tmp_path):
    w = random_weights((2, 3, 6, 6))
    fig = show(w, TOKENS, title="test")
    path = fig.save(tmp_path / "head.svg", layer=1, head=2)
    root = ET.parse(path).getroot()  # well-formed XML, escaping included
    assert root.tag == f"{SVG}svg"
    check_svg_head(root, w[1, 2], TOKENS, TOKENS)
    assert "layer 1 · head 2" in "".join(root.itertext())


def test_svg_without_numbers_for_many_keys():
    w = random_weights((30, 30))
    root = ET.fromstring(head_svg(w, [f"t{i}" for i in range(30)], [f"t{i}" for i in range(30)]))
    assert not [t for t in root.iter(f"{SVG}text") if t.get("class") == "w"]
    check_svg_head(root, w, [f"t{i}" for i in range(30)], [f"t{i}" for i in range(30)],
                   numbers=False)


def test_shown_numbers_fit_the_cell():
    assert shown(0.274) == ".27" and shown(1.0) == "1.00" and shown(0.004) == ".00"


# -- HTML -------------------------------------------------------------------------------------
class Page(HTMLParser):
    """Collects what the checks need from an HTML page."""

    def __init__(self):
        super().__init__()
        self.tags, self.inputs, self.labels, self.images = [], [], [], []
        self.views, self.view_cells, self.style = [], {}, ""
        self._view = None
        self._in_style = False

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        self.tags.append(tag)
        if tag == "input":
            self.inputs.append(a)
        elif tag == "label":
            self.labels.append(a["for"])
        elif tag == "img":
            self.images.append(a["src"])
        elif tag == "section":
            self._view = (int(a["data-layer"]), int(a["data-head"]))
            self.views.append(self._view)
            self.view_cells[self._view] = []
        elif tag == "rect" and a.get("class") == "c":
            self.view_cells[self._view].append(float(a["data-w"]))
        elif tag == "image":
            self.view_cells[self._view].append(a["href"])
        elif tag == "style":
            self._in_style = True

    def handle_endtag(self, tag):
        self._in_style = self._in_style and tag != "style"

    def handle_data(self, data):
        if self._in_style:
            self.style += data


def decode_png(uri: str) -> np.ndarray:
    """RGB pixels of a data:image/png URI written without row filters."""
    raw = base64.b64decode(uri.removeprefix("data:image/png;base64,"))
    assert raw[:8] == b"\x89PNG\r\n\x1a\n"
    pos, chunks = 8, {}
    while pos < len(raw):
        (length,), kind = struct.unpack(">I", raw[pos: pos + 4]), raw[pos + 4: pos + 8]
        data = raw[pos + 8: pos + 8 + length]
        assert struct.unpack(">I", raw[pos + 8 + length: pos + 12 + length])[0] == \
            zlib.crc32(kind + data)
        chunks[kind] = chunks.get(kind, b"") + data
        pos += 12 + length
    width, height, depth, color = struct.unpack(">IIBB", chunks[b"IHDR"][:10])
    assert (depth, color) == (8, 2)
    rows = np.frombuffer(zlib.decompress(chunks[b"IDAT"]), np.uint8).reshape(height, -1)
    assert (rows[:, 0] == 0).all()  # filter type None
    return rows[:, 1:].reshape(height, width, 3)


def expected_pixels(w: np.ndarray) -> np.ndarray:
    return np.array([[weight_rgb(x) for x in row] for row in w], dtype=np.uint8)


def test_html_page_is_self_contained_and_shows_every_head(tmp_path):
    w = random_weights((2, 3, 6, 6))
    fig = show(w, TOKENS, title="two layers <of> three")
    text = fig.save(tmp_path / "heads.html").read_text(encoding="utf-8")
    assert text.startswith("<!DOCTYPE html>")
    lowered = text.lower()
    for banned in ("<script", "http://", "https://", "require", "<link", "@import", "url("):
        assert banned not in lowered, banned
    page = Page()
    page.feed(text)
    ids = [a["id"] for a in page.inputs]
    assert len(ids) == 6 and sorted(page.labels) == sorted(ids)  # a thumbnail per head
    assert sum("checked" in a for a in page.inputs) == 1
    for key in ids:  # the CSS shows the large view of the checked head
        layer, head = key.rsplit("-", 2)[-2:]
        assert f"#{key}:checked ~ .views .v-{layer}-{head} {{display:block}}" in page.style
    assert page.views == [(layer, head) for layer in range(2) for head in range(3)]
    for (layer, head), cells in page.view_cells.items():
        np.testing.assert_allclose(cells, w[layer, head].ravel(), atol=5e-7)
    assert len(page.images) == 6
    for n, uri in enumerate(page.images):  # thumbnails in grid order: layer-major
        np.testing.assert_array_equal(decode_png(uri), expected_pixels(w[n // 3, n % 3]))


def test_html_switches_to_raster_views_for_long_sentences():
    w = random_weights((1, 2, 20, 20))
    page = Page()
    page.feed(show(w).html())
    for (layer, head), cells in page.view_cells.items():
        assert len(cells) == 1  # one <image>, not 400 <rect>s
        np.testing.assert_array_equal(decode_png(cells[0]), expected_pixels(w[layer, head]))


def test_notebook_repr_is_an_offline_fragment():
    x = np.random.default_rng(2).standard_normal((3, 4, 8))
    trace = qkv.explain(x, x, x)
    a, b = show(trace)._repr_html_(), qkv.show(trace)._repr_html_()
    for frag in (a, b):
        assert frag.startswith("<div") and "<html" not in frag and "<script" not in frag
        assert "http" not in frag
    ids = re.findall(r'id="(qkv-show-\d+)"', a + b)
    assert len(ids) == 2 and ids[0] != ids[1]  # two figures in one notebook do not collide
    page = Page()
    page.feed(a)
    for (batch, head), cells in page.view_cells.items():
        assert batch == 0
        np.testing.assert_allclose(cells, trace.weights[head].ravel(), atol=5e-7)


# -- terminal ---------------------------------------------------------------------------------
def render_text(renderable, width=120):
    from rich.console import Console

    console = Console(width=width, record=True, color_system="truecolor", file=open("/dev/null",
                                                                                    "w"))
    console.print(renderable)
    return console.export_text()


def test_terminal_heatmap_numbers_and_colours():
    w = random_weights((6, 6))
    text = heatmap(w, TOKENS, TOKENS)
    lines = render_text(text).splitlines()
    rows = [line for line in lines if re.match(r"^\s+\d+ ", line)]
    assert len(rows) == 6
    for i, line in enumerate(rows):
        assert TOKENS[i] in line
        shown_pct = [int(n) for n in line.split(TOKENS[i], 1)[1].split()]
        assert shown_pct == [round(x * 100) for x in w[i]]
    backgrounds = [str(span.style).split(" on ")[1] for span in text.spans
                   if " on " in str(span.style)]
    assert backgrounds == [weight_color(x) for x in w.ravel()]


def test_small_multiples_colour_every_cell():
    w = random_weights((2, 3, 5, 5))
    block = _block(w[1, 2])
    pairs = [(s.style.color.triplet.hex, s.style.bgcolor.triplet.hex if s.style.bgcolor
              else None) for s in block.spans]
    expected = []
    for i in range(0, 5, 2):
        for j in range(5):
            expected.append((hex_color(weight_rgb(w[1, 2, i, j])),
                             hex_color(weight_rgb(w[1, 2, i + 1, j])) if i + 1 < 5 else None))
    assert pairs == expected
    text = render_text(small_multiples(as_heads(w), 1), width=30)
    assert all(f"head {h}" in text for h in range(3))
    assert text.count("▀") == 3 * 3 * 5


def test_neuron_view_numbers_come_from_the_trace():
    rng = np.random.default_rng(3)
    q, k = rng.standard_normal((1, 32)), rng.standard_normal((6, 32))
    trace = qkv.explain(q, k, k)
    text = render_text(neuron_view(trace, TOKENS, "cat"), width=140)
    for j, token in enumerate(TOKENS):
        line = next(li for li in text.splitlines() if li.startswith(token))
        assert f"{trace.scores[0, j]:.2f}" in line
        assert f"{trace.scaled[0, j]:.3f}" in line
        assert f"{trace.weights[0, j]:.4f}" in line
    np.testing.assert_allclose(trace.scores[0], k @ q[0])
    limit = max(np.abs(q).max(), np.abs(k).max())
    colours = [(s.style.color.triplet.hex, s.style.bgcolor.triplet.hex)
               for s in _vector(k[2], limit).spans]
    assert colours == [(hex_color(signed_rgb(k[2, c], limit)),
                        hex_color(signed_rgb(k[2, c + 1], limit))) for c in range(0, 32, 2)]
    with pytest.raises(ValueError, match="one query"):
        neuron_view(qkv.explain(k, k, k), TOKENS, "cat")


def test_figure_prints_in_the_terminal():
    fig = show(random_weights((1, 2, 6, 6)), TOKENS)
    assert "head 0" in str(fig) and "[CLS]" in str(fig)
    assert "head 1" in render_text(fig)  # __rich__: the small multiples of layer 0


def test_heatmap_fits_the_terminal():
    n = 40
    w = random_weights((n, n))
    labels = [f"t{i}" for i in range(n)]
    text = render_text(show(w, labels).terminal(0, 0), width=80)
    assert max(len(line) for line in text.splitlines()) <= 80
    fits = (80 - len("  3 t39 ")) // 3  # after the row label, 3 characters per cell
    assert f"keys {fits}–39 do not fit this terminal" in text
    row = next(line for line in text.splitlines() if line.startswith("  3 t3 "))
    assert [int(x) for x in row.split()[2:]] == [round(x * 100) for x in w[3, :fits]]
