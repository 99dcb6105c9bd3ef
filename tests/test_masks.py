"""Masks: their meaning (True = may attend), alignment, composition and tile classification."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from qkv.masks import EMPTY, FULL, PARTIAL, Layout

import qkv
from helpers import BACKEND_PARAMS
from qkv.engine import TileStats, kernel_config


def literal(name, nq, nk, **kw):
    """Each mask's definition, written as loops over (i, j) with i at position i + (nk − nq)."""
    out = np.zeros((nq, nk), dtype=bool)
    for i in range(nq):
        pos = i + nk - nq
        for j in range(nk):
            if name == "causal":
                out[i, j] = j <= pos
            elif name == "window":
                out[i, j] = pos - kw["before"] <= j <= pos + kw["after"]
            elif name == "prefix":
                out[i, j] = j < kw["n"] or j <= pos
    return out


@pytest.mark.parametrize(("nq", "nk"), [(6, 6), (3, 8), (8, 3), (1, 5)])
def test_position_masks_align_bottom_right(nq, nk):
    np.testing.assert_array_equal(qkv.causal().to_dense(nq, nk), literal("causal", nq, nk))
    np.testing.assert_array_equal(qkv.window(2, 1).to_dense(nq, nk),
                                  literal("window", nq, nk, before=2, after=1))
    np.testing.assert_array_equal(qkv.prefix(2).to_dense(nq, nk),
                                  literal("prefix", nq, nk, n=2))
    # The last query always sees the last key under causal (decoding with a KV cache).
    assert qkv.causal().to_dense(nq, nk)[-1, -1]


def test_padding_and_documents_dense():
    dense = qkv.padding([2, 4], query_lengths=[3, 1]).to_dense(3, 4)
    assert dense.shape == (2, 1, 3, 4)
    np.testing.assert_array_equal(dense[0, 0], [[1, 1, 0, 0]] * 3)
    np.testing.assert_array_equal(dense[1, 0], [[1, 1, 1, 1], [0, 0, 0, 0], [0, 0, 0, 0]])
    ids = np.array([0, 0, 1, 1, 1, 2])
    docs = qkv.documents(ids).to_dense(6, 6)
    np.testing.assert_array_equal(docs, ids[:, None] == ids[None, :])
    cross = qkv.documents([0, 1], k_ids=[1, 1, 0]).to_dense(2, 3)
    np.testing.assert_array_equal(cross, [[0, 0, 1], [1, 1, 0]])


def test_allow_deny_polarity():
    arr = np.array([[True, False], [False, True]])
    np.testing.assert_array_equal(qkv.allow(arr).to_dense(2, 2), arr)
    np.testing.assert_array_equal(qkv.deny(arr).to_dense(2, 2), ~arr)


def test_composition():
    a, b = qkv.causal(), qkv.window(1, 1)
    da, db = a.to_dense(5, 5), b.to_dense(5, 5)
    np.testing.assert_array_equal((a & b).to_dense(5, 5), da & db)
    np.testing.assert_array_equal((a | b).to_dense(5, 5), da | db)
    np.testing.assert_array_equal((~a).to_dense(5, 5), ~da)
    np.testing.assert_array_equal((~(a & ~b) | qkv.prefix(1)).to_dense(5, 5),
                                  ~(da & ~db) | qkv.prefix(1).to_dense(5, 5))
    assert repr(a & (b | qkv.prefix(2))) == "causal() & (window(1, after=1) | prefix(2))"


def test_predicate_sees_index_grids():
    seen = []

    def rule(i, j):
        seen.append((i.shape, j.shape))
        return (i + j) % 2 == 0

    dense = qkv.predicate(rule).to_dense(3, 4)
    np.testing.assert_array_equal(dense, (np.arange(3)[:, None] + np.arange(4)) % 2 == 0)
    assert seen == [((3, 1), (1, 4))]


MASKS = {
    "causal": lambda nq, nk, rng: qkv.causal(),
    "window": lambda nq, nk, rng: qkv.window(int(rng.integers(0, 9)), int(rng.integers(0, 4))),
    "prefix": lambda nq, nk, rng: qkv.prefix(int(rng.integers(0, nk + 1))),
    "padding": lambda nq, nk, rng: qkv.padding(rng.integers(0, nk + 1, 2),
                                               rng.integers(0, nq + 1, 2)),
    "documents": lambda nq, nk, rng: qkv.documents(np.sort(rng.integers(0, 3, (2, nq))),
                                                   np.sort(rng.integers(0, 3, (2, nk)))),
    # ids out of order in one sequence of the two: the tile reads their min and max
    "documents unordered": lambda nq, nk, rng: qkv.documents(
        np.stack([np.sort(rng.integers(0, 3, nq)), rng.integers(0, 3, nq)]),
        np.stack([rng.integers(0, 3, nk), np.sort(rng.integers(0, 3, nk))])),
    "allow": lambda nq, nk, rng: qkv.allow(rng.random((nq, nk)) < 0.7),
    "predicate": lambda nq, nk, rng: qkv.predicate(lambda i, j: j <= 2 * i),
    "and": lambda nq, nk, rng: qkv.causal() & qkv.window(3),
    "or": lambda nq, nk, rng: qkv.window(2) | qkv.prefix(3),
    "not": lambda nq, nk, rng: ~qkv.causal(),
}


@given(name=st.sampled_from(sorted(MASKS)), nq=st.integers(1, 30), nk=st.integers(1, 30),
       seed=st.integers(0, 2**32 - 1), data=st.data())
def test_tile_classification_agrees_with_dense(name, nq, nk, seed, data):
    # For any set of query and key positions — contiguous or not, as in sharded sequences —
    # EMPTY means no pair allowed, FULL every pair, PARTIAL returns exactly the dense block.
    rng = np.random.default_rng(seed)
    mask = MASKS[name](nq, nk, rng)
    bound = mask.bind(Layout((2,), 1, nq, nk))
    dense = np.broadcast_to(bound.dense(np.arange(nq), np.arange(nk)), (2, 1, nq, nk))
    qi = np.array(sorted(data.draw(st.sets(st.integers(0, nq - 1), min_size=1))))
    kj = np.array(sorted(data.draw(st.sets(st.integers(0, nk - 1), min_size=1))))
    b = data.draw(st.integers(0, 1))
    kind, block = bound.tile(qi, kj, b, 0)
    expected = dense[b, 0][np.ix_(qi, kj)]
    if kind == EMPTY:
        assert not expected.any()
    elif kind == FULL:
        assert expected.all()
    else:
        assert kind == PARTIAL
        np.testing.assert_array_equal(np.broadcast_to(block(), expected.shape), expected)


def tiles_computed(n, mask, backend, tile=64):
    """Tiles the kernel computed for an (n, n) problem, counted through the stats hook."""
    stats = TileStats()
    x = np.random.default_rng(0).standard_normal((n, 8)).astype(np.float32)
    with kernel_config(tile_q=tile, tile_k=tile, tile_k_unmasked=tile, small=0,
                       backend=backend, stats=stats):
        out = qkv.attention(x, x, x, mask=mask)
    np.testing.assert_allclose(out, qkv.reference.attention(x, x, x, mask=mask), atol=1e-5)
    assert stats.computed + stats.skipped == (n // tile) ** 2  # every tile classified once
    return stats.computed


@pytest.mark.parametrize("backend", BACKEND_PARAMS)
def test_kernel_skips_empty_tiles(backend):
    n, tile = 1024, 64
    blocks = n // tile
    assert tiles_computed(n, None, backend, tile) == blocks * blocks
    # causal: the diagonal and below, about half
    assert tiles_computed(n, qkv.causal(), backend, tile) == blocks * (blocks + 1) // 2
    # a causal window of 64 keys touches at most 2 key tiles per query tile: O(N·w)
    assert tiles_computed(n, qkv.window(63), backend, tile) <= 2 * blocks
    # 4 packed documents of 256: only the tiles inside each document
    ids = np.repeat(np.arange(4), 256)
    assert tiles_computed(n, qkv.documents(ids), backend, tile) == 4 * (256 // tile) ** 2
