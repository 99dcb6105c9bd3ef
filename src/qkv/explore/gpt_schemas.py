"""Requests and responses of the GPT view (``/api/gpt/*``), as pydantic models."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, Field

from .schemas import _Strict

Prompt = Annotated[str, Field(min_length=1, max_length=64,
                              description="characters the model knows; at most its context, 64")]
Temperature = Annotated[float, Field(strict=False, ge=0.01, le=10.0, allow_inf_nan=False,
                                     description="softmax temperature T (logits / T), "
                                                 "0.01 ≤ T ≤ 10")]


class GPTPredictRequest(_Strict):
    prompt: Prompt = "ROMEO.\nI will not"
    temperature: Temperature = 1.0


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


class GPTRolesResponse(BaseModel):
    previous_token: list = Field(description="(layers, heads) mean weight on the previous key")
    induction: list = Field(description="(layers, heads) mean weight on the token after the "
                            "current token's earlier occurrence")
    half: int
    n_sequences: int
    sentence: str
    example: list[str]
    example_weights: list = Field(description="(layers, heads, 2·half, 2·half) the first "
                                  "sequence's weights")
