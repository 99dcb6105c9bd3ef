"""What every layer in :mod:`qkv.nn` shares: parameters as named arrays, forward and backward.

The pattern (one for all layers, Flax-like in spirit — weights are plain data, apply is code):

    y = layer(x)                          # inference: forward only
    y, ctx = layer.forward(x)             # training: ctx holds what the backward needs
    dx, grads = layer.backward(ctx, dy)   # dy = ∂loss/∂y → dx = ∂loss/∂x,
                                          # grads[name] = ∂loss/∂params[name]

``layer.params`` maps names to the NumPy arrays themselves (not copies), so an optimiser that
updates them in place (``Adam.step``) updates the layer. ``grads`` has exactly the keys of
``params``, each with the parameter's shape. A layer holds no per-call state: the same layer may
be applied several times (weight sharing) and each call's ``ctx`` is kept by the caller.
"""

from __future__ import annotations

import numbers

import numpy as np

from ..engine import current, gemm
from ..engine.problem import as_array
from ..engine.threads import blas_held

FLOAT_DTYPES = (np.float16, np.float32, np.float64)


def as_rng(rng) -> np.random.Generator:
    """``None`` (fresh entropy), an int seed or a Generator → a Generator."""
    if rng is None or isinstance(rng, numbers.Integral | np.random.Generator):
        return np.random.default_rng(rng)
    raise TypeError(f"rng must be None, an int seed or a numpy Generator, got {type(rng).__name__}")


def check_dtype(dtype) -> np.dtype:
    dt = np.dtype(dtype)
    if dt not in FLOAT_DTYPES:
        raise TypeError(f"dtype must be float16, float32 or float64, got {dt}")
    return dt


def positive_int(value, name: str, owner: str) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
        raise ValueError(f"{owner}: {name} must be a positive int, got {value!r}")
    return int(value)


def as_input(x, name: str, owner: str, last: int | None = None, dtype=None) -> np.ndarray:
    """A float array whose last dim is ``last``; promoted with the layer's ``dtype``. Checked
    by the engine's :func:`~qkv.engine.problem.as_array` first (ragged rows, bools, strings and
    objects are refused by name, as every entry point of qkv does); layers take floats only."""
    arr = np.asarray(x) if isinstance(x, np.ndarray) else as_array(x, f"{owner}: {name}")
    if arr.dtype.kind in "bUSO":
        as_array(arr, f"{owner}: {name}")  # raises, naming the argument
    if not np.issubdtype(arr.dtype, np.floating):
        raise TypeError(f"{owner}: {name} must be a float array, got dtype {arr.dtype}")
    if last is not None and (arr.ndim < 1 or arr.shape[-1] != last):
        raise ValueError(
            f"{owner}: {name} has shape {arr.shape} but its last dim must be {last} "
            f"(shape (..., {last}))"
        )
    if dtype is not None:
        arr = arr.astype(np.result_type(arr.dtype, dtype), copy=False)
    return arr


def sum_to_last(x: np.ndarray) -> np.ndarray:
    """Sum over every axis but the last: the gradient of a bias broadcast over batch dims."""
    return x.reshape(-1, x.shape[-1]).sum(axis=0)


def outer_sum(x: np.ndarray, dy: np.ndarray) -> np.ndarray:
    """Σ over batch positions of xᵀ dy: the gradient of W in y = x W. (d_in, d_out)"""
    return x.reshape(-1, x.shape[-1]).T @ dy.reshape(-1, dy.shape[-1])


class Layer:
    """Base class. Subclasses set ``self.params`` and implement ``forward`` / ``backward``."""

    params: dict[str, np.ndarray]
    # Row GEMMs (x W) on the engine's tile GEMM while the BLAS is held to one thread (see
    # matmul_rows). Off by default: the trained models' figures are NumPy's BLAS's bits;
    # MiniLM's encoder turns it on.
    row_gemm: bool = False

    def __call__(self, *args, **kwargs):
        return self.forward(*args, **kwargs)[0]

    def forward(self, *args, **kwargs):  # pragma: no cover - interface
        raise NotImplementedError

    def backward(self, ctx, dy):  # pragma: no cover - interface
        raise NotImplementedError

    def zero_grads(self) -> dict[str, np.ndarray]:
        """A zero gradient for every parameter (to accumulate into)."""
        return {name: np.zeros_like(p) for name, p in self.params.items()}

    @property
    def num_params(self) -> int:
        return sum(int(p.size) for p in self.params.values())


def prefixed(prefix: str, named: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """``{"weight": w}`` → ``{"prefix.weight": w}`` (the same arrays)."""
    return {f"{prefix}.{name}": arr for name, arr in named.items()}


def matmul_rows(x: np.ndarray, w: np.ndarray, fast: bool = False) -> np.ndarray:
    """``x @ w`` for x ``(..., d_in)`` and a matrix w ``(d_in, d_out)``, as ONE BLAS call on
    ``(prod(...), d_in)``: NumPy's stacked matmul would call the BLAS once per leading index,
    2–5× slower for a batch of short sentences (measured in benchmarks/minilm.py).

    ``fast`` (a layer's :attr:`Layer.row_gemm`): while the BLAS is held to one thread (inside
    qkv's pool), run the product on the engine's tile GEMM (:mod:`qkv.engine.gemm`: MKL on an
    Intel CPU with the ``qkv[mkl]`` extra) — one thread either way, MKL's faster there."""
    use = current().resolved_gemm() if fast and blas_held() else "numpy"
    flat = gemm.matmul(x.reshape(-1, x.shape[-1]), w, use=use)
    return flat.reshape(*x.shape[:-1], w.shape[-1])


def check_sequence(x, h0, lengths, owner: str, d_in: int, d_hidden: int, dtype):
    """A recurrent layer's inputs checked: ``x (B, T, d_in)``, ``h0 (B, d_hidden)`` (zeros
    if None) in x's dtype, ``lengths (B,)`` integers in [0, T] or None; errors name
    ``owner`` (the GRU and the plain RNN share this)."""
    x = as_input(x, "x", owner, d_in, dtype)
    if x.ndim != 3:
        raise ValueError(f"{owner}: x must have shape (B, T, {d_in}), got {x.shape}")
    B, T, _ = x.shape
    if h0 is None:
        h0 = np.zeros((B, d_hidden), x.dtype)
    else:
        h0 = as_input(h0, "h0", owner, d_hidden, x.dtype)
        if h0.shape != (B, d_hidden):
            raise ValueError(f"{owner}: h0 must have shape ({B}, {d_hidden}), got "
                             f"{h0.shape}")
    if lengths is not None:
        lengths = np.asarray(lengths)
        if lengths.dtype == bool or not np.issubdtype(lengths.dtype, np.integer):
            raise TypeError(f"{owner}: lengths must be integers, got dtype {lengths.dtype}")
        if lengths.shape != (B,) or (lengths < 0).any() or (lengths > T).any():
            raise ValueError(f"{owner}: lengths must have shape ({B},) with values in [0, {T}], "
                             f"got {lengths.tolist() if lengths.size < 20 else lengths.shape}")
    return x, h0.astype(x.dtype, copy=False), lengths
