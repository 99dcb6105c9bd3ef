"""Attention over a paged KV cache: keys and values read through a block table, tile by tile.

vLLM's PagedAttention and flash-attn's ``block_table``: the keys and values of every sequence
live in one pool of fixed-size blocks, and sequence b's positions ``0 … seq_lens[b] − 1`` are in
blocks ``block_table[b, 0], block_table[b, 1], …`` in order::

    k_pool       (num_blocks, Hkv, block_size, Dk)   a block is a small (Hkv, N, D) k array
    v_pool       (num_blocks, Hkv, block_size, Dv)
    block_table  (B, max_blocks) int                  entries past a sequence's last block unused
    seq_lens     (B,) int                             positions cached per sequence, ≥ 0
    q            (B, Hq, Nq, Dk)                      Nq new queries per sequence

Each sequence is its own problem — ``seq_lens[b]`` keys, its Nq queries standing at its last Nq
positions — so ``qkv.causal()`` (or a window) aligns at each sequence's own length, and a slot
past it (a released sequence's stale keys, garbage of any size) is never read: the kernel's key
tiles stop at the length, and :meth:`SequencePages.rows` gathers one tile at a time from the
blocks that hold it. No contiguous copy of the cache is made.

A decode step (Nq = 1) under GQA stacks the G query heads of each kv head: one work item per
(sequence, kv head) walks key tiles of 1024 (``tile_k_unmasked``) with the one tile step's
online softmax, gathering each tile once for its G heads, scoring it in one ``(tk, G)``
product, and skipping tiles the mask leaves empty.

Results: bitwise equal to :func:`qkv.attention` on that sequence's contiguous k, v wherever
both take the same tiles — the contiguous call on the tiled path (Nq·Nk above
``kernel_config().small``, or ``small=0``) and the paged call not a stacked decode step (Nq > 1,
or one query head per kv head). Elsewhere the products or the sums run in another order (the
contiguous small path batches all heads; the stacked decode's ``(tk, G)`` product is another
GEMM than G one-column ones): equal within the dtype's rounding (tests/test_paged_cache.py
holds both to the float64 reference within the dtype-derived bound).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from . import kernel
from .problem import as_array, finite_max_abs, prepare


@dataclass(frozen=True)
class SequencePages:
    """One sequence's keys and values in the pool: ``rows(which, hk, k0, k1)`` is the tile of
    positions k0:k1 of kv head hk, ``(k1 − k0, D)``, gathered from the blocks that hold it."""

    k_pool: np.ndarray  # (num_blocks, Hkv, block_size, Dk)
    v_pool: np.ndarray  # (num_blocks, Hkv, block_size, Dv)
    blocks: np.ndarray  # (ceil(length / block_size),) the sequence's block ids, in order
    length: int

    def rows(self, which: str, hk: int, k0: int, k1: int) -> np.ndarray:
        pool = self.k_pool if which == "k" else self.v_pool
        size = pool.shape[2]
        first, last = k0 // size, -(-k1 // size)
        tile = pool[self.blocks[first:last], hk]  # (n_blocks, block_size, D): one tile's copy
        start = k0 - first * size
        return tile.reshape(-1, pool.shape[-1])[start: start + k1 - k0]  # (k1 − k0, D)


@dataclass(frozen=True)
class Pages:
    """A checked paged layout: the pools, the block table and the lengths (see the module doc).
    """

    k_pool: np.ndarray
    v_pool: np.ndarray
    block_table: np.ndarray  # (B, max_blocks) int64
    seq_lens: np.ndarray  # (B,) int64

    @property
    def batch(self) -> int:
        return self.block_table.shape[0]

    @property
    def block_size(self) -> int:
        return self.k_pool.shape[2]

    def magnitudes(self, which: str) -> tuple[np.ndarray, np.ndarray]:
        """``(max |x|, max |x| over finite entries)`` of each sequence's cached positions,
        ``(B,)`` each (NaN where a sequence holds a NaN, inf an inf): stale slots — the free
        blocks, the tail of a sequence's last block — are never looked at.

        One max and one min per block of the whole pool (two passes, no copy, as the contiguous
        path's check reads its k and v), then each sequence's blocks; a last block that is only
        partly used is reduced over its used positions alone.
        """
        pool = self.k_pool if which == "k" else self.v_pool
        size = self.block_size
        flat = pool.reshape(pool.shape[0], -1)  # one row per block (a view of a C-ordered pool)
        hi, lo = flat.max(axis=1), flat.min(axis=1)  # (num_blocks,)
        whole, finite = np.zeros(self.batch), np.zeros(self.batch)
        for b in range(self.batch):
            n = int(self.seq_lens[b])
            full, rest = divmod(n, size)
            blocks = self.block_table[b, :full]
            parts = [np.maximum(hi[blocks], -lo[blocks])] if full else []
            if rest:
                last = pool[self.block_table[b, full], :, :rest]
                parts.append(np.array([max(float(last.max()), -float(last.min()))]))
            per_block = np.concatenate(parts) if parts else np.zeros(1)
            whole[b] = per_block.max()  # NaN if any block holds a NaN
            if np.isfinite(whole[b]):
                finite[b] = whole[b]
            else:  # the caller's NaN/inf (check_finite=False): the finite rest, block by block
                k, v = self.gather(b)
                finite[b] = finite_max_abs(k if which == "k" else v)
        return whole, finite

    def sequence(self, b: int) -> SequencePages:
        n = int(self.seq_lens[b])
        used = -(-n // self.block_size)
        return SequencePages(self.k_pool, self.v_pool, self.block_table[b, :used], n)

    def gather(self, b: int) -> tuple[np.ndarray, np.ndarray]:
        """Sequence b's k ``(Hkv, n, Dk)`` and v ``(Hkv, n, Dv)`` as contiguous copies (for
        debugging and tests; attention never makes them)."""
        seq = self.sequence(b)
        out = []
        for pool in (self.k_pool, self.v_pool):
            x = pool[seq.blocks].transpose(1, 0, 2, 3)  # (Hkv, n_blocks, block_size, D)
            x = x.reshape(x.shape[0], -1, x.shape[-1])[:, : seq.length]  # (Hkv, n, D)
            out.append(np.ascontiguousarray(x))
        return out[0], out[1]


LAYOUT = ("k (num_blocks, Hkv, block_size, Dk), v (num_blocks, Hkv, block_size, Dv), "
          "block_table (B, max_blocks) int, seq_lens (B,) int, q (B, Hq, Nq, Dk)")


def _ints(x, name: str, ndim: int) -> np.ndarray:
    arr = np.asarray(x)
    if arr.dtype.kind not in "iu":
        raise TypeError(f"{name} must hold ints, got dtype {arr.dtype}; pass e.g. "
                        f"np.asarray({name}, dtype=np.int64) ({LAYOUT})")
    if arr.ndim != ndim:
        raise ValueError(f"{name} has shape {arr.shape}, expected {ndim}-D ({LAYOUT})")
    return arr.astype(np.int64, copy=False)


def bind(k_pool, v_pool, block_table, seq_lens) -> Pages:
    """Check a paged layout and return it as :class:`Pages`, or raise naming the argument."""
    if block_table is None or seq_lens is None:
        missing = "block_table" if block_table is None else "seq_lens"
        raise ValueError(f"paged attention needs both block_table and seq_lens; {missing} is "
                         f"None ({LAYOUT})")
    k, v = as_array(k_pool, "k"), as_array(v_pool, "v")
    for name, x in (("k", k), ("v", v)):
        if x.ndim != 4:
            raise ValueError(f"with block_table, {name} is a pool of blocks: expected 4-D, got "
                             f"shape {x.shape} ({LAYOUT})")
    if k.shape[:3] != v.shape[:3]:
        raise ValueError(f"k pool {k.shape} and v pool {v.shape} must agree on (num_blocks, Hkv, "
                         f"block_size) ({LAYOUT})")
    if k.dtype != v.dtype:
        raise TypeError(f"v has dtype {v.dtype} but k has {k.dtype}: the pools must share one "
                        "dtype; convert with v.astype(k.dtype)")
    num_blocks, _, size, _ = k.shape
    if size == 0:
        raise ValueError(f"the pools have block_size 0 (k {k.shape}); blocks need ≥ 1 position")
    table = _ints(block_table, "block_table", 2)
    lens = _ints(seq_lens, "seq_lens", 1)
    if lens.shape[0] != table.shape[0]:
        raise ValueError(f"seq_lens has {lens.shape[0]} entries but block_table has "
                         f"{table.shape[0]} rows: one length per sequence (row)")
    if (lens < 0).any():
        b = int(np.argmax(lens < 0))
        raise ValueError(f"seq_lens[{b}] = {lens[b]} is negative; lengths are positions "
                         "cached, ≥ 0")
    capacity = table.shape[1] * size
    if (lens > capacity).any():
        b = int(np.argmax(lens > capacity))
        raise ValueError(
            f"seq_lens[{b}] = {lens[b]} is past the block table's capacity: {table.shape[1]} "
            f"blocks of {size} hold {capacity} positions; widen block_table or fix seq_lens")
    used = np.arange(table.shape[1]) < -(-lens[:, None] // size)  # (B, max_blocks)
    bad = used & ((table < 0) | (table >= num_blocks))
    if bad.any():
        b, j = (int(i) for i in np.argwhere(bad)[0])
        raise ValueError(
            f"block_table[{b}, {j}] = {table[b, j]} is not a block of the pool (0 … "
            f"{num_blocks - 1}) but sequence {b} of length {lens[b]} reads it; give every "
            "block a sequence reads a valid id (entries past its last block are ignored)")
    return Pages(k, v, table, lens)


def attention(q, k_pool, v_pool, block_table, seq_lens, *, mask=None, bias=None, scale=None,
              return_lse=False, check_finite=True, softcap=None):
    """:func:`qkv.attention` with ``block_table=`` and ``seq_lens=``: see the module doc.

    ``mask`` and ``bias`` are bound to each sequence's own problem (Nq queries against
    ``seq_lens[b]`` keys, no batch dims): position rules such as ``qkv.causal()`` align at
    each sequence's length. Returns ``out (B, Hq, Nq, Dv)`` (and ``lse (B, Hq, Nq)``).
    """
    pages = bind(k_pool, v_pool, block_table, seq_lens)
    qa = as_array(q, "q")
    kshape = pages.k_pool.shape
    if qa.ndim != 4 or qa.shape[0] != pages.batch:
        raise ValueError(f"with block_table, q must be (B={pages.batch}, Hq, Nq, Dk) — one row "
                         f"of the table per sequence — got q {qa.shape} ({LAYOUT})")
    if qa.dtype != pages.k_pool.dtype:
        raise TypeError(f"k has dtype {pages.k_pool.dtype} but q has {qa.dtype}: q, k and v "
                        "must share one dtype; convert with k.astype(q.dtype)")
    hkv, dv = kshape[1], pages.v_pool.shape[-1]
    scanned = {name: pages.magnitudes(name) for name in ("k", "v")}
    problems = []
    for b in range(pages.batch):
        seq = pages.sequence(b)
        # Shape-only stand-ins (no memory): the kernel reads the keys through seq.rows.
        k_like = np.broadcast_to(np.zeros((), qa.dtype), (hkv, seq.length, kshape[-1]))
        v_like = np.broadcast_to(np.zeros((), qa.dtype), (hkv, seq.length, dv))
        known = {}
        for name, (whole, finite) in scanned.items():
            if check_finite and not np.isfinite(whole[b]):
                raise ValueError(
                    f"{name} contains NaN or inf in sequence {b}'s cached positions (0 … "
                    f"{seq.length - 1}); fix the cache (or pass check_finite=False)")
            known[name] = float(finite[b])
        try:
            p = prepare(qa[b], k_like, v_like, mask, bias, scale, check_finite=check_finite,
                        softcap=softcap, known=known)
        except ValueError as err:
            if mask is None and bias is None:
                raise
            raise ValueError(
                f"with block_table, mask and bias are bound to each sequence's own problem — "
                f"q {qa[b].shape} against its {seq.length} keys, no batch dims — and sequence "
                f"{b} refused them: {err}. Use position rules (qkv.causal(), qkv.window(...), "
                "qkv.alibi()); the lengths are already in seq_lens") from None
        problems.append(replace(p, pages=seq))
    results = kernel.forward_pages(problems)
    out = np.stack([o for o, _ in results]) if results else np.zeros(
        (0, *qa.shape[1:-1], dv), qa.dtype)
    if not return_lse:
        return out
    lse = np.stack([x for _, x in results]) if results else np.zeros(qa.shape[:-1], qa.dtype)
    return out, lse
