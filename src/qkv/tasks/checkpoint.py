"""Checkpoints as safetensors: named arrays plus JSON metadata; never pickle.

A checkpoint is written to a temporary file in the target's directory, flushed to disk, then
renamed over the target (``os.replace`` is atomic on POSIX and Windows), so a crash mid-write
leaves the previous checkpoint intact, never a half-written one. Arrays come back bit-identical
(same dtype, shape and bytes): safetensors stores raw little-endian buffers.

Layout of a training checkpoint (see :mod:`qkv.tasks.training`)::

    model.<param>        every model parameter, e.g. model.attn.w_q
    adam.m.<param>       Adam's first moments (float64)
    adam.v.<param>       Adam's second moments (float64)
    adam.step            (1,) int64
    metadata             {"format", "task", "config", "step", "rng", "history", "elapsed"} as JSON
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import numpy as np

FORMAT = "qkv.checkpoint/1"


def save(path, tensors: dict[str, np.ndarray], metadata: dict) -> Path:
    """Write ``tensors`` and JSON-able ``metadata`` to ``path`` atomically."""
    from safetensors.numpy import save as to_bytes

    path = Path(path)
    if path.is_dir():
        raise ValueError(f"checkpoint path {str(path)!r} is a directory; give a file name such "
                         "as recall.safetensors")
    path.parent.mkdir(parents=True, exist_ok=True)
    meta = {"format": FORMAT, **{k: json.dumps(v) for k, v in metadata.items()}}
    blob = to_bytes({k: np.ascontiguousarray(v) for k, v in tensors.items()}, metadata=meta)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(blob)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def load(path) -> tuple[dict[str, np.ndarray], dict]:
    """``(tensors, metadata)`` as written by :func:`save`."""
    from safetensors import safe_open

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no checkpoint at {str(path)!r}; train one with "
                                f"`qkv train recall --checkpoint {path}`")
    with safe_open(str(path), framework="np") as f:
        raw = f.metadata() or {}
        if raw.get("format") != FORMAT:
            raise ValueError(f"{str(path)!r} is not a qkv checkpoint (format "
                             f"{raw.get('format')!r}, expected {FORMAT!r})")
        tensors = {name: f.get_tensor(name) for name in f.keys()}
    meta = {k: json.loads(v) for k, v in raw.items() if k != "format"}
    return tensors, meta
