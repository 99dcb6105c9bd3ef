"""Softmax cross-entropy, with its gradient."""

from __future__ import annotations

import numpy as np


def log_softmax(logits: np.ndarray) -> np.ndarray:
    """log softmax over the last axis, shifted by the row max so exp never overflows."""
    shifted = logits - logits.max(axis=-1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))


def softmax_cross_entropy(logits, targets):
    """Mean over positions of −log softmax(logits)[target], and its gradient.

    Args:
        logits: ``(..., C)`` floats.
        targets: ``(...)`` ints in [0, C).

    Returns:
        ``(loss, dlogits)``: a Python float and ``(..., C)``. With p = softmax(logits) and M
        positions, ∂loss/∂logits = (p − onehot(target)) / M.
    """
    logits = np.asarray(logits)
    targets = np.asarray(targets)
    if not np.issubdtype(logits.dtype, np.floating):
        raise TypeError(f"softmax_cross_entropy: logits must be floats, got {logits.dtype}")
    if targets.dtype == bool or not np.issubdtype(targets.dtype, np.integer):
        raise TypeError(f"softmax_cross_entropy: targets must be ints, got {targets.dtype}")
    if logits.shape[:-1] != targets.shape:
        raise ValueError(f"softmax_cross_entropy: logits {logits.shape} must be targets' shape "
                         f"{targets.shape} plus a class axis")
    n_classes = logits.shape[-1]
    if targets.size and (targets.min() < 0 or targets.max() >= n_classes):
        raise ValueError(f"softmax_cross_entropy: targets must lie in [0, {n_classes})")
    logp = log_softmax(logits).reshape(-1, n_classes)  # (M, C)
    flat = targets.reshape(-1)
    m = max(flat.size, 1)
    loss = -logp[np.arange(flat.size), flat].sum() / m
    grad = np.exp(logp)
    grad[np.arange(flat.size), flat] -= 1.0
    return float(loss), (grad / m).reshape(logits.shape).astype(logits.dtype, copy=False)
