"""A paged KV cache (vLLM's PagedAttention layout; flash-attn's ``block_table``).

Keys and values live in a pool of fixed-size *blocks* of ``block_size`` positions; each sequence
of the batch owns a list of block numbers, its row of the *block table*. Appending takes free
blocks from the pool as a sequence grows — nothing is ever copied to grow — and ``release``
returns a sequence's blocks to the pool for the next request, so sequences of very different
lengths share one preallocated memory without fragmentation. Reading gathers a sequence's
blocks in table order: the same ``(..., Hkv, n, d)`` arrays the contiguous :class:`LayerCache`
gives, so attention over it is the same computation.

    pool_k  (num_blocks, Hkv, block_size, d_k)       block_table  (B, max_blocks) int
    pool_v  (num_blocks, Hkv, block_size, d_v)       length       positions cached (all rows)
"""

from __future__ import annotations

import numpy as np

from .cache import KVCache


class PagedLayerCache:
    """One attention layer's paged cache, for a batch of ``batch`` sequences.

    Drop-in for :class:`LayerCache` in ``MultiHeadAttention.forward(..., cache=...)``: ``append``
    takes ``(B, Hkv, n_new, d)`` and returns the cached k and v, ``(B, Hkv, n, d)``.
    """

    def __init__(self, batch: int, num_blocks: int, block_size: int = 16):
        for name, x in (("batch", batch), ("num_blocks", num_blocks),
                        ("block_size", block_size)):
            if isinstance(x, bool) or not isinstance(x, int) or x < 1:
                raise ValueError(f"PagedLayerCache: {name} must be a positive int, got {x!r}")
        self.batch, self.num_blocks, self.block_size = batch, num_blocks, block_size
        self.pool_k = self.pool_v = None
        self.free = list(range(num_blocks))[::-1]  # a stack: the lowest numbers first
        self.tables: list[list[int]] = [[] for _ in range(batch)]
        self.length = 0

    @property
    def block_table(self) -> np.ndarray:
        """``(B, max_blocks)`` block numbers, −1 past a sequence's last block."""
        width = max((len(t) for t in self.tables), default=0)
        table = np.full((self.batch, width), -1, dtype=np.int64)
        for b, blocks in enumerate(self.tables):
            table[b, : len(blocks)] = blocks
        return table

    def _gather(self, pool: np.ndarray) -> np.ndarray:
        blocks = np.asarray(self.tables, dtype=np.int64)  # (B, n_blocks): equal lengths
        gathered = pool[blocks]  # (B, n_blocks, Hkv, block_size, d)
        b, n_blocks, h, size, d = gathered.shape
        gathered = gathered.transpose(0, 2, 1, 3, 4).reshape(b, h, n_blocks * size, d)
        return gathered[:, :, : self.length]

    @property
    def k(self) -> np.ndarray | None:
        return None if self.pool_k is None else self._gather(self.pool_k)

    @property
    def v(self) -> np.ndarray | None:
        return None if self.pool_v is None else self._gather(self.pool_v)

    def append(self, k_new: np.ndarray, v_new: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        k_new, v_new = np.asarray(k_new), np.asarray(v_new)
        if (k_new.ndim != 4 or v_new.ndim != 4 or k_new.shape[0] != self.batch
                or v_new.shape[:3] != k_new.shape[:3]):
            raise ValueError(
                f"PagedLayerCache.append: k_new {k_new.shape} and v_new {v_new.shape} must be "
                f"(B={self.batch}, Hkv, n_new, d) with the same B, Hkv and n_new")
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
        end = self.length + n_new
        needed = -(-end // self.block_size) - len(self.tables[0])
        if needed * self.batch > len(self.free):
            raise ValueError(
                f"PagedLayerCache: the pool is full — {self.batch} sequences of {end} positions "
                f"need {needed * self.batch} more blocks of {self.block_size}, "
                f"{len(self.free)} are free; release finished sequences or use more num_blocks")
        for table in self.tables:
            table.extend(self.free.pop() for _ in range(needed))
        for pos in range(self.length, end):  # write position by position into its block
            block_idx, offset = divmod(pos, self.block_size)
            blocks = [table[block_idx] for table in self.tables]
            self.pool_k[blocks, :, offset] = k_new[:, :, pos - self.length]
            self.pool_v[blocks, :, offset] = v_new[:, :, pos - self.length]
        self.length = end
        return self.k, self.v

    def release(self) -> None:
        """Return every sequence's blocks to the pool (the batch is done); the cache is empty."""
        for table in self.tables:
            self.free.extend(reversed(table))
            table.clear()
        self.length = 0


class PagedKVCache(KVCache):
    """Per-layer paged caches: ``cache[i]`` is layer i's :class:`PagedLayerCache`."""

    def __init__(self, n_layers: int, batch: int, num_blocks: int, block_size: int = 16):
        super().__init__(n_layers, lambda: PagedLayerCache(batch, num_blocks, block_size))

    def release(self) -> None:
        """Return every layer's blocks to its pool."""
        for layer in self.layers:
            layer.release()
