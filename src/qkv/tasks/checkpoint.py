"""Checkpoints as safetensors: named arrays plus JSON metadata; never pickle.

Writing. A checkpoint is written to a temporary file next to the target, named
``.<target name>.saving-<pid>-<host>-<random>.tmp``, flushed to disk, then renamed over the target
(``os.replace`` is atomic on POSIX and Windows), so a crash mid-write leaves the previous
checkpoint intact, never a half-written one. Any exception during the save removes the temporary
file; a save killed outright (SIGKILL, power loss) cannot, so the next save of the same target
removes the temporary files that earlier saves on this host left behind (their process is gone)
and those older than a day from anywhere. The file is created like any other (mode 0666 minus
the umask); a target that already exists keeps its permission bits.

Reading. Everything is checked before it is used, and every problem is a :class:`CheckpointError`
(a ``ValueError``) whose one-line message names the file and the problem: a file safetensors
cannot parse (truncated, bad header), a format other than qkv's, metadata that is not JSON, a
SHA-256 over the metadata and every tensor's name, dtype, shape and bytes that does not match
(a flipped byte anywhere), and — through the ``check`` hook, which sees the header's shapes
before any tensor data is read — a config or step that is out of range or inconsistent with the
stored shapes. Arrays come back bit-identical (same dtype, shape and bytes): safetensors stores
raw little-endian buffers.

Layout of a training checkpoint (see :mod:`qkv.tasks.recall`)::

    model.<param>        every model parameter, e.g. model.attn.w_q
    adam.m.<param>       Adam's first moments (float64)
    adam.v.<param>       Adam's second moments (float64)
    adam.step            (1,) int64
    metadata             {"format", "sha256", and "task", "config", "step", "rng", "history",
                         "elapsed" as JSON}

Format ``qkv.checkpoint/2`` carries the ``sha256``; ``qkv.checkpoint/1`` files (written before
it) load with every check except the checksum.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import re
import secrets
import socket
import stat
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np

FORMAT = "qkv.checkpoint/2"
LEGACY_FORMATS = ("qkv.checkpoint/1",)  # no checksum
STALE_AFTER = 24 * 3600  # seconds: a temporary file this old is from a save that died
_TEMP = re.compile(r"\.saving-(\d+)-([0-9a-f]{8})-[0-9a-f]+\.tmp\Z")

# The errors a malformed file can raise while it is parsed or checked; each becomes a
# CheckpointError naming the file (a MemoryError or a bug's RuntimeError is not swallowed).
_BAD_FILE = (ValueError, TypeError, KeyError, IndexError, OverflowError, AttributeError,
             json.JSONDecodeError, UnicodeDecodeError)

Shapes = dict[str, tuple[str, tuple[int, ...]]]  # tensor name → (safetensors dtype, shape)


class CheckpointError(ValueError):
    """A checkpoint that cannot be used; the message names the file and the problem."""


# -- writing --------------------------------------------------------------------------------
def save(path, tensors: dict[str, np.ndarray], metadata: dict) -> Path:
    """Write ``tensors`` and JSON-able ``metadata`` to ``path`` atomically (see module doc)."""
    from safetensors.numpy import save as to_bytes

    path = Path(path)
    if path.is_dir():
        raise ValueError(f"checkpoint path {str(path)!r} is a directory; give a file name such "
                         "as recall.safetensors")
    path.parent.mkdir(parents=True, exist_ok=True)
    arrays = {k: np.ascontiguousarray(v) for k, v in tensors.items()}
    meta = {"format": FORMAT, **{k: json.dumps(v) for k, v in metadata.items()}}
    meta["sha256"] = _digest(meta, arrays)
    blob = to_bytes(arrays, metadata=meta)
    remove_stale_temps(path)
    tmp = path.with_name(f".{path.name}.saving-{os.getpid()}-{_host()}-"
                         f"{secrets.token_hex(4)}.tmp")
    try:
        # O_EXCL: a fresh file, mode 0666 filtered by the umask (mkstemp would force 0600)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0),
                     0o666)
        with os.fdopen(fd, "wb") as f:
            with contextlib.suppress(FileNotFoundError):  # keep the target's own permissions
                os.chmod(f.fileno() if os.chmod in os.supports_fd else tmp,
                         stat.S_IMODE(path.stat().st_mode))
            f.write(blob)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    _fsync_dir(path.parent)
    return path


def temp_files(path) -> list[Path]:
    """The temporary files that saves of ``path`` have left next to it (live or stale)."""
    path = Path(path)
    prefix = f".{path.name}"
    return sorted(p for p in path.parent.glob(f".{glob_escape(path.name)}.saving-*.tmp")
                  if _TEMP.fullmatch(p.name[len(prefix):]))


def remove_stale_temps(path) -> list[Path]:
    """Remove the temporary files of earlier saves of ``path`` that died; returns them.

    Stale: written on this host by a process that no longer runs, or older than a day. A save
    running right now (another process) is left alone.
    """
    removed = []
    now, host = time.time(), _host()
    for tmp in temp_files(path):
        pid, tmp_host = _TEMP.fullmatch(tmp.name[len(path.name) + 1:]).group(1, 2)
        try:
            old = now - tmp.stat().st_mtime > STALE_AFTER
        except FileNotFoundError:
            continue
        dead = tmp_host == host and int(pid) != os.getpid() and not _alive(int(pid))
        if old or dead:
            with contextlib.suppress(FileNotFoundError):
                tmp.unlink()
                removed.append(tmp)
    return removed


def glob_escape(name: str) -> str:
    return re.sub(r"([\[\]*?])", r"[\1]", name)


def _host() -> str:
    return hashlib.sha256(socket.gethostname().encode()).hexdigest()[:8]


def _alive(pid: int) -> bool:
    if os.name != "posix":  # os.kill(pid, 0) would terminate the process on Windows
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # it exists, under another user
        return True
    return True


def _fsync_dir(directory: Path) -> None:
    """Make the rename durable (POSIX); a no-op where directories cannot be opened."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _digest(meta: dict[str, str], arrays: dict[str, np.ndarray]) -> str:
    """SHA-256 over the metadata strings (but the digest itself) and every tensor's name,
    dtype, shape and bytes, in sorted order."""
    h = hashlib.sha256()
    h.update(json.dumps({k: v for k, v in meta.items() if k != "sha256"},
                        sort_keys=True).encode())
    for name in sorted(arrays):
        a = np.ascontiguousarray(arrays[name])
        h.update(json.dumps([name, a.dtype.str, list(a.shape)]).encode())
        h.update(a.view(np.uint8).reshape(-1).data if a.size else b"")
    return h.hexdigest()


# -- reading --------------------------------------------------------------------------------
@contextlib.contextmanager
def reading(path) -> Iterator[None]:
    """Turn what a malformed checkpoint raises inside the block into one CheckpointError line
    that names ``path``."""
    try:
        yield
    except CheckpointError as exc:
        if str(path) in str(exc):
            raise
        raise CheckpointError(f"checkpoint {path}: {exc}") from None
    except _BAD_FILE as exc:
        raise CheckpointError(f"checkpoint {path}: {_one_line(exc)}") from None


def load(path, check: Callable[[dict, Shapes], None] | None = None
         ) -> tuple[dict[str, np.ndarray], dict]:
    """``(tensors, metadata)`` as written by :func:`save`, every byte checked.

    ``check(metadata, shapes)`` runs on the header alone — the parsed metadata and each
    tensor's ``(dtype, shape)`` — before any tensor is read: the place to refuse a config that
    does not match the stored shapes, before a model is built from it.
    """
    from safetensors import SafetensorError, safe_open

    path = Path(path)
    if not path.is_file():
        if path.exists():
            raise CheckpointError(f"checkpoint {path}: not a file")
        raise FileNotFoundError(f"no checkpoint at {str(path)!r}; train one with "
                                f"`qkv train recall --checkpoint {path}`")
    with reading(path):
        try:
            f = safe_open(str(path), framework="np")
        except SafetensorError as exc:
            raise CheckpointError(f"not a readable safetensors file ({_one_line(exc)}); "
                                  "truncated or damaged?") from None
        with f:
            raw = f.metadata() or {}
            fmt = raw.get("format")
            if fmt != FORMAT and fmt not in LEGACY_FORMATS:
                raise CheckpointError(f"not a qkv checkpoint (format {fmt!r}, expected "
                                      f"{FORMAT!r})")
            meta = {}
            for key, value in raw.items():
                if key in ("format", "sha256"):
                    continue
                try:
                    meta[key] = json.loads(value)
                except json.JSONDecodeError:
                    raise CheckpointError(f"metadata {key!r} is not valid JSON") from None
            shapes = {}
            for name in f.keys():
                part = f.get_slice(name)
                shapes[name] = (part.get_dtype(), tuple(part.get_shape()))
            if check is not None:
                check(meta, shapes)
            try:
                tensors = {name: f.get_tensor(name) for name in f.keys()}
            except SafetensorError as exc:
                raise CheckpointError(f"cannot read its tensors ({_one_line(exc)})") from None
        if fmt == FORMAT and raw.get("sha256") != _digest(raw, tensors):
            raise CheckpointError("its SHA-256 does not match its contents: the file was "
                                  "damaged or edited after it was written")
    return tensors, meta


# -- checks shared by the tasks' loaders ------------------------------------------------------
def config_from(cls, value):
    """``cls(**value)`` for a frozen config dataclass, with every field's type checked first
    (ints are ints, not bools or floats; floats are finite numbers). Missing fields take the
    defaults (checkpoints written before a field existed)."""
    import dataclasses

    if not isinstance(value, dict):
        raise CheckpointError(f"config must be a JSON object, got {type(value).__name__}")
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(value) - set(fields))
    if unknown:
        raise CheckpointError(f"config has unknown fields {unknown} for {cls.__name__}")
    for name, v in value.items():
        default = fields[name].default
        if isinstance(default, bool):
            ok = isinstance(v, bool)
        elif isinstance(default, int):
            ok = isinstance(v, int) and not isinstance(v, bool)
        elif isinstance(default, float):
            ok = (isinstance(v, (int, float)) and not isinstance(v, bool)
                  and math.isfinite(v))
        else:
            ok = True
        if not ok:
            raise CheckpointError(f"config field {name} = {v!r} is not a valid "
                                  f"{type(default).__name__}")
    return cls(**value)


def natural(value, name: str) -> int:
    """``value`` if it is an int ≥ 0 (a step count), else CheckpointError."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise CheckpointError(f"{name} must be an integer ≥ 0, got {value!r}")
    return value


def check_progress(meta: dict, history_fields: tuple[str, ...]) -> None:
    """A training run's progress metadata: ``step`` an int ≥ 0, ``elapsed`` seconds ≥ 0,
    ``history`` a list of evaluations each with an int ``step`` and a number for each of
    ``history_fields``, ``rng`` a generator state (a JSON object)."""
    natural(meta["step"], "step")
    elapsed = meta["elapsed"]
    if (isinstance(elapsed, bool) or not isinstance(elapsed, (int, float))
            or not 0 <= elapsed < float("inf")):
        raise CheckpointError(f"elapsed must be a number of seconds ≥ 0, got {elapsed!r}")
    history = meta["history"]
    if not isinstance(history, list) or not all(
            isinstance(h, dict) and isinstance(h.get("step"), int)
            and all(isinstance(h.get(k), (int, float)) for k in history_fields)
            for h in history):
        raise CheckpointError("history must be a list of evaluations, each with step, "
                              + " and ".join(history_fields))
    if not isinstance(meta["rng"], dict):
        raise CheckpointError("rng must be a generator state (a JSON object)")


def load_optimizer(opt, tensors: dict[str, np.ndarray], prefix: str, step: int) -> None:
    """Load Adam ``opt`` from the tensors named ``<prefix><name>``; its step must be ``step``."""
    opt.load_state_dict({n[len(prefix):]: a for n, a in tensors.items() if n.startswith(prefix)})
    if opt.t != step:
        raise CheckpointError(f"{prefix}step is {opt.t} but step is {step}")


def restore_rng(rng: np.random.Generator, state) -> None:
    """Set ``rng``'s state from a checkpoint's JSON; CheckpointError if it is not one."""
    try:
        rng.bit_generator.state = state
    except (TypeError, ValueError, KeyError) as exc:
        raise CheckpointError(f"rng is not a {type(rng.bit_generator).__name__} state "
                              f"({exc})") from None


def expect_shapes(shapes: Shapes, expected: dict[str, tuple[int, ...]], what: str) -> None:
    """Each tensor in ``expected`` must be in the header with that shape."""
    for name, shape in expected.items():
        got = shapes.get(name)
        if got is None:
            raise CheckpointError(f"tensor {name!r} is missing")
        if got[1] != tuple(shape):
            raise CheckpointError(f"tensor {name!r} has shape {got[1]}, but the stored {what} "
                                  f"needs {tuple(shape)}")


def expect_tensors(tensors: dict[str, np.ndarray], expected: dict[str, np.ndarray]) -> None:
    """``tensors`` must be exactly the names of ``expected``, each with its dtype and shape,
    and free of NaN and infinity where floating point."""
    extra = sorted(set(tensors) - set(expected))
    if extra:
        raise CheckpointError(f"unexpected tensors {extra[:3]}")
    for name, want in expected.items():
        got = tensors.get(name)
        if got is None or got.shape != want.shape or got.dtype != want.dtype:
            found = "missing" if got is None else f"{got.dtype}{got.shape}"
            raise CheckpointError(f"tensor {name!r} is {found}, expected {want.dtype}"
                                  f"{want.shape}")
        if got.dtype.kind == "f" and not np.isfinite(got).all():
            raise CheckpointError(f"tensor {name!r} holds NaN or infinity")


# -- a trained task model: its parameters, kind, config and held-out scores ----------------------
def save_model(path, model, task: str, metrics: dict | None = None) -> Path:
    """``model.params`` as ``model.<name>``, with ``task``, ``model.kind``, ``model.config``
    and ``metrics`` (its held-out scores) as metadata."""
    return save(path, {f"model.{n}": a for n, a in model.params.items()},
                {"task": task, "kind": model.kind, "config": model.config.to_dict(),
                 "metrics": metrics or {}})


def load_model(path, cls, task: str, kinds, config_cls):
    """The model :func:`save_model` wrote at ``path``, built as ``cls(config, kind)``; the
    task, kind and config are checked, and the shapes ``cls.pinned_shapes(config, kind)`` in
    the header before anything is built; ``.metrics`` holds the stored scores. Anything
    truncated, edited or inconsistent is a CheckpointError naming the file."""

    def check(meta, shapes):
        if meta.get("task") != task or meta.get("kind") not in kinds:
            raise CheckpointError(f"a checkpoint of task {meta.get('task')!r} "
                                  f"(kind {meta.get('kind')!r}), not {task!r}")
        config = config_from(config_cls, meta.get("config"))
        expect_shapes(shapes, {f"model.{n}": s for n, s in
                               cls.pinned_shapes(config, meta["kind"]).items()}, "config")
        if not isinstance(meta.get("metrics", {}), dict):
            raise CheckpointError("metrics must be a JSON object")

    tensors, meta = load(path, check=check)
    with reading(path):
        model = cls(config_from(config_cls, meta["config"]), meta["kind"])
        expect_tensors(tensors, {f"model.{n}": p for n, p in model.params.items()})
        for name, p in model.params.items():
            p[...] = tensors[f"model.{name}"]
    model.metrics = meta.get("metrics", {})
    return model


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return text or type(exc).__name__
