"""The GPT's own heads (view 10): the shipped runs of :mod:`qkv.tasks.own_heads` (the
attention-only model and the GPT on text with repeats, the GPT on plain text 5× longer), what
copying is worth on the GPT's text (:mod:`qkv.tasks.copy_payoff`), and the induction heads
switched off — every number from the library; the page draws them and writes its sentences
from them.
"""

from __future__ import annotations

from functools import lru_cache

from .gpt_service import GPTUnavailable
from .own_heads_schemas import OwnHeadsRequest, OwnHeadsResponse
from .shipped import load_once

_loaded: dict[str, object] = {}
KEYS = ("step", "chars", "induction", "previous", "repeat", "text")


def _load(name: str):
    from qkv.tasks import own_heads

    run = own_heads.run(name)
    return load_once(_loaded, name, f"the shipped run {name}", run.load, GPTUnavailable)


def _row(row: dict) -> dict:
    return {k: row.get(k) for k in KEYS}


@lru_cache(maxsize=1)
def summary() -> dict:
    """Every figure of the page's section (cached: the shipped files are fixed; ~20 s once):
    :func:`qkv.tasks.own_heads.measure`, each model loaded once per server."""
    from qkv.tasks import own_heads

    m = own_heads.measure(load=lambda run: _load(run.name))
    for run in m["runs"]:
        run["history"] = [_row(x) for x in run["history"]]
        run["first"] = None if run["first"] is None else _row(run["first"])
        run["best"] = _row(run["best"])
    return m


def register(app, responses: dict) -> None:
    """Add ``/api/gpt/own-heads`` to the explorer's app."""
    @app.post("/api/gpt/own-heads", response_model=OwnHeadsResponse, responses=responses,
              response_model_by_alias=True)
    def gpt_own_heads(req: OwnHeadsRequest) -> dict:
        """View 10: does the GPT grow an induction head? Three runs, and copying's worth."""
        return summary()
