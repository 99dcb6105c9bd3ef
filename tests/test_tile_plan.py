"""The kernel's tile plan (qkv.engine.tiles.TilePlan): partial tiles split where that skips work,
runs of FULL tiles merged into wider key tiles — every pair planned once, with its true kind."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from qkv.masks import FULL, PARTIAL, Layout

import qkv
from helpers import BACKEND_PARAMS, grad_atols, output_atol
from qkv import reference
from qkv.engine import TileStats, kernel_config
from qkv.engine.tiles import TilePlan, blocks, work_fraction
from test_masks import MASKS


@settings(max_examples=150, deadline=None)
@given(name=st.sampled_from(sorted(MASKS)), nq=st.integers(1, 40), nk=st.integers(1, 40),
       seed=st.integers(0, 2**32 - 1), tq=st.integers(1, 9), tk=st.integers(1, 9),
       merge=st.integers(1, 20), split_min=st.integers(1, 8), aligned=st.booleans())
def test_the_plan_covers_every_pair_once_with_its_true_kind(name, nq, nk, seed, tq, tk, merge,
                                                            split_min, aligned):
    mask = MASKS[name](nq, nk, np.random.default_rng(seed))
    bound = mask.bind(Layout((2,), 1, nq, nk))
    dense = np.broadcast_to(bound.dense(np.arange(nq), np.arange(nk)), (2, 1, nq, nk))
    stats = TileStats()
    with kernel_config(tile_q=tq, tile_k=tk, split_min=split_min, stats=stats) as cfg:
        # aligned: as the backward plans (merge_k = align = tile_k), else as the forward
        plan = TilePlan(bound, np.arange(nq), np.arange(nk), cfg, tk,
                        *((tk, tk) if aligned else (merge, None)))
        width = tk if aligned else max(tk, merge)
        for b in range(2):
            seen = np.zeros((nq, nk), dtype=int)
            for q0, q1 in blocks(nq, tq):
                for r0, r1, k0, k1, kind, block in plan.tiles(b, 0, q0, q1):
                    assert 0 <= r0 < r1 <= q1 - q0 and 0 <= k0 < k1 <= nk
                    seen[q0 + r0: q0 + r1, k0:k1] += 1
                    want = dense[b, 0, q0 + r0: q0 + r1, k0:k1]
                    if aligned:  # within one backward work item's keys
                        assert k0 // tk == (k1 - 1) // tk
                    if kind == FULL:
                        assert want.all() and k1 - k0 <= width
                    else:
                        assert kind == PARTIAL and k1 - k0 <= tk
                        np.testing.assert_array_equal(np.broadcast_to(block(), want.shape), want)
                        np.testing.assert_array_equal(block(True), want.T)
            assert seen.max(initial=0) <= 1  # no pair computed twice
            assert seen[dense[b, 0]].all()  # every allowed pair computed
    # every pair planned once, computed or skipped
    assert sum(stats.pairs.values()) == 2 * nq * nk
    assert stats.pairs["empty"] <= int((~dense).sum())


def test_work_fraction_of_causal_window_and_documents():
    n = 2048
    # 256 × 512 tiles, unsplit: 62.5% of the dense work for the 50% causal needs
    with kernel_config(split_min=1 << 30, tile_k_unmasked=512):
        assert work_fraction(qkv.causal(), n, n) == 0.625
    # split down to 128: each query tile's keys before its diagonal FULL, its 256 × 256
    # diagonal square split into two 128 × 128 PARTIAL squares and a FULL one (the fourth
    # skipped)
    tiles = sum(i * 256 * 256 + 3 * 128 * 128 for i in range(n // 256))
    with kernel_config(split_min=128):
        assert work_fraction(qkv.causal(), n, n) == tiles / n**2 == 0.53125
    # the default (256): the 512 × 512 diagonal square of each 512-row query tile in 256s
    tiles = sum(i * 512 * 512 + 3 * 256 * 256 for i in range(n // 512))
    assert work_fraction(qkv.causal(), n, n) == tiles / n**2 == 0.5625
    with kernel_config(split_min=64):
        assert 0.5 < work_fraction(qkv.causal(), n, n) < 0.53125
    # a window of 256 keys: 3 squares of 128 on each edge of the band (the first query tile
    # has one edge), where the unsplit plan computes 1024 keys per query tile
    n = 16384
    with kernel_config(split_min=128):
        assert work_fraction(qkv.window(255), n, n) == (63 * 6 + 3) * 128**2 / n**2
    with kernel_config(split_min=1 << 30):  # unsplit: 512 or 1024 keys per query tile
        assert work_fraction(qkv.window(255), n, n) > 1.9 * (63 * 6 + 3) * 128**2 / n**2
    # 16 documents of 1024: exactly their squares (tile boundaries fall on documents')
    docs = qkv.documents(np.repeat(np.arange(16), n // 16))
    assert work_fraction(docs, n, n) == 1 / 16
    assert work_fraction(None, 100, 300) == 1.0


@pytest.mark.parametrize("backend", BACKEND_PARAMS)
def test_stats_count_the_plans_pairs_and_merged_tiles(backend):
    n = 600
    x = np.random.default_rng(0).standard_normal((2, n, 8)).astype(np.float32)
    stats = TileStats()
    config = dict(tile_q=64, tile_k=64, tile_k_unmasked=256, split_min=16, small=0)
    with kernel_config(stats=stats, backend=backend, **config):
        qkv.attention(x, x, x, mask=qkv.causal())
    with kernel_config(**config):
        planned = work_fraction(qkv.causal(), n, n)
    assert stats.work_fraction == planned
    assert sum(stats.pairs.values()) == 2 * n * n  # two heads, every pair once
    assert 0.5 < planned < (n / 2 + 16 * 64) / n  # the diagonal's squares of 16 are its waste
    # FULL runs merged into key tiles of up to 256: fewer tiles than cells of 64
    cells = sum(i for i in range(-(-n // 64)))  # FULL cells left of each query tile's diagonal
    assert 0 < stats.tiles["full"] < 2 * cells


@pytest.mark.parametrize("backend", BACKEND_PARAMS)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_split_and_merged_tiles_stay_exact_and_ignore_garbage_in_masked_slots(backend, dtype):
    """Causal over per-sequence lengths, keys past each length holding NaN and huge values
    (a KV cache's stale tail): the plan's split and merged tiles give the reference's result
    and gradients on the real keys, within the dtype's bound, and never read the garbage."""
    rng = np.random.default_rng(3)
    nq = nk = 700
    klen = np.array([700, 437])
    q, k, v = (rng.standard_normal((2, 2, n, 16)).astype(dtype) for n in (nq, nk, nk))
    mask = qkv.causal() & qkv.padding(klen)
    dirty_k, dirty_v = k.copy(), v.copy()
    dirty_k[1, :, 437::2], dirty_k[1, :, 438::2] = np.nan, 1e30
    dirty_v[1, :, 437::2], dirty_v[1, :, 438::2] = 1e30, np.nan
    stats = TileStats()
    with kernel_config(tile_q=64, tile_k=128, tile_k_unmasked=512, split_min=16, small=0,
                       backend=backend, stats=stats):
        out, lse = qkv.attention(q, dirty_k, dirty_v, mask=mask, return_lse=True,
                                 check_finite=False)
        dout = rng.standard_normal(out.shape).astype(dtype)
        grads = qkv.attention_backward(q, dirty_k, dirty_v, out, lse, dout, mask=mask,
                                       check_finite=False)
        weights = qkv.attention_weights(q, dirty_k, mask=mask, check_finite=False)
    assert stats.tiles["partial"] and stats.tiles["full"] and stats.tiles["empty"]
    np.testing.assert_allclose(out, reference.attention(q, k, v, mask=mask),
                               atol=output_atol(q, k, v), rtol=0)
    want = reference.attention_weights(q, k, mask=mask)
    np.testing.assert_allclose(weights, want, atol=output_atol(q, k, np.ones(1, dtype)), rtol=0)
    assert not weights[1, :, :, 437:].any()
    expected = reference.attention_backward(q, k, v, dout, mask=mask)
    for grad, ref, atol in zip(grads, expected, grad_atols(q, k, v, dout), strict=True):
        assert np.isfinite(grad).all()
        np.testing.assert_allclose(grad[0], ref[0], atol=atol, rtol=0)
        np.testing.assert_allclose(grad[1, :, :437], ref[1, :, :437], atol=atol, rtol=0)
    assert not grads[1][1, :, 437:].any() and not grads[2][1, :, 437:].any()


def test_the_plan_splits_only_masks_that_classify_from_ranges():
    # An explicit array answers by looking at its block: its partial tiles are not split.
    n = 64
    allowed = np.tril(np.ones((n, n), dtype=bool))
    stats = TileStats()
    with kernel_config(tile_q=32, tile_k=32, tile_k_unmasked=32, split_min=4, small=0,
                       stats=stats):
        x = np.random.default_rng(0).standard_normal((n, 8))
        qkv.attention(x, x, x, mask=qkv.allow(allowed))
    assert stats.tiles == {"partial": 2, "full": 1, "empty": 1}
    with kernel_config(tile_q=32, tile_k=32, tile_k_unmasked=32, split_min=4):
        assert work_fraction(qkv.allow(allowed), n, n) == 0.75
        assert work_fraction(qkv.causal(), n, n) < 0.75
