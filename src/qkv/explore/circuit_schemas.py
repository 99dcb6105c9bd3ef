"""Requests and responses of the induction model's circuit (``/api/gpt/circuit*``, view 10)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, Field

from .schemas import _Strict

CONTEXT = 48  # the shipped induction model's context, in characters


def _prompt(text: str) -> str:
    """The prompt's length, in the learner's words (the page's control is "prompt")."""
    if not text:
        raise ValueError("type at least one character for the induction model to continue")
    if len(text) > CONTEXT:
        raise ValueError(f"it has {len(text)} characters, but the induction model reads at "
                         f"most {CONTEXT}: shorten it")
    return text


Index = Annotated[int, Field(strict=True, ge=0, le=63)]


class Head(_Strict):
    layer: Index
    head: Index


class Path(_Strict):
    source: Head = Field(description="the head taken out")
    target: Head = Field(description="the head whose input loses it (a later layer)")
    input: Literal["q", "k", "v"] = Field(description="which of the target's inputs: its "
                                          "queries, keys or values")


class CircuitRequest(_Strict):
    prompt: Annotated[str, AfterValidator(_prompt), Field(
        description="characters the model knows; 1 to its context, 48")] = (
        "the cat sat on the mat; the cat sat on the mat")
    off: list[Head] = Field(default_factory=list, max_length=64,
                            description="heads switched off (their output zeroed)")
    paths: list[Path] = Field(default_factory=list, max_length=64, description=(
        "heads taken out of one input of a later head only"))


class CircuitNext(BaseModel):
    chars: list[str] = Field(description="the intact model's most likely next characters")
    probs: list[float] = Field(description="their probabilities, intact")
    after: list[float] = Field(description="the same characters' probabilities in this run")
    top_chars: list[str] = Field(description="this run's most likely next characters")
    top_probs: list[float]


class CircuitCopy(BaseModel):
    char: str = Field(description="the prompt's last character")
    earlier: list[int] = Field(description="positions where it occurred before (not last)")
    keys: list[int] = Field(description="the positions right after those: where an induction "
                            "head looks")
    copied: str | None = Field(description="the character after its most recent earlier "
                               "occurrence: what copying predicts; null if none")
    weight_before: list = Field(description="(layers, heads) the last query's weight on keys, "
                                "intact")
    weight_after: list = Field(description="(layers, heads) the same in this run")
    p_before: float | None = Field(description="the copied character's probability, intact")
    p_after: float | None = Field(description="its probability in this run")


class CircuitRepeat(BaseModel):
    n: int = Field(description="positions of the prompt whose next character a copy "
                   "predicts (the same two characters occurred earlier)")
    before: float | None = Field(description="mean loss (nats) on them, intact")
    after: float | None = Field(description="the same in this run")


class CircuitRoles(BaseModel):
    induction: list | None = Field(description="(layers, heads); null where no character "
                                   "repeats")
    previous: list | None = Field(description="(layers, heads); null for one character")


class CircuitResponse(BaseModel):
    chars: list[str]
    layers: int
    heads: int
    context: int
    weights: list = Field(description="(layers, heads, N, N) every head's causal weights in "
                          "this run")
    intact_weights: list = Field(description="(layers, heads, N, N) the same, intact")
    allowed: list = Field(description="(N, N) bool: False where the key lies in the future")
    labels: list[str] = Field(description="what this run changed, in words")
    next: CircuitNext
    copying: CircuitCopy
    repeat: CircuitRepeat
    roles_before: CircuitRoles
    roles_after: CircuitRoles


class CircuitTableRequest(_Strict):
    pass


class Measured(BaseModel):
    induction: list = Field(description="(layers, heads) induction score in that run")
    previous: list = Field(description="(layers, heads) previous-token score in that run")
    copy_loss: float = Field(description="mean loss (nats) on the second copy's positions a "
                             "copy predicts")
    first_loss: float = Field(description="mean loss on the first copy")


class OffRow(Measured):
    layer: int
    head: int


class PathRow(Measured):
    source: list[int] = Field(description="[layer, head]")
    target: list[int] = Field(description="[layer, head]")
    input: str


class CircuitTableResponse(BaseModel):
    n_sequences: int
    half: int = Field(description="each random string's length; it is followed by itself")
    layers: int
    heads: int
    context: int
    alphabet: list[str] = Field(description="the characters the model knows")
    threshold: float = Field(description="an induction score ≥ this calls a head an "
                             "induction head")
    base: Measured
    off: list[OffRow] = Field(description="each head switched off alone")
    paths: list[PathRow] = Field(description="each earlier head taken out of each last-layer "
                                 "head's queries, keys or values alone")
