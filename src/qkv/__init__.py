"""qkv — attention you can see, check and train: softmax(Q Kᵀ / √d_k) V on NumPy.

The engine (NumPy only):

    qkv.attention(q, k, v, mask=None, bias=None, scale=None, *, return_lse=False)
    qkv.attention_weights(q, k, mask=None, bias=None, scale=None, *, rows=None)
    qkv.attention_backward(q, k, v, out, lse, dout, mask=None, bias=None, scale=None)
    qkv.explain(q, k, v, ...)  -> Trace of every intermediate (float64 reference)
    qkv.reference              the formula written literally in float64: the oracle
    qkv.merge                  combine partial results exactly through their lse

Masks (True always means "may attend"): causal, window, prefix, padding, documents,
packed_causal, allow, deny, predicate — composable with & | ~. Biases: dense arrays or alibi().

The layers above the engine load on first use (PEP 562), so ``import qkv`` stays the engine:
``qkv.nn`` (layers, KV cache, training), ``qkv.models`` (MiniLM), ``qkv.tasks`` (experiments),
``qkv.render`` and ``qkv.show`` (views), ``qkv.widgets`` (notebook widgets), ``qkv.distributed``
(ring attention over MPI).
"""

import importlib
import sys

from .engine import masks, reference
from .engine.api import attention, attention_backward, attention_weights
from .engine.bias import alibi, alibi_slopes, relative_position_buckets
from .engine.masks import (
    allow,
    causal,
    deny,
    documents,
    packed_causal,
    padding,
    predicate,
    prefix,
    window,
)
from .engine.merge import merge
from .engine.trace import Trace, explain, set_layout

__version__ = "0.1.0"

# The engine's public modules keep their short names: `import qkv.masks`, `qkv.reference(...)`.
sys.modules[__name__ + ".masks"] = masks
sys.modules[__name__ + ".reference"] = reference



def _trace_text(trace: Trace) -> str:
    from .render.trace import text

    return text(trace)


def _trace_html(trace: Trace) -> str:
    from .render.trace import html

    return html(trace)


# The composition root wires the views layer's trace layout into the engine (loaded on first use,
# so ``import qkv`` stays the engine).
set_layout(_trace_text, _trace_html)
del set_layout

_SUBPACKAGES = ("engine", "nn", "models", "tasks", "render", "distributed", "explore",
                "commands", "integrations", "widgets")

__all__ = [
    "Trace",
    "alibi",
    "alibi_slopes",
    "allow",
    "attention",
    "attention_backward",
    "attention_weights",
    "causal",
    "deny",
    "documents",
    "explain",
    "masks",
    "merge",
    "packed_causal",
    "padding",
    "predicate",
    "prefix",
    "reference",
    "relative_position_buckets",
    "show",
    "window",
]


def __getattr__(name: str):
    # Subpackages above the engine, and qkv.show (the views layer), load on first use.
    if name == "show":
        from .render import show

        return show
    if name in _SUBPACKAGES:
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module 'qkv' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_SUBPACKAGES) | {"show"})
