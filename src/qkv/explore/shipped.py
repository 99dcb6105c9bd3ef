"""The shipped checkpoints behind views 7, 8 and 10 (encoder–decoder, far back, GPT): each loaded
once, and a clear HTTP 503 — what is missing and the command that installs it — when it cannot be.

safetensors (the ``[train]`` extra) reads every shipped checkpoint; it is checked before loading,
since its ImportError deep inside a loader would otherwise reach the client as a 500.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

_lock = threading.Lock()


class Unavailable(Exception):
    """A view's shipped model cannot be loaded here (HTTP 503); the message says why."""


def load_once(cache: dict, key: str, what: str, loader: Callable[[], object],
              error: type[Unavailable] = Unavailable):
    """``cache[key] = loader()`` the first time; ``error`` naming ``what`` if it cannot load."""
    with _lock:
        if key not in cache:
            from qkv._install import missing, missing_message

            if missing("safetensors"):
                raise error(missing_message(what, ["safetensors"]))
            try:
                cache[key] = loader()
            except (ImportError, AttributeError, OSError, ValueError) as exc:
                raise error(f"{what} cannot be loaded: {exc}") from exc
        return cache[key]
