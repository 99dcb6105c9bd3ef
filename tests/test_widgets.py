"""The notebook widgets without a browser: the kernel answers a view's request exactly as the
explorer's server does, and single_esm links the modules the view code imports."""

from __future__ import annotations

import json

import numpy as np
import pytest

pytest.importorskip("anywidget")
from fastapi.testclient import TestClient

import qkv
from qkv.explore import create_app
from qkv.widgets import MaskEditor, Vectors, front_end, kernel, scoped_css, sections
from qkv.widgets.esm import closure, single_esm, split


@pytest.fixture(scope="module")
def client():
    return TestClient(create_app(), base_url="http://127.0.0.1:8765")


@pytest.mark.parametrize(("path", "body"), [
    ("/api/trace", {"queries": [[0.3, -1.2]], "keys": [[1, 0], [0, 1], [-0.4, 2]],
                    "values": [[2, 0], [0, 2], [1, 1]]}),
    ("/api/trace", {"queries": [[1, 0], [0, 1]], "keys": [[1, 0], [0, 1], [1, 1]],
                    "values": [[1], [2], [3]], "mask": {"presets": [{"kind": "causal"}]}}),
    ("/api/mask", {"tokens": ["a", "b", "c", "d"], "seed": 3,
                   "mask": {"presets": [{"kind": "window", "before": 1, "after": 0}],
                            "overrides": [{"i": 2, "j": 0, "allowed": True}]}}),
])
def test_the_kernel_answers_as_the_explorer_does(client, path, body):
    reply = kernel.answer(path, body, None)
    assert reply["status"] == 200
    assert reply["data"] == client.post(path, json=body).json()  # the same JSON, to the bit


def test_bad_requests_get_the_explorers_sentences(client):
    body = {"queries": [[1, 0]], "keys": [[1, 0, 2]], "values": [[1]]}
    reply = kernel.answer("/api/trace", body, None)
    server = client.post("/api/trace", json=body)
    assert reply["status"] == server.status_code == 422
    assert reply["detail"] == server.json()["detail"] and "keys[0]" in reply["detail"]
    assert kernel.answer("/api/nothing", {}, None)["status"] == 404
    assert kernel.answer("/api/colors", None, None)["data"] == client.get("/api/colors").json()


def test_widgets_check_their_arguments_and_keep_the_kernels_answers():
    with pytest.raises(ValueError, match="q must be a non-empty 2-D"):
        Vectors(q=[1, 0])
    with pytest.raises(ValueError, match="each key needs exactly one value"):
        Vectors(k=[[1, 0]], v=[[1, 0], [0, 1]])
    with pytest.raises(ValueError, match=r"MaskEditor: .*window"):
        MaskEditor("a b", presets=[{"kind": "window", "before": -1}])
    w = Vectors([[0.5, 0.5]], [[1, 0], [0, 1]], [[1, 2], [3, 4]])
    # what the front end sends when a vector is dragged: the kernel answers and remembers it
    body = {"queries": [[2.0, -1.0]], "keys": [[1, 0], [0, 1]], "values": [[1, 2], [3, 4]]}
    sent = []
    w.send = sent.append
    w._on_request(w, {"kind": "request", "id": 7, "path": "/api/trace", "body": body}, [])
    assert sent[0]["id"] == 7 and sent[0]["status"] == 200
    trace = qkv.explain(body["queries"], body["keys"], body["values"])
    assert np.array_equal(np.asarray(w.answers["/api/trace"][1]["trace"]["weights"]),
                          trace.weights)


def test_single_esm_follows_the_import_convention():
    files = {"a/main.js": 'import { x } from "../b/x.js";\nimport * as y from "./y.js";\n'
                          'export const s = "import z from \\"./z.js\\"";\n',
             "b/x.js": 'export let x = 1;\n', "a/y.js": 'import { x } from "../b/x.js";\n'}
    order = closure(["a/main.js"], files.__getitem__)
    assert list(order) == ["b/x.js", "a/y.js", "a/main.js"]  # dependencies first
    parts, targets = split("a/main.js", files["a/main.js"])
    assert targets == ["b/x.js", "a/y.js"]  # resolved; the string's "import" is not followed
    # the parts are the text cut exactly at the two specifiers
    assert parts[0] + "../b/x.js" + parts[1] + "./y.js" + parts[2] == files["a/main.js"]
    esm = single_esm("a/main.js", {"n": 1}, files.__getitem__)
    assert esm.count("export default") == 1 and '"n": 1' in esm
    for bad, message in (({"m.js": 'import "https://cdn.example/x.js";'}, "only relative"),
                         ({"m.js": 'import "./n.js";', "n.js": 'import "./m.js";'}, "cycle"),
                         ({"m.js": 'import "../../x.js";'}, "outside the qkv package")):
        with pytest.raises(ValueError, match=message):
            closure(["m.js"], bad.__getitem__)


def test_the_front_end_is_the_explorers_view_modules():
    esm, css = front_end()
    modules = json.loads(esm.split("const MODULES = ", 1)[1].split(";\nconst DATA", 1)[0])
    for path in ("explore/static/core/api.js", "explore/static/views/vectors.js",
                 "explore/static/views/masks.js", "explore/static/views/model.js",
                 "widgets/widget.js"):
        assert path in modules
    assert "http://" not in esm.replace("http://www.w3.org/2000/svg", "") and "https://" not in esm
    assert css.startswith(".qkv-widget {") and ":root" not in css
    assert set(sections('<section id="view-a" x>1</section><section id="view-b">2</section>')) \
        == {"a", "b"}
    assert scoped_css(":root { --x: 1; }") == ".qkv-widget {\n& { --x: 1; }\n}\n"
