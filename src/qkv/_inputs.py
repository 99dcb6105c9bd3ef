"""Checking and normalising the arguments of every attention entry point.

Every public function (the tiled kernel, the float64 reference, ``explain``, the weights and the
backward) starts here, so they all accept the same inputs and fail with the same messages: the
argument named, the shapes or dtype received, and what was expected.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .bias import Bias, as_bias
from .masks import Layout, Mask

FLOATS = (np.float16, np.float32, np.float64)
SHAPES = "q (..., Hq, Nq, Dk), k (..., Hkv, Nk, Dk), v (..., Hkv, Nk, Dv)"


@dataclass
class Problem:
    """Validated attention inputs.

    ``q``, ``k``, ``v`` are broadcast views of shape ``(*batch, H, N, D)`` (2-D inputs gain a
    head axis of 1); ``batch_shape`` is the broadcast of their leading dims. ``q_pos`` and
    ``k_pos`` are the *global* positions of the rows (``arange`` unless a sharded caller says
    otherwise), and ``layout`` holds the global sizes the mask and bias are bound to.
    """

    q: np.ndarray
    k: np.ndarray
    v: np.ndarray | None
    batch_shape: tuple[int, ...]
    dtype: np.dtype  # the inputs' dtype (and the output's)
    compute: np.dtype  # the dtype the arithmetic runs in (float16 → float32)
    scale: float
    mask: Mask | None
    bias: Bias | None
    q_pos: np.ndarray
    k_pos: np.ndarray
    layout: Layout
    two_d: bool

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
    def batch_size(self) -> int:
        return math.prod(self.batch_shape)

    def batch_index(self, b: int) -> tuple[int, ...]:
        """Multi-index into the batch dims of the flat batch number ``b``."""
        return tuple(int(i) for i in np.unravel_index(b, self.batch_shape)) if self.batch_shape \
            else ()

    def out_shape(self, last: int) -> tuple[int, ...]:
        return (*self.batch_shape, self.hq, self.nq, last)

    def present(self, x: np.ndarray, heads_axis: int = -3) -> np.ndarray:
        """Drop the head axis added to 2-D inputs, so 2-D in gives 2-D out."""
        return np.squeeze(x, axis=heads_axis) if self.two_d else x


def as_array(x, name: str) -> np.ndarray:
    """An ndarray of float16/32/64. Lists and scalars (no dtype stated) become float64."""
    if isinstance(x, np.ndarray):
        arr = x
    else:
        try:
            arr = np.asarray(x, dtype=np.float64)
        except (TypeError, ValueError) as exc:
            raise TypeError(f"{name} must be an array of numbers, got {type(x).__name__}: {exc}") \
                from None
    if arr.dtype not in FLOATS:
        raise TypeError(
            f"{name} has dtype {arr.dtype}: attention needs float16, float32 or float64 inputs; "
            f"convert it, e.g. {name}.astype(np.float32)"
        )
    return arr


def check_scale(scale, dk: int) -> float:
    if scale is None:
        # The head dimension, never d_model: the seeds' "scaling by the wrong number" mistake.
        return 1.0 / math.sqrt(dk)
    if isinstance(scale, bool) or not isinstance(scale, int | float | np.integer | np.floating):
        raise TypeError(f"scale must be a real number (default 1/sqrt(Dk)), got {scale!r}")
    if not math.isfinite(float(scale)):
        raise ValueError(f"scale must be finite, got {scale!r}")
    return float(scale)


def _batch(shapes: dict[str, tuple[int, ...]]) -> tuple[int, ...]:
    try:
        return np.broadcast_shapes(*shapes.values())
    except ValueError:
        described = ", ".join(f"{n} has batch shape {s}" for n, s in shapes.items())
        raise ValueError(
            f"batch dims do not broadcast: {described}; the leading dims (before heads) must be "
            "equal or 1"
        ) from None


def prepare(q, k, v=None, mask=None, bias=None, scale=None, *, check_finite=True,
            positions=None) -> Problem:
    """Validate the arguments of an attention call; see :func:`qkv.attention` for their meaning.

    ``positions=(q_pos, k_pos, nq_total, nk_total)`` is for sharded callers: the rows given are
    at these global positions of sequences of these global lengths.
    """
    arrays = {"q": as_array(q, "q"), "k": as_array(k, "k")}
    if v is not None:
        arrays["v"] = as_array(v, "v")
    given = dict(arrays)  # before broadcasting, for the finiteness check

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
    if two_d:  # one head, as in the seeds: add the head axis
        arrays = {name: arr[None] for name, arr in arrays.items()}

    dtypes = {name: arr.dtype for name, arr in arrays.items()}
    if len(set(dtypes.values())) > 1:
        odd = [n for n in dtypes if dtypes[n] != dtypes["q"]]
        raise TypeError(
            f"{odd[0]} has dtype {dtypes[odd[0]]} but q has dtype {dtypes['q']}: q, k and v must "
            f"share one dtype; convert with {odd[0]}.astype(q.dtype)"
        )
    qa, ka = arrays["q"], arrays["k"]
    va = arrays.get("v")
    hq, nq, dk = qa.shape[-3:]
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
    if hkv == 0 or hq % hkv:
        raise ValueError(
            f"q has {hq} heads but k has {hkv}: the number of query heads must be a multiple of "
            "the key/value heads (grouped-query attention)"
        )
    batch = _batch({n: a.shape[:-3] for n, a in arrays.items()})
    qa = np.broadcast_to(qa, (*batch, hq, nq, dk))
    ka = np.broadcast_to(ka, (*batch, hkv, nk, dk))
    if va is not None:
        va = np.broadcast_to(va, (*batch, hkv, nk, va.shape[-1]))

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
    bias_rule = as_bias(bias)

    if positions is None:
        q_pos, k_pos, nq_total, nk_total = np.arange(nq), np.arange(nk), nq, nk
    else:
        q_pos, k_pos, nq_total, nk_total = positions
    layout = Layout(tuple(batch), hq, nq_total, nk_total)
    bound_mask = mask.bind(layout) if mask is not None else None
    bound_bias = bias_rule.bind(layout) if bias_rule is not None else None

    if check_finite:
        for name, arr in given.items():
            if not np.isfinite(arr).all():
                raise ValueError(
                    f"{name} contains NaN or inf; fix the input (or pass check_finite=False to "
                    "skip this check)"
                )
        if bias_rule is not None:
            bias_rule.check_finite()

    dtype = qa.dtype
    return Problem(
        q=qa, k=ka, v=va, batch_shape=tuple(batch), dtype=dtype,
        compute=np.dtype(np.float32) if dtype == np.float16 else dtype,
        scale=check_scale(scale, dk), mask=bound_mask, bias=bound_bias,
        q_pos=q_pos, k_pos=k_pos, layout=layout, two_d=two_d,
    )


def check_like(x, name: str, shape: tuple[int, ...], what: str) -> np.ndarray:
    """An array of exactly ``shape`` (after the 2-D → 3-D lift), for out/lse/dout/rows."""
    arr = np.asarray(x)
    if arr.shape != shape:
        raise ValueError(f"{name} has shape {arr.shape} but {what} has shape {shape}")
    return arr


def unbroadcast(grad: np.ndarray, shape: tuple[int, ...], two_d: bool) -> np.ndarray:
    """Sum a gradient over the dims its input was broadcast along, back to the input's shape."""
    if two_d:
        return grad[0]
    extra = grad.ndim - len(shape)
    grad = grad.sum(axis=tuple(range(extra))) if extra else grad
    axes = tuple(i for i, n in enumerate(shape) if n == 1 and grad.shape[i] != 1)
    return grad.sum(axis=axes, keepdims=True) if axes else grad
