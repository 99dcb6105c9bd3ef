"""qkv — attention you can see, check and train: softmax(Q Kᵀ / √d_k) V on NumPy.

The engine (NumPy only):

    qkv.attention(q, k, v, mask=None, bias=None, scale=None, *, return_lse=False)
    qkv.attention_weights(q, k, mask=None, bias=None, scale=None, *, rows=None)
    qkv.attention_backward(q, k, v, out, lse, dout, mask=None, bias=None, scale=None)
    qkv.explain(q, k, v, ...)  -> Trace of every intermediate (float64 reference)
    qkv.reference              the formula written literally in float64: the oracle

Masks (True always means "may attend"): causal, window, prefix, padding, documents, allow, deny,
predicate — composable with & | ~. Biases: dense arrays or alibi().
"""

from . import masks, reference
from .bias import alibi, alibi_slopes
from .functional import attention, attention_backward, attention_weights
from .masks import allow, causal, deny, documents, padding, predicate, prefix, window
from .trace import Trace, explain

__version__ = "0.1.0"

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
    "padding",
    "predicate",
    "prefix",
    "reference",
    "window",
]


def __getattr__(name: str):
    # qkv.show lives in the views layer (qkv.render); imported on first use so that
    # `import qkv` stays the engine alone (PEP 562).
    if name == "show":
        from .render import show

        return show
    raise AttributeError(f"module 'qkv' has no attribute {name!r}")
