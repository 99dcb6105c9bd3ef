"""Request and response of the GPT's own heads (``/api/gpt/own-heads``, view 10): does the
GPT grow an induction head, and what is copying worth on its text."""

from __future__ import annotations

from pydantic import BaseModel, Field

from .schemas import _Strict


class OwnHeadsRequest(_Strict):
    pass


class OwnRow(BaseModel):
    step: int
    chars: int = Field(description="training characters seen by this step")
    induction: float = Field(description="best induction score, layers 1 and up")
    previous: float = Field(description="best layer-0 previous-token score")
    repeat: float = Field(description="held-out loss on the positions a copy can predict")
    text: float | None = Field(description="held-out loss on plain validation text (runs "
                               "made before it was measured: null)")


class OwnRun(BaseModel):
    name: str
    words: str = Field(description="the run, in the learner's words")
    command: str = Field(description="the command that made its shipped file")
    layers: int
    heads: int
    width: int
    context: int
    batch: int
    params: int
    mlp: bool
    history: list[OwnRow]
    first: OwnRow | None = Field(description="the first evaluation with an induction head "
                                 "(score ≥ threshold); null: none")
    best: OwnRow = Field(description="the evaluation with the highest induction score")


class PayoffRow(BaseModel):
    what: str
    context: int
    repeats: bool = Field(description="the training windows with a chunk written twice")
    positions: int
    found: float = Field(description="share of positions whose last characters occurred "
                         "earlier in the window")
    right: float = Field(description="share where what followed them there is the next one")
    news: float = Field(description="share where that is right and the text's statistics "
                        "are not")
    stats_right: float = Field(description="share where the text's statistics are right")


class Losses(BaseModel):
    plain: float = Field(description="plain validation text, every position")
    news: float = Field(description="plain text, the positions where copying is news")
    wrong: float = Field(description="plain text, the positions where copying would be wrong")
    repeats: float = Field(description="windows with repeats, the positions a copy predicts")


class Worth(BaseModel):
    name: str
    heads: list[list[int]] = Field(description="the heads switched off (layer, head)")
    induction_heads: bool = Field(description="they are induction heads (else: the model's "
                                  "best-scoring head, for comparison)")
    news_share: float
    wrong_share: float
    windows: int
    with_: Losses = Field(alias="with")
    without: Losses


class OwnHeadsResponse(BaseModel):
    threshold: float
    match: int = Field(description="characters the copy rule matches")
    runs: list[OwnRun]
    payoff: list[PayoffRow]
    worth: list[Worth]
