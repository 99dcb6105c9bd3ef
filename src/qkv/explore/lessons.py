"""The explorer's teaching views beyond a single trace: the lesson's common mistakes and the cost
of n × n (the projections X → Q, K, V are in :mod:`.projections`). Every weight comes from
``qkv.explain``; every tile classification from ``qkv.engine.block_map`` (the kernel's own).
"""

from __future__ import annotations

import math
import os

import numpy as np

import qkv

from .schemas import CostRequest, MistakesRequest

FLOAT32 = 4  # bytes


def mistake_inputs(req: MistakesRequest) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One head's q, k, v ``(n, d_k)``: seeded N(0, 1) entries, as for a trained layer's
    projections of unit-variance inputs."""
    rng = np.random.default_rng(req.seed)
    q, k, v = rng.standard_normal((3, req.n, req.d_k))
    return q, k, v


def mistakes(req: MistakesRequest) -> dict:
    """The right attention and the one with the chosen mistakes, both by qkv.

    - wrong scale: 1/√d_model (d_model = heads · d_k, e.g. MiniLM's 384) instead of 1/√d_k (32)
    - wrong axis: softmax over the queries (each *column* sums to 1): ``qkv.explain`` with the
      roles of q and k exchanged, transposed back
    - swapped K and V: ``qkv.explain(q, v, k)``: the values decide the weights, the keys are
      copied
    """
    q, k, v = mistake_inputs(req)
    d_model = req.heads * req.d_k
    right = qkv.explain(q, k, v)
    scale = 1 / math.sqrt(d_model) if req.wrong_scale else 1 / math.sqrt(req.d_k)
    keys, values = (v, k) if req.swap_kv else (k, v)
    if req.wrong_axis:
        flipped = qkv.explain(keys, q, np.zeros((req.n, 1)), scale=scale)  # softmax over queries
        weights = flipped.weights.T  # (nq, nk): each column sums to 1
        scaled = flipped.scaled.T
        output = weights @ values  # (nq, d_v): the mistaken weights applied as usual
    else:
        wrong = qkv.explain(q, keys, values, scale=scale)
        weights, scaled, output = wrong.weights, wrong.scaled, wrong.output
    notes = []
    if req.wrong_scale:
        notes.append(f"scaled by 1/√d_model = 1/√{d_model} = {scale:.4f} instead of 1/√d_k = "
                     f"1/√{req.d_k} = {1 / math.sqrt(req.d_k):.4f}: the scores are "
                     f"{math.sqrt(d_model / req.d_k):.2f}× too small, so softmax is too flat")
    if req.wrong_axis:
        notes.append("softmax over the queries (axis −2): each column sums to 1, the rows do "
                     "not — a query's weights are no longer a distribution over the keys")
    if req.swap_kv:
        notes.append("keys and values swapped: the values decide who matches and the keys are "
                     "copied — queries and keys decide the weights, values what gets copied")
    return {
        "right": {"scale": right.scale, "scaled": right.scaled.tolist(),
                  "weights": right.weights.tolist(), "output": right.output.tolist(),
                  "row_sums": right.weights.sum(axis=1).tolist(),
                  "col_sums": right.weights.sum(axis=0).tolist()},
        "wrong": {"scale": scale, "scaled": scaled.tolist(), "weights": weights.tolist(),
                  "output": output.tolist(), "row_sums": weights.sum(axis=1).tolist(),
                  "col_sums": weights.sum(axis=0).tolist()},
        "notes": notes or ["no mistake chosen: both sides are the same"],
        "d_model": d_model, "d_k": req.d_k,
    }


def cost_mask(kind: str, n: int):
    """The cost view's masks at length n."""
    if kind == "none":
        return None, "no mask: every query meets every key"
    if kind == "causal":
        return qkv.causal(), "causal: query i meets keys 0…i"
    if kind == "window":
        before = max(1, n // 8)
        return qkv.window(before), f"window: query i meets keys i − {before:,}…i"
    ids = np.arange(n) * 4 // n  # 4 documents of n/4 tokens
    return qkv.documents(ids), "4 documents of n/4 tokens: a query meets only its own document"


def cost(req: CostRequest) -> dict:
    """Sizes, work and memory of n × n attention, and the tiles a mask lets the kernel skip."""
    from qkv import engine

    config = engine.current()
    n, d = req.n, req.d
    mask, said = cost_mask(req.mask, n)
    # the tiles the kernel runs with: without a mask its key tiles are wider (key_tile), so the
    # grid, the tile count and the memory row all speak of the same 512 × 1024 tile, not of two
    tq = req.tile_q or config.tile_q
    tk = req.tile_k or config.key_tile(mask is not None)
    grid = engine.block_map(mask, n, n, tile=(tq, tk))  # (tiles_q, tiles_k): 0 / 1 / 2
    counts = np.bincount(grid.ravel(), minlength=3)
    workers = config.workers or os.cpu_count() or 1  # None: one per core
    # work: QKᵀ and PV, 2·d flops per pair each, on every pair of every tile computed
    rows = np.minimum(tq, n - np.arange(grid.shape[0])[:, None] * tq)  # (tiles_q, 1)
    cols = np.minimum(tk, n - np.arange(grid.shape[1])[None, :] * tk)  # (1, tiles_k)
    computed = int(((grid > 0) * rows * cols).sum())
    # memory: what the kernel holds at once, as it runs (qkv.engine.kernel): a problem of at
    # most config.small scores is one block of n × n scores (no tiling pays off); a larger one
    # holds one tile per worker at work, a tile being clipped to the problem, and the workers
    # being one below config.thread_min_work multiply-adds and at most one per query tile.
    small = n * n <= config.small
    if small:
        block, in_use = [n, n], 1
    else:
        block = [min(tq, n), min(tk, n)]
        in_use = min(config.num_workers(n * n * 2 * d), grid.shape[0])
    output = n * (d + 1) * FLOAT32  # the output and the log-sum-exp per row
    return {
        "n": n, "d": d, "mask": req.mask, "mask_description": said, "tile": [tq, tk],
        "entries": n * n,
        "naive_bytes": 2 * n * n * FLOAT32 + n * d * FLOAT32,  # scores, weights, output
        "qkv_bytes": in_use * block[0] * block[1] * FLOAT32 + output,
        "workers": workers, "workers_in_use": in_use, "block": block, "small_problem": small,
        "small_limit": config.small,
        "flops_dense": 4 * n * n * d,
        "flops_qkv": 4 * computed * d,
        "tiles": {"empty": int(counts[0]), "partial": int(counts[1]), "full": int(counts[2]),
                  "total": int(grid.size)},
        "grid": ["".join("012"[c] for c in row) for row in grid],
    }
