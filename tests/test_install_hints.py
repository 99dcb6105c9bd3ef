"""Optional extras: each command checks what it needs before it starts any work, and says how
to install it in the form that fits how qkv was installed (a clone or a wheel)."""

from __future__ import annotations

import json
import sys

import pytest
from fastapi.testclient import TestClient

from qkv import _install
from qkv.cli import main
from qkv.explore import seq2seq_service
from qkv.explore.app import create_app


class _Dist:
    def __init__(self, direct_url: dict | None):
        self.text = None if direct_url is None else json.dumps(direct_url)

    def read_text(self, name):
        assert name == "direct_url.json"
        return self.text


@pytest.fixture
def installed_as(monkeypatch):
    """Pretend qkv was pip-installed with this direct_url.json (None: from an index)."""

    def set_(direct_url):
        _install.editable_clone.cache_clear()
        monkeypatch.setattr(_install.metadata, "distribution", lambda name: _Dist(direct_url))

    yield set_
    _install.editable_clone.cache_clear()


def test_a_wheel_install_is_told_pip_install_qkv_extra(installed_as):
    installed_as({"url": "file:///tmp/dist/qkv-0.1.0-py3-none-any.whl",
                  "archive_info": {"hash": "sha256=00"}})
    assert _install.install_hint("train") == "pip install 'qkv[train]'"


def test_an_editable_clone_is_told_pip_install_e(installed_as):
    installed_as({"url": "file:///home/me/qkv", "dir_info": {"editable": True}})
    hint = _install.install_hint("explore")
    assert hint.startswith("pip install -e '.[explore]' in your qkv clone (/home/me/qkv")
    assert "scripts/install.sh" in hint


def test_an_index_install_without_direct_url_is_a_wheel_install(installed_as, monkeypatch):
    installed_as(None)
    monkeypatch.setattr(_install, "__file__", "/venv/lib/python3.11/site-packages/qkv/x.py")
    assert _install.install_hint("cli") == "pip install 'qkv[cli]'"


def test_require_names_every_missing_module_and_one_extra(installed_as, monkeypatch):
    installed_as({"url": "file:///w.whl", "archive_info": {}})
    monkeypatch.setitem(sys.modules, "safetensors", None)
    monkeypatch.setitem(sys.modules, "rich", None)
    with pytest.raises(_install.MissingExtra) as err:
        _install.require("qkv train recall", "rich", "safetensors", "numpy", extra="train")
    assert str(err.value) == ("qkv train recall needs rich and safetensors (the [train] extra), "
                              "which are not installed: pip install 'qkv[train]'")
    _install.require("numpy")  # present: no error


def test_train_recall_stops_before_training_without_safetensors(installed_as, monkeypatch,
                                                                 tmp_path, capsys):
    installed_as({"url": "file:///w.whl", "archive_info": {}})
    monkeypatch.setitem(sys.modules, "safetensors", None)
    from qkv.tasks import Run

    monkeypatch.setattr(Run, "fresh", lambda *a, **k: pytest.fail("training started"))
    ckpt = tmp_path / "r.safetensors"
    assert main(["train", "recall", "--checkpoint", str(ckpt), "--no-progress"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and not ckpt.exists()
    assert err.strip().splitlines() == [
        "qkv train recall needs safetensors (the [train] extra), which is not installed: "
        "pip install 'qkv[train]'"]


def test_look_without_tokenizers_names_the_model_extra(installed_as, monkeypatch, capsys):
    # a wheel installed with [cli,train,explore] only: `qkv look` must name the missing extra,
    # never end on a bare "No module named 'tokenizers'"
    installed_as({"url": "file:///w.whl", "archive_info": {}})
    monkeypatch.setitem(sys.modules, "tokenizers", None)
    assert main(["look", "The cat sat on the mat"]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err.strip().splitlines() == [
        "qkv look needs tokenizers (the [model] extra), which is not installed: "
        "pip install 'qkv[model]'"]


def test_a_bad_step_count_is_one_line_and_nonzero(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["train", "recall", "--steps", "-5"])
    assert exit_.value.code == "qkv train recall: --steps must be ≥ 1, got -5"


def test_bench_only_matching_nothing_is_one_line_and_nonzero(capsys):
    assert main(["bench", "--only", "nosuchcase", "--keep-blas-env"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and len(err.strip().splitlines()) == 1
    assert "--only nosuchcase matches no case; the cases are: dense N=2048" in err


def test_warm_without_numba_says_there_is_nothing_to_build(monkeypatch, tmp_path, capsys):
    monkeypatch.setitem(sys.modules, "numba", None)  # as without the qkv[fast] extra
    monkeypatch.setenv("QKV_CACHE_DIR", str(tmp_path))
    assert main(["warm"]) == 0
    assert "Numba is not installed, so qkv runs its NumPy step: nothing to build" in (
        capsys.readouterr().out)
    assert list(tmp_path.iterdir()) == []


def test_seq2seq_help_is_the_seq2seq_help(capsys):
    with pytest.raises(SystemExit):
        main(["train", "seq2seq", "--help"])
    out = capsys.readouterr().out
    assert "--save-dir" in out and "--per-bucket" in out
    assert "GRU encoder–decoder with one fixed context vector" in out
    assert "associative recall" not in out  # not the overview of every task


def test_view_7_without_safetensors_is_the_documented_503(installed_as, monkeypatch):
    installed_as({"url": "file:///w.whl", "archive_info": {}})
    monkeypatch.setitem(sys.modules, "safetensors", None)
    monkeypatch.setattr(seq2seq_service, "_models", {})
    with TestClient(create_app(allowed_hosts=["testserver"])) as c:
        r = c.post("/api/seq2seq", json={})
        assert c.post("/api/trace", json={}).status_code == 200
    assert r.status_code == 503
    assert r.json()["detail"] == (
        "the encoder–decoder view (its shipped checkpoints) needs safetensors (the [train] "
        "extra), which is not installed: pip install 'qkv[train]'")


def test_demo_runs_without_rich(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "rich", None)
    for name in [m for m in sys.modules if m.startswith("rich.")]:
        monkeypatch.setitem(sys.modules, name, None)
    assert main(["demo"]) == 0
    out = capsys.readouterr().out
    assert "All numbers agree with the lesson." in out and "[green]" not in out
    assert "[0.9997, 0.0003]" in out and "(1.219, 0.779)" in out and "✗" not in out
