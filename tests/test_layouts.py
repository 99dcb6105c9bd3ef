"""Exact for every memory layout (issue 48): each array argument — q, k, v, dout, and the
forward's own out and lse handed to the backward — in C or Fortran order, as a transposed view,
reversed, strided (with garbage between), broadcast, unaligned and read-only, gives the float64
reference's answer within the dtype's bound, forward and backward, on every path of the kernel:
small, tiled from Python, and the fused loop on each BLAS (forced on, so it runs on every
machine: NumPy's own OpenBLAS and MKL, the test extra, are both there).

On e140049 (the fused loop switched on for OpenBLAS) the matrix below fails for q in Fortran
order and as a transposed view at N = 1024: the loop read q's columns as rows."""

from __future__ import annotations

import functools

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import qkv
from helpers import grad_atols, lse_atol, needs_numba, output_atol
from layouts import LAYOUTS, lay
from qkv import reference
from qkv.engine import TileStats, gemm, has_numba, kernel_config
from qkv.engine import step as steps

OPERANDS = ("q", "k", "v", "dout", "out", "lse")
DTYPES = (np.float16, np.float32, np.float64)
SIZES = (48, 300, 1024)  # small path, small path, tiled (and fused for float16/32)
MASKS = {"dense": None, "causal": qkv.causal()}
BLASES = [b for b in ("numpy", "mkl") if gemm.address(np.float32, b) is not None]


def problem(dtype, n: int, seed: int = 0, heads: int = 2, d: int = 16):
    """q, k, v, dout ``(heads, n, d)`` in C order."""
    rng = np.random.default_rng(seed)
    return [rng.standard_normal((heads, n, d)).astype(dtype) for _ in range(4)]


@functools.cache
def c_order_results(dtype, n: int, mask_name: str):
    """qkv's out, lse and gradients on C-ordered operands, and the reference's."""
    q, k, v, dout = problem(dtype, n)
    mask = MASKS[mask_name]
    out, lse = qkv.attention(q, k, v, mask=mask, return_lse=True)
    ref_out, ref_lse = reference.attention(q, k, v, mask=mask, return_lse=True)
    ref_grads = reference.attention_backward(q, k, v, dout, mask=mask)
    return out, lse, (ref_out, ref_lse, ref_grads)


def stored(dtype) -> dict:
    """The final rounding into the result's dtype: float16 results are computed in float32 and
    rounded once, half an ulp (2^-11 relative; 2^-25 absolute below float16's normal range)."""
    return dict(rtol=2.0**-11, extra=2.0**-25) if np.dtype(dtype) == np.float16 else dict(
        rtol=0.0, extra=0.0)


def assert_close(got, ref, atol, err_msg=""):
    r = stored(got.dtype)
    np.testing.assert_allclose(got.astype(np.float64), ref, rtol=r["rtol"],
                               atol=atol + r["extra"], err_msg=err_msg)


def check(q, k, v, dout, mask, out=None, lse=None, ref=None):
    """qkv's forward and backward against the float64 reference, within the dtype's bounds;
    ``out``/``lse`` (laid out) are handed to the backward instead of the forward's own."""
    got_out, got_lse = qkv.attention(q, k, v, mask=mask, return_lse=True)
    ref_out, ref_lse, ref_grads = ref or (
        *reference.attention(q, k, v, mask=mask, return_lse=True),
        reference.attention_backward(q, k, v, dout, mask=mask))
    np.testing.assert_allclose(got_out.astype(np.float64), ref_out, rtol=0,
                               atol=output_atol(q, k, v), err_msg="out")
    finite = np.isfinite(ref_lse)
    np.testing.assert_allclose(got_lse[finite], ref_lse[finite], rtol=0,
                               atol=lse_atol(q, k, q.dtype), err_msg="lse")
    grads = qkv.attention_backward(q, k, v, got_out if out is None else out,
                                   got_lse if lse is None else lse, dout, mask=mask)
    for name, g, r, atol in zip(("dq", "dk", "dv"), grads, ref_grads,
                                grad_atols(q, k, v, dout), strict=True):
        assert_close(g, r, atol, err_msg=name)


@pytest.mark.parametrize("mask_name", MASKS)
@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("operand", OPERANDS)
def test_every_operand_in_every_layout_on_the_default_path(operand, layout, dtype, n, mask_name):
    q, k, v, dout = problem(dtype, n)
    out, lse, ref = c_order_results(dtype, n, mask_name)
    args = dict(q=q, k=k, v=v, dout=dout, out=out, lse=lse)
    args[operand] = lay(args[operand], layout)
    if layout == "broadcast" and operand in ("out", "lse"):
        pytest.skip("a broadcast out or lse is not this problem's: the backward refuses it")
    if layout == "broadcast":  # the values changed: the reference (and out, lse) are theirs
        ref = None
        if operand in ("q", "k", "v"):
            args["out"] = args["lse"] = None
    check(args["q"], args["k"], args["v"], args["dout"], MASKS[mask_name],
          out=args["out"], lse=args["lse"], ref=ref)


@pytest.mark.parametrize("layout", ["F", "transposed", "reversed", "strided rows"])
@pytest.mark.parametrize("operand", ["q", "k", "v", "dout"])
def test_long_sequences_in_every_layout(operand, layout):
    # N = 4096, one head of 64 features: the default tiles, several query blocks per head
    q, k, v, dout = problem(np.float32, 4096, seed=1, heads=1, d=64)
    args = dict(q=q, k=k, v=v, dout=dout)
    args[operand] = lay(args[operand], layout)
    check(args["q"], args["k"], args["v"], args["dout"], qkv.causal())


def test_the_issues_snippet():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((64, 1024)).astype(np.float32)
    q = x.T  # (1024, 64): a transposed view, e.g. (W_Q @ X.T).T
    k = rng.standard_normal((1024, 64)).astype(np.float32)
    v = rng.standard_normal((1024, 64)).astype(np.float32)
    diff = np.abs(qkv.attention(q, k, v) - qkv.attention(np.ascontiguousarray(q), k, v)).max()
    assert diff <= 1e-6


# -- every path, forced: hypothesis draws a layout for every argument -------------------------
CONFIGS = {  # name → kernel_config: each path of the kernel at sizes a property test can afford
    "small": dict(),
    "tiled numpy step": dict(backend="numpy", small=0, tile_q=8, tile_k=16, tile_k_unmasked=16,
                             split_min=2),
    **{f"tiled compiled, Python loop, {b}": dict(backend="compiled", fused=False, gemm=b, small=0,
                                                 tile_q=8, tile_k=16, tile_k_unmasked=16,
                                                 split_min=2) for b in BLASES},
    **{f"fused loop, {b}": dict(backend="compiled", fused=True, gemm=b, small=0, tile_q=8,
                                tile_k=16, tile_k_unmasked=16, split_min=2) for b in BLASES},
    "threads": dict(small=0, tile_q=8, tile_k=16, tile_k_unmasked=16, workers=2,
                    thread_min_work=0),
}
if not has_numba():
    CONFIGS = {name: c for name, c in CONFIGS.items() if c.get("backend") != "compiled"}


@st.composite
def laid_problems(draw):
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    dtype = draw(st.sampled_from(DTYPES))
    hkv = draw(st.integers(1, 2))
    hq = hkv * draw(st.integers(1, 2))
    nq, nk = draw(st.integers(1, 40)), draw(st.integers(1, 40))
    dk, dv = draw(st.integers(1, 9)), draw(st.integers(1, 7))
    shapes = dict(q=(hq, nq, dk), k=(hkv, nk, dk), v=(hkv, nk, dv), dout=(hq, nq, dv))
    arrays = {}
    for name, shape in shapes.items():
        x = (rng.standard_normal(shape) * draw(st.sampled_from([0.5, 3.0]))).astype(dtype)
        arrays[name] = lay(x, draw(st.sampled_from(LAYOUTS), label=f"{name} layout"))
    bias = None
    if draw(st.booleans()):
        bias = lay(rng.standard_normal((hq, nq, nk)).astype(dtype),
                   draw(st.sampled_from(LAYOUTS), label="bias layout"))
    mask = draw(st.sampled_from([None, qkv.causal(), qkv.window(5)]))
    layouts = dict(out=draw(st.sampled_from(LAYOUTS[:6]), label="out layout"),
                   lse=draw(st.sampled_from(LAYOUTS[:6]), label="lse layout"))
    return arrays, bias, mask, layouts


@pytest.mark.parametrize("config", sorted(CONFIGS))
@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=laid_problems())
def test_every_path_reads_every_layout(config, case):
    arrays, bias, mask, layouts = case
    q, k, v, dout = (arrays[n] for n in ("q", "k", "v", "dout"))
    with kernel_config(**CONFIGS[config]):
        out, lse = qkv.attention(q, k, v, mask=mask, bias=bias, return_lse=True)
        grads = qkv.attention_backward(q, k, v, lay(out, layouts["out"]),
                                       lay(lse, layouts["lse"]), dout, mask=mask, bias=bias)
        weights = qkv.attention_weights(q, k, mask=mask, bias=bias)
    ref_out = reference.attention(q, k, v, mask=mask, bias=bias)
    ref_grads = reference.attention_backward(q, k, v, dout, mask=mask, bias=bias)
    atol = output_atol(q, k, v, bias=bias)
    np.testing.assert_allclose(out.astype(np.float64), ref_out, rtol=0, atol=atol)
    for g, r, tol in zip(grads, ref_grads, grad_atols(q, k, v, dout, bias=bias), strict=True):
        assert_close(g, r, tol)
    ref_w = reference.attention_weights(q, k, mask=mask, bias=bias)
    np.testing.assert_allclose(weights.astype(np.float64), ref_w, rtol=0,
                               atol=output_atol(q, k, np.ones_like(v), bias=bias))


# -- the operand contract itself --------------------------------------------------------------
@needs_numba
@pytest.mark.parametrize("blas", BLASES)
@pytest.mark.parametrize("layout", ["F", "transposed", "reversed", "broadcast", "unaligned"])
def test_a_layout_the_fused_loop_cannot_read_is_copied_once_and_counted(blas, layout):
    q, k, v, _ = problem(np.float32, 1024)
    laid = lay(k, layout)
    stats = TileStats()
    with kernel_config(backend="compiled", fused=True, gemm=blas, stats=stats):
        out = qkv.attention(q, laid, v)
    assert stats.paths["tiled fused"] > 0
    assert stats.copies == {"k": k.nbytes}  # one copy of k for the call; q is scaled anyway
    np.testing.assert_allclose(out, qkv.attention(q, np.array(laid), v), rtol=0,
                               atol=output_atol(q, laid, v))
    stats = TileStats()
    with kernel_config(backend="compiled", fused=True, gemm=blas, stats=stats):
        qkv.attention(lay(q, layout), k, v)
    assert not stats.copies  # q is scaled into C order anyway: never an extra copy


@needs_numba
@pytest.mark.parametrize("blas", BLASES)
@pytest.mark.parametrize("layout", ["C", "strided rows", "read-only"])
def test_rows_the_blas_reads_in_place_are_not_copied(blas, layout):
    q, k, v, _ = problem(np.float32, 1024)
    stats = TileStats()
    with kernel_config(backend="compiled", fused=True, gemm=blas, stats=stats):
        qkv.attention(q, lay(k, layout), lay(v, layout))
    assert stats.paths["tiled fused"] > 0 and not stats.copies


@needs_numba
@pytest.mark.parametrize("direction", ["forward", "backward"])
def test_the_fused_loop_refuses_rows_it_cannot_read(direction):
    # the second line behind the contract: handed a column-major operand, the compiled loop
    # raises instead of reading columns as rows (the JIT; the prebuilt wrapper hands such
    # arrays to the JIT)
    from qkv.engine.step import compiled

    run = steps.fused_loop(compiled, direction)
    sgemm = gemm.address(np.float32, "numpy")
    tq, nk, d = 8, 16, 4
    rng = np.random.default_rng(0)
    q_f = np.asfortranarray(rng.standard_normal((tq, d)).astype(np.float32))
    k = rng.standard_normal((nk, d)).astype(np.float32)
    k.flags.writeable = False
    tiles = np.array([[0, tq, 0, nk, 0, 0]], dtype=np.int64)
    blocks = np.zeros(1, dtype=bool)
    with pytest.raises(ValueError, match="rows that are not contiguous"):
        if direction == "forward":
            run(q_f, k, k, tiles, blocks, np.full(tq, -np.inf, np.float32),
                np.zeros(tq, np.float32), np.zeros((d, tq), np.float32),
                np.zeros(tq * nk, np.float32), True, sgemm)
        else:
            z = np.zeros((tq, d), np.float32)
            run(q_f, k, k, z, np.zeros(tq, np.float32), np.zeros(tq, np.float32), tiles, blocks,
                np.zeros((nk, d), np.float32), np.zeros((nk, d), np.float32), z.copy(),
                np.zeros(tq, np.float32), np.zeros(tq, np.float32),
                np.zeros(2 * tq * nk + tq, np.float32), 0.5, True, sgemm)


# -- the entry points above the kernel: a paged cache's pools and tables, the layers ----------
@pytest.mark.parametrize("layout", [x for x in LAYOUTS if x != "broadcast"])
@pytest.mark.parametrize("operand", ["q", "k_pool", "v_pool", "block_table", "seq_lens"])
def test_a_paged_cache_reads_every_layout(operand, layout):
    from qkv.engine import paged

    rng = np.random.default_rng(0)
    args = dict(q=rng.standard_normal((2, 4, 1, 8)).astype(np.float32),
                k_pool=rng.standard_normal((6, 2, 4, 8)).astype(np.float32),
                v_pool=rng.standard_normal((6, 2, 4, 8)).astype(np.float32),
                block_table=np.array([[0, 2, 4], [1, 3, 5]]), seq_lens=np.array([10, 7]))
    want = paged.attention(*args.values())
    args[operand] = lay(args[operand], layout)
    np.testing.assert_array_equal(paged.attention(*args.values()), want)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_a_layer_reads_its_input_in_every_layout(layout):
    from qkv import nn

    rng = np.random.default_rng(0)
    mha = nn.MultiHeadAttention(32, 4, rng=np.random.default_rng(1))
    x = rng.standard_normal((2, 400, 32)).astype(np.float32)  # tiled: 400 × 400 per head
    laid = lay(x, layout)
    want, _ = mha.forward(np.array(laid), mask=qkv.causal())
    got, _ = mha.forward(laid, mask=qkv.causal())
    np.testing.assert_allclose(got, want, rtol=0, atol=64 * 2.0**-24 * float(np.abs(want).max()))
