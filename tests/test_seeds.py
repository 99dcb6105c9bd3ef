"""The seed texts' numbers, common mistakes and check-yourself answers, as acceptance tests."""

import numpy as np
import pytest

import qkv

QUERY = [[1.0, 0.0]]
KEYS = [[1.0, 0.0], [0.0, 1.0], [0.7, 0.7]]
VALUES = [[2.0, 0.0], [0.0, 2.0], [1.0, 1.0]]


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_worked_example_weights(dtype):
    # Worked example 1: scaled scores ≈ (0.707, 0, 0.495) → weights ≈ (0.434, 0.214, 0.351).
    q, k = np.asarray(QUERY, dtype), np.asarray(KEYS, dtype)
    weights = qkv.attention_weights(q, k)
    assert weights.shape == (1, 3)
    np.testing.assert_array_equal(np.round(weights[0].astype(np.float64), 3),
                                  [0.434, 0.214, 0.351])


def test_worked_example_intermediates():
    trace = qkv.explain(QUERY, KEYS, VALUES)
    np.testing.assert_allclose(trace.scores[0], [1.0, 0.0, 0.7])
    assert trace.scale == pytest.approx(1 / np.sqrt(2))
    np.testing.assert_array_equal(np.round(trace.scaled[0], 3), [0.707, 0.0, 0.495])
    np.testing.assert_array_equal(np.round(np.exp(trace.scaled[0]), 3), [2.028, 1.0, 1.640])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_worked_example_output_is_exact_not_the_rounded_blend(dtype):
    # Worked example 2 blends the *rounded* weights into (1.219, 0.779); the exact output is
    # (1.2202, 0.7798).
    out = qkv.attention(*(np.asarray(x, dtype) for x in (QUERY, KEYS, VALUES)))
    np.testing.assert_array_equal(np.round(out[0].astype(np.float64), 4), [1.2202, 0.7798])
    rounded_blend = np.array([0.434, 0.214, 0.351]) @ np.asarray(VALUES)
    np.testing.assert_allclose(rounded_blend, [1.219, 0.779], atol=1e-12)


@pytest.mark.parametrize(("scores", "printed"), [((8.0, 0.0), (0.9997, 0.0003)),
                                                 ((1.0, 0.0), (0.731, 0.269))])
def test_softmax_of_two_scores(scores, printed):
    # A softmax of two scores is one 1-d query against two 1-d keys, with scale 1.
    weights = qkv.attention_weights([[1.0]], [[scores[0]], [scores[1]]], scale=1.0)[0]
    decimals = len(str(printed[1]).split(".")[1])
    np.testing.assert_array_equal(np.round(weights, decimals), printed)


def test_scale_is_head_dim_not_d_model():
    # Common mistake 1: with several heads, scale by d_k (the head dim), not d_model.
    rng = np.random.default_rng(0)
    q = rng.standard_normal((4, 5, 16))  # 4 heads × d_k 16: d_model would be 64
    k = rng.standard_normal((4, 6, 16))
    v = rng.standard_normal((4, 6, 16))
    np.testing.assert_allclose(qkv.attention(q, k, v),
                               qkv.attention(q, k, v, scale=1 / np.sqrt(16)), rtol=1e-12)
    assert not np.allclose(qkv.attention(q, k, v), qkv.attention(q, k, v, scale=1 / 8))


def test_softmax_over_the_keys():
    # Common mistake 2: normalise over the keys for each query (rows sum to 1), not over queries.
    rng = np.random.default_rng(1)
    weights = qkv.attention_weights(rng.standard_normal((5, 3)), rng.standard_normal((7, 3)))
    np.testing.assert_allclose(weights.sum(axis=-1), 1.0, rtol=1e-12)
    assert not np.allclose(weights.sum(axis=0), 1.0)


def test_roles_queries_and_keys_decide_values_are_copied():
    # Common mistake 3: values do not change the weights; they decide what gets copied.
    rng = np.random.default_rng(2)
    q, k = rng.standard_normal((3, 4)), rng.standard_normal((5, 4))
    t1 = qkv.explain(q, k, rng.standard_normal((5, 2)))
    t2 = qkv.explain(q, k, rng.standard_normal((5, 2)))
    np.testing.assert_array_equal(t1.weights, t2.weights)
    assert not np.allclose(t1.output, t2.output)


def test_check_yourself_weight_matrix_of_ten_tokens():
    x = np.random.default_rng(3).standard_normal((10, 8))
    assert qkv.attention_weights(x, x).shape == (10, 10)
    assert qkv.explain(x, x, x).weights.shape == (10, 10)


def test_why_sqrt_dk_score_spread():
    # Entries ~ N(0, 1), d_k = 64: the dot product has std √64 = 8; scaled, about 1.
    rng = np.random.default_rng(4)
    q, k = rng.standard_normal((512, 64)), rng.standard_normal((512, 64))
    raw = qkv.explain(q, k, k, scale=1.0).scaled
    scaled = qkv.explain(q, k, k).scaled
    assert raw.std() == pytest.approx(8.0, rel=0.03)
    assert scaled.std() == pytest.approx(1.0, rel=0.03)
    # Unscaled, softmax is close to a hard argmax; scaled, every key keeps a share.
    assert qkv.explain(q, k, k, scale=1.0).weights.max(axis=-1).mean() > 0.5
    assert qkv.explain(q, k, k).weights.max(axis=-1).mean() < 0.1
