"""Memory: the tiled kernel never builds the Nq × Nk matrix."""

import tracemalloc

import numpy as np
import pytest

import qkv


@pytest.mark.slow
@pytest.mark.parametrize("mask", [None, qkv.causal()], ids=["dense", "causal"])
def test_peak_memory_at_32768(mask):
    # Nq = Nk = 32768, D = 64: the float32 score matrix alone would be 4 GiB. tracemalloc sees
    # NumPy's allocations; the inputs are allocated before tracing starts.
    n, d = 32768, 64
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((1, 1, n, d), dtype=np.float32) for _ in range(3))
    qkv.engine.release_scratch()  # the tiles kept from earlier tests' calls must count here
    tracemalloc.start()
    out = qkv.attention(q, k, v, mask=mask)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert out.shape == (1, 1, n, d) and np.isfinite(out).all()
    assert peak < 64 * 2**20, f"peak {peak / 2**20:.1f} MiB"
    # spot-check rows against the reference on the keys they see
    rows = [0, 1, n // 2, n - 1]
    expected = qkv.reference.attention(q[0, 0][rows], k[0, 0], v[0, 0]) if mask is None else \
        np.stack([qkv.reference.attention(q[0, 0][[r]], k[0, 0][: r + 1], v[0, 0][: r + 1])[0]
                  for r in rows])
    np.testing.assert_allclose(out[0, 0][rows], expected, atol=2e-5)
