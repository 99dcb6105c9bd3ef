"""Bridges from other libraries to qkv's engine.

``qkv.integrations.transformers`` (extra ``[hf]``): qkv as an attention implementation of
Hugging Face transformers, ``from_pretrained(..., attn_implementation="qkv")``, with exact
attention weights — all of them, or only chosen layers, heads and rows.
"""

import importlib


def __getattr__(name: str):
    # Each bridge loads (and imports its library) on first use: `qkv.integrations.transformers`.
    if name == "transformers":
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
