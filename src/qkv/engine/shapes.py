"""Shape helpers shared by the entry points: the broadcast batch dims and their gradients."""

from __future__ import annotations

import numpy as np

SHAPES = "q (..., Hq, Nq, Dk), k (..., Hkv, Nk, Dk), v (..., Hkv, Nk, Dv)"


def batch_shape(shapes: dict[str, tuple[int, ...]]) -> tuple[int, ...]:
    """The broadcast of the leading (batch) dims, or an error naming every argument's."""
    try:
        return tuple(np.broadcast_shapes(*shapes.values()))
    except ValueError:
        described = ", ".join(f"{n} has batch shape {s}" for n, s in shapes.items())
        raise ValueError(
            f"batch dims do not broadcast: {described}; the leading dims (before heads) must be "
            "equal or 1"
        ) from None


def unbroadcast(grad: np.ndarray, shape: tuple[int, ...], two_d: bool) -> np.ndarray:
    """Sum a gradient over the dims its input was broadcast along, back to the input's shape."""
    if two_d:
        return grad[0]
    extra = grad.ndim - len(shape)
    grad = grad.sum(axis=tuple(range(extra))) if extra else grad
    axes = tuple(i for i, n in enumerate(shape) if n == 1 and grad.shape[i] != 1)
    return grad.sum(axis=axes, keepdims=True) if axes else grad


def sum_to_shape(grad: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """Sum a gradient of a broadcast array back to the array's own ``shape``."""
    extra = grad.ndim - len(shape)
    grad = grad.sum(axis=tuple(range(extra))) if extra > 0 else grad
    axes = tuple(i for i, n in enumerate(shape) if n == 1 and grad.shape[i] != 1)
    grad = grad.sum(axis=axes, keepdims=True) if axes else grad
    return grad.reshape(shape)
