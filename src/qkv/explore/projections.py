"""The projections view: Q = X W_Q, K = X W_K, V = X W_V, each W as rotation · stretch · rotation,
and how the projected shape decides who looks up whom.

Every weight comes from ``qkv.explain``; every factorisation from ``numpy.linalg.svd``. What is
added here is only bookkeeping for a person: the SVD's signs chosen so both outer factors are
rotations (a reflection, if W has one, becomes the sign of one stretch factor), the angles in
degrees, the shapes after each step, and counts of where each query's largest weight falls.
"""

from __future__ import annotations

import math

import numpy as np

import qkv

from .projection_schemas import D_MODEL, ProjectionRequest

FRAMES_PER_STEP = 10  # morph frames per step (rotate, stretch, rotate): t = 0, 0.1, …, 3
FLIP = np.diag([1.0, -1.0])  # D: U D and D Vᵀ change a determinant's sign; D S D = S
# Singular values this close (relative) are equal: W/σ is then orthogonal, and any rotation
# pair with the same sum of angles is an SVD; the one with no second rotation is shown.
SAME_SIGMA = 64 * np.finfo(np.float64).eps


def rotation(degrees: float) -> np.ndarray:
    """(2, 2) row-convention rotation: ``x @ rotation(a)`` turns x by a degrees,
    counter-clockwise ((1, 0) ↦ (cos a, sin a))."""
    a = math.radians(degrees)
    return np.array([[math.cos(a), math.sin(a)], [-math.sin(a), math.cos(a)]])


def angle(r: np.ndarray) -> float:
    """The angle (degrees, in (−180, 180]) of a (2, 2) row-convention rotation."""
    return math.degrees(math.atan2(r[0, 1], r[0, 0]))


def rotation_stretch_rotation(w: np.ndarray) -> dict:
    """W (2, d), d ∈ {1, 2}, as U · S · Vᵀ with U, Vᵀ rotations (det +1) and S diagonal.

    From ``numpy.linalg.svd(W) = (U, σ, Vᵀ)``. When U and Vᵀ are both reflections, U D and D Vᵀ
    are rotations with the same product (D = diag(1, −1), D S D = S). When only one is (det W < 0),
    it is turned into a rotation and the sign goes to the second stretch factor: W flips the
    plane over, and the page says so. For d = 1 (a 2 → 1 map) Vᵀ = [[±1]]; −1 is folded into U by
    a half turn (−U is a rotation too), so the map is: turn, then keep the first coordinate × σ.
    """
    d = w.shape[1]
    u, sigma, vt = np.linalg.svd(w)  # (2, 2), (d,), (d, d)
    # numpy's matrix_rank tolerance: smaller singular values are rounding, not a stretch, and are
    # shown as 0 (a projection flattens the plane onto a line; its ±1e-17 would be noise)
    kept = sigma > sigma.max(initial=0.0) * max(w.shape) * np.finfo(np.float64).eps
    rank = int(kept.sum())
    factors = np.where(kept, sigma, 0.0)
    reflection = False
    if d == 1:
        if vt[0, 0] < 0:
            u, vt = -u, -vt
        if np.linalg.det(u) < 0:
            u = u @ FLIP  # its second column meets only S's zero row
    elif sigma[0] > 0 and sigma[0] - sigma[1] <= SAME_SIGMA * sigma[0]:
        # equal stretch both ways: W/σ is a rotation (or a reflection); no second rotation
        u, vt = w / sigma[0], np.eye(2)
        if np.linalg.det(u) < 0:
            u, factors, reflection = u @ FLIP, factors * [1.0, -1.0], True
    else:
        du, dv = np.linalg.det(u), np.linalg.det(vt)
        if du < 0:
            u = u @ FLIP
        if dv < 0:
            vt = FLIP @ vt
        if (du < 0) != (dv < 0):  # det W < 0 (or rank < 2, where 0 · −1 changes nothing)
            factors = factors * [1.0, -1.0] + 0.0  # + 0.0: no −0 for a zero factor
            reflection = rank == 2
        if abs(angle(u)) + abs(angle(vt)) > abs(angle(-u)) + abs(angle(-vt)):
            u, vt = -u, -vt  # the same product (−U)S(−Vᵀ) = U S Vᵀ, with the smaller turns
    stretch = np.zeros((D_MODEL, d))  # (2, d)
    stretch[np.arange(d), np.arange(d)] = factors
    return {"u": u, "sigma": sigma, "factors": factors, "stretch": stretch, "vt": vt,
            "angles": [angle(u), angle(vt) if d == 2 else 0.0], "reflection": reflection,
            "rank": rank}


def _flat(points: np.ndarray) -> np.ndarray:
    """(n, d) → (n, 2): 1-D points drawn on the horizontal axis."""
    return points if points.shape[1] == 2 else np.column_stack([points, np.zeros(len(points))])


def morph(x: np.ndarray, f: dict, final: np.ndarray) -> tuple[list, list]:
    """The shapes after each step (X U, X U S, X W) and the frames of X turning, stretching,
    turning into X W, FRAMES_PER_STEP per step, as (n, 2) points.

    Each step is interpolated the way it acts: rotations by their angle, the stretch factor by
    factor (a negative factor passes through 0: the shape flattens, then comes out flipped). The
    last frame is ``final`` (X W as qkv's projections computed it)."""
    turned = x @ f["u"]  # (n, 2)
    d = f["stretch"].shape[1]
    target = np.ones(2)
    target[:d] = f["factors"]
    if d == 1:
        target[1] = 0.0  # 2 → 1: the second coordinate is dropped
    stretched = turned * target  # (n, 2)
    frames = []
    for s in range(FRAMES_PER_STEP * 3 + 1):
        t = s / FRAMES_PER_STEP
        if t <= 1:
            frames.append(x @ rotation(t * f["angles"][0]))
        elif t <= 2:
            frames.append(turned * (1 + (t - 1) * (target - 1)))
        else:
            frames.append(stretched @ rotation((t - 2) * f["angles"][1]))
    frames[-1] = _flat(final)
    return [turned.tolist(), stretched.tolist(), _flat(final).tolist()], \
        [frame.tolist() for frame in frames]


def factors(w: np.ndarray, x: np.ndarray, xw: np.ndarray) -> dict:
    """One W's rotation · stretch · rotation, its angles, and the morph of x into x W."""
    f = rotation_stretch_rotation(w)
    steps, frames = morph(x, f, xw)
    return {"shape": list(w.shape), "sigma": f["sigma"].tolist(), "u": f["u"].tolist(),
            "stretch": f["stretch"].tolist(), "factors": f["factors"].tolist(),
            "vt": f["vt"].tolist(), "angles": f["angles"], "reflection": f["reflection"],
            "rank": f["rank"], "steps": steps, "frames": frames}


def top_keys(weights: np.ndarray) -> list[list[int]]:
    """Per query row, the keys holding its largest weight (several: a tie, equal to rounding).

    Weights within a few ulps of the row's maximum count as tied, so that equal scores that
    rounding split by one ulp are not reported as a winner."""
    top = weights.max(axis=1, keepdims=True)  # (n, 1)
    near = weights >= top * (1 - 8 * np.finfo(np.float64).eps)  # (n, n)
    return [np.flatnonzero(row).tolist() for row in near]


def lookups(weights: np.ndarray) -> dict:
    """Where each query's largest weight falls: itself, the next point, the previous one."""
    n = len(weights)
    top = top_keys(weights)
    single = [t[0] if len(t) == 1 else None for t in top]
    return {"top": top,
            "self_count": sum(j == i for i, j in enumerate(single)),
            "next_count": sum(j == (i + 1) % n for i, j in enumerate(single)),
            "previous_count": sum(j == (i - 1) % n for i, j in enumerate(single)),
            "tied": sum(j is None for j in single),
            "keys_used": sorted({j for j in single if j is not None})}


def can_attend_to_itself(x: np.ndarray) -> list[int]:
    """The points that some W_Q, W_K can make their own query's single largest weight: the
    corners of the shape's outline (the strict vertices of the points' convex hull). A query's
    score q·k = (x_i W_Q)·(x_j W_K) is linear in the key's point x_j, so over the points it
    peaks at a corner, never strictly at a point inside the outline or on one of its edges
    (the letter F: 3 of its 7 points). So this is at most how many can attend to themselves;
    on both of the page's shapes every corner can at once, with W_Q = I and a W_K the learner
    can type (tests/test_explore_learner_api.py finds one). For 2-D points (n < 3: every
    point; other widths: none claimed)."""
    pts = np.asarray(x, dtype=np.float64)
    n = len(pts)
    if pts.ndim != 2 or pts.shape[1] != 2 or n < 3:
        return list(range(n)) if n < 3 else []
    order = sorted(range(n), key=lambda i: (pts[i, 0], pts[i, 1]))

    def cross(o, a, b):
        return ((pts[a, 0] - pts[o, 0]) * (pts[b, 1] - pts[o, 1])
                - (pts[a, 1] - pts[o, 1]) * (pts[b, 0] - pts[o, 0]))

    def chain(indices):  # Andrew's monotone chain; collinear and repeated points dropped
        out = []
        for i in indices:
            while len(out) >= 2 and cross(out[-2], out[-1], i) <= 1e-12:
                out.pop()
            out.append(i)
        return out
    lower, upper = chain(order), chain(order[::-1])
    corners = set(lower[:-1] + upper[:-1])
    # a point repeated at a corner is nobody's single largest: both copies score the same
    same = {i for i in corners for j in range(n) if j != i and np.array_equal(pts[i], pts[j])}
    return sorted(corners - same)


def projections(req: ProjectionRequest) -> dict:
    """Q = X W_Q, K = X W_K, V = X W_V (row convention), attention over them by qkv.explain,
    each W factored, and the selected query's lookup."""
    x = np.asarray(req.x, dtype=np.float64)  # (n, d_model)
    ws = {name: np.asarray(getattr(req, name), dtype=np.float64) for name in ("w_q", "w_k", "w_v")}
    q = x @ ws["w_q"]  # (n, d_k)
    k = x @ ws["w_k"]  # (n, d_k)
    v = x @ ws["w_v"]  # (n, d_v)
    trace = qkv.explain(q, k, v)
    n, d_k, d_v = len(x), q.shape[1], v.shape[1]
    selected = None
    if req.query is not None:
        i = req.query
        selected = {"i": i, "q": q[i].tolist(), "dots": trace.scores[i].tolist(),
                    "scale": float(trace.scale), "scaled": trace.scaled[i].tolist(),
                    "weights": trace.weights[i].tolist(), "output": trace.output[i].tolist(),
                    "top": top_keys(trace.weights[[i]])[0]}
    return {
        "q": q.tolist(), "k": k.tolist(), "v": v.tolist(), "trace": trace.to_dict(),
        "shapes": {"X": f"{n} × {D_MODEL} (n × d_model)", "Q": f"{n} × {d_k} (n × d_k)",
                   "K": f"{n} × {d_k} (n × d_k)", "V": f"{n} × {d_v} (n × d_v)",
                   "weights": f"{n} × {n} (n × n)", "output": f"{n} × {d_v} (n × d_v)"},
        "n": n, "d_model": D_MODEL, "d_k": d_k, "d_v": d_v,
        "factors": {name: factors(w, x, {"w_q": q, "w_k": k, "w_v": v}[name])
                    for name, w in ws.items()},
        "frames_per_step": FRAMES_PER_STEP,
        "selected": selected,
        "lookups": {**lookups(trace.weights), "can_self": can_attend_to_itself(x)},
    }
