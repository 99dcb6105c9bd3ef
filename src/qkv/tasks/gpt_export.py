"""A :class:`qkv.tasks.gpt.GPT` as a transformers GPT-2 folder: ``config.json``,
``model.safetensors`` with GPT-2's tensor names, and a character-level ``tokenizer.json``.

GPT-2 stores its projections as ``Conv1D`` weights of shape ``(d_in, d_out)`` — the lesson's row
convention, qkv's layout — so nothing is transposed; ``c_attn`` is W_Q, W_K, W_V side by side
``(C, 3C)``. The output embedding is tied to ``wte`` (``tie_word_embeddings``), so no
``lm_head.weight`` is written. The tokenizer maps each character to its id with no merges
(``tokenizers``' BPE with an empty merge list) and decodes by joining (``decoders.Fuse``).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from .corpus import CharTokenizer
from .gpt import GPT


def gpt2_config(model: GPT) -> dict:
    c = model.config
    return {
        "architectures": ["GPT2LMHeadModel"], "model_type": "gpt2",
        "vocab_size": c.vocab_size, "n_positions": c.block_size, "n_embd": c.n_embd,
        "n_layer": c.n_layer, "n_head": c.n_head, "n_inner": 4 * c.n_embd,
        "activation_function": "gelu_new",  # GPT-2's tanh GELU, qkv.nn.gelu_tanh
        "layer_norm_epsilon": model.ln_f.eps, "resid_pdrop": 0.0, "embd_pdrop": 0.0,
        "attn_pdrop": 0.0, "scale_attn_weights": True, "tie_word_embeddings": True,
        "bos_token_id": None, "eos_token_id": None, "pad_token_id": None,
        "torch_dtype": str(np.dtype(model.dtype)), "use_cache": True,
    }


def gpt2_tensors(model: GPT) -> dict[str, np.ndarray]:
    """Every tensor under GPT-2's name (``transformer.h.<i>.attn.c_attn.weight``, …)."""
    p = model.params
    out = {"transformer.wte.weight": p["wte.weight"], "transformer.wpe.weight": p["wpe.weight"],
           "transformer.ln_f.weight": p["ln_f.weight"], "transformer.ln_f.bias": p["ln_f.bias"]}
    for i in range(model.config.n_layer):
        q, t = f"h.{i}.", f"transformer.h.{i}."
        out.update({
            t + "ln_1.weight": p[q + "ln1.weight"], t + "ln_1.bias": p[q + "ln1.bias"],
            t + "attn.c_attn.weight": np.concatenate(
                [p[q + "attn.w_q"], p[q + "attn.w_k"], p[q + "attn.w_v"]], axis=1),  # (C, 3C)
            t + "attn.c_attn.bias": np.concatenate(
                [p[q + "attn.b_q"], p[q + "attn.b_k"], p[q + "attn.b_v"]]),
            t + "attn.c_proj.weight": p[q + "attn.w_o"], t + "attn.c_proj.bias": p[q + "attn.b_o"],
            t + "ln_2.weight": p[q + "ln2.weight"], t + "ln_2.bias": p[q + "ln2.bias"],
            t + "mlp.c_fc.weight": p[q + "mlp.fc1.weight"],
            t + "mlp.c_fc.bias": p[q + "mlp.fc1.bias"],
            t + "mlp.c_proj.weight": p[q + "mlp.fc2.weight"],
            t + "mlp.c_proj.bias": p[q + "mlp.fc2.bias"],
        })
    return {name: np.ascontiguousarray(a) for name, a in out.items()}


def char_tokenizer(tok: CharTokenizer):
    """A ``tokenizers.Tokenizer``: one token per character, id i = ``tok.chars[i]``."""
    from tokenizers import Tokenizer, decoders, models

    vocab = {ch: i for i, ch in enumerate(tok.chars)}
    t = Tokenizer(models.BPE(vocab=vocab, merges=[]))  # no merges: every character stays one
    t.decoder = decoders.Fuse()  # decode by joining, no spaces between tokens
    return t


def export(model: GPT, tok: CharTokenizer, folder) -> Path:
    """Write the folder (created if needed); returns its path."""
    from safetensors.numpy import save_file

    folder = Path(folder)
    if not model.config.mlp:
        raise ValueError("an attention-only model (config mlp=False) has no GPT-2 form: "
                         "GPT-2's blocks all have an MLP; export a model trained with MLPs")
    if folder.exists() and not folder.is_dir():
        raise ValueError(f"{folder} exists and is not a folder")
    if tok.vocab_size != model.config.vocab_size:
        raise ValueError(f"the tokenizer has {tok.vocab_size} characters but the model "
                         f"{model.config.vocab_size}")
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(gpt2_config(model), indent=1) + "\n",
                                        encoding="utf-8")
    save_file(gpt2_tensors(model), str(folder / "model.safetensors"),
              metadata={"format": "pt"})
    char_tokenizer(tok).save(str(folder / "tokenizer.json"))
    (folder / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": model.config.block_size,
        "clean_up_tokenization_spaces": False}, indent=1) + "\n", encoding="utf-8")
    return folder
