"""Where one worker's time goes: the kernel's tile loop on one head, one thread, timed part by
part — the score GEMM ``K Qᵀ``, the compiled tile step, the ``P V`` GEMM — beside the same GEMMs
alone (one tile, repeated: cache-warm) and beside ``qkv.attention`` and torch's SDPA on the same
head with one thread each.

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python benchmarks/tile_breakdown.py

The loop is the kernel's own recurrence (FlashAttention-2's, ``qkv.engine.step``'s contract) on
the default tile sizes of :class:`qkv.engine.KernelConfig`, written out here so each part can be
timed, with the GEMMs :mod:`qkv.engine.gemm` chooses (``--gemm numpy`` for NumPy's BLAS).
Best of ``--rounds`` passes over the head.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import threadpoolctl

import qkv
from qkv.engine import KernelConfig, gemm, step
from qkv.engine.kernel import ACC_PAD


def best(fn, rounds: int) -> float:
    fn()
    times = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def positive(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return int(text)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=positive, default=2048, help="queries = keys (2048)")
    parser.add_argument("--d", type=positive, default=64, help="head dimension (64)")
    parser.add_argument("--rounds", type=positive, default=7)
    parser.add_argument("--tile-q", type=positive, default=None,
                        help="queries per tile (default: KernelConfig's)")
    parser.add_argument("--tile-k", type=positive, default=None,
                        help="keys per tile (default: KernelConfig's, unmasked)")
    parser.add_argument("--gemm", choices=gemm.GEMMS, default="auto",
                        help="who computes the tile GEMMs (default auto: see qkv.engine.gemm)")
    args = parser.parse_args(argv)
    n, d = args.n, args.d
    cfg = KernelConfig(gemm=args.gemm)
    use = cfg.resolved_gemm()
    tq = min(args.tile_q or cfg.tile_q, n)
    tk = min(args.tile_k or cfg.key_tile(masked=False), n)
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((n, d), dtype=np.float32) for _ in range(3))
    q_scaled = q * np.float32(d ** -0.5)
    compiled = step.get("compiled")
    parts = np.zeros(3)  # seconds: score GEMM, step, P·V GEMM

    def head() -> None:
        s_buf = np.empty(tk * tq, np.float32)
        out = np.zeros((n, d), np.float32)
        for q0 in range(0, n, tq):
            rows = min(tq, n - q0)
            m = np.full((1, rows), -np.inf, np.float32)  # running max
            row_sum = np.zeros((1, rows), np.float32)
            acc_t = np.zeros((d, rows), np.float32)  # accᵀ (D, tq), as the kernel keeps it
            for k0 in range(0, n, tk):
                cols = min(tk, n - k0)
                t0 = time.perf_counter()
                s = gemm.matmul(k[k0:k0 + cols], q_scaled[q0:q0 + rows].T,
                                out=s_buf[:cols * rows].reshape(cols, rows), use=use)  # (tk, tq)
                t1 = time.perf_counter()
                compiled.online_softmax(s[None], None, m, row_sum, acc_t[None])
                t2 = time.perf_counter()
                gemm.matmul(v[k0:k0 + cols].T, s, acc_t, accumulate=True, use=use)  # Vᵀ Pᵀ
                t3 = time.perf_counter()
                parts[:] += (t1 - t0, t2 - t1, t3 - t2)
            out[q0:q0 + rows] = (acc_t / row_sum).T

    flops = 2 * n * n * d  # one GEMM over the whole head
    with threadpoolctl.threadpool_limits(1, "blas"):
        head()
        rounds = []
        for _ in range(args.rounds):
            parts[:] = 0
            t0 = time.perf_counter()
            head()
            rounds.append((time.perf_counter() - t0, *parts))
        total, s_gemm, step_s, pv_gemm = min(rounds)
        s_tile = np.empty((tk, tq), np.float32)
        alone_s = best(lambda: gemm.matmul(k[:tk], q_scaled[:tq].T, out=s_tile, use=use), 20)
        p_tile = np.abs(s_tile)
        pv_out = np.zeros((d, tq), np.float32)
        alone_pv = best(lambda: gemm.matmul(v[:tk].T, p_tile, pv_out, accumulate=True, use=use),
                        20)

        def store(pad: int) -> float:
            """A query block's store, out = (accᵀ)ᵀ / ℓ, from accᵀ rows of tq + pad floats."""
            acc_rows = rng.standard_normal((d, tq + pad), dtype=np.float32)  # accᵀ (D, tq + pad)
            row_sum = np.full(tq, 2, np.float32)
            dst = np.empty((tq, d), np.float32)
            return best(lambda: np.divide(acc_rows[:, :tq].T, row_sum[:, None], out=dst), 200)

        store_padded, store_plain = store(ACC_PAD), store(0)
        with qkv.engine.kernel_config(workers=1, gemm=args.gemm):
            q4, k4, v4 = (x[None, None] for x in (q, k, v))
            whole = best(lambda: qkv.attention(q4, k4, v4), args.rounds)
    tile_flops = 2 * tq * tk * d
    print(f"one head, N={n}, D={d}, float32, one thread, tiles {tq} queries × {tk} keys; "
          f"GEMMs: {gemm.describe(args.gemm)}")
    print(f"  score GEMM  {s_gemm * 1e3:6.2f} ms  {flops / s_gemm / 1e9:5.1f} GFLOP/s in the loop,"
          f" {tile_flops / alone_s / 1e9:5.1f} alone")
    print(f"  tile step   {step_s * 1e3:6.2f} ms  {step_s / (n * n) * 1e9:5.2f} ns a score "
          f"({step_s / total:.0%} of the loop)")
    print(f"  P·V GEMM    {pv_gemm * 1e3:6.2f} ms  {flops / pv_gemm / 1e9:5.1f} GFLOP/s in the "
          f"loop, {tile_flops / alone_pv / 1e9:5.1f} alone")
    print(f"  the loop    {total * 1e3:6.2f} ms  {2 * flops / total / 1e9:5.1f} GFLOP/s")
    print(f"  a block's store into the output: {store_padded * 1e6:5.1f} µs with accᵀ's rows "
          f"padded by {ACC_PAD} floats (as the kernel keeps them), {store_plain * 1e6:5.1f} µs not")
    print(f"  qkv.attention, one worker: {whole * 1e3:6.2f} ms")
    try:
        import torch
    except ImportError:
        print("  torch: not installed")
        return 0
    torch.set_num_threads(1)
    tq4, tk4, tv4 = (torch.from_numpy(x[None, None]) for x in (q, k, v))  # 4-D: torch's fast path
    sdpa = best(lambda: torch.nn.functional.scaled_dot_product_attention(tq4, tk4, tv4),
                args.rounds)
    print(f"  torch SDPA, one thread:    {sdpa * 1e3:6.2f} ms  ({2 * flops / sdpa / 1e9:5.1f} "
          f"GFLOP/s; qkv / torch = {whole / sdpa:.2f})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
