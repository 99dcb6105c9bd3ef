"""How to install an optional extra, said the same way by every message that needs it.

qkv is installed one of two ways, and the command that adds an extra differs:

- from a clone, editable (``pip install -e '.[all]'``, or ``bash scripts/install.sh``):
  ``pip install -e '.[extra]'``, run in the clone;
- from its wheel (``pip install 'qkv[...]'`` from a ``pip wheel`` build, or any non-editable
  install): ``pip install 'qkv[extra]'`` — pip keeps the installed qkv and adds the extra's
  packages.

Which one is read from the distribution's metadata: pip writes ``direct_url.json`` with
``dir_info.editable`` for an editable install (PEP 610). :func:`require` checks an extra's
modules *before* work starts, so a missing piece stops a command at once, with that line, and
never after minutes of training.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from functools import lru_cache
from importlib import metadata
from urllib.parse import unquote, urlparse

# The extra that provides each optional top-level module (pyproject.toml's extras).
EXTRA_OF = {
    "rich": "cli",
    "safetensors": "train",
    "threadpoolctl": "fast",
    "numba": "fast",
    "mkl": "mkl",
    "tokenizers": "model",
    "scipy": "model",
    "fastapi": "explore",
    "uvicorn": "explore",
    "pydantic": "explore",
    "matplotlib": "plot",
    "mpi4py": "mpi",
    "transformers": "hf",
}


class MissingExtra(ModuleNotFoundError):
    """An optional module is not installed; the message names it, the extra and the command."""


@lru_cache(maxsize=1)
def editable_clone() -> str | None:
    """The clone qkv is installed from in editable mode, or None (a wheel, or not pip-installed:
    then the clone form is still right when this file lies in a clone's ``src/``)."""
    try:
        text = metadata.distribution("qkv").read_text("direct_url.json")
    except metadata.PackageNotFoundError:
        text = None
    if text:
        try:
            info = json.loads(text)
        except ValueError:
            info = {}
        if info.get("dir_info", {}).get("editable"):
            url = urlparse(info.get("url", ""))
            return unquote(url.path) if url.scheme == "file" else info.get("url") or "."
        return None
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]  # src/qkv/_install.py → the clone
    return str(root) if (root / "pyproject.toml").is_file() else None


def install_hint(extra: str) -> str:
    """The command that installs ``extra`` for how qkv was installed: ``pip install -e
    '.[extra]'`` in a clone, ``pip install 'qkv[extra]'`` for a wheel install."""
    clone = editable_clone()
    if clone is None:
        return f"pip install 'qkv[{extra}]'"
    return (f"pip install -e '.[{extra}]' in your qkv clone ({clone}; or bash "
            "scripts/install.sh there for every user extra)")


def missing(*modules: str) -> list[str]:
    """Those of ``modules`` this Python cannot import (``sys.modules[m] = None`` blocks one)."""
    return [m for m in modules
            if (sys.modules[m] is None if m in sys.modules
                else importlib.util.find_spec(m) is None)]


def missing_message(who: str, modules: list[str], extra: str | None = None) -> str:
    """One line: ``who`` needs ``modules``, not installed, and the command that installs them
    (``extra``, or the extra of the first module)."""
    extra = extra or EXTRA_OF.get(modules[0], "all")
    names = " and ".join(", ".join(modules).rsplit(", ", 1))
    verb = "is" if len(modules) == 1 else "are"
    return f"{who} needs {names} (the [{extra}] extra), which {verb} not installed: " \
           f"{install_hint(extra)}"


def require(who: str, *modules: str, extra: str | None = None) -> None:
    """Raise :class:`MissingExtra` (one line, the install command) unless every one of
    ``modules`` can be imported. Call it before the work that needs them starts."""
    absent = missing(*modules)
    if absent:
        raise MissingExtra(missing_message(who, absent, extra), name=absent[0])
