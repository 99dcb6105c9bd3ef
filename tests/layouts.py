"""Memory layouts for array arguments (issue 48): the same values, laid out as NumPy users pass
them every day. Used by tests/test_layouts.py and the fuzzer (tests/fuzz_api.py).

Each layout changes only how the values sit in memory, except ``broadcast``, which repeats the
first row along the position axis (a zero stride there): compare with the values of the array
returned, ``np.array(laid)``, never with the input.
"""

from __future__ import annotations

import numpy as np

LAYOUTS = ("C", "F", "transposed", "reversed", "strided rows", "strided columns", "broadcast",
           "unaligned", "read-only")


def lay(x: np.ndarray, layout: str) -> np.ndarray:
    """``x``'s values (see the module doc for ``broadcast``) in ``layout``; the last two axes
    are the ones laid out (positions and features), as attention reads them."""
    x = np.asarray(x)
    if x.ndim < 2 and layout in ("F", "transposed", "strided columns"):
        layout = "C"
    if layout == "broadcast" and (x.ndim == 0 or x.shape[-2 if x.ndim > 1 else -1] == 0):
        layout = "C"  # no row to repeat
    if layout == "C":
        return np.ascontiguousarray(x)
    if layout == "F":  # every axis column-major (np.asfortranarray)
        return np.asfortranarray(x)
    if layout == "transposed":  # the last two axes column-major: a transposed view, (W X.T).T
        return np.swapaxes(np.ascontiguousarray(np.swapaxes(x, -1, -2)), -1, -2)
    if layout == "reversed":  # negative strides on every axis
        flip = (slice(None, None, -1),) * x.ndim
        return np.ascontiguousarray(x[flip])[flip]
    if layout == "strided rows":  # every other row of a buffer whose other rows are garbage
        return _every_other(x, axis=-2 if x.ndim > 1 else -1)
    if layout == "strided columns":  # every other feature
        return _every_other(x, axis=-1)
    if layout == "broadcast":  # the first position's row, repeated by a zero stride
        axis = -2 if x.ndim > 1 else -1
        return np.broadcast_to(np.take(x, [0], axis=axis), x.shape)
    if layout == "unaligned":  # one byte off the buffer's alignment (any itemsize > 1)
        raw = np.empty(x.nbytes + x.itemsize, dtype=np.uint8)
        out = raw[1: 1 + x.nbytes].view(x.dtype).reshape(x.shape)
        out[...] = x
        assert x.itemsize == 1 or x.size == 0 or not out.flags.aligned
        return out
    if layout == "read-only":
        out = np.array(x)
        out.flags.writeable = False
        return out
    raise ValueError(f"unknown layout {layout!r}; one of {LAYOUTS}")


def _every_other(x: np.ndarray, axis: int) -> np.ndarray:
    shape = list(x.shape)
    shape[axis] *= 2
    # garbage where it must not matter: huge finite values in the skipped slots (a NaN there
    # would also be fine; a finite value is the harder case — nothing refuses it)
    buf = np.full(shape, np.finfo(x.dtype).max / 2 if x.dtype.kind == "f" else 7, x.dtype)
    index = [slice(None)] * x.ndim
    index[axis] = slice(None, None, 2)
    view = buf[tuple(index)]
    view[...] = x
    return view
