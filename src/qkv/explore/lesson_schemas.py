"""The JSON of the lesson's measured claims: far back (the far-back task's shipped models), the
encoder–decoder's accuracy by length, and the cost view's growth of time with n.

Every field a view reads is declared here, so FastAPI passes it through and a test can check the
page against the schema.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, Field

from .schemas import _Strict

MAX_LAG = 4096  # lags beyond the shipped window are refused by the service with its window
MAX_DISTRACTORS = 64
MAX_LIVE_N = 2048
MIN_LIVE_N = 64

Lag = Annotated[int, Field(strict=True, ge=1, le=MAX_LAG,
                           description="steps back from the end: 1 is the last step")]


class CurvesRequest(_Strict):
    """No fields: the curves are of the shipped models on their held-out set (send ``{}``)."""


# -- far back ----------------------------------------------------------------------------------
class FarbackRequest(_Strict):
    """A series of the far-back task: sampled from ``seed``, then optionally edited."""

    seed: Annotated[int, Field(strict=True, ge=0, le=2**31 - 1)] = 0
    event_lag: Lag | None = Field(None, description="move the event (the type-0 block trade) "
                                  "to this lag")
    event_sign: Literal[-1, 1] | None = Field(None, description="give the event this sign")
    distractor_lags: Annotated[list[Lag], Field(max_length=MAX_DISTRACTORS)] | None = Field(
        None, description="replace the blocks of other types by blocks at these lags")


class FarbackEvent(BaseModel):
    lag: int
    sign: int = Field(description="+1 or −1: the answer")
    size: float


class FarbackPrediction(BaseModel):
    prediction: int = Field(description="the model's answer, +1 or −1")
    p_plus: float = Field(description="the model's probability that the sign is +1")
    correct: bool


class FarbackPredictions(BaseModel):
    attention: FarbackPrediction
    recency: FarbackPrediction
    gru: FarbackPrediction


class FarbackAttention(BaseModel):
    top_lag: int = Field(description="the lag of the step with the largest weight")
    weight_on_event: float
    weight_on_distractors: float = Field(description="the weights on all distractors, summed")
    max_distractor_weight: float


class FarbackSweepModel(BaseModel):
    p_plus: list[float] = Field(description="P(+) with the event moved to lag i + 1")
    correct: list[bool]
    p_plus_flipped: list[float] = Field(description="P(+) there with the event's sign flipped")
    reads: list[bool] = Field(description="right for both signs of the event at lag i + 1")


class FarbackSweepModels(BaseModel):
    attention: FarbackSweepModel
    recency: FarbackSweepModel
    gru: FarbackSweepModel


class FarbackSweep(BaseModel):
    lags: list[int] = Field(description="1 … window")
    truth: list[int] = Field(description="the event's sign (the answer) at each lag")
    models: FarbackSweepModels


class FarbackResponse(BaseModel):
    seed: int
    window: int
    trained_lags: list[int] = Field(description="[shortest, longest] event lag in training")
    types: list[int] = Field(description="per step, oldest first (index i has lag window − i)")
    sizes: list[float]
    signs: list[int]
    event: FarbackEvent
    distractor_lags: list[int] = Field(description="blocks (size ≥ 3) of other types, "
                                       "most recent first")
    models: FarbackPredictions
    weights: list[float] = Field(description="the attention model's query over the steps "
                                 "(window,), oldest first; sums to 1")
    attention: FarbackAttention
    sweep: FarbackSweep = Field(description="the same series with the event moved to every "
                                "lag: each model's answer there")


class LagBucket(BaseModel):
    lags: list[int]
    cases: int
    correct: int
    accuracy: float
    interval: list[float] = Field(description="95% Wilson interval of the accuracy")


class FarbackProgress(BaseModel):
    per_bucket: int = Field(description="held-out series per lag bucket during training")
    steps: list[int]
    accuracy: list[list[float]] = Field(description="per step listed, accuracy per lag bucket")
    chance_from: list[list[int] | None]


class FarbackCurve(BaseModel):
    parameters: int
    units: int = Field(description="the width: recurrent units (GRU, RNN) or d_model")
    steps: int
    train_seconds: float = Field(description="measured on a busy 2-core machine")
    accuracy: float
    by_lag: list[LagBucket]
    chance_from: list[int] | None = Field(description="the first lag bucket whose 95% interval "
                                          "contains 0.5; None if none does")
    progress: FarbackProgress


class FarbackTuned(FarbackCurve):
    gate_bias: float = Field(description="added to the GRU's update-gate bias at init")
    command: str


class FarbackCurves(BaseModel):
    attention: FarbackCurve
    recency: FarbackCurve
    gru: FarbackCurve
    rnn: FarbackCurve = Field(description="the plain (tanh) RNN, trained by rnn_command")


class FarbackCurvesResponse(BaseModel):
    held_out: int = Field(description="held-out series scored")
    per_bucket: int = Field(description="held-out series per lag bucket")
    window: int
    command: str = Field(description="the command that trained the shipped models")
    rnn_command: str = Field(description="the command that trained the plain RNN")
    models: FarbackCurves
    gru_tuned: FarbackTuned
    top_weight_on_event: float = Field(description="share of held-out series whose largest "
                                       "attention weight is on the event")
    mean_weight_on_event: float


# -- encoder–decoder ---------------------------------------------------------------------------
class LengthBucket(BaseModel):
    lengths: list[int]
    sequences: int
    token_accuracy: float
    exact_match: float


class Seq2SeqCurves(BaseModel):
    attention: list[LengthBucket]
    fixed: list[LengthBucket]


class Seq2SeqCurvesResponse(BaseModel):
    per_bucket: int = Field(description="held-out sequences per length bucket")
    run: str = Field(description="where the scores come from: the shipped checkpoints' "
                     "stored held-out scores and the command of the run that trained them")
    trained_lengths: list[int]
    d_hidden: int = Field(description="the size of the fixed model's one context vector")
    long_example: str = Field(description="a held-out-style input of the longest trained length")
    models: Seq2SeqCurves


# -- cost: time against n ------------------------------------------------------------------------
class GrowthRequest(_Strict):
    """Time the four methods live for n = 64, 128, … max_n within ``budget`` seconds."""

    max_n: Annotated[int, Field(strict=True, ge=MIN_LIVE_N, le=MAX_LIVE_N)] = MAX_LIVE_N
    repeats: Annotated[int, Field(strict=True, ge=1, le=3)] = 2
    budget: Annotated[float, Field(strict=True, gt=0, le=1.5)] = 1.5


class TimePoint(BaseModel):
    n: int
    seconds: float
    source: Literal["live", "shipped"]


class TimeSeries(BaseModel):
    method: Literal["qkv dense", "qkv causal", "qkv window", "ssm scan"]
    points: list[TimePoint]
    stopped: str | None = Field(description="why the curve stops before the last n, if it does")
    slope: float | None = Field(description="least-squares slope of log time on log n for "
                                "n ≥ fit_from (None under two points)")


class GrowthRun(BaseModel):
    d: int
    dtype: str
    window: int
    repeats: int
    fit_from: int
    methods: list[TimeSeries] = Field(description="qkv dense, qkv causal, qkv window, "
                                      "ssm scan, in this order")


class LiveRun(GrowthRun):
    state: int
    budget_seconds: float
    busy: str | None = Field(None, description="a sentence when other programs kept the "
                             "machine busy while these were timed (or it was not measurable)")


class ShippedRun(GrowthRun):
    command: str = Field(description="the command that produced the shipped results")


class GrowthResponse(BaseModel):
    live: LiveRun
    shipped: ShippedRun


# -- cost: what the n² buys, recall (MQAR) -----------------------------------------------------
MAX_RECALL_PAIRS = 64
RecallKey = Annotated[int, Field(strict=True, ge=1, le=1024)]  # the service checks the range


class RecallRequest(_Strict):
    """A recall sequence: ``pairs`` [[key, value], …] and the keys ``asked``; or, without
    pairs, ``n_pairs`` random pairs drawn from ``seed`` with every key asked once."""

    pairs: Annotated[list[tuple[RecallKey, RecallKey]],
                     Field(min_length=1, max_length=MAX_RECALL_PAIRS)] | None = None
    asked: Annotated[list[RecallKey], Field(min_length=1, max_length=MAX_RECALL_PAIRS)] | None \
        = None
    seed: Annotated[int, Field(strict=True, ge=0, le=2**31 - 1)] = 0
    n_pairs: Annotated[int, Field(strict=True, ge=1, le=MAX_RECALL_PAIRS)] = 8


class RecallAnswer(BaseModel):
    position: int = Field(description="the asked key's position in the sequence")
    key: int
    expected: int | None = Field(description="the value stored under the key")
    answer: int | None = Field(description="the model's most likely token, if it is a value")
    probability: float = Field(description="the model's probability of its answer")
    correct: bool


class RecallSelectionLayer(BaseModel):
    """One layer's selective scan (S6) at every token of the sequence, computed by qkv.nn's
    own layer (``MambaBlock.selection``)."""

    delta: list[float] = Field(description="the step Δ at each token, mean over the channels")
    kept: list[float] = Field(description="the share of the state kept at each token: the "
                              "geometric mean of the decay exp(ΔA) over channels and states "
                              "(near 1: held; near 0: forgotten and written over)")


class RecallModelAnswers(BaseModel):
    kind: Literal["attention", "ssm-small", "ssm-large"]
    n_state: int | None = Field(description="states per channel (None: attention)")
    answers: list[RecallAnswer]
    correct: int
    total: int
    selection: list[RecallSelectionLayer] | None = Field(
        description="per layer, what its state selects at each token (None: attention)")


class RecallToken(BaseModel):
    role: Literal["key", "value", "asked", "blank"] = Field(
        description="a stored key or value, an asked key, or a blank")
    number: int | None = Field(description="the key's or value's number (None: a blank)")


class RecallResponse(BaseModel):
    pairs: list[list[int]]
    asked: list[int]
    length: int = Field(description="tokens in the sequence the models read")
    n_keys: int
    n_values: int
    tokens: list[RecallToken] = Field(description="each position of the sequence, in order")
    models: list[RecallModelAnswers] = Field(description="attention, ssm-small, ssm-large")


class RecallCell(BaseModel):
    length: int
    pairs: int
    answers: int = Field(description="asked keys scored in this cell")
    correct: int
    accuracy: float


class RecallCurve(BaseModel):
    kind: Literal["attention", "ssm-small", "ssm-large"]
    n_state: int | None
    parameters: int
    mixer_parameters: int = Field(description="parameters of the two sequence mixers")
    state_floats_per_layer: int | None = Field(description="d × N (None: attention)")
    train_seconds: float
    cells: list[RecallCell]


class RecallCurvesResponse(BaseModel):
    command: str = Field(description="the command that trained the shipped models")
    per_cell: int = Field(description="held-out sequences per (length, pairs) cell")
    n_keys: int
    n_values: int
    d_model: int
    generator: Literal["zoology", "uniform"] = Field(
        description="how the training and held-out sequences were drawn (qkv.tasks.mqar)")
    steps: int
    train_lengths: list[int]
    eval_lengths: list[int]
    models: list[RecallCurve] = Field(description="attention, ssm-small, ssm-large")
