"""View 1's "the power is the three together": the shipped runs of
:mod:`qkv.tasks.frozen_projections` (view 1's toy trained with W_Q, W_K, W_V all learned, one
frozen, or only one learned), served as ``POST /api/projections/frozen`` for the view to table,
caption and load into its planes."""

from __future__ import annotations

from pydantic import BaseModel, Field

from .schemas import _Strict


class FrozenRequest(_Strict):
    """No fields: the runs are the shipped ones (send ``{}``)."""


class FrozenCircle(BaseModel):
    points: int = Field(description="points on this circle")
    right: int = Field(description="tokens whose output lies nearest their neighbour")
    top_on_neighbour: int
    top_on_self: int
    weight_on_neighbour: float


class FrozenRun(BaseModel):
    label: str = Field(description="which W's are frozen, and at what")
    learned: list[str] = Field(description="the W's trained, e.g. ['W_Q', 'W_K']")
    frozen_at: str | None = Field(description="'identity' or 'random' (None: all learned)")
    mse_start: float = Field(description="mean squared error before training")
    mse: float = Field(description="mean squared error after training")
    tokens: int = Field(description="tokens over all circles")
    right: int = Field(description="tokens whose output lies nearest their neighbour among "
                       "their circle's points")
    top_on_neighbour: int = Field(description="tokens whose largest weight is on the neighbour")
    top_on_self: int = Field(description="tokens whose largest weight is on themselves")
    weight_on_neighbour: float = Field(description="the mean weight on the neighbour")
    by_points: list[FrozenCircle]
    w_q: list[list[float]]
    w_k: list[list[float]]
    w_v: list[list[float]]


class FrozenResponse(BaseModel):
    command: str = Field(description="the command that made these runs")
    task: str
    points: list[int] = Field(description="the circles' numbers of points, trained together")
    steps: int
    lr: float
    seed: int
    runs: list[FrozenRun]


def register(app, responses: dict) -> None:
    from qkv.tasks import frozen_projections

    shipped = frozen_projections.shipped()  # a few kilobytes, read once

    @app.post("/api/projections/frozen", response_model=FrozenResponse, responses=responses)
    def frozen(req: FrozenRequest) -> dict:
        """View 1: the toy trained with the W's all learned, one frozen, or one alone."""
        return shipped
