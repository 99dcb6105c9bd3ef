"""The paged KV cache: attention through a block table equals the contiguous cache.

Bitwise where both take the same tiles (the contiguous call on the tiled path: ``small=0`` or a
problem past ``small``): each sequence is its own problem, read tile by tile, so the GEMMs and
steps see the same numbers in the same order. Not bitwise, and held to the float64 reference
within ``output_atol`` (the dtype-derived bound) instead, where the schedules differ: the
contiguous call on the small path (all heads in one batched product: a short decode step), and
the paged decode step under GQA (one query per head, the G heads of a kv head stacked into one
``(tk, G)`` product per key tile — another GEMM than G one-column ones).
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import qkv
from helpers import BACKEND_PARAMS, KERNEL_PATHS, kernel_path, output_atol
from qkv import nn, reference
from qkv.engine import TileStats, kernel_config
from test_nn_cache import TinyDecoder

GARBAGE = 1e30  # finite, and past any score's range: a stale slot read once would overflow


def paged(lens, hkv=2, d=8, block_size=4, dtype=np.float32, seed=0, garbage=GARBAGE,
          spare=3):
    """Random per-sequence k, v ``[(Hkv, n, d)]`` and the same in a shuffled pool whose every
    other slot holds ``garbage``: ``(k_pool, v_pool, block_table, seq_lens, ks, vs)``."""
    g = np.random.default_rng(seed)
    need = [-(-n // block_size) for n in lens]
    width = max(need, default=0) + 1  # a spare column: entries past the last block are unused
    num_blocks = sum(need) + spare
    k_pool = np.full((num_blocks, hkv, block_size, d), garbage, dtype=dtype)
    v_pool = np.full((num_blocks, hkv, block_size, d), -garbage, dtype=dtype)
    table = np.full((len(lens), width), -1, dtype=np.int64)
    ids = iter(g.permutation(num_blocks))
    ks, vs = [], []
    for b, n in enumerate(lens):
        table[b, : need[b]] = [next(ids) for _ in range(need[b])]
        k, v = (g.standard_normal((hkv, n, d)).astype(dtype) for _ in range(2))
        pos = np.arange(n)
        k_pool[table[b, pos // block_size], :, pos % block_size] = k.swapaxes(0, 1)
        v_pool[table[b, pos // block_size], :, pos % block_size] = v.swapaxes(0, 1)
        ks.append(k)
        vs.append(v)
    return k_pool, v_pool, table, np.asarray(lens), ks, vs


MASKS = {"none": lambda: None, "causal": qkv.causal, "window": lambda: qkv.window(5, 0)}


@pytest.mark.parametrize("backend", BACKEND_PARAMS)
@pytest.mark.parametrize("path", ["tiled", "threads"])
@pytest.mark.parametrize("mask", sorted(MASKS))
@pytest.mark.parametrize(("nq", "hq"), [(1, 2), (6, 4)])  # not a stacked decode step
def test_bitwise_equal_to_the_contiguous_path_on_the_same_tiles(backend, path, mask, nq, hq):
    lens = [37, 0, 100, 1, 16]  # ragged, an empty sequence, block-aligned and not
    k_pool, v_pool, table, seq_lens, ks, vs = paged(lens)
    q = np.random.default_rng(1).standard_normal((len(lens), hq, nq, 8)).astype(np.float32)
    with kernel_path(path, backend):  # small=0: the contiguous calls take the tiled path too
        out, lse = qkv.attention(q, k_pool, v_pool, mask=MASKS[mask](), block_table=table,
                                 seq_lens=seq_lens, return_lse=True)
        for b in range(len(lens)):
            want, want_lse = qkv.attention(q[b], ks[b], vs[b], mask=MASKS[mask](),
                                           return_lse=True)
            np.testing.assert_array_equal(out[b], want)
            np.testing.assert_array_equal(lse[b], want_lse)
    assert np.isfinite(out).all() and (out[1] == 0).all() and (lse[1] == -np.inf).all()


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_decode_matches_the_reference_and_the_contiguous_small_path(dtype):
    """The default config: a decode step (1 query) walks key tiles through the table; the
    contiguous call on these short sequences takes the small path. Both within the bound."""
    lens = [300, 7, 1100]
    k_pool, v_pool, table, seq_lens, ks, vs = paged(lens, hkv=2, d=16, block_size=16,
                                                    dtype=dtype, garbage=1e4)
    q = np.random.default_rng(2).standard_normal((3, 4, 1, 16)).astype(dtype)
    stats = TileStats()
    with kernel_config(stats=stats):
        out = qkv.attention(q, k_pool, v_pool, mask=qkv.causal(), block_table=table,
                            seq_lens=seq_lens)
    assert stats.paths["paged " + ("numpy" if dtype == np.float64 else qkv.engine.backend())]
    assert out.dtype == np.dtype(dtype)
    for b in range(3):
        ref = reference.attention(q[b], ks[b], vs[b], mask=qkv.causal())
        atol = output_atol(q[b], ks[b], vs[b])
        np.testing.assert_allclose(out[b], ref, rtol=0, atol=atol)
        contiguous = qkv.attention(q[b], ks[b], vs[b], mask=qkv.causal())
        np.testing.assert_allclose(out[b], contiguous, rtol=0, atol=2 * atol)


@pytest.mark.parametrize("backend", BACKEND_PARAMS)
@pytest.mark.parametrize("mask", sorted(MASKS))
def test_a_gqa_decode_step_stacks_the_heads_of_each_kv_head(backend, mask):
    """1 query, 8 heads on 2 kv heads: one work item per kv head, each key tile gathered once
    for its 4 query heads. Within the bound of the reference and of the contiguous path."""
    lens = [2000, 3, 0, 1030]
    k_pool, v_pool, table, seq_lens, ks, vs = paged(lens, d=16, block_size=16, garbage=1e4)
    q = np.random.default_rng(6).standard_normal((4, 8, 1, 16)).astype(np.float32)
    stats = TileStats()
    with kernel_config(stats=stats, backend=backend):
        out = qkv.attention(q, k_pool, v_pool, mask=MASKS[mask](), block_table=table,
                            seq_lens=seq_lens)
    # Each kv head plans each key once for its 4 query heads (a window's partial tile of 1024
    # keys may split: its empty parts are not gathered).
    assert sum(stats.pairs.values()) == 2 * sum(lens)  # kv heads × keys, one query row
    assert stats.tiles["full"] + stats.tiles["partial"] <= 2 * (2 + 1 + 0 + 2)  # tiles of 1024
    assert (out[2] == 0).all()
    for b in range(4):
        atol = output_atol(q[b], ks[b], vs[b])
        np.testing.assert_allclose(out[b], reference.attention(q[b], ks[b], vs[b],
                                                               mask=MASKS[mask]()),
                                   rtol=0, atol=atol)
        with kernel_config(backend=backend):
            want = qkv.attention(q[b], ks[b], vs[b], mask=MASKS[mask]())
        np.testing.assert_allclose(out[b], want, rtol=0, atol=2 * atol)


def test_position_biases_apply_per_sequence():
    """ALiBi (a rule, not an array) binds to each sequence's own length, as its contiguous call."""
    k_pool, v_pool, table, seq_lens, ks, vs = paged([7, 40])
    q = np.random.default_rng(9).standard_normal((2, 2, 3, 8)).astype(np.float32)
    with kernel_config(small=0):
        out = qkv.attention(q, k_pool, v_pool, mask=qkv.causal(), bias=qkv.alibi(),
                            block_table=table, seq_lens=seq_lens)
        for b in range(2):
            np.testing.assert_array_equal(out[b], qkv.attention(q[b], ks[b], vs[b],
                                                                mask=qkv.causal(),
                                                                bias=qkv.alibi()))


def test_causal_aligns_at_each_sequences_own_length():
    """3 new queries per sequence stand at that sequence's last 3 positions."""
    lens = [5, 12]
    k_pool, v_pool, table, seq_lens, ks, vs = paged(lens)
    q = np.random.default_rng(3).standard_normal((2, 2, 3, 8)).astype(np.float32)
    out = qkv.attention(q, k_pool, v_pool, mask=qkv.causal(), block_table=table,
                        seq_lens=seq_lens)
    for b, n in enumerate(lens):
        for i in range(3):  # query i sees keys 0 … n − 3 + i
            want = reference.attention(q[b, :, i: i + 1], ks[b][:, : n - 2 + i],
                                       vs[b][:, : n - 2 + i])
            np.testing.assert_allclose(out[b, :, i: i + 1], want, rtol=0,
                                       atol=output_atol(q[b], ks[b], vs[b]))


def test_stale_slots_never_matter_even_nan():
    """The same cache in pools whose unused slots hold 0, ±1e30 or NaN: the same bits."""
    lens = [9, 30, 2]
    results = []
    for garbage in (0.0, GARBAGE, np.nan):
        k_pool, v_pool, table, seq_lens, _, _ = paged(lens, garbage=garbage)
        q = np.random.default_rng(4).standard_normal((3, 4, 2, 8)).astype(np.float32)
        results.append(qkv.attention(q, k_pool, v_pool, mask=qkv.causal(), block_table=table,
                                     seq_lens=seq_lens))
    np.testing.assert_array_equal(results[1], results[0])
    np.testing.assert_array_equal(results[2], results[0])


def test_decode_skips_empty_key_tiles():
    """A window of 8 keys at 4096 cached: one key tile computed per head, the rest skipped."""
    # (2 query heads on 2 kv heads: not stacked, so the masked key tile of 512, whose partial
    # tile splits down to split_min = 256 keys)
    k_pool, v_pool, table, seq_lens, ks, vs = paged([4096], d=8, block_size=16)
    q = np.random.default_rng(5).standard_normal((1, 2, 1, 8)).astype(np.float32)
    stats = TileStats()
    with kernel_config(stats=stats):
        out = qkv.attention(q, k_pool, v_pool, mask=qkv.window(7, 0), block_table=table,
                            seq_lens=seq_lens)
    split = qkv.engine.current().split_min
    assert stats.computed == 2 and stats.pairs["partial"] == 2 * split
    assert stats.pairs["empty"] == 2 * (4096 - split)
    want = reference.attention(q[0], ks[0], vs[0], mask=qkv.window(7, 0))
    np.testing.assert_allclose(out[0], want, rtol=0, atol=output_atol(q[0], ks[0], vs[0]))


@settings(max_examples=40, deadline=None)
@given(lens=st.lists(st.integers(0, 70), min_size=1, max_size=4),
       block_size=st.integers(1, 9), nq=st.integers(1, 4), group=st.sampled_from([1, 2]),
       mask=st.sampled_from(sorted(MASKS)), path=st.sampled_from(KERNEL_PATHS[1:]),
       seed=st.integers(0, 2**16))
def test_random_layouts_equal_the_contiguous_path(lens, block_size, nq, group, mask, path,
                                                  seed):
    k_pool, v_pool, table, seq_lens, ks, vs = paged(lens, block_size=block_size, seed=seed)
    q = np.random.default_rng(seed + 1).standard_normal((len(lens), 2 * group, nq, 8))
    q = q.astype(np.float32)
    with kernel_path(path):
        out = qkv.attention(q, k_pool, v_pool, mask=MASKS[mask](), block_table=table,
                            seq_lens=seq_lens)
        for b in range(len(lens)):
            want = qkv.attention(q[b], ks[b], vs[b], mask=MASKS[mask]())
            if nq > 1 or group == 1:  # the same tiles
                np.testing.assert_array_equal(out[b], want)
            else:  # a stacked decode step
                np.testing.assert_allclose(out[b], want, rtol=0,
                                           atol=2 * output_atol(q[b], ks[b], vs[b]))


# -- errors --------------------------------------------------------------------------------
def _args():
    k_pool, v_pool, table, seq_lens, _, _ = paged([5, 9])
    q = np.zeros((2, 2, 1, 8), np.float32)
    return q, k_pool, v_pool, table, seq_lens


@pytest.mark.parametrize(("change", "error", "match"), [
    (lambda a: a[3].__setitem__((1, 2), 99), ValueError, r"block_table\[1, 2\] = 99 is not"),
    (lambda a: a[3].__setitem__((0, 1), -1), ValueError, r"block_table\[0, 1\] = -1"),
    (lambda a: a[4].__setitem__(1, 40), ValueError, r"seq_lens\[1\] = 40 is past the block "
                                                    r"table's capacity: 4 blocks of 4"),
    (lambda a: a[4].__setitem__(0, -1), ValueError, r"seq_lens\[0\] = -1 is negative"),
    (lambda a: a[1].__setitem__((a[3][1, 0], 0, 0, 0), np.nan), ValueError,
     "k contains NaN or inf in sequence 1"),
])
def test_bad_layouts_are_named(change, error, match):
    args = list(_args())
    change(args)
    q, k_pool, v_pool, table, seq_lens = args
    with pytest.raises(error, match=match):
        qkv.attention(q, k_pool, v_pool, block_table=table, seq_lens=seq_lens)


def test_bad_arguments_are_named():
    q, k_pool, v_pool, table, seq_lens = _args()
    cases = [
        (dict(block_table=table.astype(float), seq_lens=seq_lens), TypeError,
         "block_table must hold ints"),
        (dict(block_table=table, seq_lens=seq_lens.astype(np.float32)), TypeError,
         "seq_lens must hold ints"),
        (dict(block_table=table, seq_lens=seq_lens[:1]), ValueError,
         "seq_lens has 1 entries but block_table has 2 rows"),
        (dict(block_table=table), ValueError, "needs both block_table and seq_lens"),
        (dict(block_table=table, seq_lens=seq_lens, dropout=0.1, dropout_seed=0), ValueError,
         "takes no dropout"),
    ]
    for kwargs, error, match in cases:
        with pytest.raises(error, match=match):
            qkv.attention(q, k_pool, v_pool, **kwargs)
    with pytest.raises(ValueError, match=r"q must be \(B=2, Hq, Nq, Dk\)"):
        qkv.attention(q[:1], k_pool, v_pool, block_table=table, seq_lens=seq_lens)
    with pytest.raises(ValueError, match="expected 4-D"):
        qkv.attention(q, k_pool[0], v_pool[0], block_table=table, seq_lens=seq_lens)
    with pytest.raises(TypeError, match="must share one dtype"):
        qkv.attention(q.astype(np.float64), k_pool, v_pool, block_table=table,
                      seq_lens=seq_lens)
    with pytest.raises(ValueError, match=r"bound to each sequence's own problem .* sequence 0 "
                                         r"refused them: mask: padding key_lengths"):
        qkv.attention(q, k_pool, v_pool, mask=qkv.padding([3, 4]), block_table=table,
                      seq_lens=seq_lens)
    with pytest.raises(ValueError, match="multiple of the key/value heads"):
        qkv.attention(np.zeros((2, 3, 1, 8), np.float32), k_pool, v_pool, block_table=table,
                      seq_lens=seq_lens)


# -- the nn cache ----------------------------------------------------------------------------
def _run(model, tokens, cache, prefill=10):
    steps = [model(tokens[:, :prefill], cache=cache)]
    steps += [model(tokens[:, t: t + 1], start=t, cache=cache)
              for t in range(prefill, tokens.shape[1])]
    return np.concatenate(steps, axis=1)  # (B, n, vocab)


@pytest.mark.parametrize("n_layers", [1, 2])
def test_paged_cache_decodes_as_the_contiguous_cache(n_layers):
    """The same schedule (a prefill, then steps) on the same tiles (small=0): bitwise equal
    with one layer (4 heads, 4 kv heads); with the second layer's GQA (4 heads on 2) the
    paged decode steps stack the heads: within float32's rounding of the logits, as in
    test_nn_cache (decoded vs full forward)."""
    model = TinyDecoder(seed=5, n_layers=n_layers)
    tokens = np.random.default_rng(3).integers(0, 11, (3, 37))
    with kernel_config(small=0):
        want = _run(model, tokens, nn.KVCache(len(model.blocks)))
        cache = nn.PagedKVCache(len(model.blocks), batch=3, num_blocks=40, block_size=8)
        got = _run(model, tokens, cache)
    if n_layers == 1:
        np.testing.assert_array_equal(got, want)
    else:
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-6 * max(1.0, np.abs(want).max()))
    table = cache[0].block_table
    assert table.shape == (3, 5) and len(set(table.ravel())) == 15  # ceil(37/8) blocks each
    k, v = cache[0].gather(1)
    assert k.shape == (4, 37, 4) and v.shape == (4, 37, 4)
    cache.reset()
    assert cache.length == 0 and len(cache[0].free) == 40


def test_continuous_batching_release_then_reuse():
    """Sequence 1 finishes early; its blocks (stale keys left in them) serve a new request in
    its slot while 0 and 2 go on decoding. Every sequence decodes as it would alone."""
    model = TinyDecoder(seed=7)
    g = np.random.default_rng(8)
    a, b, c, d = (g.integers(0, 11, (1, n)) for n in (30, 12, 30, 15))
    cache = nn.PagedKVCache(len(model.blocks), batch=3, num_blocks=20, block_size=4)
    outs = {name: [] for name in "abcd"}

    def step(seqs, names, t):
        tokens = np.concatenate([{"a": a, "b": b, "c": c, "d": d}[n][:, t[n]: t[n] + 1]
                                 for n in names])
        y = _forward(model, tokens, cache, seqs, [t[n] for n in names])
        for i, n in enumerate(names):
            outs[n].append(y[i: i + 1])
            t[n] += 1

    t = dict.fromkeys("abcd", 0)
    for _ in range(12):
        step([0, 1, 2], "abc", t)
    cache.release(1)
    free_before = len(cache[0].free)
    assert free_before == 20 - 2 * 3  # a, c: 12 positions (3 blocks) each
    for _ in range(15):
        step([0, 1, 2], "adc", t)
    assert len(cache[0].free) == 20 - 2 * 7 - 4  # a, c: 27 positions each; d: 15
    for _ in range(3):
        step([0, 2], "ac", t)
    assert not cache[0].free  # a, c: 30 positions (8 blocks) each; d: 15 (4)
    with pytest.raises(ValueError, match="needs 1 more blocks of 4, 0 of 20 are free"):
        cache[0].append(np.zeros((1, 4, 5, 4)), np.zeros((1, 4, 5, 4)), seqs=[1])
    assert cache[0].lengths.tolist() == [30, 15, 30]
    for name, tokens in zip("abcd", (a, b, c, d), strict=True):
        alone = _run(model, tokens, nn.KVCache(len(model.blocks)), prefill=1)
        np.testing.assert_allclose(np.concatenate(outs[name], axis=1), alone, rtol=0,
                                   atol=1e-6 * max(1.0, np.abs(alone).max()))


@settings(max_examples=30, deadline=None)
@given(ops=st.lists(st.tuples(st.sampled_from(["append", "append", "release"]),
                              st.sets(st.integers(0, 2), min_size=1), st.integers(1, 7)),
                    min_size=1, max_size=10),
       block_size=st.integers(1, 5), seed=st.integers(0, 2**16))
def test_random_schedules_of_appends_and_releases(ops, block_size, seed):
    """Any schedule: every sequence holds exactly what was appended to it since its last
    release, no block is in two places, and attention over the pool (2 queries per sequence,
    the tiled path) is bitwise that of each sequence's own contiguous k, v."""
    g = np.random.default_rng(seed)
    blocks = 3 * 10 * 7  # never full: 3 sequences, ≤ 10 appends of ≤ 7 (exhaustion: below)
    layer = nn.PagedLayerCache(batch=3, num_blocks=blocks, block_size=block_size)
    want = [[np.zeros((2, 0, 4), np.float32)] * 2 for _ in range(3)]  # per slot: k, v
    for op, slots, n in ops:
        seqs = sorted(slots)
        if op == "release":
            for b in seqs:
                layer.release(b)
                want[b] = [np.zeros((2, 0, 4), np.float32)] * 2
            continue
        k, v = (g.standard_normal((len(seqs), 2, n, 4)).astype(np.float32) for _ in range(2))
        layer.append(k, v, seqs=seqs)
        for i, b in enumerate(seqs):
            want[b] = [np.concatenate([want[b][0], k[i]], axis=1),
                       np.concatenate([want[b][1], v[i]], axis=1)]
        held = [blk for t in layer.tables for blk in t]
        assert len(set(held)) == len(held) and len(held) + len(layer.free) == blocks
        for b in range(3):
            assert layer.lengths[b] == want[b][0].shape[1]
            if layer.lengths[b]:
                np.testing.assert_array_equal(layer.gather(b)[0], want[b][0])
                np.testing.assert_array_equal(layer.gather(b)[1], want[b][1])
        q = g.standard_normal((3, 4, 2, 4)).astype(np.float32)
        with kernel_path("tiled"):
            out = qkv.attention(q, **layer.attention_args(), mask=qkv.causal())
            for b in range(3):
                np.testing.assert_array_equal(
                    out[b], qkv.attention(q[b], *want[b], mask=qkv.causal()))


def _forward(model, tokens, cache, seqs, starts):
    """One decode step of the sequences in slots ``seqs``, each at its own position."""
    x = model.tok(tokens) + model.pos(np.asarray(starts))[:, None]  # (len(seqs), 1, d)
    for i, block in enumerate(model.blocks):
        x = block(x, mask=qkv.causal(), cache=cache[i], seqs=seqs)
    return model.head(model.ln(x))


def test_pool_exhaustion_and_bad_calls_are_named():
    layer = nn.PagedLayerCache(batch=2, num_blocks=4, block_size=4)
    k = np.random.default_rng(0).standard_normal((2, 1, 8, 3))
    layer.append(k, 2 * k)
    np.testing.assert_array_equal(layer.gather(0)[0], k[0])
    with pytest.raises(ValueError, match="the pool is full — appending 1 positions"):
        layer.append(k[:, :, :1], k[:, :, :1])
    assert layer.lengths.tolist() == [8, 8]  # all or nothing
    layer.release(0)
    layer.append(k[:1, :, :5], k[:1, :, :5], seqs=[0])  # the freed blocks serve again
    assert layer.lengths.tolist() == [5, 8]
    with pytest.raises(ValueError, match=r"\(len\(seqs\)=2, Hkv, n_new, d\)"):
        layer.append(np.zeros((3, 1, 1, 3)), np.zeros((3, 1, 1, 3)))
    with pytest.raises(ValueError, match="distinct slots in 0 … 1"):
        layer.append(k[:1, :, :1], k[:1, :, :1], seqs=[2])
    with pytest.raises(ValueError, match="nothing appended yet"):
        nn.PagedLayerCache(batch=1, num_blocks=1).attention_args()
