"""A paged KV cache that serves: per-sequence lengths, one shared pool, continuous batching.

vLLM's PagedAttention layout (flash-attn's ``block_table``): keys and values live in a pool of
fixed-size *blocks* of ``block_size`` positions; each sequence owns a list of block numbers, its
row of the *block table*, and its own length. Appending takes free blocks from the pool as a
sequence grows — nothing is copied to grow — and ``release(seq)`` returns one finished
sequence's blocks to the pool while the others go on decoding; a new request then starts in
that slot (``append(..., seqs=[seq])``) and reuses the freed blocks, whatever stale keys they
still hold. Attention reads the pool through the table tile by tile
(``qkv.attention(q, **cache.attention_args())``): the cache is never copied to be read.

    pool_k  (num_blocks, Hkv, block_size, d_k)       block_table  (B, max_blocks) int
    pool_v  (num_blocks, Hkv, block_size, d_v)       lengths      (B,) positions per sequence
"""

from __future__ import annotations

import numpy as np

from ..engine import paged
from ..engine.problem import as_array
from .cache import KVCache


class PagedLayerCache:
    """One attention layer's paged cache for ``batch`` sequence slots sharing ``num_blocks``.

    Used as ``MultiHeadAttention.forward(x, mask=qkv.causal(), cache=layer, seqs=...)``.
    """

    def __init__(self, batch: int, num_blocks: int, block_size: int = 16):
        for name, x in (("batch", batch), ("num_blocks", num_blocks),
                        ("block_size", block_size)):
            if isinstance(x, bool) or not isinstance(x, int) or x < 1:
                raise ValueError(f"PagedLayerCache: {name} must be a positive int, got {x!r}")
        self.batch, self.num_blocks, self.block_size = batch, num_blocks, block_size
        self.pool_k = self.pool_v = None  # allocated at the first append (Hkv, d, dtype)
        self.free = list(range(num_blocks))[::-1]  # a stack: the lowest numbers first
        self.tables: list[list[int]] = [[] for _ in range(batch)]
        self.lengths = np.zeros(batch, dtype=np.int64)

    @property
    def length(self) -> int:
        """The longest sequence's cached positions."""
        return int(self.lengths.max())

    @property
    def block_table(self) -> np.ndarray:
        """``(B, max_blocks)`` block numbers, −1 past a sequence's last block."""
        width = max((len(t) for t in self.tables), default=0)
        table = np.full((self.batch, width), -1, dtype=np.int64)
        for b, blocks in enumerate(self.tables):
            table[b, : len(blocks)] = blocks
        return table

    def _seqs(self, seqs) -> np.ndarray:
        if seqs is None:
            return np.arange(self.batch)
        idx = np.asarray(seqs)
        if idx.ndim != 1 or idx.dtype.kind not in "iu":
            raise TypeError(f"PagedLayerCache: seqs must be a 1-D list of sequence slots "
                            f"(ints), got {seqs!r}")
        if ((idx < 0) | (idx >= self.batch)).any() or len(set(idx.tolist())) != len(idx):
            raise ValueError(f"PagedLayerCache: seqs {idx.tolist()} must be distinct slots in "
                             f"0 … {self.batch - 1}")
        return idx.astype(np.int64)

    def append(self, k_new, v_new, seqs=None) -> None:
        """Append ``n_new`` positions to each sequence slot in ``seqs`` (all if None).

        k_new ``(len(seqs), Hkv, n_new, d_k)``, v_new ``(len(seqs), Hkv, n_new, d_v)``. All or
        nothing: if the pool cannot hold them, nothing is appended and a ValueError says so.
        """
        seqs = self._seqs(seqs)
        k_new, v_new = as_array(k_new, "k_new"), as_array(v_new, "v_new")
        if (k_new.ndim != 4 or v_new.ndim != 4 or k_new.shape[0] != len(seqs)
                or v_new.shape[:3] != k_new.shape[:3]):
            raise ValueError(
                f"PagedLayerCache.append: k_new {k_new.shape} and v_new {v_new.shape} must be "
                f"(len(seqs)={len(seqs)}, Hkv, n_new, d) with the same len(seqs), Hkv and n_new")
        if self.pool_k is None:
            shape = (self.num_blocks, k_new.shape[1], self.block_size)
            self.pool_k = np.zeros((*shape, k_new.shape[-1]), dtype=k_new.dtype)
            self.pool_v = np.zeros((*shape, v_new.shape[-1]), dtype=v_new.dtype)
        elif (k_new.shape[1] != self.pool_k.shape[1] or k_new.shape[-1] != self.pool_k.shape[-1]
              or v_new.shape[-1] != self.pool_v.shape[-1]):
            raise ValueError(
                f"PagedLayerCache.append: got k_new {k_new.shape}, v_new {v_new.shape} but the "
                f"pool holds Hkv={self.pool_k.shape[1]}, d_k={self.pool_k.shape[-1]}, "
                f"d_v={self.pool_v.shape[-1]}")
        n_new = k_new.shape[2]
        ends = self.lengths[seqs] + n_new
        needed = [-(-int(end) // self.block_size) - len(self.tables[b])
                  for b, end in zip(seqs, ends, strict=True)]
        if sum(needed) > len(self.free):
            raise ValueError(
                f"PagedLayerCache: the pool is full — appending {n_new} positions to sequences "
                f"{seqs.tolist()} needs {sum(needed)} more blocks of {self.block_size}, "
                f"{len(self.free)} of {self.num_blocks} are free; release finished sequences "
                "or use more num_blocks")
        for i, b in enumerate(seqs):
            table = self.tables[b]
            table.extend(self.free.pop() for _ in range(needed[i]))
            pos = np.arange(self.lengths[b], ends[i])  # the new positions
            blocks = np.asarray(table, dtype=np.int64)[pos // self.block_size]
            # (n_new, Hkv, d) rows into (block, :, offset) slots
            self.pool_k[blocks, :, pos % self.block_size] = k_new[i].swapaxes(0, 1)
            self.pool_v[blocks, :, pos % self.block_size] = v_new[i].swapaxes(0, 1)
            self.lengths[b] = ends[i]

    def attention_args(self, seqs=None) -> dict:
        """The keyword arguments of ``qkv.attention(q, **args)`` for sequence slots ``seqs``
        (all if None; q is then ``(len(seqs), Hq, Nq, d_k)``): the pools, their block table
        rows and lengths — no copy of the cache."""
        seqs = self._seqs(seqs)
        if self.pool_k is None:
            raise ValueError("PagedLayerCache.attention_args: nothing appended yet")
        return {"k": self.pool_k, "v": self.pool_v, "block_table": self.block_table[seqs],
                "seq_lens": self.lengths[seqs]}

    def gather(self, seq: int) -> tuple[np.ndarray, np.ndarray]:
        """Sequence ``seq``'s cached k ``(Hkv, n, d_k)`` and v ``(Hkv, n, d_v)`` as contiguous
        copies — for debugging and tests; attention never needs them."""
        args = self.attention_args([seq])  # the engine's reading of the table, not a second
        pages = paged.bind(args["k"], args["v"], args["block_table"], args["seq_lens"])
        return pages.gather(0)

    def release(self, seq: int) -> None:
        """Sequence slot ``seq`` is finished: its blocks return to the pool (their stale keys
        stay there, never read again), its length is 0; the other sequences are untouched."""
        b = int(self._seqs([seq])[0])
        self.free.extend(reversed(self.tables[b]))
        self.tables[b].clear()
        self.lengths[b] = 0

    def reset(self) -> None:
        """Release every sequence: the cache is empty, the pool all free."""
        for b in range(self.batch):
            self.release(b)

    @property
    def nbytes(self) -> int:
        """Bytes held by the two pools (allocated once, at the first append)."""
        return 0 if self.pool_k is None else self.pool_k.nbytes + self.pool_v.nbytes


class PagedKVCache(KVCache):
    """Per-layer paged caches: ``cache[i]`` is layer i's :class:`PagedLayerCache`."""

    def __init__(self, n_layers: int, batch: int, num_blocks: int, block_size: int = 16):
        super().__init__(n_layers, lambda: PagedLayerCache(batch, num_blocks, block_size))

    def release(self, seq: int) -> None:
        """Sequence slot ``seq`` is finished: every layer returns its blocks to its pool."""
        for layer in self.layers:
            layer.release(seq)

    def reset(self) -> None:
        """Release every sequence in every layer."""
        for layer in self.layers:
            layer.reset()
