"""Checking and normalising the arguments of every attention entry point.

Every public function (the tiled kernel, the float64 reference, ``explain``, the weights and the
backward) starts with :func:`prepare`, so they all accept the same inputs and fail with the same
messages: the argument named, the shapes or dtype received, and what was expected.
"""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass

import numpy as np

from . import dropout as dropout_rule
from .bias import BoundBias, as_bias
from .masks import BoundMask, Layout, Mask
from .shapes import SHAPES, batch_shape

FLOATS = (np.float16, np.float32, np.float64)


@dataclass(frozen=True)
class Problem:
    """Validated attention inputs.

    ``q``, ``k``, ``v`` are broadcast views of shape ``(*batch, H, N, D)`` (2-D inputs gain a
    head axis of 1); ``batch_shape`` is the broadcast of their leading dims. ``q_pos`` and
    ``k_pos`` are the *global* positions of the rows (``arange`` unless a sharded caller says
    otherwise), and the mask and bias are bound to the global sizes in ``layout``.
    """

    q: np.ndarray
    k: np.ndarray
    v: np.ndarray | None
    batch_shape: tuple[int, ...]
    dtype: np.dtype  # the inputs' dtype (and the output's)
    compute: np.dtype  # the dtype the arithmetic runs in (float16 → float32)
    scale: float
    mask: BoundMask | None
    bias: BoundBias | None
    q_pos: np.ndarray
    k_pos: np.ndarray
    layout: Layout
    two_d: bool
    checked_finite: bool = True  # q, k, v (and bias) were checked free of NaN and inf
    softcap: float | None = None  # scores become softcap · tanh(scores / softcap) (Gemma 2)
    dropout: float = 0.0  # dropout rate on the weights (see dropout.py)
    score_mod: object = None  # fn(scores (tq, tk), b, h, q_idx (tq, 1), k_idx (1, tk)), or None
    dropout_seed: int = 0
    # A paged cache's sequence (engine/paged.py): k and v are then shape-only stand-ins and the
    # kernel reads key tiles through ``pages.rows(which, hk, k0, k1)``.
    pages: object = None
    # max |v| over v's finite entries (0 without v): see value_reach
    v_max: float = 0.0

    @property
    def hq(self) -> int:
        return self.q.shape[-3]

    @property
    def hkv(self) -> int:
        return self.k.shape[-3]

    @property
    def group(self) -> int:
        """Query heads per key/value head (GQA): query head h reads kv head h // group."""
        return self.hq // self.hkv

    @property
    def nq(self) -> int:
        return self.q.shape[-2]

    @property
    def nk(self) -> int:
        return self.k.shape[-2]

    @property
    def dk(self) -> int:
        return self.q.shape[-1]

    @property
    def dv(self) -> int:
        return 0 if self.v is None else self.v.shape[-1]

    @property
    def batch_size(self) -> int:
        return math.prod(self.batch_shape)

    @property
    def empty(self) -> bool:
        """No (query, key) pair at all: every row is all-masked."""
        return self.nq == 0 or self.nk == 0 or self.batch_size == 0 or self.hq == 0

    def flat(self, x: np.ndarray) -> np.ndarray:
        """``(*batch, H, N, D)`` → ``(B, H, N, D)`` with one flat batch axis (a view)."""
        # The batch size is given, not inferred: reshape(-1, ...) fails for size-0 arrays.
        return x.reshape(self.batch_size, *x.shape[-3:]) if self.batch_shape else x[None]

    def out_shape(self, last: int) -> tuple[int, ...]:
        return (*self.batch_shape, self.hq, self.nq, last)

    def present(self, x: np.ndarray, heads_axis: int = -3) -> np.ndarray:
        """Drop the head axis added to 2-D inputs, so 2-D in gives 2-D out."""
        return np.squeeze(x, axis=heads_axis) if self.two_d else x

    def quiet(self):
        """NumPy's floating-point warnings off for a problem the caller chose not to have
        checked (check_finite=False): a NaN or inf there is the caller's, and the kernel keeps
        it out of every pair that does not hold it (masked slots never reach a result) — and
        for one whose sums of v may overflow (:attr:`sums_may_overflow`): checked after."""
        if self.checked_finite and not self.sums_may_overflow:
            return contextlib.nullcontext()
        return np.errstate(over="ignore", invalid="ignore", divide="ignore")

    @property
    def value_reach(self) -> float:
        """Nk · max|v| / (1 − dropout): what the kernels' sums of weights (each ≤ 1: a score
        minus its row's max, exponentiated; dropout scales the kept ones) times v's rows can
        reach before their division by the weights' total — past the compute dtype's range
        only for overflow-sized values (see kernel.forward); inf past float64's."""
        return self.v_max * self.nk / (1.0 - self.dropout)

    @property
    def sums_may_overflow(self) -> bool:
        """Could Σ p·v, before its division by Σ p, pass the compute dtype's range? Then the
        kernel checks its output and redoes an overflowed one with v scaled down
        (:func:`qkv.engine.kernel.forward`), its first attempt's overflow warnings off."""
        return self.value_reach > float(np.finfo(self.compute).max)

    def rows(self, idx: np.ndarray) -> tuple[Problem, np.ndarray]:
        """The same problem for the query rows ``idx`` only (global positions kept), and where
        each requested row is in it: ``(problem, at)``, so that ``result[..., at, :]`` has the
        rows in the order asked. The problem holds them sorted and once each: masks and biases
        read a tile's ends as its range (rows=[0, 4, 2] would read as 0…2 otherwise)."""
        from dataclasses import replace

        sorted_rows, at = np.unique(np.asarray(idx, dtype=np.intp), return_inverse=True)
        return replace(self, q=self.q[..., sorted_rows, :], q_pos=self.q_pos[sorted_rows]), at


def as_array(x, name: str) -> np.ndarray:
    """An ndarray of float16/32/64. Integers (lists or arrays) are promoted to float64, as NumPy's
    linear algebra does; bools, strings, None and ragged nesting are refused by name."""
    try:
        arr = x if isinstance(x, np.ndarray) else np.asarray(x)
    except ValueError:
        raise ValueError(
            f"{name} is ragged (rows of different lengths); pass a rectangular array"
        ) from None
    kind = arr.dtype.kind
    if kind in "iu":
        return arr.astype(np.float64)
    if kind == "f" and arr.dtype in FLOATS:
        return arr
    if kind == "b":
        raise TypeError(f"{name} is a bool array; attention needs numbers (float16/32/64)")
    if kind in "USO":
        what = "strings" if kind in "US" else "non-numbers (None, objects or ragged rows)"
        raise TypeError(f"{name} holds {what}; pass an array of numbers, e.g. np.asarray(x, "
                        "dtype=np.float32)")
    raise TypeError(
        f"{name} has dtype {arr.dtype}: attention needs float16, float32 or float64 inputs; "
        f"convert it, e.g. {name}.astype(np.float32)"
    )


def check_like(x, name: str, shape: tuple[int, ...], what: str) -> np.ndarray:
    """An array of exactly ``shape`` (after the 2-D → 3-D lift), for out/lse/dout: the same
    array checks as q, k, v (:func:`as_array`), then the shape."""
    arr = as_array(x, name)
    if arr.shape != shape:
        raise ValueError(f"{name} has shape {arr.shape} but {what} has shape {shape}")
    return arr


def check_lse(lse: np.ndarray, name: str = "lse") -> None:
    """An lse from attention(..., return_lse=True): finite or −inf (a row with no allowed key)."""
    if np.isnan(lse).any() or (lse == np.inf).any():
        raise ValueError(
            f"{name} contains NaN or +inf; pass the lse that attention(..., return_lse=True) "
            "returned (−inf is fine: it marks rows with no allowed key)"
        )


def require_v(v, fn: str) -> None:
    """``fn`` computes with values: v ``(..., Hkv, Nk, Dv)`` may not be left out."""
    if v is None:
        raise TypeError(f"{fn} needs v, the values (..., Hkv, Nk, Dv), got None; for the "
                        "weights alone use qkv.attention_weights(q, k, ...)")


def check_scale(scale, dk: int) -> float:
    if scale is None:
        # The head dimension, never d_model: the lesson's "scaling by the wrong number" mistake.
        return 1.0 / math.sqrt(dk)
    if isinstance(scale, bool) or not isinstance(scale, int | float | np.integer | np.floating):
        raise TypeError(f"scale must be a real number (default 1/sqrt(Dk)), got {scale!r}")
    try:
        value = float(scale)
    except OverflowError:
        raise ValueError(f"scale must be a finite number, got an int with {len(str(scale))} "
                         "digits (beyond float64)") from None
    if not math.isfinite(value):
        raise ValueError(f"scale must be finite, got {scale!r}")
    return value


def _max_abs(x: np.ndarray) -> float:
    """max |x| from two SIMD reductions and no temporary: NaN if x holds a NaN, inf if an inf.
    float16 (whose reductions NumPy emulates, ~5 ns an element: 67 ms for a (8, 4096, 64) q, k
    and v) is read through its bits: |x| is the bits without the sign, ordered as the values,
    with inf at 0x7C00 and NaN above it — one integer pass."""
    if not x.size:
        return 0.0
    if x.dtype == np.float16:
        top = int(np.bitwise_and(x.view(np.uint16), 0x7FFF).max())
        return float("nan") if top > 0x7C00 else float(np.uint16(top).view(np.float16))
    hi, lo = float(x.max()), float(x.min())
    return max(hi, -lo) if not (np.isnan(hi) or np.isnan(lo)) else float("nan")


def finite_max_abs(x: np.ndarray) -> float:
    """max |x| over the finite entries only (0 if none): with check_finite=False a NaN or inf
    may sit in a masked slot, and must not switch the overflow guard off for the rest."""
    with np.errstate(invalid="ignore"):
        return float(np.max(np.abs(x), where=np.isfinite(x), initial=0.0))


def check_softcap(softcap) -> float | None:
    if softcap is None:
        return None
    if isinstance(softcap, bool) or not isinstance(softcap, int | float | np.integer |
                                                       np.floating):
        raise TypeError(f"softcap must be a positive number or None, got {softcap!r}")
    value = float(softcap)
    if not (math.isfinite(value) and value > 0):
        raise ValueError(f"softcap must be a positive finite number (e.g. 50.0), got {softcap!r}")
    return value


def check_range(arrays: dict[str, np.ndarray], magnitudes: dict[str, float], scale: float,
                bias: BoundBias | None, compute: np.dtype, softcap: float | None = None) -> None:
    """Refuse problems whose scores would overflow the compute dtype.

    |q·k·scale| ≤ Dk · max|q| · max|k| · |scale|; with the bias's magnitude added, that must stay
    well inside the dtype (a quarter of its largest number, room for the softmax's subtraction).
    Otherwise an overflowed score (±inf) would read as a masked pair — a silent wrong answer.
    """
    q = arrays["q"]
    qmax, kmax = (m if math.isfinite(m) else finite_max_abs(arrays[name])
                  for name, m in (("q", magnitudes["q"]), ("k", magnitudes["k"])))
    # (Non-finite entries are the caller's, with check_finite=False: they reach only the pairs
    # that hold them — masked slots, or NaN out as the formula says. The finite rest is guarded.)
    score = q.shape[-1] * qmax * kmax * abs(scale)
    if softcap is not None and score > float(np.finfo(compute).max) / 4:
        raise ValueError(
            f"q·k·scale can reach {score:.3g}, past {compute}'s range even before the softcap: "
            "rescale q, k or scale, or use float64 inputs")
    score = score if softcap is None else min(score, softcap)
    extra = bias.magnitude() if bias is not None else 0.0
    limit = float(np.finfo(compute).max) / 4
    if score + extra > limit:
        culprit = (f"a bias of magnitude {extra:.3g}" if extra > score else
                   f"q·k·scale (Dk={q.shape[-1]}, max|q|={qmax:.3g}, max|k|={kmax:.3g}, "
                   f"scale={scale:.3g})")
        raise ValueError(
            f"the scores would overflow {compute}: {culprit} can reach {score + extra:.3g}, past "
            f"{limit:.3g}. Rescale q, k, scale or the bias (softmax is shift-invariant, so a bias "
            f"can be shifted), or use float64 inputs"
        )


def check_narrowing(wide: np.ndarray, narrow: np.ndarray, name: str, fix: str) -> None:
    """Refuse a result that overflowed when it was rounded from the compute dtype to the output
    dtype (float16 results are computed in float32): finite in ``wide``, inf in ``narrow`` is
    an overflow, never an answer — with ``check_finite=False`` too (an inf or NaN the caller
    passed in stays non-finite in ``wide`` and is the caller's). ``fix`` says what to change."""
    if narrow.dtype == wide.dtype or narrow.size == 0 or np.isfinite(narrow).all():
        return
    if (np.isfinite(wide) & ~np.isfinite(narrow)).any():
        dtype = narrow.dtype
        raise ValueError(
            f"{name} overflows {dtype}: the {wide.dtype} result reaches past "
            f"{float(np.finfo(dtype).max):g}, the largest {dtype}; {fix}")


def output_fix(p: Problem) -> str:
    """What to change when the output overflows its dtype (see check_narrowing)."""
    scaled = (f" scaled by 1/(1 − dropout) = {1 / (1 - p.dropout):.3g}" if p.dropout else "")
    return f"its values are blends of v{scaled}: pass float32 q, k, v (or rescale v)"


def _two_d(arrays: dict[str, np.ndarray]) -> bool:
    for name, arr in arrays.items():
        if arr.ndim < 2:
            raise ValueError(
                f"{name} has shape {arr.shape}: it needs at least 2 dims (N, D); full form {SHAPES}"
            )
    dims = {name: arr.ndim for name, arr in arrays.items()}
    two_d = all(d == 2 for d in dims.values())
    if any(d == 2 for d in dims.values()) and not two_d:
        raise ValueError(
            "q, k and v mix 2-D (N, D) and batched inputs ("
            + ", ".join(f"{n} {a.shape}" for n, a in arrays.items())
            + f"): use 2-D for all of them (one head), or the full form {SHAPES}"
        )
    return two_d


def _check_shapes(qa, ka, va) -> None:
    hq, _, dk = qa.shape[-3:]
    hkv, nk, dk_k = ka.shape[-3:]
    if dk_k != dk:
        raise ValueError(
            f"q has Dk={dk} features but k has {dk_k} (shapes q {qa.shape}, k {ka.shape}): "
            f"queries and keys must have the same last dim; {SHAPES}"
        )
    if dk == 0:
        raise ValueError(f"q and k have Dk=0 features (q {qa.shape}): attention needs Dk ≥ 1")
    if va is not None:
        hv, nv, _ = va.shape[-3:]
        if hv != hkv:
            raise ValueError(
                f"k has {hkv} heads but v has {hv} heads (shapes k {ka.shape}, v {va.shape}): "
                "keys and values come in pairs, one value head per key head"
            )
        if nv != nk:
            raise ValueError(
                f"k has Nk={nk} positions but v has {nv} (shapes k {ka.shape}, v {va.shape}): "
                "every key needs a value (axis -2 must match)"
            )
    if hkv == 0:
        raise ValueError(
            f"k has 0 heads (axis -3 of k {ka.shape}): attention needs at least one key/value "
            "head; for an empty batch, put the 0 in a batch axis before the heads, e.g. "
            "(0, H, N, D)")
    if hq % hkv:
        raise ValueError(
            f"q has {hq} heads but k has {hkv}: the number of query heads must be a multiple of "
            "the key/value heads (grouped-query attention)"
        )


def _check_mask(mask) -> Mask | None:
    if isinstance(mask, np.ndarray) or isinstance(mask, list | tuple):
        raise TypeError(
            "mask got a raw array, whose polarity is ambiguous: say which you mean with "
            "mask=qkv.allow(array) (True = may attend, as in torch SDPA) or "
            "mask=qkv.deny(array) (True = masked out, as in torch.nn.MultiheadAttention)"
        )
    if mask is not None and not isinstance(mask, Mask):
        raise TypeError(
            f"mask must be a qkv mask (qkv.causal(), qkv.padding(...), qkv.allow(array), ...), "
            f"got {type(mask).__name__}"
        )
    return mask


def prepare(q, k, v=None, mask=None, bias=None, scale=None, *, check_finite=True,
            positions=None, softcap=None, dropout=0.0, dropout_seed=None,
            score_mod=None, known=None) -> Problem:
    """Validate the arguments of an attention call; see :func:`qkv.attention` for their meaning.

    ``positions=(q_pos, k_pos, nq_total, nk_total)`` is for sharded callers: the rows given are
    at these global positions of sequences of these global lengths. ``known={"k": m, ...}``
    gives max |x| over the finite entries of inputs passed as shape-only stand-ins (a paged
    cache's pools, which the caller scanned and checked): they are not read here.
    """
    arrays = {"q": as_array(q, "q"), "k": as_array(k, "k")}
    if v is not None:
        arrays["v"] = as_array(v, "v")
    given = dict(arrays)  # before broadcasting, for the finiteness and range checks
    two_d = _two_d(arrays)
    if two_d:  # one head, as in the lesson: add the head axis
        arrays = {name: arr[None] for name, arr in arrays.items()}

    dtypes = {name: arr.dtype for name, arr in arrays.items()}
    if len(set(dtypes.values())) > 1:
        raw = {"q": q, "k": k, "v": v}

        def shown(name):
            was = getattr(raw[name], "dtype", None)
            promoted = f" (promoted from {was})" if was is not None and was != dtypes[name] else ""
            return f"dtype {dtypes[name]}{promoted}"

        odd = next(n for n in dtypes if dtypes[n] != dtypes["q"])
        raise TypeError(
            f"{odd} has {shown(odd)} but q has {shown('q')}: q, k and v must share one dtype; "
            f"convert with {odd}.astype(q.dtype)"
        )
    qa, ka, va = arrays["q"], arrays["k"], arrays.get("v")
    _check_shapes(qa, ka, va)
    hq, nq, dk = qa.shape[-3:]
    hkv, nk, _ = ka.shape[-3:]
    batch = batch_shape({n: a.shape[:-3] for n, a in arrays.items()})
    qa = np.broadcast_to(qa, (*batch, hq, nq, dk))
    ka = np.broadcast_to(ka, (*batch, hkv, nk, dk))
    if va is not None:
        va = np.broadcast_to(va, (*batch, hkv, nk, va.shape[-1]))

    mask = _check_mask(mask)
    bias_rule = as_bias(bias)
    scale = check_scale(scale, dk)
    softcap = check_softcap(softcap)
    dropout, dropout_seed = dropout_rule.check(dropout, dropout_seed)
    if score_mod is not None and not callable(score_mod):
        raise TypeError(f"score_mod must be a callable fn(scores, b, h, q_idx, k_idx), got "
                        f"{type(score_mod).__name__}")
    if positions is None:
        q_pos, k_pos, nq_total, nk_total = np.arange(nq), np.arange(nk), nq, nk
    else:
        q_pos, k_pos, nq_total, nk_total = positions
    layout = Layout(batch, hq, nq_total, nk_total)
    bound_mask = mask.bind(layout) if mask is not None else None
    bound_bias = bias_rule.bind(layout) if bias_rule is not None else None

    known = known or {}
    magnitudes = {name: known[name] if name in known else _max_abs(arr)  # one pass each
                  for name, arr in given.items()}
    if check_finite:
        for name in [n for n in given if n not in known]:
            if not math.isfinite(magnitudes[name]):
                raise ValueError(
                    f"{name} contains NaN or inf; fix the input (or pass check_finite=False to "
                    "skip this check)"
                )
        if bias_rule is not None:
            bias_rule.check_finite()
    dtype = qa.dtype
    compute = np.dtype(np.float32) if dtype == np.float16 else dtype
    check_range(given, magnitudes, scale, bound_bias, compute, softcap)
    v_max = 0.0
    if "v" in given:
        v_max = magnitudes["v"]
        v_max = v_max if math.isfinite(v_max) else finite_max_abs(given["v"])
    return Problem(
        q=qa, k=ka, v=va, batch_shape=batch, dtype=dtype, compute=compute, scale=scale,
        mask=bound_mask, bias=bound_bias, q_pos=np.asarray(q_pos, dtype=np.int64),
        k_pos=np.asarray(k_pos, dtype=np.int64), layout=layout, two_d=two_d,
        checked_finite=bool(check_finite), softcap=softcap, dropout=dropout,
        dropout_seed=dropout_seed, score_mod=score_mod, v_max=v_max,
    )
