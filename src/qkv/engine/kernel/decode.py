"""A paged decode step (one query per head) with the query heads of each kv head stacked as the
columns of one tile: each key tile is gathered once per kv head, not once per query head."""

from __future__ import annotations

import numpy as np

from .. import operands
from ..masks import PARTIAL
from ..problem import Problem
from .common import bad_rows, dot_t, finish_into, tile_scores


def decode_group(p: Problem) -> bool:
    """Does a paged decode step (one query per head) stack the query heads of each kv head
    into one tile? Then each key tile is gathered once per kv head, not once per query head,
    and its scores are one (tk, G) product. Only for rules that treat the heads alike."""
    return (p.pages is not None and p.nq == 1 and p.group > 1 and p.bias is None
            and p.score_mod is None and not p.dropout
            and (p.mask is None or not p.mask.head_dependent))



def decode_worker(p, planner, step, q, keys, values, out_flat, lse_flat, scratch):
    """The worker of a stacked decode step: item (b, hk) computes query heads
    hk·G … hk·G + G − 1 of its one query together, as the G columns of every tile."""
    c, g = p.compute, p.group

    def worker(worker_id: int, item) -> None:
        b, hk = item
        heads = slice(hk * g, (hk + 1) * g)
        q_scaled = operands.scaled_rows(q[b, heads, 0], p.scale, c)  # (G, Dk)
        k_rows = keys(b, hk)
        v_rows = None if values is None else values(b, hk)
        m = np.full(g, -np.inf, dtype=c)
        row_sum = np.zeros(g, dtype=c)
        acc_t = None if values is None else np.zeros((p.dv, g), dtype=c)  # accᵀ (Dv, G)
        for _, _, k0, k1, kind, block in planner.tiles(b, hk * g, 0, 1):
            kj = p.k_pos[k0:k1]
            s = tile_scores(p, q_scaled, k_rows(k0, k1), b, hk * g, p.q_pos, kj,
                             out=scratch.tile(worker_id, k1 - k0, g, c))  # (tk, G)
            allowed = None if kind != PARTIAL else np.ascontiguousarray(
                np.broadcast_to(block(True), (k1 - k0, g)))[None]  # the one query's, G times
            step.online_softmax(s[None], allowed, m[None], row_sum[None],
                                None if acc_t is None else acc_t[None], products=True)
            if acc_t is not None:
                v_tile = v_rows(k0, k1)
                dot_t(v_tile, s, bad_rows(p, v_tile), acc_t, "numpy")  # (Dv, tk) @ (tk, G)
        acc = None if acc_t is None else acc_t.T  # (G, Dv)
        lse_flat[b, heads, 0] = finish_into(p, m, row_sum, acc,
                                             None if acc is None else out_flat[b, heads, 0])

    return worker
