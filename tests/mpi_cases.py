"""Rank-side checks for tests/test_distributed.py: run under mpirun; rank 0 prints one JSON line.

    mpirun -n 3 python tests/mpi_cases.py

Every case builds its full arrays from a seed on every rank, shards them, runs ring attention
forward and backward, and compares this rank's shards with the single-process engine
(qkv.attention / qkv.attention_backward on the full arrays) and with the float64 reference.

Tolerance. helpers.output_atol / lse_atol / grad_atols bound the error of the engine against the
exact result (first-order error analysis of the float32 kernel). The ring computes each shard's
partial with the same kernel and merges partials with weights exp(lse_t − lse) ∈ [0, 1] that sum
to 1, adding O(eps·max|v|) per step, far below that bound: so the ring is within the same bound
of the exact result (checked against the float64 reference), and within twice it of the
engine (triangle inequality). Errors are reported as ratios to these bounds: ≤ 1 passes.
"""

from __future__ import annotations

import json
import sys
import traceback

import numpy as np
from mpi4py import MPI

import qkv
from helpers import grad_atols, kernel_path, lse_atol, output_atol
from qkv import reference
from qkv.distributed import (
    gather,
    positions,
    ring_attention,
    ring_attention_backward,
    shard,
)

COMM = MPI.COMM_WORLD
RANK, SIZE = COMM.Get_rank(), COMM.Get_size()


def arrays(seed, q_shape, k_shape, dv, dtype=np.float32):
    rng = np.random.default_rng(seed)
    q = rng.standard_normal(q_shape).astype(dtype)
    k = rng.standard_normal(k_shape).astype(dtype)
    v = rng.standard_normal((*k_shape[:-1], dv)).astype(dtype)
    dout = rng.standard_normal((*q_shape[:-1], dv)).astype(dtype)
    return q, k, v, dout


def doc_ids(n, seed):
    rng = np.random.default_rng(seed)
    cuts = np.sort(rng.choice(np.arange(1, n), size=5, replace=False))
    return np.searchsorted(cuts, np.arange(n), side="right")  # sorted ids: packed documents


N = 203  # divisible by neither 2, 3, 4, 6 nor the tile sizes


def cases():
    """name → (q, k, v, dout, mask, bias)."""
    b, h = (2, 2)
    out = {}
    out["causal"] = (*arrays(1, (b, h, N, 16), (b, h, N, 16), 16), qkv.causal(), None)
    out["window"] = (*arrays(2, (b, h, N, 16), (b, h, N, 16), 8), qkv.window(17, after=5), None)
    ids = np.stack([doc_ids(N, 3), doc_ids(N, 4)])  # (B, N): a different packing per batch row
    out["documents_causal"] = (*arrays(3, (b, h, N, 16), (b, h, N, 16), 16),
                               qkv.documents(ids) & qkv.causal(), None)
    # padding: batch row 1 has 60 real keys and 50 real queries; its other rows are zeros
    out["padding"] = (*arrays(4, (b, h, N, 16), (b, h, N, 16), 16),
                      qkv.padding([N - 30, 60], query_lengths=[N, 50]), None)
    out["gqa_causal"] = (*arrays(5, (b, 4, N, 16), (b, 2, N, 16), 16), qkv.causal(), None)
    out["gqa_broadcast_batch"] = (*arrays(6, (3, 4, N, 8), (1, 1, N, 8), 8), qkv.causal(), None)
    out["cross_none"] = (*arrays(7, (b, h, 77, 16), (b, h, 190, 16), 12), None, None)
    out["cross_causal"] = (*arrays(8, (b, h, 77, 16), (b, h, 190, 16), 12), qkv.causal(), None)
    # more queries than keys, bottom-right aligned: the first 130 queries see no key at all
    out["cross_masked_rows"] = (*arrays(9, (1, h, 190, 16), (1, h, 60, 16), 16), qkv.causal(),
                                None)
    out["prefix_alibi"] = (*arrays(10, (b, h, N, 16), (b, h, N, 16), 16), qkv.prefix(10),
                           qkv.alibi())
    out["two_d_none"] = (*arrays(11, (N, 32), (N, 32), 32), None, None)
    out["float64_causal"] = (*arrays(12, (b, h, N, 16), (b, h, N, 16), 16, np.float64),
                             qkv.causal(), None)
    out["tiny"] = (*arrays(13, (1, 1, 5, 4), (1, 1, 5, 4), 4), qkv.causal(), None)  # some ranks 0
    return out


def ratio(got, want, atol) -> tuple[float, float]:
    err = float(np.abs(np.asarray(got, np.float64) - np.asarray(want, np.float64)).max()) \
        if np.size(got) else 0.0
    return err, err / atol


def check_case(q, k, v, dout, mask, bias, layout) -> dict:
    """This rank's errors: {quantity: (max abs error, error / bound)}, plus exactness flags."""
    ref_out, ref_lse = qkv.attention(q, k, v, mask=mask, bias=bias, return_lse=True)
    ref_grads = qkv.attention_backward(q, k, v, ref_out, ref_lse, dout, mask=mask, bias=bias)
    exact_out = reference.attention(q, k, v, mask=mask, bias=bias)
    exact_grads = reference.attention_backward(q, k, v, dout, mask=mask, bias=bias)
    bias_mag = None
    if bias is not None:  # alibi's largest magnitude: slope · distance
        bias_mag = np.asarray([np.max(qkv.alibi_slopes(q.shape[-3])) * max(q.shape[-2],
                                                                             k.shape[-2])])

    qs, ks, vs, ds = (shard(x, layout=layout) for x in (q, k, v, dout))
    stats = {}
    out, lse = ring_attention(qs, ks, vs, mask=mask, bias=bias, layout=layout, return_lse=True,
                              stats=stats)
    dq, dk, dv = ring_attention_backward(qs, ks, vs, out, lse, ds, mask=mask, bias=bias,
                                         layout=layout)
    mine_q = lambda x: shard(x, layout=layout)  # noqa: E731
    mine_lse = lambda x: shard(x, layout=layout, axis=-1)  # noqa: E731

    o_tol = output_atol(q, k, v, bias=bias_mag)
    l_tol = lse_atol(q, k, q.dtype, bias=bias_mag)
    g_tol = grad_atols(q, k, v, dout, bias=bias_mag)
    finite = np.isfinite(ref_lse)
    res = {
        "out_vs_engine": ratio(out, mine_q(ref_out), 2 * o_tol),
        "out_vs_exact": ratio(out, mine_q(exact_out), o_tol),
        "lse_vs_engine": ratio(np.where(np.isfinite(lse), lse, 0),
                               mine_lse(np.where(finite, ref_lse, 0)), 2 * l_tol),
        "lse_masked_same": bool(np.array_equal(np.isfinite(lse), mine_lse(finite))),
        "dq_vs_engine": ratio(dq, mine_q(ref_grads[0]), 2 * g_tol[0]),
        "dk_vs_engine": ratio(dk, mine_q(ref_grads[1]), 2 * g_tol[1]),
        "dv_vs_engine": ratio(dv, mine_q(ref_grads[2]), 2 * g_tol[2]),
        "dq_vs_exact": ratio(dq, mine_q(exact_grads[0]), g_tol[0]),
        "dk_vs_exact": ratio(dk, mine_q(exact_grads[1]), g_tol[1]),
        "dv_vs_exact": ratio(dv, mine_q(exact_grads[2]), g_tol[2]),
        # rows with no allowed key: exactly zero output and gradient, lse −inf
        "masked_rows": int((~np.isfinite(lse)).sum()),
        "masked_rows_zero": bool(np.all(out[~np.isfinite(lse)] == 0)
                                 and np.all(dq[~np.isfinite(lse)] == 0)),
        "dtypes": [str(x.dtype) for x in (out, dq, dk, dv)] == [str(q.dtype)] * 4,
        "shapes": [x.shape for x in (out, dq, dk, dv)] == [
            mine_q(ref_out).shape, qs.shape, ks.shape, vs.shape],
        "gather_roundtrip": bool(np.array_equal(gather(out, layout=layout), gather_ref(out, q,
                                                                                     layout))),
        "computed": stats["computed"],
        "skipped": stats["skipped"],
    }
    return res


def gather_ref(out, q, layout):
    """The full output assembled by hand from every rank's shard, to check gather."""
    parts = COMM.allgather(out)
    n = q.shape[-2]
    full = np.empty((*out.shape[:-2], n, out.shape[-1]), out.dtype)
    for r, part in enumerate(parts):
        full[..., positions(n, r, SIZE, layout), :] = part
    return full


def error_cases() -> dict:
    """Bad input on one rank must raise on every rank (else the others wait forever)."""
    q, k, v, _ = arrays(20, (1, 1, 30, 4), (1, 1, 30, 4), 4)
    qs, ks, vs = (shard(x) for x in (q, k, v))
    results = {}
    if RANK == 0:  # two rows short: no layout of 28 positions gives these lengths
        ks_bad, vs_bad = ks[..., :-2, :], vs[..., :-2, :]
    else:
        ks_bad, vs_bad = ks, vs
    for name, call in {
        "wrong_length": lambda: ring_attention(qs, ks_bad, vs_bad),
        "wrong_dtype": lambda: ring_attention(qs.astype(np.float64) if RANK == 0 else qs, ks, vs),
        "raw_mask": lambda: ring_attention(qs, ks, vs, mask=np.ones((30, 30), bool)),
        "bad_layout": lambda: ring_attention(qs, ks, vs, layout="striped"),
    }.items():
        try:
            call()
            results[name] = "no error"
        except (ValueError, TypeError) as exc:
            results[name] = f"{type(exc).__name__}: {exc}"
    return results


def main() -> None:
    only = sys.argv[1].split(",") if len(sys.argv) > 1 else None
    report = {"size": SIZE, "cases": {}, "errors": {}}
    for name, (q, k, v, dout, mask, bias) in cases().items():
        if only and name not in only:
            continue
        for layout in ("zigzag", "contiguous"):
            # the tiled kernel with small tiles: many tiles per shard, tiles spanning chunks
            path = "small" if name in ("tiny", "two_d_none") else "tiled"
            try:
                with kernel_path(path):
                    mine = check_case(q, k, v, dout, mask, bias, layout)
            except Exception:  # report, so that the test shows the rank's traceback
                mine = {"exception": traceback.format_exc()}
            report["cases"][f"{name}/{layout}"] = COMM.gather(mine, root=0)
    report["errors"] = COMM.gather(error_cases(), root=0)
    if RANK == 0:
        print("RESULT " + json.dumps(report), flush=True)


if __name__ == "__main__":
    main()
