"""packed_causal: documents packed in one sequence, each causal from its own bottom-right corner,
checked against xformers' definition written literally, the float64 reference and the kernel's
tile classification."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from qkv.masks import EMPTY, FULL, Layout

import qkv
from helpers import BACKEND_PARAMS, KERNEL_PATHS, grad_atols, kernel_path, output_atol
from qkv.engine import TileStats, kernel_config

# The peers' case: flash-attn / xformers varlen tests use documents of ragged lengths, with
# fewer queries than keys in every document (a prompt continued against its cache).
Q_LENGTHS, K_LENGTHS = [1, 17, 64, 113], [5, 40, 64, 127]


def xformers_literal(q_lengths, k_lengths, window_size=None) -> np.ndarray:
    """xformers' BlockDiagonalCausal[LocalAttention]FromBottomRightMask, materialised as its
    docs define it: a block diagonal of per-document masks, each
    ``tril(ones, shift)`` (and ``triu(…, shift − window_size + 1)`` with a window), where
    ``shift = k_len − q_len``. Written with loops, independently of qkv."""
    out = np.zeros((sum(q_lengths), sum(k_lengths)), dtype=bool)
    q0 = k0 = 0
    for nq, nk in zip(q_lengths, k_lengths, strict=True):
        shift = nk - nq
        for a in range(nq):
            for c in range(nk):
                ok = c <= a + shift
                if window_size is not None:
                    ok = ok and c >= a + shift - window_size + 1
                out[q0 + a, k0 + c] = ok
        q0, k0 = q0 + nq, k0 + nk
    return out


@pytest.mark.parametrize("window_size", [None, 1, 8, 50])
def test_matches_xformers_definition_on_the_peers_case(window_size):
    before = None if window_size is None else window_size - 1
    mask = qkv.packed_causal(Q_LENGTHS, K_LENGTHS, before=before)
    np.testing.assert_array_equal(mask.to_dense(sum(Q_LENGTHS), sum(K_LENGTHS)),
                                  xformers_literal(Q_LENGTHS, K_LENGTHS, window_size))


def test_differs_from_documents_and_causal_at_the_packed_totals():
    # The composition aligns the causal rule at Nk − Nq of the whole packing, which is wrong for
    # every document whose own lengths differ: that is why the mask has a name of its own.
    ids_q = np.repeat(np.arange(4), Q_LENGTHS)
    ids_k = np.repeat(np.arange(4), K_LENGTHS)
    composed = (qkv.documents(ids_q, ids_k) & qkv.causal()).to_dense(sum(Q_LENGTHS),
                                                                      sum(K_LENGTHS))
    assert (composed != xformers_literal(Q_LENGTHS, K_LENGTHS)).any()


def test_equal_lengths_are_documents_and_causal():
    lengths = [3, 5, 1, 7]
    ids = np.repeat(np.arange(4), lengths)
    np.testing.assert_array_equal(qkv.packed_causal(lengths).to_dense(16, 16),
                                  (qkv.documents(ids) & qkv.causal()).to_dense(16, 16))


@pytest.mark.parametrize("backend", BACKEND_PARAMS)
@pytest.mark.parametrize("path", KERNEL_PATHS)
@pytest.mark.parametrize("before", [None, 15])
def test_attention_and_backward_equal_the_reference(backend, path, before):
    rng = np.random.default_rng(1)
    nq, nk = sum(Q_LENGTHS), sum(K_LENGTHS)
    q = rng.standard_normal((2, nq, 16)).astype(np.float32)
    k = rng.standard_normal((2, nk, 16)).astype(np.float32)
    v = rng.standard_normal((2, nk, 8)).astype(np.float32)
    dout = rng.standard_normal((2, nq, 8)).astype(np.float32)
    mask = qkv.packed_causal(Q_LENGTHS, K_LENGTHS, before=before)
    dense = qkv.allow(xformers_literal(Q_LENGTHS, K_LENGTHS,
                                       None if before is None else before + 1))
    with kernel_path(path, backend):
        out, lse = qkv.attention(q, k, v, mask=mask, return_lse=True)
        grads = qkv.attention_backward(q, k, v, out, lse, dout, mask=mask)
        weights = qkv.attention_weights(q, k, mask=mask, rows=[0, 5, 100, 194])
    ref_out, ref_lse = qkv.reference.attention(q, k, v, mask=dense, return_lse=True)
    np.testing.assert_allclose(out, ref_out, atol=output_atol(q, k, v), rtol=0)
    # Q_LENGTHS[0] = 1 query against 5 keys sees all 5; no row is empty here.
    assert np.isfinite(lse).all()
    np.testing.assert_allclose(lse, ref_lse, rtol=1e-5, atol=1e-5)
    ref_grads = qkv.reference.attention_backward(q, k, v, dout, mask=dense)
    for got, want, atol in zip(grads, ref_grads, grad_atols(q, k, v, dout), strict=True):
        np.testing.assert_allclose(got, want, atol=atol, rtol=0)
    full = qkv.reference.attention_weights(q, k, mask=dense)
    np.testing.assert_allclose(weights, full[:, [0, 5, 100, 194]], atol=1e-6)


def test_documents_with_more_queries_than_keys_leave_rows_empty():
    # Bottom-right alignment: the first q_len − k_len queries of a document see no key, and
    # return zeros with lse = -inf (never NaN), as every all-masked row does.
    q = np.ones((5, 2))
    out, lse = qkv.attention(q, q[:3], q[:3], mask=qkv.packed_causal([2, 3], [2, 1]),
                             return_lse=True)
    np.testing.assert_array_equal(np.isneginf(lse), [False, False, True, True, False])
    np.testing.assert_array_equal(out[2:4], 0)


@pytest.mark.parametrize("backend", BACKEND_PARAMS)
def test_kernel_skips_the_tiles_outside_the_documents(backend):
    # 4 documents of 256 with 64-wide tiles: each document's lower triangle of tiles only.
    n, tile, per = 1024, 64, 256 // 64
    stats = TileStats()
    x = np.random.default_rng(0).standard_normal((n, 8)).astype(np.float32)
    with kernel_config(tile_q=tile, tile_k=tile, tile_k_unmasked=tile, small=0,
                       backend=backend, stats=stats):
        qkv.attention(x, x, x, mask=qkv.packed_causal([256] * 4))
    assert stats.computed + stats.skipped == (n // tile) ** 2
    assert stats.computed == 4 * per * (per + 1) // 2


lengths = st.lists(st.integers(0, 9), min_size=1, max_size=5)


@settings(max_examples=60, deadline=None)
@given(q_lengths=lengths, data=st.data(), before=st.one_of(st.none(), st.integers(0, 6)),
       tq=st.integers(1, 7), tk=st.integers(1, 7))
def test_tile_kinds_agree_with_the_dense_mask(q_lengths, data, before, tq, tk):
    k_lengths = data.draw(st.lists(st.integers(0, 9), min_size=len(q_lengths),
                                   max_size=len(q_lengths)))
    nq, nk = sum(q_lengths), sum(k_lengths)
    window_size = None if before is None else before + 1
    want = xformers_literal(q_lengths, k_lengths, window_size)
    mask = qkv.packed_causal(q_lengths, k_lengths, before=before)
    np.testing.assert_array_equal(mask.to_dense(nq, nk), want)
    if nq == 0 or nk == 0:
        return
    kinds = qkv.masks.block_map(mask, nq, nk, (tq, tk))
    for r in range(kinds.shape[0]):
        for c in range(kinds.shape[1]):
            tile = want[r * tq:(r + 1) * tq, c * tk:(c + 1) * tk]
            assert kinds[r, c] == (FULL if tile.all() else EMPTY if not tile.any() else 1)


def test_gapped_positions_read_the_block():
    # A zigzag shard of the ring holds two chunks of positions: the kinds stay exact.
    bound = qkv.packed_causal([6, 6]).bind(Layout((), 1, 12, 12))
    qi, kj = np.array([0, 1, 10, 11]), np.array([0, 1, 2, 3])
    kind, block = bound.tile(qi, kj, 0, 0)
    want = xformers_literal([6, 6], [6, 6])[np.ix_(qi, kj)]
    assert kind == 1
    np.testing.assert_array_equal(block(), want)


def test_per_sequence_packings_in_a_batch():
    # Batch element 0 packs [3, 5], element 1 packs [6, 2]: the mask depends on the batch.
    mask = qkv.packed_causal([[3, 5], [6, 2]])
    dense = mask.to_dense(8, 8)
    assert dense.shape == (2, 1, 8, 8)
    np.testing.assert_array_equal(dense[0, 0], xformers_literal([3, 5], [3, 5]))
    np.testing.assert_array_equal(dense[1, 0], xformers_literal([6, 2], [6, 2]))
    rng = np.random.default_rng(2)
    q = rng.standard_normal((2, 3, 8, 4))  # (B, H, N, D)
    out = qkv.attention(q, q, q, mask=mask)
    ref = qkv.reference.attention(q, q, q, mask=qkv.allow(dense))
    np.testing.assert_allclose(out, ref, atol=1e-12)


def test_composes_like_the_other_masks():
    # With a padding of the last document's keys, and negated: plain boolean algebra.
    base = qkv.packed_causal([4, 4])
    both = (base & qkv.padding(6)).to_dense(8, 8)
    np.testing.assert_array_equal(both, base.to_dense(8, 8) & (np.arange(8) < 6)[None, :])
    np.testing.assert_array_equal((~base).to_dense(8, 8), ~base.to_dense(8, 8))
    assert repr(qkv.packed_causal([4, 4], before=2)) == "packed_causal(2 documents, before=2)"


@pytest.mark.parametrize(("args", "kwargs", "match"), [
    (([3, 4],), {}, "sum to 7 but there are 8 queries"),
    (([4, 4], [4, 3]), {}, "k_lengths sum to 7 but there are 8 keys"),
    (([4, 4], [8]), {}, "q_lengths has 2 documents but k_lengths has 1"),
    (([4, -1],), {}, "must be ≥ 0"),
    (([4.0, 4.0],), {}, "must hold integers"),
    ((4,), {}, "got a scalar"),
    (([4, 4],), {"before": -1}, "before must be a non-negative int"),
])
def test_bad_lengths_are_refused_by_name(args, kwargs, match):
    x = np.ones((8, 2))
    with pytest.raises((ValueError, TypeError), match=match):
        qkv.attention(x, x, x, mask=qkv.packed_causal(*args, **kwargs))
