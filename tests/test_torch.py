"""Against torch.nn.functional.scaled_dot_product_attention (torch==2.13.0, test-only), wherever
torch has the same semantics. Differences, on purpose: torch's is_causal is top-left aligned when
Nq != Nk (qkv aligns bottom-right, for decoding); and for rows with no allowed key qkv always
returns zeros, where torch gives NaN or zeros depending on which of its kernels runs."""

import numpy as np
import pytest

import qkv
from helpers import output_atol

torch = pytest.importorskip("torch")
F = torch.nn.functional


def sdpa(q, k, v, **kw):
    t = [torch.from_numpy(np.ascontiguousarray(x)) for x in (q, k, v)]
    return F.scaled_dot_product_attention(*t, **kw).numpy()


@pytest.fixture
def qkv_arrays():
    rng = np.random.default_rng(0)
    q = rng.standard_normal((2, 4, 70, 16)).astype(np.float32)
    k = rng.standard_normal((2, 4, 70, 16)).astype(np.float32)
    v = rng.standard_normal((2, 4, 70, 8)).astype(np.float32)
    return q, k, v


def test_dense_and_causal(qkv_arrays):
    q, k, v = qkv_arrays
    atol = 2 * output_atol(q, k, v)  # both sides carry float32 error
    np.testing.assert_allclose(qkv.attention(q, k, v), sdpa(q, k, v), atol=atol)
    np.testing.assert_allclose(qkv.attention(q, k, v, mask=qkv.causal()),
                               sdpa(q, k, v, is_causal=True), atol=atol)


def test_scale_and_float_mask_as_bias(qkv_arrays):
    q, k, v = qkv_arrays
    bias = np.random.default_rng(1).standard_normal((70, 70)).astype(np.float32)
    np.testing.assert_allclose(qkv.attention(q, k, v, bias=bias, scale=0.3),
                               sdpa(q, k, v, attn_mask=torch.from_numpy(bias), scale=0.3),
                               atol=2 * output_atol(q, k, v, 0.3, bias))


def test_bool_mask_polarity(qkv_arrays):
    # SDPA's bool attn_mask: True = takes part in attention = qkv.allow.
    # nn.MultiheadAttention's attn_mask: True = NOT allowed = qkv.deny.
    q, k, v = qkv_arrays
    keep = np.random.default_rng(2).random((70, 70)) < 0.6
    keep[:, 0] = True  # every row keeps a key (torch gives NaN otherwise)
    expected = sdpa(q, k, v, attn_mask=torch.from_numpy(keep))
    atol = 2 * output_atol(q, k, v)
    np.testing.assert_allclose(qkv.attention(q, k, v, mask=qkv.allow(keep)), expected, atol=atol)
    np.testing.assert_allclose(qkv.attention(q, k, v, mask=qkv.deny(~keep)), expected, atol=atol)


def test_gqa(qkv_arrays):
    q, k, v = qkv_arrays
    k2, v2 = k[:, :2], v[:, :2]
    np.testing.assert_allclose(qkv.attention(q, k2, v2), sdpa(q, k2, v2, enable_gqa=True),
                               atol=2 * output_atol(q, k2, v2))


def test_fully_masked_rows(qkv_arrays):
    q, k, v = qkv_arrays
    keep = np.ones((70, 70), bool)
    keep[3] = False
    ours = qkv.attention(q, k, v, mask=qkv.allow(keep))
    theirs = sdpa(q, k, v, attn_mask=torch.from_numpy(keep))
    assert not ours[:, :, 3].any()
    assert np.isnan(theirs[:, :, 3]).all() or not theirs[:, :, 3].any()  # backend-dependent
    np.testing.assert_allclose(np.delete(ours, 3, axis=2), np.delete(theirs, 3, axis=2),
                               atol=2 * output_atol(q, k, v))


def test_float16(qkv_arrays):
    q, k, v = (x.astype(np.float16) for x in qkv_arrays)
    ours = qkv.attention(q, k, v, mask=qkv.causal())
    theirs = sdpa(q.astype(np.float32), k.astype(np.float32), v.astype(np.float32),
                  is_causal=True)
    assert ours.dtype == np.float16
    np.testing.assert_allclose(ours.astype(np.float32), theirs, atol=output_atol(q, k, v))
