"""What O(n²) costs, measured: time and peak memory of attention vs a linear-time scan.

The seed: "comparing every query against every key is O(n²) in sequence length, which is
exactly the scaling problem that motivated the state-space alternatives in Mamba".

For n = min_n, 2·min_n, … max_n, one head of width d (self-attention, Nq = Nk = n):

- ``naive``        softmax(Q Kᵀ/√d) V written literally: the n × n matrix (while it fits)
- ``qkv dense``    ``qkv.attention(q, k, v)``: tiled, the n × n matrix is never built
- ``qkv causal``   ``qkv.attention(q, k, v, mask=qkv.causal())``: half the tiles are skipped
- ``qkv window``   ``qkv.attention(q, k, v, mask=qkv.window(256))``: O(n · 256)
- ``ssm scan``     a diagonal linear state-space recurrence (state 16 per channel):
                   h_t = a ⊙ h_{t−1} + b ⊙ x_t,  y_t = Σ c ⊙ h_t   — O(n), the lesson's
                   alternative, as a plain NumPy loop over t
- ``selective scan`` (on request: ``--methods``) Mamba's S6, ``qkv.nn.SelectiveSSM`` with 16
                   states per channel: input-dependent Δ, B, C, the chunked scan, run block
                   by block as at inference — O(n) time, O(n·d) memory for x and y

Time is the best of a few calls (one call once a call takes over a second); peak memory is
what :mod:`tracemalloc` sees NumPy allocate during one call, beyond the inputs. Each curve's
slope is fitted on log n vs log time (and log memory) for n ≥ ``fit_from``: ≈ 2 means O(n²),
≈ 1 means O(n). A curve stops growing once its next call would take more than ``max_seconds``
(extrapolated from the last two points).

    python -m qkv.tasks.scaling --json scaling.json --plot scaling.png
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path

import numpy as np

METHODS = ("naive", "qkv dense", "qkv causal", "qkv window", "ssm scan")
EXTRA_METHODS = ("selective scan",)  # measured when named in --methods, not by default
WINDOW = 256
STATE = 16


def naive_attention(q, k, v):
    """softmax(q kᵀ/√d) v with the full n × n matrix, updated in place (one n × n buffer)."""
    s = q @ k.T  # (n, n)
    s *= q.dtype.type(1.0 / math.sqrt(q.shape[-1]))
    s -= s.max(axis=1, keepdims=True)
    np.exp(s, out=s)
    s /= s.sum(axis=1, keepdims=True)
    return s @ v  # (n, d)


def ssm_scan(x, a, b, c):
    """y_t = Σ_s c ⊙ h_t with h_t = a ⊙ h_{t−1} + b ⊙ x_t: x (n, d); a, b, c (d, N) → (n, d)."""
    n = x.shape[0]
    h = np.zeros_like(a)  # (d, N)
    y = np.empty_like(x)
    tmp = np.empty_like(a)
    for t in range(n):
        np.multiply(b, x[t, :, None], out=tmp)
        h *= a
        h += tmp
        np.multiply(c, h, out=tmp)
        tmp.sum(axis=1, out=y[t])
    return y


def call(method: str, inputs) -> Callable[[], object]:
    """A no-argument call of ``method`` on ``inputs`` (from :func:`make_inputs`)."""
    import qkv

    q, k, v, a, b, c = inputs
    if method == "selective scan":
        from ..nn import SelectiveSSM

        layer = SelectiveSSM(v.shape[-1], STATE, rng=0, dtype=v.dtype)
        return lambda: layer(v[None])
    return {
        "naive": lambda: naive_attention(q, k, v),
        "qkv dense": lambda: qkv.attention(q, k, v),
        "qkv causal": lambda: qkv.attention(q, k, v, mask=qkv.causal()),
        "qkv window": lambda: qkv.attention(q, k, v, mask=qkv.window(WINDOW)),
        "ssm scan": lambda: ssm_scan(v, a, b, c),
    }[method]


def make_inputs(n: int, d: int, dtype, rng):
    """q, k, v ``(n, d)`` and the scan's a, b, c ``(d, STATE)``."""
    q, k, v = (rng.standard_normal((n, d)).astype(dtype) for _ in range(3))
    a = rng.uniform(0.9, 0.999, (d, STATE)).astype(dtype)
    b, c = (rng.standard_normal((d, STATE)).astype(dtype) / STATE for _ in range(2))
    return q, k, v, a, b, c


def measure(fn: Callable[[], object], repeats: int, memory: bool = True, *,
            warm: bool = True) -> tuple[float, int | None]:
    """(best seconds over ``repeats`` calls — one if a call takes over 1 s —, peak bytes, or
    None when ``memory`` is False: tracing allocations costs another call). ``repeats=0``:
    memory only (seconds NaN) — the peak is the same however loaded the machine, the time is
    not; ``warm``: call once first (the first call of a method compiles and imports, and its
    peak is not the method's) — once per method is enough, the compiled code does not depend
    on n."""
    best = math.inf if repeats else math.nan
    if not repeats and warm:
        fn()
    collecting = gc.isenabled()
    if not memory:  # a quick look (the explorer): no full collection per call, none during one
        gc.disable()
    try:
        for i in range(repeats):
            if memory:
                gc.collect()
            t0 = time.perf_counter()
            fn()
            best = min(best, time.perf_counter() - t0)
            if best > 1.0 and i == 0:
                break
    finally:
        if collecting:
            gc.enable()
    if not memory:
        return best, None
    gc.collect()
    # The peak is measured with one worker thread: with more, it depends on how the workers'
    # tiles happen to overlap in time (±0.3 MiB between runs at n = 8,192), and a figure that
    # does not reproduce is not a figure. Each further worker adds its own tile buffers.
    from qkv.engine import kernel_config, release_scratch

    release_scratch()  # the tiles a call allocates count, as in a fresh process's first call
    tracemalloc.start()
    try:
        with kernel_config(workers=1):
            tracemalloc.reset_peak()
            base = tracemalloc.get_traced_memory()[0]
            fn()
            peak = tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()
    return best, int(peak)


SHIPPED = Path(__file__).parent / "data" / "scaling.json"
# what wrote SHIPPED (docs/figures/scaling.json, same run): the command's defaults, n = 256 … 65,536
SHIPPED_COMMAND = "qkv bench scaling --json scaling.json"


def shipped() -> dict:
    """The results of ``SHIPPED_COMMAND`` shipped with qkv (the JSON :func:`run` returns)."""
    return json.loads(SHIPPED.read_text(encoding="utf-8"))


def slope(ns, ys) -> float | None:
    """Least-squares slope of log y against log n (None with fewer than two points)."""
    if len(ns) < 2:
        return None
    return float(np.polyfit(np.log(ns), np.log(np.maximum(ys, 1e-12)), 1)[0])


def run(ns: list[int], d: int, dtype, methods, *, max_seconds: float, naive_max_bytes: int,
        fit_from: int, repeats: int, seed: int, on_point=None) -> dict:
    rng = np.random.default_rng(seed)
    out = {"config": {"ns": ns, "d": d, "dtype": np.dtype(dtype).name, "window": WINDOW,
                      "state": STATE, "max_seconds": max_seconds,
                      "naive_max_bytes": naive_max_bytes, "fit_from": fit_from,
                      "repeats": repeats, "seed": seed},
           "methods": {}}
    for method in methods:
        points, stopped = [], None
        for n in ns:
            if method == "naive" and n * n * np.dtype(dtype).itemsize > naive_max_bytes:
                stopped = f"n × n matrix of {n} would exceed {naive_max_bytes} bytes"
                break
            if repeats and len(points) >= 2:  # extrapolate the next call from the last two
                (n1, t1), (n2, t2) = ((p["n"], p["seconds"]) for p in points[-2:])
                growth = math.log(max(t2, 1e-9) / max(t1, 1e-9)) / math.log(n2 / n1)
                if t2 * (n / n2) ** max(growth, 1.0) > max_seconds:
                    stopped = f"the call at n={n} would take over {max_seconds} s"
                    break
            seconds, peak = measure(call(method, make_inputs(n, d, dtype, rng)), repeats,
                                    warm=not points)
            points.append({"n": n, "seconds": None if math.isnan(seconds) else seconds,
                           "peak_bytes": peak})
            if on_point:
                on_point(method, points[-1])
        fit = [p for p in points if p["n"] >= fit_from]
        out["methods"][method] = {
            "points": points, "stopped": stopped,
            "time_slope": slope([p["n"] for p in fit], [p["seconds"] for p in fit])
            if repeats else None,
            "memory_slope": slope([p["n"] for p in fit], [p["peak_bytes"] for p in fit]),
        }
    return out


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value}")
    return value


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="qkv bench scaling", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--min-n", type=_positive, default=256, help="shortest sequence (256)")
    p.add_argument("--max-n", type=_positive, default=65536, help="longest sequence (65536)")
    p.add_argument("--d", type=_positive, default=64, help="head width (64)")
    p.add_argument("--dtype", choices=("float32", "float64"), default="float32")
    p.add_argument("--methods", default=",".join(METHODS),
                   help=f"comma-separated subset of: {', '.join(METHODS + EXTRA_METHODS)}")
    p.add_argument("--max-seconds", type=float, default=15.0,
                   help="stop a curve when its next call would take longer (15)")
    p.add_argument("--naive-max-mib", type=_positive, default=512,
                   help="largest n × n matrix the naive method may build, in MiB (512)")
    p.add_argument("--fit-from", type=_positive, default=2048,
                   help="fit slopes on n ≥ this (2048)")
    p.add_argument("--repeats", type=_positive, default=3, help="calls per point, best kept")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--memory-only", action="store_true",
                   help="peak memory only: one call per point, no timing, no time limit (the "
                        "memory figures are exact, so they need no quiet machine)")
    p.add_argument("--quick", action="store_true",
                   help="n = 256 … 2048, one call per point (for tests)")
    p.add_argument("--json", metavar="PATH", help="write the measurements as JSON")
    p.add_argument("--plot", metavar="PATH",
                   help="write the log–log plot (.png/.svg; needs matplotlib: qkv[plot])")
    return p


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.quick:
        args.max_n, args.repeats, args.fit_from = min(args.max_n, 2048), 1, min(args.fit_from,
                                                                                  512)
    if args.memory_only:
        if args.plot:
            parser.error("--plot draws time and memory; leave it out with --memory-only")
        args.repeats = 0
    if args.min_n > args.max_n:
        parser.error(f"--min-n ({args.min_n}) must be ≤ --max-n ({args.max_n})")
    if not args.max_seconds > 0:
        parser.error(f"--max-seconds must be > 0, got {args.max_seconds}")
    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    unknown = [m for m in methods if m not in METHODS + EXTRA_METHODS]
    if unknown or not methods:
        parser.error(f"--methods: unknown {unknown or 'empty list'}; choose from "
                     f"{', '.join(METHODS + EXTRA_METHODS)}")
    if args.plot:
        from .._install import missing, missing_message

        if missing("matplotlib"):
            parser.error(missing_message("--plot", ["matplotlib"]))
    ns = []
    n = args.min_n
    while n <= args.max_n:
        ns.append(n)
        n *= 2

    def on_point(method, p):
        time = "—" if p["seconds"] is None else f"{p['seconds'] * 1e3:.2f} ms"
        print(f"{method:>11}  n={p['n']:>6}  {time:>13}  "
              f"peak {p['peak_bytes'] / 2**20:9.2f} MiB", flush=True)

    result = run(ns, args.d, np.dtype(args.dtype), methods, max_seconds=args.max_seconds,
                 naive_max_bytes=args.naive_max_mib * 2**20, fit_from=args.fit_from,
                 repeats=args.repeats, seed=args.seed, on_point=on_point)
    print(f"\nfitted slopes (log–log, n ≥ {args.fit_from}):  time   memory")
    for method, series in result["methods"].items():
        ts, ms = series["time_slope"], series["memory_slope"]
        print(f"  {method:>11}                    "
              f"{'—' if ts is None else f'{ts:5.2f}'}  {'—' if ms is None else f'{ms:5.2f}'}"
              + (f"   (stopped: {series['stopped']})" if series["stopped"] else ""))
    if args.json:
        path = Path(args.json)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
        print(f"numbers: {path}")
    if args.plot:
        from .plots import scaling_plot

        print(f"plot: {scaling_plot(result, args.plot)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
