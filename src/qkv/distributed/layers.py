"""The long-context path: qkv.nn layers whose attention runs as ring attention across ranks.

Each rank holds its shard of the sequence — the rows ``positions(N, rank, size, layout)`` of the
activations ``x (..., N, d_model)`` — and runs the *same* layer (same weights on every rank) on
them. Everything in a transformer block is per position except attention, so only attention
needs the other ranks: :class:`RingMultiHeadAttention` is :class:`qkv.nn.MultiHeadAttention`
with its attention computed by :func:`ring_attention` (forward) and
:func:`ring_attention_backward` (backward). Nothing else changes: the projections, layer norms
and MLP run on this rank's rows, and so do their backwards.

    block = qkv.nn.TransformerBlock(d_model, heads, rng=0)     # same seed: same weights everywhere
    ring = ring_layer(block)                                   # shares block's parameters
    y_r, ctx = ring.forward(shard(x), mask=qkv.causal())       # this rank's rows of block(x)
    dx_r, grads = ring.backward(ctx, dy_r)                     # dy_r: ∂loss/∂y on these rows
    grads = sum_over_ranks(grads)                              # ∂loss/∂W: every rank's rows

The weight gradients a rank computes cover its own rows only; their sum over ranks
(:func:`sum_over_ranks`, an Allreduce) is the gradient of the whole sequence, equal to the
single-process one (tests/test_distributed.py checks loss and every gradient under mpirun).
"""

from __future__ import annotations

import copy

import numpy as np

from ..nn.attention import MultiHeadAttention
from ._mpi import communicator
from .ring import ring_attention, ring_attention_backward

__all__ = ["RingMultiHeadAttention", "ring_layer", "sum_over_ranks"]


class RingMultiHeadAttention(MultiHeadAttention):
    """:class:`qkv.nn.MultiHeadAttention` on this rank's rows, attending over every rank's.

    ``x`` (and ``context``) are this rank's shards in ``layout``; the mask is built for the full
    sequence. Collective: every rank of ``comm`` calls forward and backward together. Decoding
    with a KV cache stays single-process.
    """

    comm = None
    layout = "zigzag"

    @classmethod
    def of(cls, mha: MultiHeadAttention, comm=None, layout: str = "zigzag"):
        """A ring version of ``mha`` sharing its parameters (the same arrays)."""
        if not isinstance(mha, MultiHeadAttention):
            raise TypeError(f"RingMultiHeadAttention.of needs a qkv.nn.MultiHeadAttention, got "
                            f"{type(mha).__name__}")
        ring = cls.__new__(cls)
        ring.__dict__.update(mha.__dict__)  # params: the same dict, the same arrays
        ring.comm, ring.layout = comm, layout
        return ring

    def forward(self, x, context=None, mask=None, *, cache=None, seqs=None):
        if cache is not None or seqs is not None:
            raise ValueError("RingMultiHeadAttention: decoding with a KV cache is single-process; "
                             "use the qkv.nn layer it was made from")
        return super().forward(x, context, mask)

    def _attention(self, q, k, v, mask):
        return ring_attention(q, k, v, mask=mask, scale=self.scale, comm=self.comm,
                              layout=self.layout, return_lse=True)

    def _attention_backward(self, q, k, v, out, lse, dout, mask):
        return ring_attention_backward(q, k, v, out, lse, dout, mask=mask, scale=self.scale,
                                       comm=self.comm, layout=self.layout)


def ring_layer(layer, comm=None, layout: str = "zigzag"):
    """A shallow copy of a qkv.nn layer whose every MultiHeadAttention runs as ring attention.

    Parameters are shared (the same arrays), so an optimiser stepping ``layer.params`` trains
    both. Works for :class:`qkv.nn.MultiHeadAttention`, :class:`qkv.nn.TransformerBlock` and any
    layer holding them as attributes.
    """
    if isinstance(layer, MultiHeadAttention):
        return RingMultiHeadAttention.of(layer, comm, layout)
    out = copy.copy(layer)
    found = False
    for name, value in vars(layer).items():
        if isinstance(value, MultiHeadAttention):
            setattr(out, name, RingMultiHeadAttention.of(value, comm, layout))
            found = True
    if not found:
        raise TypeError(f"ring_layer: {type(layer).__name__} holds no qkv.nn.MultiHeadAttention")
    return out


def sum_over_ranks(grads: dict, comm=None) -> dict:
    """Each gradient summed over the ranks of ``comm`` (default COMM_WORLD): a new dict."""
    comm = communicator(comm)
    out = {}
    for name, g in grads.items():
        total = np.empty_like(g)
        comm.Allreduce(np.ascontiguousarray(g), total)
        out[name] = total
    return out
