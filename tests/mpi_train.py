"""Rank-side check of the long-context path: a causal qkv.nn TransformerBlock trained through
ring attention equals the single-process run. Run under mpirun; rank 0 prints one JSON line.

    mpirun -n 2 python tests/mpi_train.py

Every rank builds the same block (same seed) and the same full batch; the single-process run
is the block on the full sequence. The ring run feeds each rank its zigzag shard of the rows,
attention through ``ring_layer(block)``, a cross-entropy on the block's output (its d_model
features as logits) weighted so the ranks' losses sum to the full mean; then dx on this rank's
rows and the weight gradients summed over ranks are compared with the single-process ones.

Tolerance. float64: the ring and the engine sum the same terms in another order: relative
error ~1e-15; 1e-12 relative to each gradient's largest entry (at least 1e-3 of the largest
gradient: the key bias's is zero in exact arithmetic, its computed value rounding noise).
float32: the ring must be as close to the float64 truth as the single-process float32 run
is — its error at most 4× the engine's (the ring merges P partials, each with its own
rounding, before the same projections), plus 4 ulps of the magnitude for quantities the
engine happens to hit exactly.
"""

from __future__ import annotations

import json

import numpy as np
from mpi4py import MPI

import qkv
from qkv.distributed import positions, ring_layer, shard, sum_over_ranks
from qkv.nn import TransformerBlock, softmax_cross_entropy

COMM = MPI.COMM_WORLD
RANK, SIZE = COMM.Get_rank(), COMM.Get_size()
B, N, D_MODEL, HEADS, KV_HEADS = 2, 203, 32, 4, 2  # N divisible by no rank count or tile


def problem(dtype):
    rng = np.random.default_rng(7)
    block = TransformerBlock(D_MODEL, HEADS, n_kv_heads=KV_HEADS, rng=1, dtype=dtype)
    x = rng.standard_normal((B, N, D_MODEL)).astype(dtype)  # (B, N, d_model)
    targets = rng.integers(0, D_MODEL, size=(B, N))
    return block, x, targets


def single(dtype):
    """Loss, dx (B, N, d) and weight gradients of the block on the full sequence."""
    block, x, targets = problem(dtype)
    y, ctx = block.forward(x, mask=qkv.causal())
    loss, dy = softmax_cross_entropy(y, targets)
    dx, grads = block.backward(ctx, dy)
    return loss, dx, grads


def ring(dtype, layout):
    """The same through ring attention: loss (summed over ranks), this rank's dx rows, grads."""
    block, x, targets = problem(dtype)
    rows = positions(N, RANK, SIZE, layout)
    x_r, t_r = shard(x, layout=layout), targets[:, rows]  # (B, n_r, d), (B, n_r)
    rblock = ring_layer(block, layout=layout)
    y, ctx = rblock.forward(x_r, mask=qkv.causal())
    loss_r, dy = softmax_cross_entropy(y, t_r)  # the mean over this rank's rows
    share = len(rows) / N  # so that the ranks' losses and gradients sum to the full mean
    dx, grads = rblock.backward(ctx, (dy * share).astype(dtype))
    loss = COMM.allreduce(loss_r * share)
    return loss, dx, sum_over_ranks(grads), rows


def ratio(ring_err, engine_err, scale) -> float:
    """The ring's float32 error over its allowance: ≤ 1 passes."""
    return float(ring_err / (4 * engine_err + 4 * np.finfo(np.float32).eps * scale))


def err(a, b) -> float:
    return float(np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64)).max())


def main():
    truth = single(np.float64)
    report = {}
    for layout in ("zigzag", "contiguous"):
        loss64, dx64, g64, rows = ring(np.float64, layout)
        loss32, dx32, g32, _ = ring(np.float32, layout)
        e_loss32, e_dx32, e_g32 = single(np.float32)
        top = max(np.abs(g).max() for g in truth[2].values())
        # the scale of each gradient; attn.b_k's is 0 in exact arithmetic (softmax ignores the
        # shift q·b_k common to a row), so every scale is at least 1e-3 of the largest gradient
        mag = {n: max(np.abs(g).max(), 1e-3 * top) for n, g in truth[2].items()}
        res = {"loss_rel64": float(abs(loss64 - truth[0]) / abs(truth[0])),
               "dx_rel64": float(err(dx64, truth[1][:, rows]) / np.abs(truth[1]).max()),
               "grads_rel64": max(float(err(g64[n], truth[2][n]) / mag[n])
                                  for n in truth[2])}

        res["loss_ratio32"] = ratio(abs(loss32 - truth[0]), abs(e_loss32 - truth[0]),
                                    abs(truth[0]))
        res["dx_ratio32"] = ratio(err(dx32, truth[1][:, rows]), err(e_dx32, truth[1]),
                                  np.abs(truth[1]).max())
        res["grads_ratio32"] = max(ratio(err(g32[n], truth[2][n]), err(e_g32[n], truth[2][n]),
                                         mag[n]) for n in truth[2])
        res["n_grads"] = len(g64)
        report[layout] = COMM.gather(res, root=0)
    if RANK == 0:
        print("RESULT " + json.dumps(report), flush=True)


if __name__ == "__main__":
    main()
