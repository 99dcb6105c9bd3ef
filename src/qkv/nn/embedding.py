"""Embedding: a lookup table from integer ids to vectors."""

from __future__ import annotations

import numpy as np

from ._base import Layer, as_rng, check_dtype, positive_int


class Embedding(Layer):
    """y = weight[ids].

    Params: ``weight (n, d)``, initialised N(0, 1). Shapes: ids ``(...)`` ints in [0, n) →
    y ``(..., d)``. The backward returns ``None`` for ids (they are not differentiable) and
    scatters dy into the rows that were read (repeated ids accumulate).
    """

    def __init__(self, n: int, d: int, rng=None, dtype=np.float32):
        self.n = positive_int(n, "n", "Embedding")
        self.d = positive_int(d, "d", "Embedding")
        self.dtype = check_dtype(dtype)
        self.params = {"weight": as_rng(rng).standard_normal((self.n, self.d)).astype(self.dtype)}

    def forward(self, ids):
        ids = np.asarray(ids)
        if ids.dtype == bool or not np.issubdtype(ids.dtype, np.integer):
            raise TypeError(f"Embedding: ids must be integers, got dtype {ids.dtype}")
        if ids.size and (ids.min() < 0 or ids.max() >= self.n):
            bad = ids.min() if ids.min() < 0 else ids.max()
            raise ValueError(f"Embedding: ids must lie in [0, {self.n}), got {bad}")
        return self.params["weight"][ids], ids  # (..., d)

    def backward(self, ids, dy):
        # Scatter-add dy into the rows read. Sorting the ids and summing each run with
        # reduceat gives the same sums as np.add.at (in a fixed order) ~10× faster.
        flat = ids.reshape(-1)
        rows = dy.reshape(-1, self.d).astype(self.dtype, copy=False)  # (M, d)
        dw = np.zeros_like(self.params["weight"])
        if flat.size:
            order = np.argsort(flat, kind="stable")
            sorted_ids = flat[order]
            starts = np.flatnonzero(np.r_[True, sorted_ids[1:] != sorted_ids[:-1]])
            dw[sorted_ids[starts]] = np.add.reduceat(rows[order], starts, axis=0)
        return None, {"weight": dw}

    def __repr__(self):
        return f"Embedding({self.n}, {self.d})"
