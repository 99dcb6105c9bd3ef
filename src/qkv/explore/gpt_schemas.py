"""Requests and responses of the GPT view (``/api/gpt/*``), as pydantic models."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, Field

from .schemas import _Strict

CONTEXT = 64  # the shipped GPT's context, in characters


def _prompt(text: str) -> str:
    """The prompt's length, checked in the learner's words (the page's control is "prompt")."""
    if not text:
        raise ValueError("type at least one character for the model to continue")
    if len(text) > CONTEXT:
        raise ValueError(f"it has {len(text)} characters, but the model reads at most "
                         f"{CONTEXT}: shorten it")
    return text


Prompt = Annotated[str, AfterValidator(_prompt), Field(
    description="characters the model knows; 1 to its context, 64")]
Temperature = Annotated[float, Field(strict=False, ge=0.01, le=10.0, allow_inf_nan=False,
                                     description="softmax temperature T (logits / T), "
                                                 "0.01 ≤ T ≤ 10")]


class GPTSwitchOff(_Strict):
    layer: Annotated[int, Field(strict=True, ge=0, le=63)]
    head: Annotated[int | None, Field(strict=True, ge=0, le=63,
                                      description="None: the layer's whole attention")] = None


class GPTPredictRequest(_Strict):
    prompt: Prompt = "ROMEO.\nI will not"
    temperature: Temperature = 1.0
    ablate: list[GPTSwitchOff] = Field(default_factory=list, max_length=64, description=(
        "heads (or whole layers' attention) to switch off before predicting"))
    ablation: Literal["zero", "mean"] = "zero"


class GPTNext(BaseModel):
    chars: list[str] = Field(description="the most likely next characters, most likely first")
    probs: list[float] = Field(description="their probabilities at the temperature")


class GPTAttribution(BaseModel):
    char: str = Field(description="the most likely next character")
    logit: float
    heads: list = Field(description="(layers, heads): each head's direct contribution to the "
                        "logit through the final LayerNorm and the tied output embedding")
    mlps: float
    embeddings: float
    biases: float


class GPTEffects(BaseModel):
    char: str = Field(description="the most likely next character (at T = 1)")
    p_before: float = Field(description="its probability at T = 1")
    drop: list = Field(description="(layers, heads): how much its probability falls when "
                       "that head alone is switched off")
    total: list = Field(description="(layers, heads): its logit minus its logit with that head "
                        "switched off (the total effect, every path)")
    layer_drop: list[float] = Field(description="the fall with each layer's whole attention off")
    kind: str


class GPTPromptRoles(BaseModel):
    previous: list | None = Field(description="(layers, heads) previous-token score on this "
                                  "prompt; null for a prompt of one character")
    induction: list | None = Field(description="(layers, heads) induction score on this "
                                   "prompt; null where no character repeats")
    chance_previous: float | None
    chance_induction: float | None
    n_previous: int
    n_induction: int


class GPTTop(BaseModel):
    chars: list[str]
    probs: list[float]


class GPTAblation(BaseModel):
    labels: list[str]
    kind: str
    heads: list = Field(description="[layer, head] of each head switched off")
    layers: list[int] = Field(description="layers whose whole attention is switched off")
    after: list[float] = Field(description="the probabilities of next.chars after switching off")
    top: GPTTop = Field(description="the most likely characters after switching off")


class GPTPredictResponse(BaseModel):
    chars: list[str]
    layers: int
    heads: int
    context: int
    weights: list = Field(description="(layers, heads, N, N) causal attention weights")
    allowed: list = Field(description="(N, N) bool: False where the key lies in the future")
    temperature: float
    next: GPTNext
    attribution: GPTAttribution
    effects: GPTEffects
    prompt_roles: GPTPromptRoles
    ablation: GPTAblation | None


class GPTGenerateRequest(_Strict):
    prompt: Prompt = "ROMEO.\n"
    steps: Annotated[int, Field(strict=True, ge=1, le=64)] = 8
    temperature: Temperature = 1.0
    seed: Annotated[int, Field(strict=True, ge=0, le=2**31 - 1)] = 0


class GPTGenerateResponse(BaseModel):
    prompt: list[str]
    chars: list[str] = Field(description="the characters drawn, one per step")
    probs: list[float] = Field(description="each drawn character's probability")
    weights: list = Field(description="per step (layers, heads, n): the new query's weights on "
                          "the n characters before it, read from the KV cache")
    context: int
    temperature: float
    seed: int


class GPTRolesRequest(_Strict):
    n_sequences: Annotated[int, Field(strict=True, ge=1, le=64)] = 32
    seed: Annotated[int, Field(strict=True, ge=0, le=2**31 - 1)] = 0


class GPTRoleSet(BaseModel):
    previous_token: list = Field(description="(layers, heads) mean weight on the previous key")
    induction: list = Field(description="(layers, heads) mean weight on the keys right after "
                            "the current token's earlier occurrences")
    chance_previous: float | None
    chance_induction: float | None
    source: str
    what: str
    n_sequences: int
    half: int | None
    sentence: str
    last_space: list | None
    example: list[str]
    example_weights: list = Field(description="(layers, heads, T, T) the first sequence's "
                                  "weights")


class GPTWhereRequest(_Strict):
    layer: Annotated[int, Field(strict=True, ge=0, le=63)] = 0
    head: Annotated[int, Field(strict=True, ge=0, le=63)] = 0
    ablation: Literal["zero", "mean"] = "zero"


class GPTWhereResponse(BaseModel):
    layer: int
    head: int
    kind: str
    prompt: str = Field(description="the candidate prompt where switching the head off lowers "
                        "the predicted character's probability most")
    char: str = Field(description="that prompt's predicted next character")
    drop: float = Field(description="the fall in its probability (T = 1)")
    n_candidates: int
    length: int


class GPTRolesResponse(BaseModel):
    random: GPTRoleSet
    text: GPTRoleSet


class GPTInductionRequest(_Strict):
    pass


class GPTHistoryRow(BaseModel):
    step: int
    val: float = Field(description="loss on held-out windows with repeats, all positions")
    repeat: float = Field(description="the same, only the positions a copy can predict")
    induction: float
    previous: float


class GPTPhase(BaseModel):
    step: int | None
    induction_at: float | None
    steepest_from: int
    steepest_to: int
    repeat_from: float
    repeat_to: float


class GPTInductionResponse(BaseModel):
    layers: int
    heads: int
    width: int
    context: int
    params: int
    steps: int
    elapsed: float
    history: list[GPTHistoryRow]
    phase: GPTPhase
    threshold: float
    random: GPTRoleSet
    text: GPTRoleSet
    command: str
