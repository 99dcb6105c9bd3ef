"""The projections view's JSON (``POST /api/projections``): X (n × 2) and W_Q, W_K, W_V in, Q, K,
V, qkv's trace, each W as rotation · stretch · rotation, and one query's lookup out.

d_model is 2 (the points of a plane). d_k may be 2 or 1: W_Q and W_K are then 2 × 1, every query
and key a single number on a line. d_v may be 2 or 1 as well. Every field the page reads is
declared here, so FastAPI never drops one.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, Field, model_validator

from .schemas import MAX_DIMS, MAX_TOKENS, Index, Number, TraceOut, _Strict

D_MODEL = 2  # the plane the shapes live in
# Loose list bounds here (so no request can be large); the shapes themselves are checked in
# ProjectionRequest._shapes_agree, whose messages say what a 2 × d matrix needs.
Row = Annotated[list[Number], Field(min_length=1, max_length=MAX_DIMS)]
Rows = Annotated[list[Row], Field(min_length=1, max_length=MAX_DIMS,
                                  description="a 2 × d matrix (d = 2 or 1), rows = input dims")]
IDENTITY2 = [[1.0, 0.0], [0.0, 1.0]]
SQUARE = [[1.0, 0.0], [0.0, 1.0], [-1.0, 0.0], [0.0, -1.0]]


def _width(name: str, m: list[list[float]]) -> int:
    """d for a 2 × d matrix ``m`` (d = 1 or 2), or a ValueError saying what is wrong."""
    if len(m) != D_MODEL:
        raise ValueError(
            f"the matrix {name} has {len(m)} row{'' if len(m) == 1 else 's'}: it maps points "
            f"of d_model = {D_MODEL} numbers, so it needs {D_MODEL} rows (2 × d)")
    widths = [len(row) for row in m]
    if len(set(widths)) != 1:
        raise ValueError(
            f"the rows of {name} have {' and '.join(map(str, widths))} numbers: every row of a "
            "2 × d matrix needs the same number of columns")
    if widths[0] > D_MODEL:
        raise ValueError(
            f"the matrix {name} is 2 × {widths[0]}: here d_k and d_v are 2 or 1 (the view "
            "draws a plane or a line), so give each row 2 numbers or 1")
    return widths[0]


class ProjectionRequest(_Strict):
    """X (n × 2: the points of a shape), W_Q and W_K (2 × d_k), W_V (2 × d_v), row convention
    (Q = X W_Q); ``query``: the point whose lookup is spelled out (none if null)."""

    x: Annotated[list[Row], Field(min_length=1, max_length=MAX_TOKENS,
                                  description="n points of 2 numbers")] = SQUARE
    w_q: Rows = IDENTITY2
    w_k: Rows = IDENTITY2
    w_v: Rows = IDENTITY2
    query: Index | None = Field(None, description="the selected query point i (0 … n − 1)")

    @model_validator(mode="after")
    def _shapes_agree(self) -> ProjectionRequest:
        for i, point in enumerate(self.x):
            if len(point) != D_MODEL:
                raise ValueError(
                    f"x[{i}] has {len(point)} number{'' if len(point) == 1 else 's'}: every "
                    f"point of X needs d_model = {D_MODEL} (its x and y)")
        d_q, d_k = _width("w_q", self.w_q), _width("w_k", self.w_k)
        _width("w_v", self.w_v)
        if d_q != d_k:
            raise ValueError(
                f"the matrices w_q (2 × {d_q}) and w_k (2 × {d_k}) differ: queries and keys "
                "need the same d_k (q · k pairs their numbers one by one), so give both the "
                "same number of columns")
        if self.query is not None and self.query >= len(self.x):
            raise ValueError(
                f"the query index is {self.query} but x has {len(self.x)} points: pick a "
                f"point 0 … {len(self.x) - 1}")
        return self


class Factors(BaseModel):
    """One W (2 × d) written as rotation · stretch · rotation: W = U · S · Vᵀ (row convention:
    x W = ((x U) S) Vᵀ, so U turns the shape first, S stretches it along the axes, Vᵀ turns it
    again). U and Vᵀ are rotations (determinant +1); a reflection, if W has one, is the sign of
    the second stretch factor."""

    shape: list[int] = Field(description="[2, d]")
    sigma: list[float] = Field(description="the singular values, largest first (numpy's svd)")
    u: list[list[float]] = Field(description="2 × 2 rotation applied first")
    stretch: list[list[float]] = Field(description="2 × d: diag(factors) (2 × 1: [[σ], [0]])")
    factors: list[float] = Field(description="the stretch along each axis: σ, with the sign "
                                 "of a reflection on the second (d = 2); [σ] for d = 1")
    vt: list[list[float]] = Field(description="d × d rotation applied last ([[1]] for d = 1)")
    angles: list[float] = Field(description="[first, last] rotation in degrees, "
                                "counter-clockwise, in (−180, 180]")
    reflection: bool = Field(description="det W < 0: W flips the shape over (shown as a "
                             "negative second stretch factor)")
    rank: int = Field(description="how many stretch factors are non-zero (1: W flattens the "
                      "plane onto a line)")
    steps: list[list[list[float]]] = Field(
        description="the three shapes after each step, n × 2 each: X U, X U S, X W (for d = 1 "
                    "the points (q, 0) on a line)")
    frames: list[list[list[float]]] = Field(
        description="the morph X → X W: 3 · frames_per_step + 1 shapes (n × 2), frame "
                    "f at t = f / frames_per_step")


class Selection(BaseModel):
    """One query point's lookup, read off qkv's trace (row i of each matrix)."""

    i: int
    q: list[float] = Field(description="q_i (d_k numbers)")
    dots: list[float] = Field(description="q_i · k_j for each key j (the raw scores)")
    scale: float = Field(description="1/√d_k")
    scaled: list[float] = Field(description="q_i · k_j / √d_k")
    weights: list[float] = Field(description="softmax of the scaled scores over the keys")
    output: list[float] = Field(description="Σ_j weight_j v_j: the blended point (d_v)")
    top: list[int] = Field(description="the key(s) with the largest weight")


class Lookups(BaseModel):
    """Where each query point's largest weight falls, counted from qkv's weights."""

    top: list[list[int]] = Field(description="per query, the key(s) sharing its largest weight "
                                 "(more than one: a tie)")
    self_count: int = Field(description="queries whose largest weight is on themselves alone")
    next_count: int = Field(description="… on the next point alone (i + 1, wrapping: on the "
                            "circle, the counter-clockwise neighbour)")
    previous_count: int = Field(description="… on the previous point alone (i − 1, wrapping)")
    tied: int = Field(description="queries whose largest weight is shared by several keys")
    keys_used: list[int] = Field(description="the distinct keys that are some query's single "
                                 "largest weight")
    can_self: list[int] = Field(description="the points some W_Q, W_K can make their own "
                                "query's single largest weight: the corners of the shape's "
                                "outline (a score is linear in the key)")


class ProjectionFactors(BaseModel):
    """W_Q, W_K, W_V, each as rotation · stretch · rotation."""

    w_q: Factors
    w_k: Factors
    w_v: Factors


class ProjectionShapes(BaseModel):
    """Each matrix's shape as the lesson writes them, e.g. "8 × 2 (n × d_k)"."""

    X: str
    Q: str
    K: str
    V: str
    weights: str
    output: str


class ProjectionResponse(BaseModel):
    q: list = Field(description="(n, d_k) Q = X W_Q")
    k: list = Field(description="(n, d_k) K = X W_K")
    v: list = Field(description="(n, d_v) V = X W_V")
    trace: TraceOut = Field(description="qkv.explain(Q, K, V)")
    shapes: ProjectionShapes
    n: int
    d_model: int
    d_k: int
    d_v: int
    factors: ProjectionFactors
    frames_per_step: int
    selected: Selection | None = Field(description="the requested query's lookup; null if none")
    lookups: Lookups
