"""Exact attention past one machine: ring attention over MPI (the optional ``[mpi]`` extra).

    from qkv.distributed import shard, gather, ring_attention, ring_attention_backward

    q_r, k_r, v_r = (shard(x) for x in (q, k, v))        # this rank's part, zigzag layout
    out_r, lse_r = ring_attention(q_r, k_r, v_r, mask=qkv.causal(), return_lse=True)
    out = gather(out_r)                                   # == qkv.attention(q, k, v, causal)
    dq_r, dk_r, dv_r = ring_attention_backward(q_r, k_r, v_r, out_r, lse_r, dout_r,
                                               mask=qkv.causal())

Run under ``mpirun -n P python script.py``; ``comm=None`` means ``MPI.COMM_WORLD``. Importing
this package needs no MPI; calling it without mpi4py says how to install the extra. See
docs/distributed.md and ``mpirun -n 4 python -m qkv.distributed --help``. To train a qkv.nn
model on a sequence sharded across ranks: ``ring_layer(block)`` and ``sum_over_ranks(grads)``.
"""

from ..engine import merge
from .layers import RingMultiHeadAttention, ring_layer, sum_over_ranks
from .layout import LAYOUTS, gather, positions, shard, shard_length
from .ring import RingError, ring_attention, ring_attention_backward

__all__ = [
    "LAYOUTS",
    "RingError",
    "RingMultiHeadAttention",
    "gather",
    "merge",
    "positions",
    "ring_attention",
    "ring_attention_backward",
    "ring_layer",
    "shard",
    "shard_length",
    "sum_over_ranks",
]
