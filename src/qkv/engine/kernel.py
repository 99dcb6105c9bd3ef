"""The tiled kernels: FlashAttention-2's forward and backward, the weights on demand.

Forward (FlashAttention-2, Algorithm 1), for each query tile Q_i of one (batch, head)::

    m = −∞, ℓ = 0, acc = 0                                   (per query row)
    for each key tile K_j, V_j the mask does not classify EMPTY:
        S   = Q_i K_jᵀ · scale (+ bias)                       the tile's scores   (tq, tk)
        m, ℓ, acc, P = online_softmax(S, allowed, m, ℓ, acc)  step: P = exp(S − m_new)
        acc += P V_j                                           (tq, Dv)
    out = acc / ℓ,   lse = m + log ℓ                          (ℓ = 0: no key → 0, −∞)

so no Nq × Nk array ever exists. The element-wise half of each tile is the *tile step*
(:mod:`.step`, NumPy or compiled); the GEMMs stay with the BLAS. The same step serves the
backward (weights recomputed from lse), ``attention_weights``, small problems (all heads at
once, as one batch of rows) and ring attention (which calls :func:`forward` per kv shard).

Tiles are planned before they are touched (:class:`_Planner`): the bound mask classifies each
as EMPTY (skipped), FULL (no mask arithmetic) or PARTIAL (its block applied), once per batch
element and head only if the mask depends on them.
"""

from __future__ import annotations

import threading

import numpy as np

from . import step as steps
from . import threads
from .masks import EMPTY, FULL, PARTIAL
from .problem import Problem
from .tiles import KernelConfig, blocks, current

__all__ = ["backward", "forward", "has_work", "weights"]


# --------------------------------------------------------------------------------------------
# Planning: which tiles, of which kind
# --------------------------------------------------------------------------------------------
class _Planner:
    """The tiles of one call: ``plan(b, h, q0, q1)`` lists ``(r0, r1, k0, k1, kind, block)``
    for query rows q0:q1 (r0:r1 relative to q0) — non-EMPTY tiles only, PARTIAL ones split
    into quadrants down to ``split_min`` when the mask classifies from ranges cheaply."""

    def __init__(self, p: Problem, cfg: KernelConfig, tile_k: int):
        self.p, self.cfg, self.tile_k = p, cfg, tile_k
        self.k_blocks = blocks(p.nk, tile_k)
        mask = p.mask
        self.split = mask is not None and mask.cheap
        self._cache: dict = {}
        self._lock = threading.Lock()

    def _key(self, b: int, h: int, q0: int, q1: int):
        mask = self.p.mask
        return (b if mask.batch_dependent else 0, h if mask.head_dependent else 0, q0, q1)

    def plan(self, b: int, h: int, q0: int, q1: int, keys: tuple[int, int] | None = None):
        """The tiles of query rows q0:q1 (of keys ``keys[0]:keys[1]`` only, if given)."""
        p, stats = self.p, self.cfg.stats
        if p.mask is None:
            tiles = [(0, q1 - q0, k0, k1, FULL, None) for k0, k1 in self.k_blocks]
        else:
            key = self._key(b, h, q0, q1)
            with self._lock:
                tiles = self._cache.get(key)
            if tiles is None:
                tiles = []
                for k0, k1 in self.k_blocks:
                    self._visit(b, h, q0, 0, q1 - q0, k0, k1, tiles)
                with self._lock:
                    self._cache[key] = tiles
        if keys is not None:
            tiles = [t for t in tiles if keys[0] <= t[2] and t[3] <= keys[1]]
        if stats is not None:
            for *_, kind, _ in tiles:
                stats.add_tile(kind)
        return [t for t in tiles if t[4] != EMPTY]

    def _visit(self, b, h, q0, r0, r1, k0, k1, out) -> None:
        p = self.p
        kind, block = p.mask.tile(p.q_pos[q0 + r0: q0 + r1], p.k_pos[k0:k1], b, h)
        if kind == PARTIAL and self.split and min(r1 - r0, k1 - k0) > self.cfg.split_min:
            # A partial tile (e.g. on the causal diagonal) splits into quadrants, so that its
            # empty quarters are skipped and its full ones need no mask arithmetic.
            rm, km = (r0 + r1) // 2, (k0 + k1) // 2
            for rows in ((r0, rm), (rm, r1)):
                for keys in ((k0, km), (km, k1)):
                    self._visit(b, h, q0, *rows, *keys, out)
            return
        out.append((r0, r1, k0, k1, kind, block))


def has_work(p: Problem) -> bool:
    """Is any tile of this problem not EMPTY? (Ring attention skips kv shards that are all
    masked for its queries.) Stops at the first tile found."""
    if p.empty:
        return False
    if p.mask is None:
        return True
    cfg = current()
    nb = p.batch_size if p.mask.batch_dependent else 1
    nh = p.hq if p.mask.head_dependent else 1
    for b in range(nb):
        for h in range(nh):
            for q0, q1 in blocks(p.nq, cfg.tile_q):
                qi = p.q_pos[q0:q1]
                for k0, k1 in blocks(p.nk, cfg.tile_k):
                    if p.mask.tile(qi, p.k_pos[k0:k1], b, h)[0] != EMPTY:
                        return True
    return False


def _step_for(p: Problem, cfg: KernelConfig):
    """The tile step for this problem: float64 always runs the NumPy step."""
    backend = "numpy" if p.compute == np.float64 else cfg.resolved_backend()
    return backend, steps.get(backend)


def _tile_scores(p: Problem, q_scaled, k, b, h, qi, kj) -> np.ndarray:
    """S = (q · scale) kᵀ (+ bias): one tile's scores in natural units, ``(tq, tk)``."""
    s = q_scaled @ k.T
    if p.bias is not None:
        s += p.bias.tile(qi, kj, b, h)
    return s


def _work(p: Problem, passes: float = 1.0) -> float:
    return passes * p.batch_size * p.hq * p.nq * p.nk * (p.dk + p.dv)


# --------------------------------------------------------------------------------------------
# Forward
# --------------------------------------------------------------------------------------------
def forward(p: Problem, *, with_output: bool = True) -> tuple[np.ndarray | None, np.ndarray]:
    """``(out, lse)`` for a validated problem: out ``(*batch, Hq, Nq, Dv)`` in the input dtype
    (None when ``with_output`` is False: only lse is wanted), lse ``(*batch, Hq, Nq)`` in the
    compute dtype (natural log)."""
    out = np.zeros(p.out_shape(p.dv), dtype=p.dtype) if with_output else None
    lse = np.full(p.out_shape(1)[:-1], -np.inf, dtype=p.compute)
    if p.empty:
        return out, lse  # no keys at all: every row is all-masked
    cfg = current()
    backend, step = _step_for(p, cfg)
    if p.nq * p.nk <= cfg.small:
        _forward_small(p, cfg, step, out, lse)
        path = "small"
    else:
        _forward_tiled(p, cfg, step, out, lse)
        path = "tiled"
    if cfg.stats is not None:
        cfg.stats.add_path(f"{path} {backend}")
    return out, lse


def _forward_tiled(p, cfg, step, out, lse) -> None:
    planner = _Planner(p, cfg, cfg.key_tile(p.mask is not None))
    # One work item per (batch element, query head, query tile); later query tiles first, as
    # under a causal mask they see the most keys and the pool should start on them.
    items = [(b, h, q0, q1) for q0, q1 in reversed(blocks(p.nq, cfg.tile_q))
             for b in range(p.batch_size) for h in range(p.hq)]
    out_flat = None if out is None else p.flat(out)
    lse_flat = p.flat(lse[..., None])[..., 0]  # (B, Hq, Nq)
    q, k = p.flat(p.q), p.flat(p.k)
    v = None if out is None else p.flat(p.v)
    c = p.compute

    def worker(_: int, item) -> None:
        b, h, q0, q1 = item
        hk = h // p.group
        q_scaled = q[b, h, q0:q1].astype(c) * c.type(p.scale)  # (tq, Dk)
        k_bh = k[b, hk].astype(c, copy=False)  # (Nk, Dk)
        v_bh = None if v is None else v[b, hk].astype(c, copy=False)  # (Nk, Dv)
        tq = q1 - q0
        m = np.full(tq, -np.inf, dtype=c)  # running max
        row_sum = np.zeros(tq, dtype=c)  # running sum ℓ of exp(s − m)
        acc = None if v is None else np.zeros((tq, p.dv), dtype=c)  # (tq, Dv)
        for r0, r1, k0, k1, kind, block in planner.plan(b, h, q0, q1):
            qi, kj = p.q_pos[q0 + r0: q0 + r1], p.k_pos[k0:k1]
            s = _tile_scores(p, q_scaled[r0:r1], k_bh[k0:k1], b, h, qi, kj)  # (tr, tk)
            allowed = block() if kind == PARTIAL else None
            step.online_softmax(s, allowed, m[r0:r1], row_sum[r0:r1],
                                None if acc is None else acc[r0:r1])
            if acc is not None:
                acc[r0:r1] += s @ v_bh[k0:k1]  # (tr, Dv)
        lse_flat[b, h, q0:q1] = _finish(m, row_sum, acc)
        if acc is not None:
            out_flat[b, h, q0:q1] = acc

    threads.run(worker, items, cfg.num_workers(_work(p)))


def _finish(m: np.ndarray, row_sum: np.ndarray, acc: np.ndarray | None) -> np.ndarray:
    """out = acc / ℓ in place and lse = m + log ℓ; rows with ℓ = 0 had no key: 0 and −inf."""
    has_keys = row_sum > 0
    lse = np.full_like(m, -np.inf)
    np.add(m, np.log(row_sum, where=has_keys, out=np.zeros_like(row_sum)), out=lse,
           where=has_keys)
    if acc is not None:
        np.divide(acc, row_sum[:, None], out=acc, where=has_keys[:, None])
        acc[~has_keys] = 0
    return lse


def _small_chunks(p: Problem) -> list[slice]:
    """Slices of the flat batch so one chunk's scores stay about a tile's worth per core."""
    per_elem = p.hq * p.nq * p.nk
    size = max(1, (1 << 22) // max(per_elem, 1))
    return [slice(i, min(i + size, p.batch_size)) for i in range(0, p.batch_size, size)]


def _small_scores(p: Problem, rows: slice):
    """All heads at once: scores ``(b, Hkv, G, Nq, Nk)`` and the allowed pairs (or None)."""
    c = p.compute
    g = (p.hkv, p.group)
    q = p.flat(p.q)[rows].reshape(-1, *g, p.nq, p.dk)  # (b, Hkv, G, Nq, Dk)
    k = p.flat(p.k)[rows][:, :, None]  # (b, Hkv, 1, Nk, Dk)
    s = (q.astype(c) * c.type(p.scale)) @ np.swapaxes(k.astype(c, copy=False), -1, -2)
    # Broadcasting matmuls may return a strided result; the step works on rows of a view of it.
    s = np.ascontiguousarray(s)
    shape = (p.batch_size, p.hq, p.nq, p.nk)
    if p.bias is not None:
        bias = p.bias.dense(p.q_pos, p.k_pos).reshape(shape)
        s += bias[rows].reshape(s.shape)
    allowed = None
    if p.mask is not None:
        dense = p.mask.dense(p.q_pos, p.k_pos)  # (*batch or 1s, Hq or 1, Nq, Nk)
        dense = np.broadcast_to(dense.reshape(-1, *dense.shape[-3:]), shape)
        allowed = np.ascontiguousarray(dense[rows]).reshape(s.shape)
    return s, allowed


def _forward_small(p, cfg, step, out, lse) -> None:
    """Problems whose score matrix per head fits in one tile: one tile step over all rows of all
    heads (each row is its own softmax, so heads and batch elements are just more rows)."""
    c = p.compute
    lse_flat = lse.reshape(p.batch_size, p.hq * p.nq)
    out_g = None if out is None else out.reshape(p.batch_size, p.hkv, p.group, p.nq, p.dv)
    v = None if out is None else p.flat(p.v)[:, :, None]  # (B, Hkv, 1, Nk, Dv)

    def worker(_: int, rows: slice) -> None:
        s, allowed = _small_scores(p, rows)  # (b, Hkv, G, Nq, Nk)
        flat_rows = s.shape[0] * p.hq * p.nq
        m = np.full(flat_rows, -np.inf, dtype=c)
        row_sum = np.zeros(flat_rows, dtype=c)
        s2 = s.reshape(flat_rows, p.nk)  # a view: rows of every head
        step.online_softmax(s2, None if allowed is None else allowed.reshape(s2.shape),
                            m, row_sum, None)
        lse_flat[rows] = _finish(m, row_sum, None).reshape(-1, p.hq * p.nq)
        if out_g is not None:
            acc = (s @ v[rows].astype(c, copy=False)).reshape(flat_rows, p.dv)
            _finish(m, row_sum, acc)
            out_g[rows] = acc.reshape(-1, p.hkv, p.group, p.nq, p.dv)

    threads.run(worker, _small_chunks(p), cfg.num_workers(_work(p)))


# --------------------------------------------------------------------------------------------
# Weights on demand
# --------------------------------------------------------------------------------------------
def weights(p: Problem) -> np.ndarray:
    """The exact weights ``(*batch, Hq, Nq, Nk)`` for the (possibly row-subset) problem.

    First the forward's lse for these rows, then each tile's weights recomputed from it with
    the step's ``probabilities`` — as the backward does — and each row divided by its sum, so
    the memory is the result plus a tile. Empty tiles are never computed. Weights below the dtype's smallest normal number
    (1.2e-38 in float32) are returned as 0.
    """
    result = np.zeros((*p.batch_shape, p.hq, p.nq, p.nk), dtype=p.dtype)
    if p.empty:
        return result
    _, lse = forward(p, with_output=False)
    cfg = current()
    _, step = _step_for(p, cfg)
    c = p.compute
    planner = _Planner(p, cfg, cfg.tile_k)
    flat, lse_flat = p.flat(result), p.flat(lse[..., None])[..., 0]
    q, k = p.flat(p.q), p.flat(p.k)
    items = [(b, h, q0, q1) for q0, q1 in blocks(p.nq, cfg.tile_q)
             for b in range(p.batch_size) for h in range(p.hq)]

    def worker(_: int, item) -> None:
        b, h, q0, q1 = item
        q_scaled = q[b, h, q0:q1].astype(c) * c.type(p.scale)
        k_bh = k[b, h // p.group].astype(c, copy=False)
        for r0, r1, k0, k1, kind, block in planner.plan(b, h, q0, q1):
            qi, kj = p.q_pos[q0 + r0: q0 + r1], p.k_pos[k0:k1]
            s = _tile_scores(p, q_scaled[r0:r1], k_bh[k0:k1], b, h, qi, kj)
            step.probabilities(s, block() if kind == PARTIAL else None,
                               lse_flat[b, h, q0 + r0: q0 + r1])
            flat[b, h, q0 + r0: q0 + r1, k0:k1] = s
        # exp(s − lse) sums to 1 up to the exponential's rounding (≈ |s − lse|·eps): divide by
        # the actual sum so that every row sums to 1 to the dtype's precision.
        rows = flat[b, h, q0:q1]
        total = rows.sum(axis=-1, dtype=c, keepdims=True)
        np.divide(rows, total, out=rows, where=total > 0)

    threads.run(worker, items, cfg.num_workers(_work(p)))
    # float16 results: weights below float16's normal range flush to 0 as well.
    np.copyto(result, 0, where=result < np.finfo(p.dtype).tiny)
    return result


# --------------------------------------------------------------------------------------------
# Backward
# --------------------------------------------------------------------------------------------
def backward(p: Problem, out: np.ndarray, lse: np.ndarray, dout: np.ndarray):
    """Gradients ``(dq, dk, dv)`` as ``(B, H, N, D)`` arrays in the compute dtype (flat batch).

    FlashAttention-2's backward: for each key tile (a work item), walk every query tile of every
    query head that reads this kv head, recompute the weights from ``lse``, and accumulate

        dV_j += Pᵀ dO_i,   dS = P ∘ (dO_i V_jᵀ − Δ_i),   dK_j += dSᵀ Q_i · scale,
        dQ_i += dS K_j · scale,   with Δ_i = rowsum(dO_i ∘ O_i).

    dK and dV of a key tile belong to one work item; dQ gets contributions from every key tile,
    so each worker thread accumulates dQ privately and the copies are summed at the end.
    """
    c = p.compute
    dq_shape = (p.batch_size, p.hq, p.nq, p.dk)
    dk = np.zeros((p.batch_size, p.hkv, p.nk, p.dk), dtype=c)
    dv = np.zeros((p.batch_size, p.hkv, p.nk, p.dv), dtype=c)
    if p.empty:
        return np.zeros(dq_shape, dtype=c), dk, dv
    cfg = current()
    backend, step = _step_for(p, cfg)
    dout_f = dout.reshape(p.batch_size, p.hq, p.nq, p.dv)
    out_f = out.reshape(p.batch_size, p.hq, p.nq, p.dv)
    # Δ_i = rowsum(dO ∘ O) = Σ_j P_ij (dO_i · v_j), the softmax-Jacobian term.
    delta = np.einsum("bhnd,bhnd->bhn", dout_f.astype(c), out_f.astype(c))  # (B, Hq, Nq)
    lse_f = lse.reshape(p.batch_size, p.hq, p.nq).astype(c)
    if p.nq * p.nk <= cfg.small:
        result = _backward_small(p, cfg, step, delta, lse_f, dout_f)
        path = "small"
    else:
        result = _backward_tiled(p, cfg, step, delta, lse_f, dout_f, dk, dv)
        path = "tiled"
    if cfg.stats is not None:
        cfg.stats.add_path(f"{path} backward {backend}")
    return result


def _backward_tiled(p, cfg, step, delta, lse_f, dout_f, dk, dv):
    c = p.compute
    scale = c.type(p.scale)
    dq_parts: dict[int, np.ndarray] = {}
    q, k, v = p.flat(p.q), p.flat(p.k), p.flat(p.v)
    q_blocks = blocks(p.nq, cfg.tile_q)
    planner = _Planner(p, cfg, cfg.tile_k)
    items = [(b, hk, k0, k1) for b in range(p.batch_size) for hk in range(p.hkv)
             for k0, k1 in blocks(p.nk, cfg.tile_k)]

    def worker(worker_id: int, item) -> None:
        b, hk, k0, k1 = item
        if worker_id not in dq_parts:
            dq_parts[worker_id] = np.zeros((p.batch_size, p.hq, p.nq, p.dk), dtype=c)
        dq = dq_parts[worker_id]
        dk_acc, dv_acc = dk[b, hk], dv[b, hk]
        k_bh = k[b, hk].astype(c, copy=False)
        v_bh = v[b, hk].astype(c, copy=False)
        for h in range(hk * p.group, (hk + 1) * p.group):
            for q0, q1 in q_blocks:
                q_scaled = None
                for r0, r1, t0, t1, kind, block in planner.plan(b, h, q0, q1, (k0, k1)):
                    if q_scaled is None:
                        q_tile = q[b, h, q0:q1].astype(c)  # (tq, Dk)
                        q_scaled = q_tile * scale
                        do_tile = dout_f[b, h, q0:q1].astype(c)  # (tq, Dv)
                    rows = slice(r0, r1)
                    qi, kj = p.q_pos[q0 + r0: q0 + r1], p.k_pos[t0:t1]
                    s = _tile_scores(p, q_scaled[rows], k_bh[t0:t1], b, h, qi, kj)  # (tr, tk)
                    step.probabilities(s, block() if kind == PARTIAL else None,
                                       lse_f[b, h, q0 + r0: q0 + r1])  # P, recomputed
                    dv_acc[t0:t1] += s.T @ do_tile[rows]  # (tk, Dv)
                    dp = do_tile[rows] @ v_bh[t0:t1].T  # (tr, tk)
                    step.softmax_grad(dp, s, delta[b, h, q0 + r0: q0 + r1])  # dS
                    dk_acc[t0:t1] += (dp.T @ q_tile[rows]) * scale  # (tk, Dk)
                    dq[b, h, q0 + r0: q0 + r1] += (dp @ k_bh[t0:t1]) * scale  # (tr, Dk)

    threads.run(worker, items, cfg.num_workers(_work(p, 2.5)))
    dq = sum(dq_parts.values()) if dq_parts else np.zeros((p.batch_size, p.hq, p.nq, p.dk), c)
    return dq, dk, dv


def _backward_small(p, cfg, step, delta, lse_f, dout_f):
    """The backward with all heads at once, for problems whose score matrix per head fits in
    one tile (as :func:`_forward_small`): the same step on every row of every head."""
    c = p.compute
    scale = c.type(p.scale)
    g = (p.batch_size, p.hkv, p.group)
    dq = np.zeros((*g, p.nq, p.dk), dtype=c)
    dk = np.zeros((p.batch_size, p.hkv, p.nk, p.dk), dtype=c)
    dv = np.zeros((p.batch_size, p.hkv, p.nk, p.dv), dtype=c)
    q_g = p.flat(p.q).reshape(*g, p.nq, p.dk)
    k_g, v_g = p.flat(p.k)[:, :, None], p.flat(p.v)[:, :, None]  # (B, Hkv, 1, Nk, D)
    do_g = dout_f.reshape(*g, p.nq, p.dv)
    delta_flat = delta.reshape(p.batch_size, -1)
    lse_flat = lse_f.reshape(p.batch_size, -1)

    def worker(_: int, rows: slice) -> None:
        s, allowed = _small_scores(p, rows)  # (b, Hkv, G, Nq, Nk)
        flat_rows = s.shape[0] * p.hq * p.nq
        s2 = s.reshape(flat_rows, p.nk)
        step.probabilities(s2, None if allowed is None else allowed.reshape(s2.shape),
                           lse_flat[rows].reshape(-1))  # the weights P, recomputed
        do = do_g[rows].astype(c, copy=False)
        dv[rows] = (np.swapaxes(s, -1, -2) @ do).sum(axis=2)  # Σ over the group (b, Hkv, Nk, Dv)
        dp = np.ascontiguousarray(do @ np.swapaxes(v_g[rows].astype(c, copy=False), -1, -2))
        # dp (b, Hkv, G, Nq, Nk): contiguous, so that the step's 2-D view of it is not a copy
        step.softmax_grad(dp.reshape(flat_rows, p.nk), s2, delta_flat[rows].reshape(-1))
        dq[rows] = (dp @ k_g[rows].astype(c, copy=False)) * scale
        dk[rows] = (np.swapaxes(dp, -1, -2) @ q_g[rows].astype(c, copy=False)).sum(axis=2) * scale

    threads.run(worker, _small_chunks(p), cfg.num_workers(_work(p, 2.5)))
    return dq.reshape(p.batch_size, p.hq, p.nq, p.dk), dk, dv
