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
    """Every figure of the page's section (cached: the shipped files are fixed; ~20 s once)."""
    from qkv.tasks import copy_payoff, own_heads
    from qkv.tasks.corpus import load as load_corpus
    from qkv.tasks.gpt_watch import INDUCTION

    corpus = load_corpus()
    runs, models = [], {}
    for r in own_heads.RUNS:
        model, _, meta = _load(r.name)
        models[r.name] = model
        c = model.config
        rows = own_heads.history(model, meta)
        first = own_heads.first_reached(rows, INDUCTION)
        runs.append({"name": r.name, "words": r.words, "command": r.command,
                     "layers": c.n_layer, "heads": c.n_head, "width": c.n_embd,
                     "context": c.block_size, "batch": c.batch, "params": model.num_params,
                     "mlp": c.mlp, "history": [_row(x) for x in rows],
                     "first": None if first is None else _row(first),
                     "best": _row(max(rows, key=lambda x: x["induction"]))})
    table = copy_payoff.next_table(corpus.train, own_heads.MATCH, corpus.tokenizer.vocab_size)
    worth = []
    for name in own_heads.WORTH_RUNS:
        heads = own_heads.induction_heads(models[name])
        w = own_heads.worth(models[name], heads or [own_heads.best_head(models[name])], corpus,
                            table)
        worth.append({"name": name, "induction_heads": bool(heads), **w})
    return {"threshold": INDUCTION, "match": own_heads.MATCH, "runs": runs,
            "payoff": own_heads.payoff(corpus, table=table), "worth": worth}


def register(app, responses: dict) -> None:
    """Add ``/api/gpt/own-heads`` to the explorer's app."""
    @app.post("/api/gpt/own-heads", response_model=OwnHeadsResponse, responses=responses,
              response_model_by_alias=True)
    def gpt_own_heads(req: OwnHeadsRequest) -> dict:
        """View 10: does the GPT grow an induction head? Three runs, and copying's worth."""
        return summary()
