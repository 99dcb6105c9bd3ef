"""How to install an optional extra, said the same way by every message that needs it.

qkv is installed from a clone (it is not on a package index): ``pip install -e '.[extra]'`` in
the clone, or ``bash scripts/install.sh`` for every user extra and the MiniLM weights.
"""

from __future__ import annotations


def install_hint(extra: str) -> str:
    """The command that installs ``extra``, e.g. ``pip install -e '.[mpi]'`` (from the clone)."""
    return (f"pip install -e '.[{extra}]' in your qkv clone (or bash scripts/install.sh for "
            "every user extra)")
