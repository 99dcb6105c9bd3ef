"""Named attention masks. **True always means "may attend".**

A mask answers one question for every (query i, key j) pair: may query i look at key j?
Masks are described by name, never by a raw boolean array of unknown polarity:

    causal()                  key j ≤ query position i
    window(before, after=0)   i − before ≤ j ≤ i + after   (None: unbounded on that side)
    prefix(n)                 the first n keys, plus the causal rule (prefix-LM)
    padding(key_lengths, query_lengths=None)
                              keys (and queries) past each sequence's real length are denied
    documents(q_ids, k_ids=None)
                              packed sequences: query i sees key j iff they share a document id
    packed_causal(q_lengths, k_lengths=None, before=None)
                              packed documents, each causal from its own bottom-right corner
                              (xformers' BlockDiagonalCausalFromBottomRightMask, flash-attn varlen)
    allow(array) / deny(array)
                              an explicit bool array; allow: True = may attend,
                              deny: True = masked out (torch.nn.MultiheadAttention's polarity)
    predicate(fn)             fn(q_idx, k_idx) -> bool, vectorised over index grids

and they compose: ``causal() & window(128)``, ``documents(ids) | prefix(4)``, ``~causal()``.

**Alignment.** Position masks (causal, window, prefix) align bottom-right when Nq != Nk:
query i stands at position i + (Nk − Nq), so the last query sees the last key. That is what
decoding with a KV cache needs: one new query (Nq = 1) against Nk cached keys sees all of them
under ``causal()``. With Nq > Nk the first Nq − Nk queries see no key and return zeros.

**Tiles.** The kernel never builds the Nq × Nk matrix. Before it touches a tile of queries × keys
it asks the bound mask to classify the tile as EMPTY (skipped entirely), FULL (computed with no
mask arithmetic) or PARTIAL (the mask's block for that tile is applied); see ``base.py`` for the
protocol and :func:`block_map` for the classification of a whole problem.
"""

from __future__ import annotations

import numpy as np

from .base import EMPTY, FULL, KIND_NAMES, PARTIAL, BoundMask, Layout, Mask, check_length
from .explicit import allow, deny, predicate
from .packed import packed_causal
from .position import _Aligned, causal, prefix, window
from .sequence import documents, padding

__all__ = [
    "EMPTY",
    "FULL",
    "KIND_NAMES",
    "PARTIAL",
    "BoundMask",
    "Layout",
    "Mask",
    "allow",
    "block_map",
    "causal",
    "deny",
    "documents",
    "packed_causal",
    "padding",
    "predicate",
    "prefix",
    "uses_positions",
    "window",
]


def uses_positions(mask: Mask | None) -> bool:
    """Does ``mask`` contain a position rule (causal, window, prefix), whose queries align
    bottom-right (query i at position i + Nk − Nq)? Looks through ``&``, ``|`` and ``~``."""
    from .combine import Not, _Combined

    if isinstance(mask, _Aligned):
        return True
    if isinstance(mask, _Combined):
        return any(uses_positions(part) for part in mask.parts)
    return isinstance(mask, Not) and uses_positions(mask.inner)


def block_map(mask: Mask | None, nq: int, nk: int, tile: tuple[int, int] = (512, 512), *,
              batch_shape: tuple[int, ...] = (), heads: int = 1, b: int = 0,
              h: int = 0) -> np.ndarray:
    """How the kernel sees a mask: the kind of every tile, ``(ceil(nq/tq), ceil(nk/tk))``.

    Each entry is ``EMPTY`` (0: skipped), ``PARTIAL`` (1: the mask applied inside the tile) or
    ``FULL`` (2: computed without mask arithmetic), for batch element ``b`` (flat index) and query
    head ``h`` of a problem with ``nq`` queries and ``nk`` keys. This is the classification the
    kernel uses — e.g. to draw which tiles a mask lets it skip.
    """
    nq, nk = check_length(nq, "nq"), check_length(nk, "nk")
    tq, tk = (check_length(t, "tile") for t in tile)
    if tq == 0 or tk == 0:
        raise ValueError(f"block_map: tile sizes must be ≥ 1, got {tile}")
    rows, cols = -(-nq // tq), -(-nk // tk)
    kinds = np.full((rows, cols), FULL, dtype=np.int8)
    if mask is None:
        return kinds
    if not isinstance(mask, Mask):
        raise TypeError(f"block_map: mask must be a qkv mask or None, got {type(mask).__name__}")
    bound = mask.bind(Layout(tuple(batch_shape), heads, nq, nk))
    for r in range(rows):
        qi = np.arange(r * tq, min(nq, (r + 1) * tq))
        for c in range(cols):
            kj = np.arange(c * tk, min(nk, (c + 1) * tk))
            kinds[r, c] = bound.tile(qi, kj, b, h)[0]
    return kinds
