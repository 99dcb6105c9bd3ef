"""Reading BERT weights from ``model.safetensors`` and checking them against ``config.json``.

safetensors stores raw little-endian arrays behind a JSON header — no pickle, so loading a file
runs no code. Tensor names are Hugging Face's (``encoder.layer.0.attention.self.query.weight``);
Linear weights are stored torch-style as ``(out, in)``. :func:`expected_tensors` lists what a
BERT encoder of the given config must contain; :func:`read_weights` refuses a file with a
missing tensor, a wrong shape or dtype, or non-finite values.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from .files import broken

# Stored in the file but not used by a sentence encoder (the pooler feeds BERT's NSP head; the
# position ids are just arange). Allowed, never required.
OPTIONAL = ("embeddings.position_ids", "pooler.dense.weight", "pooler.dense.bias")


def expected_tensors(config: dict) -> dict[str, tuple[int, ...]]:
    """Name → shape of every float32 tensor a BERT encoder with ``config`` needs."""
    d, ff = config["hidden_size"], config["intermediate_size"]
    shapes = {
        "embeddings.word_embeddings.weight": (config["vocab_size"], d),
        "embeddings.position_embeddings.weight": (config["max_position_embeddings"], d),
        "embeddings.token_type_embeddings.weight": (config["type_vocab_size"], d),
        "embeddings.LayerNorm.weight": (d,),
        "embeddings.LayerNorm.bias": (d,),
    }
    for i in range(config["num_hidden_layers"]):
        layer = f"encoder.layer.{i}"
        for proj in ("query", "key", "value"):
            shapes[f"{layer}.attention.self.{proj}.weight"] = (d, d)  # (out, in)
            shapes[f"{layer}.attention.self.{proj}.bias"] = (d,)
        shapes[f"{layer}.attention.output.dense.weight"] = (d, d)
        shapes[f"{layer}.attention.output.dense.bias"] = (d,)
        shapes[f"{layer}.attention.output.LayerNorm.weight"] = (d,)
        shapes[f"{layer}.attention.output.LayerNorm.bias"] = (d,)
        shapes[f"{layer}.intermediate.dense.weight"] = (ff, d)
        shapes[f"{layer}.intermediate.dense.bias"] = (ff,)
        shapes[f"{layer}.output.dense.weight"] = (d, ff)
        shapes[f"{layer}.output.dense.bias"] = (d,)
        shapes[f"{layer}.output.LayerNorm.weight"] = (d,)
        shapes[f"{layer}.output.LayerNorm.bias"] = (d,)
    return shapes


def read_weights(path: Path, config: dict) -> dict[str, np.ndarray]:
    """Every tensor of :func:`expected_tensors` (float32), checked: name, shape, dtype, finite.

    The header is checked before any data is read, so a wrong file fails fast.
    """
    from safetensors import SafetensorError, safe_open

    try:
        with safe_open(str(path), framework="numpy") as fh:
            names = set(fh.keys())
            # Count the file's layers before listing what config.json expects: a tampered
            # num_hidden_layers=10**6 would otherwise build 16 million names before failing.
            layers = {name.split(".")[2] for name in names if name.startswith("encoder.layer.")}
            if len(layers) != config["num_hidden_layers"]:
                raise broken(path, f"holds {len(layers)} encoder layers; config.json says "
                             f"num_hidden_layers={config['num_hidden_layers']}")
            expected = expected_tensors(config)
            missing = sorted(set(expected) - names)
            if missing:
                more = f" and {len(missing) - 3} more" if len(missing) > 3 else ""
                raise broken(path, f"lacks tensor(s) {', '.join(missing[:3])}{more} that "
                             f"config.json ({config['num_hidden_layers']} layers, hidden size "
                             f"{config['hidden_size']}) requires")
            unknown = sorted(names - set(expected) - set(OPTIONAL))
            if unknown:
                raise broken(path, f"holds unexpected tensor(s) {', '.join(unknown[:3])}: it is "
                             "not the BERT encoder config.json describes")
            for name, shape in expected.items():
                info = fh.get_slice(name)
                got_shape, got_dtype = tuple(info.get_shape()), info.get_dtype()
                if got_shape != shape:
                    raise broken(path, f"has {name} of shape {got_shape}; config.json implies "
                                 f"{shape}")
                if got_dtype != "F32":
                    raise broken(path, f"has {name} of dtype {got_dtype}; expected F32 (float32)")
            tensors = {name: fh.get_tensor(name) for name in expected}
    except SafetensorError as exc:  # a truncated file or a damaged header
        raise broken(path, f"cannot be read as safetensors ({exc})") from None
    except OSError as exc:
        raise broken(path, f"cannot be read ({exc})") from None
    for name, arr in tensors.items():
        if not np.isfinite(arr).all():
            raise broken(path, f"has NaN or inf values in {name}")
    return tensors
