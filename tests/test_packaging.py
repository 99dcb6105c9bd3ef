"""The package as pip builds it from a clone: the wheel holds every module, data file and the
PEP 561 marker, and its version is qkv.__version__."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

import qkv

ROOT = Path(__file__).resolve().parents[1]


def test_py_typed_is_in_the_package():
    assert (Path(qkv.__file__).parent / "py.typed").is_file()


@pytest.mark.slow
def test_the_wheel_builds_with_everything(tmp_path):
    done = subprocess.run([sys.executable, "-m", "pip", "wheel", str(ROOT), "--no-deps",
                           "--no-build-isolation", "-q", "-w", str(tmp_path)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    (wheel,) = tmp_path.glob("qkv-*.whl")
    assert wheel.name.startswith(f"qkv-{qkv.__version__}-")
    names = set(zipfile.ZipFile(wheel).namelist())
    src = ROOT / "src"
    expected = {str(p.relative_to(src)) for p in src.rglob("*.py")}
    expected |= {"qkv/py.typed"}
    # the page: index.html, style.css and every ES module in static/ and its folders
    expected |= {str(p.relative_to(src)) for p in (src / "qkv/explore/static").rglob("*")
                 if p.is_file()}
    assert "qkv/explore/static/core/api.js" in expected
    missing = sorted(expected - names)
    assert not missing, f"the wheel lacks {missing[:5]}"
