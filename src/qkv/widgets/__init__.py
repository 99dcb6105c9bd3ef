"""qkv's interactive views as notebook widgets (anywidget): JupyterLab, Notebook 7, VS Code, marimo.

    from qkv.widgets import Vectors, MaskEditor, ModelHeads
    Vectors([[1, 0]], [[1, 0], [0, 1], [0.7, 0.7]], [[2, 0], [0, 2], [1, 1]])  # drag q, k, v
    MaskEditor("the cat sat . a dog ran .", presets=[{"kind": "causal"}])     # click cells
    ModelHeads("The cat sat on the mat.")          # every head; click a token: the neuron view

The front end is the explorer's own view modules (``qkv/explore/static/views/*.js``), linked into
one ES module by :func:`qkv.widgets.esm.single_esm` — no CDN, nothing from the network. The
kernel computes every number: a view's request (what it would POST to ``qkv explore``) arrives
as a widget message and is answered by :func:`qkv.widgets.kernel.answer`, with the functions the
explorer's endpoints call, so a widget and the explorer show the same numbers.

Kernel-side state: ``widget.state`` is the view's state (synced back after each change: the
dragged vectors, the clicked cells, the picked token); ``widget.answers[path]`` is the last
``(request, answer)`` the kernel computed for each endpoint (e.g. ``"/api/trace"``).
Requires the ``notebook`` extra (``pip install 'qkv[notebook]'``); the model view also needs the
``model`` extra and the MiniLM wheel (it answers with the install line otherwise).
"""

from __future__ import annotations

import json
import re
from functools import cache
from importlib import resources

import numpy as np

try:
    import anywidget
    import traitlets
except ImportError as exc:  # pragma: no cover - exercised by the packaging tests
    raise ImportError("qkv.widgets needs anywidget: pip install 'qkv[notebook]' (or "
                      "pip install anywidget)") from exc

from qkv.explore.model_service import ModelService

from . import kernel
from .esm import single_esm

__all__ = ["MaskEditor", "ModelHeads", "Vectors", "View"]

ENTRY = "widgets/widget.js"
# The explorer's views a widget can show (widget.js imports exactly these).
VIEWS = ("vectors", "masks", "model")


def _static(name: str) -> str:
    return (resources.files("qkv.explore") / "static" / name).read_text(encoding="utf-8")


def sections(html: str) -> dict[str, str]:
    """Each view's markup, ``<section id="view-NAME" …>…</section>``, from the explorer's page."""
    found = dict(re.findall(r'(<section id="view-(\w+)"[\s\S]*?</section>)', html))
    return {name: markup for markup, name in found.items()}


def scoped_css(css: str) -> str:
    """The explorer's style sheet confined to ``.qkv-widget`` (CSS nesting): its page-wide rules
    (``body``, ``nav``, …) match nothing in a notebook, and ``:root``'s variables become the
    widget's own."""
    return ".qkv-widget {\n" + css.replace(":root", "&") + "\n}\n"


# Form controls drawn as the browser draws them. The explorer's page keeps the browser's own look
# for fields and buttons; a host may reset it inside the widget (marimo puts its Tailwind
# preflight — no border, a transparent background — into the widget's shadow root), which leaves
# the views' fields and buttons invisible. Placed before the explorer's rules, so any rule of
# theirs that styles a control wins.
CONTROLS_CSS = """\
input:not([type="checkbox"], [type="radio"], [type="range"]), select, textarea {
  border: 1px solid ButtonBorder; border-radius: 2px; padding: 1px 2px;
  background: Field; color: FieldText;
}
button {
  border: 1px solid ButtonBorder; border-radius: 3px; padding: 1px 6px;
  background: ButtonFace; color: ButtonText;
}
"""


@cache
def front_end() -> tuple[str, str]:
    """(the single ES module, its CSS), built once per process from the package's files."""
    found = sections(_static("index.html"))
    missing = [v for v in VIEWS if v not in found]
    if missing:
        raise RuntimeError(f"qkv.widgets: the explorer's index.html has no section for {missing}")
    esm = single_esm(ENTRY, {"sections": {v: found[v] for v in VIEWS}})
    return esm, scoped_css(CONTROLS_CSS + _static("style.css"))


_models: ModelService | None = None


def _model_service() -> ModelService:
    """One model service for the kernel (MiniLM is loaded once, on the first model request)."""
    global _models
    if _models is None:
        _models = ModelService()
    return _models


class View(anywidget.AnyWidget):
    """One of the explorer's views in a notebook (use :class:`Vectors`, :class:`MaskEditor` or
    :class:`ModelHeads`)."""

    view = traitlets.Unicode().tag(sync=True)
    state = traitlets.Dict().tag(sync=True)

    def __init__(self, view: str, state: dict, models: ModelService | None = None):
        if view not in VIEWS:
            raise ValueError(f"View: view {view!r} is not one of {', '.join(VIEWS)}")
        # anywidget reads _esm and _css from the instance when it is initialised
        self._esm, self._css = front_end()
        super().__init__(view=view, state=state)
        self.models = models or _model_service()
        self.answers: dict[str, tuple[object, dict]] = {}
        self.on_msg(self._on_request)

    def _on_request(self, _widget, content, _buffers) -> None:
        if not isinstance(content, dict) or content.get("kind") != "request":
            return
        path, body = content.get("path"), content.get("body")
        reply = kernel.answer(str(path), body, self.models)
        if reply["status"] == 200 and body is not None:
            self.answers[path] = (body, reply["data"])
        self.send({"kind": "answer", "id": content.get("id"), **reply})

    def answer(self, path: str, body) -> dict:
        """What the kernel answers the view's ``path`` request (``body`` None: a GET)."""
        return kernel.answer(path, body, self.models)


def _matrix(x, name: str) -> list[list[float]]:
    arr = np.asarray(x, dtype=np.float64)
    if arr.ndim != 2 or 0 in arr.shape:
        raise ValueError(f"Vectors: {name} must be a non-empty 2-D list or array (one vector "
                         f"per row), got shape {arr.shape}")
    return arr.tolist()


def _checked(view: str, path: str, body: dict, state: dict) -> dict:
    """``state`` if the explorer's schema accepts ``body``; else a ValueError with its words."""
    reply = kernel.answer(path, body, None)  # type: ignore[arg-type]  # no model needed here
    if reply["status"] != 200:
        raise ValueError(f"{view}: {reply['detail']}")
    return state


class Vectors(View):
    """The vectors view: q, k, v as arrows to drag (or type), and each step of
    softmax(QKᵀ/√d_k)V from ``qkv.explain``. ``q`` (Nq, Dk), ``k`` (Nk, Dk), ``v`` (Nk, Dv);
    the first two dimensions are drawn. Default: the lesson's worked example."""

    def __init__(self, q=((1, 0),), k=((1, 0), (0, 1), (0.7, 0.7)), v=((2, 0), (0, 2), (1, 1)),
                 scale: float | None = None):
        state = {"q": _matrix(q, "q"), "k": _matrix(k, "k"), "v": _matrix(v, "v"),
                 "scale": "" if scale is None else str(float(scale))}
        body = {"queries": state["q"], "keys": state["k"], "values": state["v"]}
        if scale is not None:
            body["scale"] = float(scale)
        super().__init__("vectors", _checked("Vectors", "/api/trace", body, state))

    @property
    def q(self) -> np.ndarray:
        """The queries as the view has them now (after any drag), (Nq, Dk)."""
        return np.asarray(self.state["q"], dtype=np.float64)

    @property
    def k(self) -> np.ndarray:
        return np.asarray(self.state["k"], dtype=np.float64)

    @property
    def v(self) -> np.ndarray:
        return np.asarray(self.state["v"], dtype=np.float64)


class MaskEditor(View):
    """The mask editor: a token grid under presets (``{"kind": "causal"}``, ``{"kind":
    "window", "before": 2, "after": 0}``, …, as ``qkv explore`` sends them) and clicked cells;
    the weights, the mask in sentences, from ``qkv.masks`` and ``qkv.explain``."""

    def __init__(self, tokens: str | list[str] = "the cat sat . a dog ran .",
                 presets: list[dict] = (), seed: int = 0, uniform: bool = False):
        text = tokens if isinstance(tokens, str) else " ".join(map(str, tokens))
        presets = json.loads(json.dumps(list(presets)))
        state = {"tokens": text, "presets": presets, "overrides": [], "seed": int(seed),
                 "uniform": bool(uniform)}
        body = {"tokens": text.split(), "seed": int(seed), "uniform": bool(uniform),
                "mask": {"presets": presets, "overrides": []}}
        super().__init__("masks", _checked("MaskEditor", "/api/mask", body, state))


class ModelHeads(View):
    """The model's heads: every layer's and head's weights for ``sentence`` (MiniLM on qkv.nn),
    one head large; click a token for the neuron view (``qkv.explain`` of that head's q, k, v)."""

    def __init__(self, sentence: str = "The cat sat on the mat because it was tired.",
                 layer: int = 0, head: int = 0, token: int | None = None):
        if not isinstance(sentence, str):
            raise TypeError(f"ModelHeads: sentence must be a str, got {type(sentence).__name__}")
        super().__init__("model", {"sentence": sentence, "layer": int(layer), "head": int(head),
                                   "token": token})
