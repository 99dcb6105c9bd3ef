"""The tiled kernels: online-softmax forward and the FlashAttention-2 backward, on NumPy.

Forward (FlashAttention-2, Algorithm 1). Queries are cut into tiles of ``TILE_Q`` rows; for
each query tile the key tiles of ``TILE_K`` keys are visited in order, keeping per query row a
running maximum ``m``, a running sum ``row_sum`` (the paper's ℓ) and an accumulator ``acc``:

    s        = q_tile k_tileᵀ · scale (+ bias)              the tile's scaled scores
    m_new    = max(m, rowmax(s))
    p        = exp(s − m_new)                                unnormalised weights, ≤ 1
    row_sum  = exp(m − m_new) · row_sum + rowsum(p)
    acc      = exp(m − m_new) · acc + p v_tile
    ...
    out      = acc / row_sum,   lse = m + log(row_sum)

so no Nq × Nk array ever exists. Before touching a tile, the mask classifies it: EMPTY tiles are
skipped, FULL tiles get no mask arithmetic, PARTIAL tiles have the mask's block applied. A row
whose ``row_sum`` stays 0 had no allowed key: it returns zeros and ``lse = −inf``.

Speed notes (measured on this machine, see benchmarks/):
- tiles are computed transposed, ``sᵀ = k_tile q_tileᵀ`` of shape (tk, tq), so the softmax
  reductions run down contiguous columns and the row sums are one matrix–vector product;
- log2(e) is folded into the scale so the exponential is ``exp2``;
- exponents are clamped at the dtype's smallest normal exponent: weights below 2^-126 (float32)
  are raised to it instead of becoming subnormal numbers, which slow every later operation on
  them by an order of magnitude. The absolute error this adds is < 1.2e-38 per weight, and
  masked entries are zeroed exactly afterwards.
"""

from __future__ import annotations

import math

import numpy as np

from . import _threads
from ._inputs import Problem
from .masks import EMPTY, FULL, PARTIAL

# Tile sizes, measured against torch in one interleaved run (benchmarks/README.md): larger tiles
# amortise NumPy's per-call cost; with a mask, smaller key tiles waste less in partial tiles.
TILE_Q = 512
TILE_K = 512
TILE_K_UNMASKED = 1024
# Partial tiles split into quadrants down to this size (masks with cheap classification only).
SPLIT_MIN = 256
LOG2E = math.log2(math.e)
LN2 = math.log(2.0)
# Below these exponents exp2 would return a subnormal number.
EXP2_FLOOR = {np.dtype(np.float32): -126.0, np.dtype(np.float64): -1022.0}
# Problems whose per-head score matrix fits in one tile run all heads at once (no Python loop).
SMALL = 256 * 512
# Below this much work (multiply-adds) threads cost more than they save.
THREAD_MIN_WORK = 1 << 22


def _log2_lse(lse_row: np.ndarray) -> np.ndarray:
    """lse in log2 units for recomputing weights; all-masked rows (−inf) give weight exp2(−inf)."""
    return np.where(np.isfinite(lse_row), lse_row * LOG2E, np.inf)


class _Tiles:
    """What every tile needs to know about one (batch element, query head) pair."""

    def __init__(self, p: Problem, b: int, h: int):
        self.where = (p.batch_index(b), h)
        self.mask, self.bias = p.mask, p.bias

    def classify(self, qi: np.ndarray, kj: np.ndarray) -> tuple[int, np.ndarray | None]:
        if self.mask is None:
            return FULL, None
        return self.mask.tile(qi, kj, self.where)

    def bias_tile(self, qi: np.ndarray, kj: np.ndarray) -> np.ndarray | None:
        if self.bias is None:
            return None
        return np.broadcast_to(self.bias.tile(qi, kj, self.where), (len(qi), len(kj)))


def _blocks(n: int, size: int) -> list[tuple[int, int]]:
    return [(start, min(start + size, n)) for start in range(0, n, size)]


def key_tile(p: Problem) -> int:
    """Keys per tile: smaller when a mask may make tiles partial (less masked work wasted)."""
    return TILE_K if p.mask is not None else max(TILE_K, TILE_K_UNMASKED)


def _workers(work: float) -> int:
    return 1 if work < THREAD_MIN_WORK else _threads.num_workers()


# --------------------------------------------------------------------------------------------
# Forward
# --------------------------------------------------------------------------------------------
def forward(p: Problem, *, with_output: bool = True) -> tuple[np.ndarray | None, np.ndarray]:
    """``(out, lse)`` for a validated problem: out ``(*batch, Hq, Nq, Dv)`` in the input dtype
    (None when ``with_output`` is False: only lse is wanted), lse ``(*batch, Hq, Nq)`` in the
    compute dtype."""
    out = np.zeros(p.out_shape(p.v.shape[-1]), dtype=p.dtype) if with_output else None
    lse = np.full(p.out_shape(1)[:-1], -np.inf, dtype=p.compute)
    if p.nq == 0 or p.nk == 0 or p.batch_size == 0 or p.hq == 0:
        return out, lse  # no keys at all: every row is all-masked
    if p.nq * p.nk <= SMALL:
        _forward_small(p, out, lse)
    else:
        _forward_tiled(p, out, lse)
    return out, lse


def _forward_tiled(p: Problem, out: np.ndarray | None, lse: np.ndarray) -> None:
    # One work item per (batch element, query head, query tile); later query tiles first, as
    # under a causal mask they see the most keys and the pool should start on them.
    items = [(b, h, q0, q1) for q0, q1 in reversed(_blocks(p.nq, TILE_Q))
             for b in range(p.batch_size) for h in range(p.hq)]
    out_flat = None if out is None else out.reshape(-1, p.hq, p.nq, out.shape[-1])
    lse_flat = lse.reshape(-1, p.hq, p.nq)
    dv = 0 if out is None else out.shape[-1]
    work = p.batch_size * p.hq * p.nq * p.nk * (p.q.shape[-1] + dv)

    def worker(_: int, item) -> None:
        b, h, q0, q1 = item
        acc, row_lse = _forward_rows(p, b, h, q0, q1, with_output=out is not None)
        lse_flat[b, h, q0:q1] = row_lse
        if out_flat is not None:
            out_flat[b, h, q0:q1] = acc

    _threads.run(worker, items, _workers(work))


def _forward_rows(p: Problem, b: int, h: int, q0: int, q1: int, *, with_output: bool):
    """Online softmax over all key tiles for query rows q0:q1 of (batch b, head h)."""
    c = p.compute
    floor = EXP2_FLOOR[c]
    bidx = p.batch_index(b)
    tiles = _Tiles(p, b, h)
    q = p.q[bidx][h, q0:q1].astype(c, copy=False) * c.type(p.scale * LOG2E)  # (tq, Dk), log2 units
    k = p.k[bidx][h // p.group]  # (Nk, Dk)
    v = p.v[bidx][h // p.group] if with_output else None  # (Nk, Dv)
    tq = q1 - q0
    qi_all = p.q_pos[q0:q1]

    m = np.full(tq, -np.inf, dtype=c)  # running max, log2 units
    row_sum = np.zeros(tq, dtype=c)  # running sum of exp2(s - m)
    acc = np.zeros((tq, v.shape[-1]), dtype=c) if with_output else None  # (tq, Dv)
    # The clamp compares against a row rather than a scalar: NumPy's broadcast loop is ~2.5×
    # faster than its scalar one for np.maximum (measured, see benchmarks/README.md).
    floor_row = np.full(tq, floor, dtype=c)
    tile_k = key_tile(p)
    ones = np.ones(tile_k, dtype=c)
    split = p.mask is not None and p.mask.cheap_tiles

    def visit(r0: int, r1: int, k0: int, k1: int) -> None:
        """Rows r0:r1 of this query tile against keys k0:k1; state lives in row-sliced views."""
        qi, kj = qi_all[r0:r1], p.k_pos[k0:k1]
        kind, block = tiles.classify(qi, kj)
        if kind == EMPTY:
            return
        if kind == PARTIAL and split and min(r1 - r0, k1 - k0) > SPLIT_MIN:
            # A partial tile (e.g. on the causal diagonal) splits into quadrants, so that its
            # empty quarters are skipped and its full ones need no mask arithmetic.
            rm, km = (r0 + r1) // 2, (k0 + k1) // 2
            for rows in ((r0, rm), (rm, r1)):
                for keys in ((k0, km), (km, k1)):
                    visit(*rows, *keys)
            return
        s = k[k0:k1].astype(c, copy=False) @ q[r0:r1].T  # (tk, tr): scores transposed, log2
        bias = tiles.bias_tile(qi, kj)
        if bias is not None:
            s += bias.T.astype(c) * c.type(LOG2E)
        if kind == PARTIAL:
            allowed = np.ascontiguousarray(block.T)  # (tk, tr); read twice, so not strided
            np.copyto(s, -np.inf, where=np.logical_not(allowed))
        m_old = m[r0:r1]
        m_new = np.maximum(m_old, s.max(axis=0))  # (tr,)
        m_ref = np.where(m_new == -np.inf, c.type(0), m_new)  # rows with nothing allowed yet
        alpha = np.exp2(np.maximum(m_old - m_ref, floor_row[r0:r1]))  # rescales what came before
        s -= m_ref
        if kind == PARTIAL or s.min() < floor:  # only then can a weight fall below 2^floor
            np.maximum(s, floor_row[r0:r1], out=s)
        np.exp2(s, out=s)  # p: unnormalised weights in (0, 1]
        if kind == PARTIAL:
            s *= allowed  # masked entries exactly 0
        row_sum[r0:r1] *= alpha
        row_sum[r0:r1] += ones[: k1 - k0] @ s  # row sums as one matrix-vector product
        if acc is not None:
            acc[r0:r1] *= alpha[:, None]
            acc[r0:r1] += s.T @ v[k0:k1].astype(c, copy=False)  # (tr, Dv)
        m[r0:r1] = m_new

    for k0, k1 in _blocks(p.nk, tile_k):
        visit(0, tq, k0, k1)

    has_keys = row_sum > 0
    row_lse = np.full(tq, -np.inf, dtype=c)
    log_sum = np.log2(row_sum, where=has_keys, out=np.zeros_like(row_sum))
    np.add(m, log_sum, out=row_lse, where=has_keys)
    row_lse *= c.type(LN2)  # natural log, as the API promises
    if acc is not None:
        np.divide(acc, row_sum[:, None], out=acc, where=has_keys[:, None])
        acc[~has_keys] = 0
    return acc, row_lse


def _grouped(x: np.ndarray) -> np.ndarray:
    """(*batch, Hkv, N, D) → (B, Hkv, 1, N, D) so it broadcasts against grouped queries."""
    return x.reshape(-1, *x.shape[-3:])[:, :, None]


def _dense_mask(p: Problem) -> np.ndarray | None:
    """Allowed pairs for the whole (small) problem, shaped (B, Hkv, G, Nq, Nk)."""
    if p.mask is None:
        return None
    allowed = np.broadcast_to(p.mask.allowed(p.q_pos, p.k_pos, None),
                              (*p.batch_shape, p.hq, p.nq, p.nk))
    return allowed.reshape(-1, p.hkv, p.group, p.nq, p.nk)


def _small_scores(p: Problem, rows: slice) -> tuple[np.ndarray, np.ndarray | None]:
    """Scaled scores in log2 units, (b, Hkv, G, Nq, Nk), with masked pairs at −inf."""
    c = p.compute
    q = p.q.reshape(-1, p.hkv, p.group, p.nq, p.q.shape[-1])[rows]  # (b, Hkv, G, Nq, Dk)
    k = _grouped(p.k)[rows]  # (b, Hkv, 1, Nk, Dk)
    s = (q.astype(c) * c.type(p.scale * LOG2E)) @ np.swapaxes(k.astype(c, copy=False), -1, -2)
    if p.bias is not None:
        bias = np.broadcast_to(p.bias.tile(p.q_pos, p.k_pos, None),
                               (*p.batch_shape, p.hq, p.nq, p.nk))
        s += bias.reshape(-1, p.hkv, p.group, p.nq, p.nk)[rows].astype(c) * c.type(LOG2E)
    allowed = _dense_mask(p)
    if allowed is not None:
        allowed = allowed[rows]
        np.copyto(s, -np.inf, where=~allowed)
    return s, allowed


def _small_chunks(p: Problem) -> list[slice]:
    """Slices of the flat batch so one chunk's scores stay about a tile's worth per core."""
    per_elem = p.hq * p.nq * p.nk
    step = max(1, (1 << 22) // max(per_elem, 1))
    return [slice(i, min(i + step, p.batch_size)) for i in range(0, p.batch_size, step)]


def _forward_small(p: Problem, out: np.ndarray | None, lse: np.ndarray) -> None:
    """All heads at once, for problems whose score matrix per head fits in one tile."""
    c = p.compute
    floor = EXP2_FLOOR[c]
    out_g = None if out is None else out.reshape(-1, p.hkv, p.group, p.nq, out.shape[-1])
    lse_g = lse.reshape(-1, p.hkv, p.group, p.nq)
    v_g = None if out is None else _grouped(p.v)

    def worker(_: int, rows: slice) -> None:
        s, allowed = _small_scores(p, rows)
        m = s.max(axis=-1, keepdims=True)  # (b, Hkv, G, Nq, 1)
        m_ref = np.where(m == -np.inf, c.type(0), m)
        s -= m_ref
        if allowed is not None or s.min() < floor:
            np.maximum(s, np.full(p.nk, floor, dtype=c), out=s)  # a row: see _forward_rows
        np.exp2(s, out=s)
        if allowed is not None:
            s *= allowed
        row_sum = s.sum(axis=-1, keepdims=True)
        has_keys = row_sum > 0
        row_lse = np.full_like(row_sum, -np.inf)
        np.add(m_ref, np.log2(row_sum, where=has_keys, out=np.zeros_like(row_sum)), out=row_lse,
               where=has_keys)
        lse_g[rows] = row_lse[..., 0] * c.type(LN2)
        if out_g is not None:
            acc = s @ v_g[rows].astype(c, copy=False)  # (b, Hkv, G, Nq, Dv)
            np.divide(acc, row_sum, out=acc, where=has_keys)
            out_g[rows] = np.where(has_keys, acc, 0)

    chunks = _small_chunks(p)
    work = p.batch_size * p.hq * p.nq * p.nk * p.q.shape[-1]
    _threads.run(worker, chunks, _workers(work))


# --------------------------------------------------------------------------------------------
# Weights on demand
# --------------------------------------------------------------------------------------------
def weights(p: Problem) -> np.ndarray:
    """The exact weights ``(*batch, Hq, Nq, Nk)`` for the (possibly row-subset) problem.

    Each query tile's rows are filled with scaled scores, then their softmax — so the memory is
    the result plus one tile-row. Empty tiles are never computed. Weights below the dtype's
    smallest normal number (1.2e-38 in float32) are returned as 0.
    """
    c = p.compute
    result = np.zeros((*p.batch_shape, p.hq, p.nq, p.nk), dtype=p.dtype)
    if p.nq == 0 or p.nk == 0 or p.batch_size == 0 or p.hq == 0:
        return result
    flat = result.reshape(-1, p.hq, p.nq, p.nk)
    floor = EXP2_FLOOR[c]
    items = [(b, h, q0, q1) for q0, q1 in _blocks(p.nq, TILE_Q)
             for b in range(p.batch_size) for h in range(p.hq)]

    def worker(_: int, item) -> None:
        b, h, q0, q1 = item
        bidx = p.batch_index(b)
        tiles = _Tiles(p, b, h)
        q = p.q[bidx][h, q0:q1].astype(c) * c.type(p.scale * LOG2E)  # (tq, Dk)
        k = p.k[bidx][h // p.group]
        qi = p.q_pos[q0:q1]
        rows = np.full((q1 - q0, p.nk), -np.inf, dtype=c)  # (tq, Nk) scaled scores, log2 units
        for k0, k1 in _blocks(p.nk, TILE_K):
            kj = p.k_pos[k0:k1]
            kind, block = tiles.classify(qi, kj)
            if kind == EMPTY:
                continue
            s = q @ k[k0:k1].astype(c, copy=False).T  # (tq, tk)
            bias = tiles.bias_tile(qi, kj)
            if bias is not None:
                s += bias.astype(c) * c.type(LOG2E)
            if kind == PARTIAL:
                np.copyto(s, -np.inf, where=~block)
            rows[:, k0:k1] = s
        m = rows.max(axis=1, keepdims=True)
        m[m == -np.inf] = 0
        rows -= m
        np.copyto(rows, -np.inf, where=rows < floor)  # flush would-be subnormals to exact 0
        np.exp2(rows, out=rows)
        total = rows.sum(axis=1, keepdims=True)
        np.divide(rows, total, out=rows, where=total > 0)
        # Dividing by the sum can push the smallest weights below the normal range again: flush
        # them to 0 so that no caller's arithmetic on these weights meets subnormals.
        np.copyto(rows, 0, where=rows < np.finfo(c).tiny)
        flat[b, h, q0:q1] = rows

    work = p.batch_size * p.hq * p.nq * p.nk * p.q.shape[-1]
    _threads.run(worker, items, _workers(work))
    return result


# --------------------------------------------------------------------------------------------
# Backward
# --------------------------------------------------------------------------------------------
def backward(p: Problem, out: np.ndarray, lse: np.ndarray, dout: np.ndarray):
    """Gradients ``(dq, dk, dv)`` in the broadcast shapes ``(*batch, H, N, D)``, compute dtype.

    FlashAttention-2's backward: for each key tile (a work item), walk every query tile of every
    query head that reads this kv head, recompute the weights from ``lse``, and accumulate

        dV_j += Pᵀ dO_i,   dS = P ∘ (dO_i V_jᵀ − Δ_i),   dK_j += dSᵀ Q_i · scale,
        dQ_i += dS K_j · scale,   with Δ_i = rowsum(dO_i ∘ O_i).

    dK and dV of a key tile belong to one work item; dQ gets contributions from every key tile,
    so each worker thread accumulates dQ privately and the copies are summed at the end.
    """
    c = p.compute
    floor = EXP2_FLOOR[c]
    dk_ = p.q.shape[-1]
    dv_ = p.v.shape[-1]
    shape_q = (p.batch_size, p.hq, p.nq, dk_)
    dk = np.zeros((p.batch_size, p.hkv, p.nk, dk_), dtype=c)
    dv = np.zeros((p.batch_size, p.hkv, p.nk, dv_), dtype=c)
    dq_parts: dict[int, np.ndarray] = {}
    if p.nq == 0 or p.nk == 0 or p.batch_size == 0 or p.hq == 0:
        return np.zeros(shape_q, dtype=c), dk, dv

    dout_f = dout.reshape(p.batch_size, p.hq, p.nq, dv_)
    out_f = out.reshape(p.batch_size, p.hq, p.nq, dv_)
    # Δ_i = rowsum(dO ∘ O) = rowsum(dO ∘ (P V)) = Σ_j P_ij (dO_i · v_j), the softmax-Jacobian term.
    delta = np.einsum("bhnd,bhnd->bhn", dout_f.astype(c), out_f.astype(c))  # (B, Hq, Nq)
    lse2 = _log2_lse(lse.reshape(p.batch_size, p.hq, p.nq).astype(c))  # (B, Hq, Nq)
    if p.nq * p.nk <= SMALL:
        return _backward_small(p, delta, lse2, dout_f)
    scale2 = c.type(p.scale * LOG2E)
    scale = c.type(p.scale)
    floor_row = np.full(TILE_Q, floor, dtype=c)
    items = [(b, hk, k0, k1) for b in range(p.batch_size) for hk in range(p.hkv)
             for k0, k1 in _blocks(p.nk, TILE_K)]

    def worker(worker_id: int, item) -> None:
        b, hk, k0, k1 = item
        bidx = p.batch_index(b)
        if worker_id not in dq_parts:
            dq_parts[worker_id] = np.zeros(shape_q, dtype=c)
        dq = dq_parts[worker_id]
        k = p.k[bidx][hk, k0:k1].astype(c)  # (tk, Dk)
        v = p.v[bidx][hk, k0:k1].astype(c)  # (tk, Dv)
        kj = p.k_pos[k0:k1]
        dk_acc = dk[b, hk, k0:k1]
        dv_acc = dv[b, hk, k0:k1]
        for h in range(hk * p.group, (hk + 1) * p.group):
            tiles = _Tiles(p, b, h)
            for q0, q1 in _blocks(p.nq, TILE_Q):
                qi = p.q_pos[q0:q1]
                kind, block = tiles.classify(qi, kj)
                if kind == EMPTY:
                    continue
                q = p.q[bidx][h, q0:q1].astype(c)  # (tq, Dk)
                do = dout_f[b, h, q0:q1].astype(c)  # (tq, Dv)
                s = k @ (q * scale2).T  # (tk, tq) log2 units
                bias = tiles.bias_tile(qi, kj)
                if bias is not None:
                    s += bias.T.astype(c) * c.type(LOG2E)
                s -= lse2[b, h, q0:q1]
                if kind == PARTIAL or s.min() < floor:
                    np.maximum(s, floor_row[: q1 - q0], out=s)
                np.exp2(s, out=s)  # P transposed: the weights, recomputed
                if kind == PARTIAL:
                    s *= block.T
                dv_acc += s @ do  # (tk, Dv)
                ds = v @ do.T  # (tk, tq) dP transposed
                ds -= delta[b, h, q0:q1]
                ds *= s  # dS transposed (without the scale)
                dk_acc += (ds @ q) * scale  # (tk, Dk)
                dq[b, h, q0:q1] += (ds.T @ k) * scale  # (tq, Dk)

    work = 2.5 * p.batch_size * p.hq * p.nq * p.nk * (dk_ + dv_)
    _threads.run(worker, items, _workers(work))
    dq = sum(dq_parts.values()) if dq_parts else np.zeros(shape_q, dtype=c)
    return dq, dk, dv


def _backward_small(p: Problem, delta: np.ndarray, lse2: np.ndarray, dout: np.ndarray):
    """The backward with all heads at once, for problems whose score matrix per head fits in one
    tile (as :func:`_forward_small`): the same recomputation from lse, batched over (B, Hkv, G)."""
    c = p.compute
    floor = EXP2_FLOOR[c]
    scale = c.type(p.scale)
    g = (p.batch_size, p.hkv, p.group)
    dq = np.zeros((*g, p.nq, p.q.shape[-1]), dtype=c)
    dk = np.zeros((p.batch_size, p.hkv, p.nk, p.q.shape[-1]), dtype=c)
    dv = np.zeros((p.batch_size, p.hkv, p.nk, p.v.shape[-1]), dtype=c)
    q_g = p.q.reshape(*g, p.nq, p.q.shape[-1])
    k_g, v_g = _grouped(p.k), _grouped(p.v)  # (B, Hkv, 1, Nk, D)
    do_g = dout.reshape(*g, p.nq, dout.shape[-1])
    delta_g = delta.reshape(*g, p.nq, 1)
    lse_g = lse2.reshape(*g, p.nq, 1)

    def worker(_: int, rows: slice) -> None:
        s, allowed = _small_scores(p, rows)  # (b, Hkv, G, Nq, Nk), log2 units
        s -= lse_g[rows]
        if allowed is not None or s.min() < floor:
            np.maximum(s, np.full(p.nk, floor, dtype=c), out=s)
        np.exp2(s, out=s)  # the weights P, recomputed
        if allowed is not None:
            s *= allowed
        do = do_g[rows].astype(c, copy=False)
        k = k_g[rows].astype(c, copy=False)
        dv[rows] = (np.swapaxes(s, -1, -2) @ do).sum(axis=2)  # Σ over the group: (b, Hkv, Nk, Dv)
        ds = do @ np.swapaxes(v_g[rows].astype(c, copy=False), -1, -2)  # dP (b, Hkv, G, Nq, Nk)
        ds -= delta_g[rows]
        ds *= s  # dS
        dq[rows] = (ds @ k) * scale
        dk[rows] = (np.swapaxes(ds, -1, -2) @ q_g[rows].astype(c, copy=False)).sum(axis=2) * scale

    work = 2.5 * p.batch_size * p.hq * p.nq * p.nk * (p.q.shape[-1] + p.v.shape[-1])
    _threads.run(worker, _small_chunks(p), _workers(work))
    return dq.reshape(p.batch_size, p.hq, p.nq, -1), dk, dv
