"""The projections view's API (``POST /api/projections``): each W as rotation · stretch · rotation
checked against ``numpy.linalg.svd``, the morph's shapes against X U, X U S and X W, the selected
query's numbers and the 2 → 1 case against ``qkv.explain``, and shape errors as readable 422s."""

from __future__ import annotations

import json
import math
from importlib import resources

import numpy as np
import pytest
from fastapi.testclient import TestClient

import qkv
from qkv.explore import create_app
from qkv.explore.projections import FRAMES_PER_STEP, SAME_SIGMA

EPS = np.finfo(np.float64).eps
CIRCLE = [[round(math.cos(2 * math.pi * i / 8), 4), round(math.sin(2 * math.pi * i / 8), 4)]
          for i in range(8)]
LEARNED = json.loads((resources.files("qkv.explore") / "static" / "learned_2d.json").read_text())
MATRICES = {
    "identity": [[1.0, 0.0], [0.0, 1.0]],
    "rotation 45°": [[0.7071, 0.7071], [-0.7071, 0.7071]],
    "stretch": [[2.0, 0.0], [0.0, 0.5]],
    "shear": [[1.0, 0.0], [1.0, 1.0]],
    "projection (rank 1)": [[0.5, 0.5], [0.5, 0.5]],
    "swap axes (reflection)": [[0.0, 1.0], [1.0, 0.0]],
    "mirror with stretch": [[-2.0, 0.3], [0.1, 0.7]],
    "half turn": [[-1.0, 0.0], [0.0, -1.0]],
    "zero": [[0.0, 0.0], [0.0, 0.0]],
    "learned W_K": LEARNED["w_k"],
    "random": np.random.default_rng(7).standard_normal((2, 2)).round(4).tolist(),
    "2 → 1": [[1.0], [0.5]],
    "2 → 1 pointing back": [[-1.0], [0.5]],
    "2 → 1 zero": [[0.0], [0.0]],
}


@pytest.fixture(scope="module")
def client():
    with TestClient(create_app(allowed_hosts=["testserver"])) as c:
        yield c


def explained(q, k, v) -> dict:
    """qkv's own trace through the JSON round trip the page gets."""
    return json.loads(json.dumps(qkv.explain(q, k, v).to_dict(), allow_nan=False))


def post(client, **body) -> dict:
    response = client.post("/api/projections", json=body)
    assert response.status_code == 200, response.text
    return response.json()


def assert_rotation(m, tol):
    m = np.asarray(m)
    np.testing.assert_allclose(m @ m.T, np.eye(len(m)), rtol=0, atol=tol)
    assert np.linalg.det(m) == pytest.approx(1.0, abs=tol)


@pytest.mark.parametrize("name", list(MATRICES))
def test_each_w_is_rotation_stretch_rotation_by_numpys_svd(client, name):
    w = np.asarray(MATRICES[name])  # (2, d)
    d = w.shape[1]
    x = np.asarray(CIRCLE)
    body = post(client, x=CIRCLE, w_q=w.tolist(), w_k=w.tolist(), w_v=w.tolist())
    f = body["factors"]["w_k"]
    sigma = np.linalg.svd(w)[1]  # the call the server makes (no-vector LAPACK differs by ulps)
    assert f["sigma"] == sigma.tolist() and f["shape"] == [2, d]
    # numpy's σ, with a sign for a reflection; σ below numpy's rank tolerance is shown as 0
    kept = sigma > sigma.max() * 2 * EPS
    np.testing.assert_array_equal(np.abs(f["factors"]), np.where(kept, sigma, 0.0))
    # the outer factors are rotations and the three rebuild W, to rounding: numpy's SVD is
    # backward stable (a few ulps of σ_max); equal σ's are taken as equal within SAME_SIGMA
    tol = (SAME_SIGMA + 16 * EPS) * max(sigma[0], 1.0)
    u, s, vt = (np.asarray(f[k]) for k in ("u", "stretch", "vt"))
    assert s.shape == (2, d) and vt.shape == (d, d)
    assert_rotation(u, 16 * EPS)
    assert_rotation(vt, 16 * EPS)
    np.testing.assert_allclose(u @ s @ vt, w, rtol=0, atol=tol)
    np.testing.assert_array_equal(np.diag(s), f["factors"])
    # the angles are the rotations' own, in degrees
    assert f["angles"][0] == pytest.approx(math.degrees(math.atan2(u[0, 1], u[0, 0])), abs=1e-12)
    if d == 2:
        assert f["angles"][1] == pytest.approx(math.degrees(math.atan2(vt[0, 1], vt[0, 0])),
                                               abs=1e-12)
    # a reflection is said exactly when W has one (full rank, det < 0), and sits in the sign
    rank = np.linalg.matrix_rank(w)
    assert f["rank"] == rank
    flips = d == 2 and rank == 2 and np.linalg.det(w) < 0
    assert f["reflection"] == flips
    assert (np.asarray(f["factors"]) < 0).any() == flips
    # the three steps: X U, X U S, X W, and the morph passes through each of them
    flat = (lambda p: p) if d == 2 else (lambda p: np.column_stack([p, np.zeros(len(p))]))
    np.testing.assert_allclose(f["steps"][0], x @ u, rtol=0, atol=16 * EPS)
    np.testing.assert_allclose(f["steps"][1], flat(x @ u @ s), rtol=0, atol=16 * EPS * sigma[0])
    np.testing.assert_array_equal(f["steps"][2], flat(x @ w))
    frames = f["frames"]
    assert len(frames) == 3 * FRAMES_PER_STEP + 1 == 3 * body["frames_per_step"] + 1
    np.testing.assert_allclose(frames[0], x, rtol=0, atol=16 * EPS)
    for step in (1, 2):
        np.testing.assert_allclose(frames[step * FRAMES_PER_STEP], f["steps"][step - 1],
                                   rtol=0, atol=16 * EPS * max(sigma[0], 1.0))
    np.testing.assert_array_equal(frames[-1], flat(x @ w))
    # and a rotation's frames keep every point's length
    lengths = np.linalg.norm(x, axis=1)
    np.testing.assert_allclose(np.linalg.norm(frames[FRAMES_PER_STEP // 2], axis=1), lengths,
                               rtol=0, atol=16 * EPS)


def test_the_rotation_preset_is_one_turn_and_a_mirror_says_so(client):
    body = post(client, x=CIRCLE, w_q=MATRICES["rotation 45°"],
                w_k=MATRICES["swap axes (reflection)"])
    rot, mirror = body["factors"]["w_q"], body["factors"]["w_k"]
    assert rot["angles"] == [pytest.approx(45.0, abs=1e-12), 0.0]
    assert rot["reflection"] is False and rot["factors"] == [pytest.approx(0.99999, abs=1e-4)] * 2
    assert mirror["reflection"] is True and mirror["factors"][1] == pytest.approx(-1.0, abs=1e-15)


@pytest.mark.parametrize("d_k", [2, 1])
@pytest.mark.parametrize("i", [0, 3, 7])
def test_the_selected_query_is_row_i_of_qkvs_trace(client, d_k, i):
    w_q = LEARNED["w_q"] if d_k == 2 else [[1.0], [0.5]]
    w_k = LEARNED["w_k"] if d_k == 2 else [[-0.3], [1.2]]
    body = post(client, x=CIRCLE, w_q=w_q, w_k=w_k, w_v=LEARNED["w_v"], query=i)
    x = np.asarray(CIRCLE)
    q, k, v = x @ np.asarray(w_q), x @ np.asarray(w_k), x @ np.asarray(LEARNED["w_v"])
    assert body["trace"] == explained(q, k, v)
    trace = qkv.explain(q, k, v)
    sel = body["selected"]
    assert sel["i"] == i and sel["q"] == q[i].tolist()
    assert sel["dots"] == trace.scores[i].tolist()
    assert sel["scaled"] == trace.scaled[i].tolist() and sel["scale"] == 1 / math.sqrt(d_k)
    assert sel["weights"] == trace.weights[i].tolist()
    assert sel["output"] == trace.output[i].tolist()
    assert sel["top"] == [int(np.argmax(trace.weights[i]))]
    # the same numbers as qkv.explain of that query alone (the neuron view's call), to rounding
    alone = qkv.explain(q[[i]], k, v)
    np.testing.assert_allclose(sel["weights"], alone.weights[0], rtol=8 * EPS, atol=0)
    np.testing.assert_allclose(sel["output"], alone.output[0], rtol=8 * EPS, atol=8 * EPS)
    assert body["d_k"] == d_k and body["d_v"] == 2 and body["n"] == 8
    assert body["shapes"]["Q"] == f"8 × {d_k} (n × d_k)"
    assert body["shapes"]["weights"] == "8 × 8 (n × n)"


def test_two_to_one_every_query_and_key_is_one_number(client):
    """d_k = 1: q_i · k_j = q_i k_j, so a query's weights depend only on its own number: a
    positive q favours the largest key, a negative q the smallest."""
    w_q, w_k = [[1.0], [0.5]], [[-0.3], [1.2]]
    body = post(client, x=CIRCLE, w_q=w_q, w_k=w_k)
    x = np.asarray(CIRCLE)
    q, k = x @ np.asarray(w_q), x @ np.asarray(w_k)  # (8, 1) each
    assert body["trace"] == explained(q, k, x)
    weights = qkv.explain(q, k, x).weights
    for i, top in enumerate(body["lookups"]["top"]):
        expect = int(np.argmax(k[:, 0])) if q[i, 0] > 0 else int(np.argmin(k[:, 0]))
        assert top == [expect] == [int(np.argmax(weights[i]))]
    assert body["lookups"]["keys_used"] == sorted({int(np.argmax(k)), int(np.argmin(k))})
    assert body["selected"] is None
    assert np.asarray(body["q"]).shape == (8, 1)


def test_lookups_count_where_each_largest_weight_falls(client):
    body = post(client, x=CIRCLE, **{k: LEARNED[k] for k in ("w_q", "w_k", "w_v")})
    x = np.asarray(CIRCLE)
    weights = qkv.explain(*(x @ np.asarray(LEARNED[k]) for k in ("w_q", "w_k", "w_v"))).weights
    top = weights.argmax(axis=1)
    look = body["lookups"]
    assert look["top"] == [[int(j)] for j in top]
    assert look["next_count"] == int((top == (np.arange(8) + 1) % 8).sum()) == 8
    assert look["self_count"] == 0 and look["previous_count"] == 0 and look["tied"] == 0
    # identity W_Q = W_K: every point's best match is itself (the guided task's answer)
    same = post(client, x=CIRCLE)["lookups"]
    assert same["self_count"] == 8 and same["keys_used"] == list(range(8))
    # W_K = 0: every score is 0, every row a tie
    flat = post(client, x=CIRCLE, w_k=MATRICES["zero"])["lookups"]
    assert flat["tied"] == 8 and flat["self_count"] == 0 and flat["top"][0] == list(range(8))


@pytest.mark.parametrize(("body", "said"), [
    ({"w_q": [[1.0], [0.0]]}, "the matrices w_q (2 × 1) and w_k (2 × 2) differ"),
    ({"w_k": [[1.0, 0.0], [1.0]]}, "the rows of w_k have 2 and 1 numbers"),
    ({"w_v": [[1.0, 2.0, 3.0], [1.0, 2.0, 3.0]]}, "the matrix w_v is 2 × 3"),
    ({"w_q": [[1.0, 0.0]]}, "the matrix w_q has 1 row: it maps points of d_model = 2"),
    ({"x": [[1.0, 2.0], [3.0]]}, "x[1] has 1 number: every point of X needs d_model = 2"),
    ({"query": 4}, "the query index is 4 but x has 4 points: pick a point 0 … 3"),
    ({"query": -1}, "query: Input should be greater than or equal to 0"),
    ({"w_q": [[1.0, "a"], [0.0, 1.0]]}, "w_q[0][1]"),
    ({"w_q": [[1e7, 0.0], [0.0, 1.0]]}, "w_q[0][0]"),
])
def test_bad_shapes_are_422s_that_say_what_to_fix(client, body, said):
    response = client.post("/api/projections", json=body)
    assert response.status_code == 422
    assert said in response.json()["detail"]


def test_every_field_the_page_reads_is_in_the_schema(client):
    """FastAPI drops what the response model does not declare: these are what the view reads."""
    body = post(client, x=CIRCLE, query=1)
    assert set(body) >= {"q", "k", "v", "trace", "shapes", "n", "d_model", "d_k", "d_v",
                         "factors", "frames_per_step", "selected", "lookups"}
    assert set(body["factors"]) == {"w_q", "w_k", "w_v"}
    assert set(body["factors"]["w_q"]) >= {"shape", "sigma", "u", "stretch", "factors", "vt",
                                           "angles", "reflection", "rank", "steps", "frames"}
    assert set(body["selected"]) >= {"i", "q", "dots", "scale", "scaled", "weights", "output",
                                     "top"}
    assert set(body["lookups"]) >= {"top", "self_count", "next_count", "previous_count", "tied",
                                    "keys_used"}
