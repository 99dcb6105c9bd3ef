"""Checkpoints: permissions, temporary files, and every damaged file refused in one line.

A real recall checkpoint is truncated at 26+ offsets (inside the 8-byte length, the JSON header
and the data) and has single bytes flipped in its header and its data; each must raise a
CheckpointError naming the file — no traceback from safetensors, json or NumPy — and the CLI
must print one line and exit non-zero. Configs edited by hand (with a valid checksum: written
through ``ckpt.save``) must be refused before a model is built from them.
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import tracemalloc
from pathlib import Path

import numpy as np
import pytest

from qkv.cli import main
from qkv.tasks import RecallConfig, RecallModel, Run
from qkv.tasks import checkpoint as ckpt
from qkv.tasks import seq2seq as s2s

pytest.importorskip("safetensors")
ROOT = Path(__file__).resolve().parents[1]
SMALL = RecallConfig(n_keys=16, n_values=16, n_pairs=6, d_model=16, n_heads=2, batch=32,
                     seed=3)


@pytest.fixture(scope="module")
def saved(tmp_path_factory) -> bytes:
    """The bytes of a real recall checkpoint after 3 training steps."""
    run = Run.fresh(SMALL)
    run.train(3, eval_every=3, held_out=20)
    path = tmp_path_factory.mktemp("ckpt") / "r.safetensors"
    run.save(path)
    return path.read_bytes()


def _header_end(blob: bytes) -> int:
    return 8 + int.from_bytes(blob[:8], "little")


def _refused(path: Path, match: str | None = None) -> str:
    with pytest.raises(ckpt.CheckpointError) as info:
        Run.load(path)
    message = str(info.value)
    assert str(path) in message and "\n" not in message, message
    if match is not None:
        assert match in message, message
    return message


# -- damaged files ----------------------------------------------------------------------------
def _truncations(blob: bytes) -> list[int]:
    end = _header_end(blob)
    spread = np.linspace(0, len(blob) - 1, 26).astype(int).tolist()
    return sorted({*spread, 1, 7, 8, 9, end // 2, end - 1, end, end + 1})


def test_every_truncation_is_one_line_naming_the_file(saved, tmp_path):
    path = tmp_path / "cut.safetensors"
    offsets = _truncations(saved)
    assert len(offsets) >= 26 and sum(o < _header_end(saved) for o in offsets) >= 8
    for offset in offsets:
        path.write_bytes(saved[:offset])
        _refused(path)


def test_every_flipped_byte_in_header_or_data_is_caught(saved, tmp_path):
    path = tmp_path / "flipped.safetensors"
    end = _header_end(saved)
    rng = np.random.default_rng(0)
    header = np.linspace(0, end - 1, 60).astype(int)
    data = rng.integers(end, len(saved), 40)
    messages = set()
    for offset in [*header, *data]:
        for bits in (0x01, 0x80):
            blob = bytearray(saved)
            blob[offset] ^= bits
            path.write_bytes(bytes(blob))
            messages.add(_refused(path).split(": ", 1)[1][:30])
    assert len(messages) >= 3, messages  # parse errors, bad JSON, checksum mismatch…


def test_cli_prints_one_line_and_fails_for_damaged_checkpoints(saved, tmp_path):
    path = tmp_path / "bad.safetensors"
    for offset in _truncations(saved)[::4]:
        path.write_bytes(saved[:offset])
        for argv in (["train", "explain", "--checkpoint", str(path)],
                     ["train", "recall", "--resume", "--steps", "5", "--no-progress",
                      "--checkpoint", str(path)]):
            with pytest.raises(SystemExit) as info:
                main(argv)
            message = str(info.value.code)
            assert message.startswith("qkv train: checkpoint ") and str(path) in message
            assert "\n" not in message
    # and as a real process: exit status, stderr, no traceback
    path.write_bytes(saved[: len(saved) // 3])
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    done = subprocess.run([sys.executable, "-m", "qkv", "train", "explain", "--checkpoint",
                           str(path)], capture_output=True, text=True, env=env, timeout=60)
    assert done.returncode != 0
    assert "Traceback" not in done.stderr and done.stderr.count("\n") == 1, done.stderr
    assert str(path) in done.stderr


def test_a_foreign_or_empty_file_is_refused(tmp_path):
    from safetensors.numpy import save_file

    other = tmp_path / "other.safetensors"
    save_file({"x": np.zeros(2)}, str(other))
    _refused(other, "not a qkv checkpoint")
    empty = tmp_path / "empty.safetensors"
    empty.write_bytes(b"")
    _refused(empty, "not a readable safetensors file")
    folder = tmp_path / "dir.safetensors"
    folder.mkdir()
    _refused(folder, "not a file")


# -- edited metadata with a valid checksum: checked before anything is built -------------------
def _edited(saved: bytes, tmp_path: Path, edit) -> Path:
    src = tmp_path / "orig.safetensors"
    src.write_bytes(saved)
    tensors, meta = ckpt.load(src)
    edit(tensors, meta)
    return ckpt.save(tmp_path / "edited.safetensors", tensors, meta)


def _with_config(**changes):
    def edit(tensors, meta):
        meta["config"].update(changes)
    return edit


def _with(key, value):
    def edit(tensors, meta):
        meta[key] = value
    return edit


@pytest.mark.parametrize("edit, match", [
    (_with_config(n_keys=10**9), "values per training step"),  # the 477 GiB
    (_with_config(n_keys=10**6), "'model.key_emb.weight' has shape (16, 16), but the stored "
                                 "config needs (1000000, 16)"),
    (_with_config(d_model=10**5), "needs (16, 100000)"),
    (_with_config(n_values=17), "needs (18, 16)"),
    (_with_config(n_keys="16"), "n_keys = '16' is not a valid int"),
    (_with_config(n_keys=16.0), "n_keys = 16.0 is not a valid int"),
    (_with_config(n_heads=True), "n_heads = True is not a valid int"),
    (_with_config(n_heads=3), "d_model=16 must be divisible by n_heads=3"),
    (_with_config(batch=10**9), "values per training step"),
    (_with_config(lr=-1.0), "lr must be a finite number > 0"),
    (_with_config(seed=-1), "seed must be an int ≥ 0"),
    (_with_config(colour="red"), "unknown fields ['colour']"),
    (_with("config", [1, 2]), "config must be a JSON object"),
    (_with("step", -1), "step must be an integer ≥ 0, got -1"),
    (_with("step", 2.5), "step must be an integer ≥ 0, got 2.5"),
    (_with("step", True), "step must be an integer ≥ 0, got True"),
    (_with("step", 4), "adam.step is 3 but step is 4"),
    (_with("elapsed", -3), "elapsed must be a number of seconds ≥ 0"),
    (_with("history", {"a": 1}), "history must be a list"),
    (_with("history", [{"step": 3}]), "each with step, accuracy and top_weight_hit"),
    (_with("rng", {"bit_generator": "MT19937"}), "rng is not a PCG64 state"),
    (_with("task", "seq2seq"), "a checkpoint of task 'seq2seq', not 'recall'"),
])
def test_edited_metadata_is_refused_before_a_model_is_built(saved, tmp_path, monkeypatch, edit,
                                                             match):
    path = _edited(saved, tmp_path, edit)
    built = []
    monkeypatch.setattr(RecallModel, "__init__",
                        lambda self, *a, **k: built.append(a) or pytest.fail("model built"))
    if "adam.step" in match or "rng is not" in match:  # checked once the tensors are read
        monkeypatch.undo()
    tracemalloc.start()
    try:
        _refused(path, match)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 20 * 2**20, peak  # nothing the size of the edited config was allocated


def test_edited_tensors_are_refused(saved, tmp_path):
    def wrong_shape(tensors, meta):
        tensors["model.attn.w_q"] = np.zeros((16, 8), np.float32)

    def wrong_dtype(tensors, meta):
        tensors["model.attn.w_q"] = tensors["model.attn.w_q"].astype(np.float64)

    def nan(tensors, meta):
        tensors["model.ln.weight"][0] = np.nan

    def extra(tensors, meta):
        tensors["model.spare"] = np.zeros(3, np.float32)

    def missing(tensors, meta):
        del tensors["adam.v.head.bias"]

    for edit, match in ((wrong_shape, "'model.attn.w_q' is float32(16, 8)"),
                        (wrong_dtype, "is float64(16, 16), expected float32(16, 16)"),
                        (nan, "'model.ln.weight' holds NaN"),
                        (extra, "unexpected tensors ['model.spare']"),
                        (missing, "'adam.v.head.bias' is missing")):
        _refused(_edited(saved, tmp_path, edit), match)


def test_pinned_shapes_are_the_built_models_shapes():
    for config in (SMALL, RecallConfig(n_keys=40, n_values=9, d_model=12, n_heads=3)):
        params = RecallModel(config).params
        for name, shape in RecallModel.pinned_shapes(config).items():
            assert params[name].shape == shape, name
    for kind in s2s.KINDS:
        config = s2s.Seq2SeqConfig(n_symbols=5, d_emb=6, d_hidden=7, d_attn=3, max_len=8)
        params = s2s.Seq2SeqModel(config, kind).params
        for name, shape in s2s.Seq2SeqModel.pinned_shapes(config, kind).items():
            assert params[name].shape == shape, (kind, name)


def test_seq2seq_checkpoints_are_checked_too(tmp_path):
    shipped = s2s.DATA / "seq2seq-attention.safetensors"
    blob = shipped.read_bytes()
    path = tmp_path / "s.safetensors"
    path.write_bytes(blob[: len(blob) // 2])
    with pytest.raises(ckpt.CheckpointError, match="not a readable safetensors file"):
        s2s.Seq2SeqModel.load(path)
    tensors, meta = ckpt.load(shipped)
    meta["config"]["d_hidden"] = 10**6
    ckpt.save(path, tensors, meta)
    with pytest.raises(ckpt.CheckpointError, match=r"'model.emb.weight'|'model.enc.w_ih'"):
        s2s.Seq2SeqModel.load(path)


def test_a_legacy_v1_checkpoint_still_loads(saved, tmp_path):
    """Checkpoints written before the checksum (format qkv.checkpoint/1) load as before."""
    from safetensors import safe_open
    from safetensors.numpy import save_file

    src = tmp_path / "new.safetensors"
    src.write_bytes(saved)
    with safe_open(str(src), framework="np") as f:
        raw = dict(f.metadata())
        tensors = {n: f.get_tensor(n) for n in f.keys()}
    raw["format"] = "qkv.checkpoint/1"
    del raw["sha256"]
    old = tmp_path / "old.safetensors"
    save_file(tensors, str(old), metadata=raw)
    back = Run.load(old)
    assert back.step == 3 and back.config == SMALL


# -- writing: permissions and temporary files -------------------------------------------------
@pytest.mark.skipif(os.name != "posix", reason="POSIX permission bits")
def test_checkpoints_honour_the_umask_and_keep_an_existing_files_mode(tmp_path):
    run = Run.fresh(SMALL)
    for mask, mode in ((0o022, 0o644), (0o077, 0o600), (0o002, 0o664)):
        old = os.umask(mask)
        try:
            path = tmp_path / f"m{mask:o}.safetensors"
            run.save(path)
        finally:
            os.umask(old)
        assert path.stat().st_mode & 0o777 == mode, (oct(mask), oct(path.stat().st_mode))
    kept = tmp_path / "kept.safetensors"
    run.save(kept)
    kept.chmod(0o640)
    run.save(kept)  # overwriting keeps the permissions the user gave it
    assert kept.stat().st_mode & 0o777 == 0o640


def test_any_exception_during_a_save_removes_the_temporary_file(tmp_path, monkeypatch):
    path = tmp_path / "r.safetensors"
    run = Run.fresh(SMALL)
    run.save(path)
    before = path.read_bytes()
    run.train(2, eval_every=2, held_out=20)
    for exc in (OSError("disk on fire"), KeyboardInterrupt()):
        def fail(fd, exc=exc):
            raise exc

        monkeypatch.setattr(os, "fsync", fail)
        with pytest.raises(type(exc)):
            run.save(path)
        monkeypatch.undo()
        assert path.read_bytes() == before
        assert sorted(p.name for p in tmp_path.iterdir()) == ["r.safetensors"]


KILLED_SAVE = """
import os, signal, sys
from qkv.tasks import RecallConfig, Run
run = Run.fresh(RecallConfig(n_keys=16, n_values=16, n_pairs=6, d_model=16, batch=8))
os.replace = lambda *a: os.kill(os.getpid(), signal.SIGKILL)  # killed between write and rename
run.save(sys.argv[1])
"""


@pytest.mark.skipif(os.name != "posix", reason="SIGKILL")
def test_a_killed_save_leaves_a_named_temp_file_that_the_next_save_removes(tmp_path):
    path = tmp_path / "r.safetensors"
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    seen = []
    for _ in range(2):  # the second killed save removes the first one's temporary file
        done = subprocess.run([sys.executable, "-c", KILLED_SAVE, str(path)], env=env,
                              timeout=60)
        assert done.returncode == -signal.SIGKILL
        left = ckpt.temp_files(path)
        assert len(left) == 1 and not path.exists() and left[0] not in seen
        assert left[0].name.startswith(".r.safetensors.saving-")
        assert left[0].stat().st_size > 1000
        seen += left
    # a save in progress right now in another live process is not touched
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        live = path.with_name(f".r.safetensors.saving-{sleeper.pid}-{ckpt._host()}-00ff.tmp")
        live.write_bytes(b"partial")
        (tmp_path / ".other.safetensors.saving-1-00000000-00.tmp").write_bytes(b"x")
        Run.fresh(SMALL).save(path)
        assert ckpt.temp_files(path) == [live]
        assert Run.load(path).config == SMALL
        assert (tmp_path / ".other.safetensors.saving-1-00000000-00.tmp").exists()
    finally:
        sleeper.kill()
        sleeper.wait()
    Run.fresh(SMALL).save(path)
    assert ckpt.temp_files(path) == []


TERMINATED_SAVE = """
import os, signal, sys
from qkv.cli import main
os.replace = lambda *a: os.kill(os.getpid(), signal.SIGTERM)  # `kill PID` mid-save
main(["train", "recall", "--keys", "16", "--values", "16", "--pairs", "6", "--d-model", "16",
      "--steps", "2", "--eval-every", "2", "--held-out", "20", "--no-progress",
      "--checkpoint", sys.argv[1]])
"""


@pytest.mark.skipif(os.name != "posix", reason="SIGTERM")
def test_sigterm_during_a_training_save_leaves_no_temp_file(tmp_path):
    path = tmp_path / "r.safetensors"
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    done = subprocess.run([sys.executable, "-c", TERMINATED_SAVE, str(path)], env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 128 + signal.SIGTERM, done.stderr
    assert "Traceback" not in done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_step_round_trips_and_dataclass_config(tmp_path):
    """A saved config comes back equal (all fields typed as declared)."""
    run = Run.fresh(dataclasses.replace(SMALL, lr=0.01))
    path = tmp_path / "r.safetensors"
    run.save(path)
    back = Run.load(path)
    assert back.config == run.config and back.step == 0
    _, meta = ckpt.load(path)
    assert json.loads(json.dumps(meta["config"])) == run.config.to_dict()


def test_cli_cannot_write_a_checkpoint_in_one_line(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    with pytest.raises(SystemExit, match=r"cannot write the checkpoint .*a-file/r.safetensors"):
        main(["train", "recall", "--keys", "16", "--values", "16", "--pairs", "6",
              "--d-model", "16", "--steps", "2", "--eval-every", "2", "--held-out", "20",
              "--no-progress", "--checkpoint", str(blocker / "r.safetensors")])
    with pytest.raises(SystemExit, match="is a directory"):
        main(["train", "recall", "--no-progress", "--checkpoint", str(tmp_path)])
    with pytest.raises(SystemExit, match=r"cannot write the checkpoint .*a-file/seq2seq-fixed"):
        main(["train", "seq2seq", "--quick", "--steps", "2", "--per-bucket", "1",
              "--no-progress", "--save-dir", str(blocker)])


def test_cli_saves_the_farback_models_where_asked(tmp_path):
    from qkv.tasks import farback

    main(["train", "farback", "--quick", "--steps", "2", "--per-bucket", "5", "--no-progress",
          "--save-dir", str(tmp_path)])
    for kind in farback.KINDS:
        model = farback.FarbackModel.load(tmp_path / f"farback-{kind}.safetensors")
        assert model.kind == kind and model.config.window == 64 and model.config.steps == 2
        assert set(model.metrics) >= {"accuracy", "by_lag"}
