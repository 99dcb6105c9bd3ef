"""The exact lse merge: attention over two key sets, merged, is attention over their union."""

import numpy as np
import pytest

import qkv
from helpers import lse_atol, output_atol
from qkv import merge


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_two_halves_merge_to_the_whole(dtype):
    rng = np.random.default_rng(0)
    q = rng.standard_normal((2, 3, 9, 4)).astype(dtype)
    k = rng.standard_normal((2, 3, 10, 4)).astype(dtype)
    v = rng.standard_normal((2, 3, 10, 5)).astype(dtype)
    # padding makes rows empty in the second half only (lengths ≤ 5) or everywhere (length 0)
    lengths = np.array([[5, 10, 0], [7, 2, 10]])
    allowed = np.arange(10) < lengths[..., None, None, None]  # (2, 3, 1, 1, 10) → keys
    allowed = np.broadcast_to(allowed[..., 0, :, :], (2, 3, 9, 10))
    full, full_lse = qkv.attention(q, k, v, mask=qkv.allow(allowed), return_lse=True)
    out, lse = qkv.attention(q, k[..., :5, :], v[..., :5, :],
                             mask=qkv.allow(allowed[..., :5]), return_lse=True)
    out_b, lse_b = qkv.attention(q, k[..., 5:, :], v[..., 5:, :],
                                 mask=qkv.allow(allowed[..., 5:]), return_lse=True)
    merge(out, lse, out_b, lse_b)
    np.testing.assert_allclose(out, full, atol=2 * output_atol(q, k, v), rtol=0)
    np.testing.assert_array_equal(np.isneginf(lse), np.isneginf(full_lse))
    finite = np.isfinite(full_lse)
    np.testing.assert_allclose(lse[finite], full_lse[finite], atol=2 * lse_atol(q, k, dtype))
    assert not out[~finite].any()
