"""Learnable layers on NumPy around qkv's attention: forward, backward, KV cache, Adam.

Every layer follows one pattern (see :mod:`qkv.nn._base`)::

    y = layer(x)                          # forward
    y, ctx = layer.forward(x)             # forward, keeping what the backward needs
    dx, grads = layer.backward(ctx, dy)   # grads[name] matches layer.params[name]

Weights are plain NumPy arrays in ``layer.params`` (the lesson's row convention, ``y = x W``).
"""

from .activations import gelu, gelu_backward, gelu_tanh, gelu_tanh_backward, relu, relu_backward
from .attention import MultiHeadAttention, merge_heads, split_heads
from .block import TransformerBlock
from .cache import KVCache, LayerCache
from .embedding import Embedding
from .gru import GRU
from .interop import masks_from_torch
from .linear import Linear
from .loss import log_softmax, softmax_cross_entropy
from .mlp import MLP
from .norm import LayerNorm
from .optim import Adam
from .paged_cache import PagedKVCache, PagedLayerCache
from .rnn import RNN
from .ssm import CausalConv, MambaBlock, SelectiveSSM, linear_scan

__all__ = [
    "GRU",
    "MLP",
    "RNN",
    "Adam",
    "CausalConv",
    "Embedding",
    "KVCache",
    "LayerCache",
    "LayerNorm",
    "Linear",
    "MambaBlock",
    "MultiHeadAttention",
    "PagedKVCache",
    "PagedLayerCache",
    "SelectiveSSM",
    "TransformerBlock",
    "gelu",
    "gelu_backward",
    "gelu_tanh",
    "gelu_tanh_backward",
    "linear_scan",
    "log_softmax",
    "masks_from_torch",
    "merge_heads",
    "relu",
    "relu_backward",
    "softmax_cross_entropy",
    "split_heads",
]
