"""The explorer's JSON API, as pydantic models: what a request may hold and what comes back.

Every request is validated here before qkv sees it: sizes are capped (at most ``MAX_TOKENS``
queries/keys/tokens, ``MAX_DIMS`` numbers per vector, sentences of ``MAX_SENTENCE`` characters),
numbers must be finite and of bounded size (so no dot product can overflow), and shapes must be
consistent. A request that breaks a rule gets a 422 whose message names the field and the rule.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

MAX_TOKENS = 64  # queries, keys, mask tokens, sentence tokens
MAX_DIMS = 16  # numbers per user-given vector
MAX_SENTENCE = 512  # characters
MAX_ABS = 1e6  # |every number| ≤ this: 16 products of 1e6 × 1e6 stay far from overflow
MAX_SCALE_DK = 1024  # random vectors of the scale view
MAX_PRESETS = 5
MAX_TILES = 65_536  # tiles the cost view classifies and draws

Number = Annotated[
    float, Field(strict=True, allow_inf_nan=False, ge=-MAX_ABS, le=MAX_ABS,
                 description=f"a finite number with |x| ≤ {MAX_ABS:g}")]
Vector = Annotated[list[Number], Field(min_length=1, max_length=MAX_DIMS)]
Vectors = Annotated[list[Vector], Field(min_length=1, max_length=MAX_TOKENS)]
Index = Annotated[int, Field(strict=True, ge=0, lt=MAX_TOKENS)]
Count = Annotated[int, Field(strict=True, ge=0, le=MAX_TOKENS)]


class _Strict(BaseModel):
    """Unknown fields are refused, so a misspelt field is an error, not silently ignored."""

    model_config = ConfigDict(extra="forbid")


# -- masks ---------------------------------------------------------------------------------------
class CausalPreset(_Strict):
    """``qkv.causal()``: token i sees tokens 0..i."""

    kind: Literal["causal"]


class WindowPreset(_Strict):
    """``qkv.window(before, after)``: token i sees tokens i − before … i + after."""

    kind: Literal["window"]
    before: Count = 1
    after: Count = 0


class PrefixPreset(_Strict):
    """``qkv.prefix(n)``: every token sees the first n tokens; beyond them, the causal rule."""

    kind: Literal["prefix"]
    n: Count = 2


class PaddingPreset(_Strict):
    """``qkv.padding(key_length, query_length)``: tokens past the real length are padding."""

    kind: Literal["padding"]
    key_length: Count
    query_length: Count | None = None


class DocumentsPreset(_Strict):
    """``qkv.documents(ids)``: token i sees token j iff they carry the same document id."""

    kind: Literal["documents"]
    ids: Annotated[list[Index], Field(min_length=1, max_length=MAX_TOKENS)]


Preset = Annotated[
    CausalPreset | WindowPreset | PrefixPreset | PaddingPreset | DocumentsPreset,
    Field(discriminator="kind"),
]


class CellOverride(_Strict):
    """One clicked cell: query ``i`` may (``allowed``) or may not attend to key ``j``."""

    i: Index
    j: Index
    allowed: bool = Field(strict=True)


class MaskSpec(_Strict):
    """Presets combined with ``&`` (all must allow a pair), then clicked cells on top."""

    presets: Annotated[list[Preset], Field(max_length=MAX_PRESETS)] = []
    overrides: Annotated[list[CellOverride], Field(max_length=MAX_TOKENS * MAX_TOKENS)] = []

    def check_size(self, nq: int, nk: int) -> None:
        """Raise ValueError (a 422) unless every preset and cell fits nq queries × nk keys."""
        for n, preset in enumerate(self.presets):
            if isinstance(preset, DocumentsPreset) and len(preset.ids) != nk:
                raise ValueError(
                    f"mask.presets[{n}] (documents) has {len(preset.ids)} ids but there are "
                    f"{nk} tokens: give one document id per token")
            if isinstance(preset, DocumentsPreset) and nq != nk:
                raise ValueError(f"mask.presets[{n}] (documents) needs as many queries as keys")
        for n, cell in enumerate(self.overrides):
            if cell.i >= nq or cell.j >= nk:
                raise ValueError(
                    f"mask.overrides[{n}] is cell ({cell.i}, {cell.j}) but the grid is {nq} "
                    f"queries × {nk} keys")


# -- view 2: vectors ------------------------------------------------------------------------------
# The lesson's worked examples 1 and 2: q = (1, 0) against three keys, then their values.
SEED_QUERIES = [[1.0, 0.0]]
SEED_KEYS = [[1.0, 0.0], [0.0, 1.0], [0.7, 0.7]]
SEED_VALUES = [[2.0, 0.0], [0.0, 2.0], [1.0, 1.0]]


class TraceRequest(_Strict):
    """Queries, keys and values typed or dragged by the user (the lesson's example by default)."""

    queries: Vectors = SEED_QUERIES
    keys: Vectors = SEED_KEYS
    values: Vectors = SEED_VALUES
    scale: Annotated[float, Field(strict=True, allow_inf_nan=False, ge=0, le=MAX_ABS)] | None = (
        Field(None, description="multiplies q·k; default 1/√d_k"))
    mask: MaskSpec | None = None

    @model_validator(mode="after")
    def _shapes_agree(self) -> TraceRequest:
        d_k = len(self.queries[0])
        for name, rows in (("queries", self.queries), ("keys", self.keys)):
            for n, row in enumerate(rows):
                if len(row) != d_k:
                    raise ValueError(
                        f"{name}[{n}] has {len(row)} numbers but queries[0] has {d_k}: every "
                        f"query and key needs the same number of dimensions (d_k)")
        if len(self.values) != len(self.keys):
            raise ValueError(
                f"there are {len(self.keys)} keys but {len(self.values)} values: each key "
                "needs exactly one value")
        d_v = len(self.values[0])
        for n, row in enumerate(self.values):
            if len(row) != d_v:
                raise ValueError(
                    f"values[{n}] has {len(row)} numbers but values[0] has {d_v}: every value "
                    "needs the same number of dimensions (d_v)")
        if self.mask is not None:
            self.mask.check_size(len(self.queries), len(self.keys))
        return self


# -- view 3: scale -------------------------------------------------------------------------------
class ScaleRequest(_Strict):
    """The lesson's two scores [8, 0] at d_k = 64 (or others), grown like √d_k as for random
    vectors, and random d_k-dimensional vectors."""

    scores: Annotated[list[Number], Field(min_length=2, max_length=MAX_TOKENS)] = [8.0, 0.0]
    reference_d_k: Annotated[int, Field(strict=True, ge=1, le=MAX_SCALE_DK)] = Field(
        64, description="the d_k at which `scores` are given; at d_k they are × √(d_k/this)")
    d_k: Annotated[int, Field(strict=True, ge=1, le=MAX_SCALE_DK)] = 64
    temperature: Annotated[float, Field(strict=True, allow_inf_nan=False, ge=0.01, le=100)] = 1.0
    seed: Annotated[int, Field(strict=True, ge=0, le=2**32 - 1)] = 0
    n_keys: Annotated[int, Field(strict=True, ge=2, le=MAX_TOKENS)] = 16


# -- view 4: masks -------------------------------------------------------------------------------
Token = Annotated[str, Field(min_length=1, max_length=32)]


class MaskRequest(_Strict):
    """A token grid: one random query/key/value per token (from ``seed``) and a mask."""

    tokens: Annotated[list[Token], Field(min_length=1, max_length=MAX_TOKENS)] = [
        "the", "cat", "sat", ".", "a", "dog", "ran", "."]
    mask: MaskSpec = MaskSpec()
    seed: Annotated[int, Field(strict=True, ge=0, le=2**32 - 1)] = 0
    uniform: bool = Field(False, strict=True,
                          description="all scores equal, so each row splits evenly")

    @model_validator(mode="after")
    def _mask_fits(self) -> MaskRequest:
        self.mask.check_size(len(self.tokens), len(self.tokens))
        return self


# -- view 8: a real model ------------------------------------------------------------------------
Sentence = Annotated[str, Field(min_length=1, max_length=MAX_SENTENCE)]


class ModelRequest(_Strict):
    """A sentence for MiniLM (at most MAX_SENTENCE characters and MAX_TOKENS tokens)."""

    sentence: Sentence = "The cat sat on the mat because it was tired."


class NeuronRequest(ModelRequest):
    """One head's inputs for one query token: the neuron view."""

    layer: Annotated[int, Field(strict=True, ge=0, le=63)] = 0
    head: Annotated[int, Field(strict=True, ge=0, le=63)] = 0
    token: Index = 0


# -- responses -----------------------------------------------------------------------------------
class FieldError(BaseModel):
    field: str = Field(description="where in the request, e.g. keys[2][0]")
    message: str
    words: str = Field("", description="what is wrong, as a learner reads it (\"must be at "
                       "least 1\"): the page puts it after the control's own label")


class ErrorResponse(BaseModel):
    """A 422 or 503: ``detail`` is one sentence for a person, ``errors`` lists each problem."""

    detail: str
    errors: list[FieldError] = []


class TraceOut(BaseModel):
    """``qkv.Trace.to_dict()``: every intermediate of one attention, float64, as nested lists
    (rows are queries). An lse of −∞ (a row with no allowed key) is null."""

    q: list = Field(description="(Nq, Dk) queries")
    k: list = Field(description="(Nk, Dk) keys")
    v: list = Field(description="(Nk, Dv) values")
    scores: list = Field(description="(Nq, Nk) q · k")
    scaled: list = Field(description="(Nq, Nk) scores × scale")
    allowed: list = Field(description="(Nq, Nk) booleans: may query i attend to key j")
    weights: list = Field(description="(Nq, Nk) softmax over the allowed keys of each row")
    output: list = Field(description="(Nq, Dv) weights V")
    lse: list = Field(description="(Nq,) log Σ_j e^scaled, null for a fully masked row")
    scale: float
    mask: str | None = Field(description="the mask's repr (qkv code), null without a mask")
    has_bias: bool
    shape: dict[str, list[int]] = Field(description="the shapes of q, k and v")


class ExpStep(BaseModel):
    """softmax's middle step: e^scaled for each allowed pair and each row's sum."""

    exp: list = Field(description="(Nq, Nk) e^scaled, or e^(scaled − row max) when shifted")
    sum: list[float] = Field(description="(Nq,) each row's sum (= e^lse when not shifted)")
    shifted: list[bool] = Field(description="(Nq,) rows whose scores were too large for e^x")


class SeedByHand(BaseModel):
    """The lesson's worked examples 1 and 2 as it computes them by hand, from rounded numbers:
    sent only when the inputs are the lesson's own, so the page's remark about why the lesson
    prints 4.668 and (1.219, 0.779) appears only then."""

    exp_rounded: list[float] = Field(description="e^scaled of q0's row, rounded to 3 decimals")
    sum: float = Field(description="the rounded e^x values added: the lesson's 4.668")
    weights_rounded: list[float] = Field(description="q0's weights rounded to 3 decimals")
    output: list[float] = Field(description="the rounded weights times V: the lesson's "
                                "(1.219, 0.779)")


class TraceResponse(BaseModel):
    """``qkv.explain(...).to_dict()`` plus each row's weight total and the exp step."""

    trace: TraceOut
    row_sums: list[float]
    d_k: int
    exp: ExpStep
    seed: SeedByHand | None = Field(description="the lesson's hand computation, only when the "
                                    "inputs are the lesson's example (else null)")


class ScaleExample(BaseModel):
    """The lesson's scores grown to d_k, with and without the scale 1/(τ·√d_k)."""

    scores: list[float] = Field(description="the scores as given, at reference_d_k")
    reference_d_k: int
    raw_scores: list[float] = Field(description="scores × √(d_k / reference_d_k)")
    scale: float = Field(description="1/(τ·√d_k)")
    d_k: int
    temperature: float
    scaled: list[float] = Field(description="raw_scores × scale")
    weights: list[float] = Field(description="softmax(raw_scores × scale)")
    unscaled_weights: list[float] = Field(description="softmax(raw_scores / τ)")
    gradient: list[float] = Field(description="w_j (1 − w_j) of the scaled weights")
    unscaled_gradient: list[float] = Field(description="w_j (1 − w_j) of the unscaled weights")
    heading: str = Field(description="the scores in words: how many standard deviations apart")
    summary: str = Field(description="what the key falling behind keeps, unscaled and scaled, "
                         "in sentences written from these numbers")
    task: ScaleTask
    hard: ScaleHard


class ScaleTask(BaseModel):
    """The task "the smallest d_k where the unscaled softmax gives the lower key < share",
    answered over every d_k from 1 to max_d_k."""

    share: float
    max_d_k: int
    smallest_d_k: int | None = Field(description="None: no d_k up to max_d_k gets below share")
    weight_at_max: float = Field(description="the lower key's unscaled weight at max_d_k")
    previous_weight: float | None = Field(description="the lower key's unscaled weight at "
                                          "d_k − 1 (None at d_k = 1)")


class ScaleHard(BaseModel):
    """Is each softmax a hard argmax: the key falling behind keeps a gradient below vanished."""

    key: int
    vanished: float
    unscaled: bool
    scaled: bool


class ScaleRandom(BaseModel):
    """Random q, k of d_k dims with N(0, 1) entries: how the scores spread, with and without
    the scale."""

    d_k: int
    n_queries: int
    n_keys: int
    seed: int
    scale: float
    raw_std: float = Field(description="std of q · k / τ over every pair")
    scaled_std: float = Field(description="std of q · k / (τ·√d_k)")
    sqrt_d_k: float
    raw_mean_max_weight: float = Field(description="mean over queries of the largest weight")
    scaled_mean_max_weight: float
    raw_max_weights: list[float] = Field(description="each query's largest weight, unscaled")
    scaled_max_weights: list[float] = Field(description="each query's largest weight, scaled")
    query: int = Field(description="the query shown: its largest unscaled weight is the "
                       "nearest to the mean")
    raw_scores: list[float] = Field(description="the shown query's scores / τ")
    raw_weights: list[float] = Field(description="the shown query's weights, unscaled")
    scaled_scores: list[float]
    scaled_weights: list[float] = Field(description="the shown query's weights, scaled")


class ScaleResponse(BaseModel):
    example: ScaleExample
    random: ScaleRandom


class MaskResponse(BaseModel):
    tokens: list[str]
    trace: TraceOut
    row_sums: list[float]
    fully_masked_rows: list[int]
    description: str = Field(description="the mask in sentences, for a learner")


class AttentionsResponse(BaseModel):
    tokens: list[str]
    layers: int
    heads: int
    weights: list = Field(description="(layers, heads, n, n) softmax weights")
    allowed: list | None = Field(None, description="(layers, heads, n, n) booleans, False "
                                 "where a mask removed the pair (a causal model's future "
                                 "keys); null when no pair is masked")
    model: str = Field("all-MiniLM-L6-v2", description="which model computed them")
    special: list[bool] = Field(default_factory=list, description="per token: True where the "
                                "tokenizer added it ([CLS], [SEP], …), not a piece of the text")


class NeuronResponse(BaseModel):
    tokens: list[str]
    layer: int
    head: int
    kv_head: int = Field(description="the key/value head this query head reads (GQA: head // "
                         "query heads per kv head; = head without GQA)")
    token: int
    trace: TraceOut
    products: list = Field(description="q ∘ k_j elementwise, (n, d): each row sums to score j")


# -- view 5: common mistakes -----------------------------------------------------------------------
class MistakesRequest(_Strict):
    """Random per-head q, k, v of a MiniLM-sized layer (d_model = heads × d_k), and toggles."""

    n: Annotated[int, Field(strict=True, ge=2, le=16)] = 5
    heads: Annotated[int, Field(strict=True, ge=1, le=64)] = 12
    d_k: Annotated[int, Field(strict=True, ge=1, le=256)] = 32
    seed: Annotated[int, Field(strict=True, ge=0, le=2**32 - 1)] = 0
    wrong_scale: bool = Field(False, strict=True, description="scale by 1/√d_model, not 1/√d_k")
    wrong_axis: bool = Field(False, strict=True, description="softmax over the queries")
    swap_kv: bool = Field(False, strict=True, description="keys and values swapped")


class MistakeSide(BaseModel):
    """One side of the mistakes view: the weights and output one way of computing gives."""

    scale: float
    scaled: list = Field(description="(n, n) scores × scale")
    weights: list = Field(description="(n, n) rows are queries")
    output: list = Field(description="(n, d_v)")
    row_sums: list[float]
    col_sums: list[float]


class MistakesResponse(BaseModel):
    right: MistakeSide
    wrong: MistakeSide
    notes: list[str] = Field(description="what each chosen mistake does, in sentences")
    d_model: int = Field(description="heads × d_k: the width of the layer the head belongs to")
    d_k: int


# -- view 6: cost ----------------------------------------------------------------------------------
class CostRequest(_Strict):
    """A sequence length, a mask, and the kernel's tile sizes (default: qkv's current ones)."""

    n: Annotated[int, Field(strict=True, ge=16, le=65536)] = 4096
    mask: Literal["none", "causal", "window", "documents"] = "causal"
    tile_q: Annotated[int, Field(strict=True, ge=16, le=4096)] | None = None
    tile_k: Annotated[int, Field(strict=True, ge=16, le=4096)] | None = None
    d: Annotated[int, Field(strict=True, ge=1, le=1024)] = 64

    @model_validator(mode="after")
    def _grid_fits(self) -> CostRequest:
        from qkv import engine  # the kernel's current tile sizes are the defaults

        config = engine.current()
        tq, tk = self.tile_q or config.tile_q, self.tile_k or config.tile_k
        tiles = -(-self.n // tq) * -(-self.n // tk)
        if tiles > MAX_TILES:
            raise ValueError(
                f"n = {self.n} with tiles of {tq} × {tk} makes {tiles:,} tiles; the cost view "
                f"draws at most {MAX_TILES:,}: use larger tiles or a smaller n")
        return self


class TileCounts(BaseModel):
    """How qkv's kernel classifies the tiles of an n × n problem under a mask."""

    empty: int = Field(description="tiles with no allowed pair: skipped")
    partial: int = Field(description="tiles where the mask is applied pair by pair")
    full: int = Field(description="tiles with every pair allowed: no mask work")
    total: int


class CostResponse(BaseModel):
    n: int
    d: int
    mask: str
    mask_description: str
    tile: list[int]
    entries: int
    naive_bytes: int = Field(description="n × n scores and weights and the output, float32")
    qkv_bytes: int = Field(description="what qkv's kernel holds at once: the block(s) in use "
                           "and the output with its log-sum-exp, float32")
    workers: int
    workers_in_use: int = Field(description="workers the kernel runs for this problem")
    block: list[int] = Field(description="the scores one worker holds at once: rows × cols")
    small_problem: bool = Field(description="n² ≤ small_limit: one block, no tiling")
    small_limit: int = Field(description="the kernel's small-problem limit, in scores")
    flops_dense: int
    flops_qkv: int
    tiles: TileCounts
    grid: list[str] = Field(description="block_map rows: '0' empty, '1' partial, '2' full")


# -- view 7: encoder–decoder -----------------------------------------------------------------------
class Seq2SeqRequest(_Strict):
    """An input sequence of symbols, written as letters a… (one per symbol)."""

    input: Annotated[str, Field(min_length=1, max_length=MAX_TOKENS)] = "abcdefgh"


class Seq2SeqDecoding(BaseModel):
    """One model's greedy decoding of the input and its weights over the input positions."""

    output: str
    weights: list = Field(description="(output steps, input positions): cross-attention "
                          "weights, or for the fixed model where its one context comes from")
    correct: int = Field(description="output symbols equal to the expected ones")
    length: int


class Seq2SeqResponse(BaseModel):
    input: str
    expected: str
    trained_lengths: list[int] = Field(description="[shortest, longest] input seen in training")
    attention: Seq2SeqDecoding
    fixed: Seq2SeqDecoding
