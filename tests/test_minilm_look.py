"""`qkv look`: the real model's heads in the terminal, HTML and SVG, with the weights it shows
read back and compared with ``MiniLM.attentions`` / ``head_inputs``."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

import numpy as np
import pytest

import qkv
from qkv.cli import main
from qkv.commands.look import find_token
from qkv.models import MiniLM

SENTENCE = "The cat sat on the mat because it was tired"


@pytest.fixture(scope="module")
def model():
    return MiniLM.load()


@pytest.fixture(scope="module")
def attentions(model):
    return model.attentions(SENTENCE)


def run(capsys, *argv):
    code = main(["look", SENTENCE, *argv])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_heatmap_shows_the_chosen_head(capsys, attentions):
    tokens, weights = attentions
    code, out, _ = run(capsys, "--layer", "2", "--head", "8")
    assert code == 0 and "layer 2 · head 8" in out
    rows = [line for line in out.splitlines() if re.match(r"^\s*\d+ \S", line)]
    assert len(rows) == len(tokens)
    for i, line in enumerate(rows):
        numbers = [int(n) for n in line.split()[2:]]
        assert numbers == [round(w * 100) for w in weights[2, 8, i]]


def test_all_heads_of_a_layer(capsys):
    code, out, _ = run(capsys, "--layer", "5", "--all")
    assert code == 0 and "layer 5: all 12 heads" in out
    assert all(f"head {h}" in out for h in range(12))


def test_neuron_view_of_a_token(capsys, model, attentions):
    tokens, weights = attentions
    code, out, _ = run(capsys, "--layer", "4", "--head", "7", "--token", "it")
    assert code == 0 and "query 8 'it'" in out
    _, q, k, v = model.head_inputs(SENTENCE, 4)
    trace = qkv.explain(q[7, [8]], k[7], v[7])
    softmax = [float(m) for m in re.findall(r"\s(\d\.\d{4})\s", out)]
    assert len(softmax) == len(tokens)
    np.testing.assert_allclose(softmax, weights[4, 7, 8], atol=5e-5)
    np.testing.assert_allclose(softmax, trace.weights[0], atol=5e-5)


def test_html_and_svg_files(capsys, tmp_path, attentions):
    _, weights = attentions
    # a folder deep enough that "wrote PATH" passes 80 columns: the path stays on one line
    # (it was broken over two under a longer temporary folder, where it could not be copied)
    deep = tmp_path / ("a-folder-with-a-long-name-" * 3)
    deep.mkdir()
    html, svg = deep / "heads.html", deep / "head.svg"
    code, out, _ = run(capsys, "--layer", "3", "--head", "1", "--html", str(html),
                       "--svg", str(svg))
    assert len(f"wrote {html}") > 80
    assert code == 0 and f"wrote {html}" in out and f"wrote {svg}" in out
    root = ET.parse(svg).getroot()
    cells = [float(r.get("data-w")) for r in root.iter("{http://www.w3.org/2000/svg}rect")
             if r.get("class") == "c"]
    np.testing.assert_allclose(cells, weights[3, 1].ravel(), atol=5e-7)
    text = html.read_text(encoding="utf-8")
    assert "<script" not in text and "https://" not in text
    sections = re.findall(r'<section class="view v-(\d)-(\d+)"', text)
    assert len(sections) == 72
    view = text.split('<section class="view v-5-11"')[1].split("</section>")[0]
    shown = [float(x) for x in re.findall(r'data-w="([0-9.]+)"', view)]
    np.testing.assert_allclose(shown, weights[5, 11].ravel(), atol=5e-7)


def test_bad_arguments_say_what_to_do(capsys):
    code, _, err = run(capsys, "--token", "dog")
    assert code == 2 and "'dog' is not one of the sentence's tokens" in err and "8:it" in err
    code, _, err = run(capsys, "--layer", "6")
    assert code == 2 and "--layer must lie in [0, 6), got 6" in err
    code, _, err = run(capsys, "--head", "12")
    assert code == 2 and "--head must lie in [0, 12)" in err
    code, _, err = run(capsys, "--model", "/nonexistent/folder")
    assert code == 2 and "does not exist" in err and "pip install" in err


def test_find_token():
    tokens = ["[CLS]", "play", "##ing", "3", "[SEP]"]
    assert find_token(tokens, "PLAY") == 1 and find_token(tokens, "ing") == 2
    assert find_token(tokens, "3") == 3 and find_token(tokens, "4") == 4  # text first, then index
    with pytest.raises(ValueError, match="0:\\[CLS\\] 1:play"):
        find_token(tokens, "missing")
