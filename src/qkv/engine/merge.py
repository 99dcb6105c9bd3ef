"""Merging two partial attention results exactly, through their log-sum-exps (engine).

Used wherever keys are visited in separate pieces — ring attention's kv shards, a KV cache split
across devices — with the partial results that ``attention(..., return_lse=True)`` returns.

A partial result over a key set A is ``out_A = Σ_{j∈A} e^{s_j} v_j / Σ_{j∈A} e^{s_j}`` and
``lse_A = log Σ_{j∈A} e^{s_j}``. Over the union of two disjoint key sets A and B:

    lse = log(e^{lse_A} + e^{lse_B}) = logaddexp(lse_A, lse_B)
    out = (e^{lse_A} out_A + e^{lse_B} out_B) / e^{lse}
        = out_A · e^{lse_A − lse} + out_B · e^{lse_B − lse}

Both weights lie in [0, 1] and sum to 1, so nothing overflows. A row that saw no allowed key in
a set has lse = −inf there and weight 0; a row with no key in either set keeps lse = −inf and
zeros (the weights are set to 0 instead of computing −inf − (−inf)).
"""

from __future__ import annotations

import numpy as np

from .problem import as_array, check_lse

__all__ = ["merge"]


def merge(out: np.ndarray, lse: np.ndarray, out_b: np.ndarray, lse_b: np.ndarray) -> None:
    """In place: ``(out, lse)`` ← the softmax over both key sets.

    ``out`` ``(..., Nq, Dv)`` and ``lse`` ``(..., Nq)`` are the running result (in the compute
    dtype); ``out_b``, ``lse_b`` the partial result over further keys, same shapes.
    """
    _check(out, lse, out_b, lse_b)
    new = np.logaddexp(lse, lse_b)  # (..., Nq); −inf only where both are −inf
    seen = np.isfinite(new)
    w_a = np.exp(np.subtract(lse, new, out=np.full_like(new, -np.inf), where=seen))
    w_b = np.exp(np.subtract(lse_b, new, out=np.full_like(new, -np.inf), where=seen))
    out *= w_a[..., None]
    out += out_b * w_b[..., None].astype(out.dtype, copy=False)
    lse[...] = new


def _check(out, lse, out_b, lse_b) -> None:
    """The arguments as :func:`qkv.attention` returns them, refused by name otherwise (the same
    array checks as every entry point: :func:`~qkv.engine.problem.as_array`)."""
    for name, x in (("out", out), ("lse", lse)):
        if not isinstance(x, np.ndarray):
            raise TypeError(f"merge: {name} is updated in place, so it must be a NumPy array "
                            f"(as attention(..., return_lse=True) returns), got "
                            f"{type(x).__name__}")
        as_array(x, name)
        if x.dtype.kind != "f":
            raise TypeError(f"merge: {name} is updated in place, so it must be a float array, "
                            f"got dtype {x.dtype}")
        if not x.flags.writeable:
            raise ValueError(f"merge: {name} is read-only; it is updated in place: pass a copy")
    out_b, lse_b = as_array(out_b, "out_b"), as_array(lse_b, "lse_b")
    if out.ndim < 1 or lse.shape != out.shape[:-1]:
        raise ValueError(f"merge: lse has shape {lse.shape} but out has shape {out.shape}: lse "
                         "must be out's shape without its last dim (..., Nq)")
    for name, x, like in (("out_b", out_b, out), ("lse_b", lse_b, lse)):
        if x.shape != like.shape:
            raise ValueError(f"merge: {name} has shape {x.shape} but the running result has "
                             f"{like.shape}: both partial results must cover the same queries")
    check_lse(lse, "lse")
    check_lse(lse_b, "lse_b")
