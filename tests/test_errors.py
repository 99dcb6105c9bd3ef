"""Bad input gets a clear error naming the argument, what was received and what was expected."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import qkv

R = np.random.default_rng(0)


def arr(*shape, dtype=np.float32):
    return R.standard_normal(shape).astype(dtype)


Q, K, V = arr(2, 4, 5, 8), arr(2, 2, 6, 8), arr(2, 2, 6, 3)

CASES = [
    # (description, call, exception, substrings that must all appear in the message)
    ("GQA heads", lambda: qkv.attention(arr(2, 3, 5, 8), K, V), ValueError,
     ["q has 3 heads but k has 2", "multiple of the key/value heads"]),
    ("k/v heads", lambda: qkv.attention(Q, K, arr(2, 1, 6, 3)), ValueError,
     ["k has 2 heads but v has 1 heads"]),
    ("Dk", lambda: qkv.attention(Q, arr(2, 2, 6, 7), V), ValueError,
     ["q has Dk=8 features but k has 7", "(2, 4, 5, 8)", "(2, 2, 6, 7)"]),
    ("Nk", lambda: qkv.attention(Q, K, arr(2, 2, 5, 3)), ValueError,
     ["k has Nk=6 positions but v has 5"]),
    ("batch", lambda: qkv.attention(arr(3, 4, 5, 8), K, V), ValueError,
     ["batch dims do not broadcast", "q has batch shape (3,)", "k has batch shape (2,)"]),
    ("ndim", lambda: qkv.attention(arr(8), K, V), ValueError,
     ["q has shape (8,)", "at least 2 dims"]),
    ("mixed 2-D", lambda: qkv.attention(arr(5, 8), K, V), ValueError,
     ["mix 2-D", "q (5, 8)"]),
    ("dtype mix", lambda: qkv.attention(Q, K.astype(np.float64), V), TypeError,
     ["k has dtype float64 but q has dtype float32", "astype"]),
    ("int dtype mixed with float32", lambda: qkv.attention(Q.astype(np.int32), K, V), TypeError,
     ["q has dtype float64 (promoted from int32)", "share one dtype"]),
    ("bool dtype", lambda: qkv.attention(Q > 0, K, V), TypeError, ["q is a bool array"]),
    ("NaN", lambda: qkv.attention(Q, K, np.full_like(V, np.nan)), ValueError,
     ["v contains NaN or inf", "check_finite=False"]),
    ("inf bias", lambda: qkv.attention(Q, K, V, bias=np.full((5, 6), -np.inf)), ValueError,
     ["bias contains NaN or inf", "mask"]),
    ("raw mask", lambda: qkv.attention(Q, K, V, mask=np.ones((5, 6), bool)), TypeError,
     ["polarity", "qkv.allow", "qkv.deny"]),
    ("mask type", lambda: qkv.attention(Q, K, V, mask="causal"), TypeError,
     ["mask must be a qkv mask", "str"]),
    ("allow shape", lambda: qkv.attention(Q, K, V, mask=qkv.allow(np.ones((5, 7), bool))),
     ValueError, ["allow() array has shape (5, 7)", "(2, 4, 5, 6)"]),
    ("allow dtype", lambda: qkv.allow(np.ones((5, 6))), TypeError,
     ["allow() needs a bool array", "bias="]),
    ("padding batch", lambda: qkv.attention(Q, K, V, mask=qkv.padding([1, 2, 3])), ValueError,
     ["padding key_lengths has leading shape (3,)", "batch dims of q/k/v are (2,)"]),
    ("padding negative", lambda: qkv.padding([-1]), ValueError, ["key_lengths must be ≥ 0"]),
    ("documents length", lambda: qkv.attention(Q, K, V, mask=qkv.documents(np.zeros(5, int),
                                                                             np.zeros(4, int))),
     ValueError, ["k_ids has shape (4,)", "6 keys"]),
    ("documents cross", lambda: qkv.attention(Q, K, V, mask=qkv.documents(np.zeros(5, int))),
     ValueError, ["no k_ids", "Nq=5 != Nk=6"]),
    ("window arg", lambda: qkv.window(-1), ValueError, ["window: before must be"]),
    ("predicate dtype", lambda: qkv.attention(Q, K, V, mask=qkv.predicate(lambda i, j: i + j)),
     TypeError, ["predicate: fn(q_idx, k_idx) must return bools"]),
    ("bias shape", lambda: qkv.attention(Q, K, V, bias=np.zeros((5, 5))), ValueError,
     ["bias has shape (5, 5)", "(2, 4, 5, 6)"]),
    ("bias bool", lambda: qkv.attention(Q, K, V, bias=np.zeros((5, 6), bool)), TypeError,
     ["bias is a bool array", "mask=qkv.allow"]),
    ("alibi slopes", lambda: qkv.attention(Q, K, V, bias=qkv.alibi([1.0, 2.0])), ValueError,
     ["alibi slopes have shape (2,)", "4 heads"]),
    ("scale", lambda: qkv.attention(Q, K, V, scale=float("nan")), ValueError,
     ["scale must be finite"]),
    ("scale type", lambda: qkv.attention(Q, K, V, scale="0.1"), TypeError,
     ["scale must be a real number"]),
    ("rows range", lambda: qkv.attention_weights(Q, K, rows=[5]), ValueError,
     ["rows has index 5", "5 queries"]),
    ("rows type", lambda: qkv.attention_weights(Q, K, rows=[0.5]), TypeError,
     ["rows must be ints"]),
    ("backward out", lambda: qkv.attention_backward(Q, K, V, np.zeros((2, 4, 5, 2)),
                                                    np.zeros((2, 4, 5)), np.zeros((2, 4, 5, 3))),
     ValueError, ["out has shape (2, 4, 5, 2)", "(2, 4, 5, 3)"]),
    ("backward lse", lambda: qkv.attention_backward(Q, K, V, np.zeros((2, 4, 5, 3)),
                                                    np.zeros((2, 4)), np.zeros((2, 4, 5, 3))),
     ValueError, ["lse has shape (2, 4)", "(2, 4, 5)"]),
    ("combine", lambda: qkv.causal() & np.ones((2, 2), bool), TypeError,
     ["cannot combine a mask with ndarray", "qkv.allow"]),
    ("explain size", lambda: qkv.explain(np.zeros((2000, 2)), np.zeros((2000, 2)),
                                         np.zeros((2000, 2))), ValueError,
     ["explain is for small inputs", "rows="]),
    ("Dk zero", lambda: qkv.attention(arr(3, 0), arr(3, 0), arr(3, 2)), ValueError, ["Dk=0"]),
]


@pytest.mark.parametrize(("what", "call", "exc", "parts"), CASES, ids=[c[0] for c in CASES])
def test_error_message(what, call, exc, parts):
    with pytest.raises(exc) as info:
        call()
    message = str(info.value)
    for part in parts:
        assert part in message, f"{what}: {part!r} not in {message!r}"


def test_check_finite_false_skips_the_scan():
    # The user takes responsibility: no error raised (the result may hold NaN).
    out = qkv.attention(Q, K, np.full_like(V, np.nan), check_finite=False)
    assert out.shape == (2, 4, 5, 3)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.floats(width=16, allow_nan=True, allow_infinity=True), min_size=1,
                max_size=40))
def test_float16_magnitude_read_through_its_bits(values):
    # prepare() reads float16 magnitudes from the bits (NumPy's float16 reductions are slow):
    # the same answer as the float64 reduction, NaN and inf included
    from qkv.engine.problem import _max_abs

    x = np.array(values, dtype=np.float16)
    wide = x.astype(np.float64)
    want = float("nan") if np.isnan(wide).any() else float(np.abs(wide).max())
    got = _max_abs(x)
    assert (np.isnan(got) and np.isnan(want)) or got == want
