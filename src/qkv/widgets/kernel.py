"""The notebook widgets' side of the API channel: a request the page's view modules would POST to
``qkv explore`` is answered here, in the kernel, by the same functions the explorer's endpoints
call (:mod:`qkv.explore.compute`, the explorer's :class:`ModelService`), checked by the same
request and response schemas — so a widget and the explorer show identical numbers.

An answer is ``{"status": 200, "data": ...}`` or ``{"status": 422 | 503 | 404, "detail": ...}``
with the explorer's sentences (the page's core turns a status ≠ 200 into the error it shows).
"""

from __future__ import annotations

from collections.abc import Callable

from pydantic import BaseModel, ValidationError

from qkv.explore import compute
from qkv.explore.errors import InputError, describe_validation_errors
from qkv.explore.model_service import ModelService, ModelUnavailable
from qkv.explore.schemas import (
    AttentionsResponse,
    MaskRequest,
    MaskResponse,
    ModelRequest,
    NeuronRequest,
    NeuronResponse,
    TraceRequest,
    TraceResponse,
)
from qkv.render.colors import scale_spec


def _attentions(req: ModelRequest, models: ModelService) -> dict:
    result = models.attention_map(req.sentence)
    layers, heads = result.weights.shape[:2]
    return {"tokens": result.tokens, "layers": layers, "heads": heads,
            "weights": result.weights.tolist(), "model": models.name,
            "allowed": None if result.allowed is None else result.allowed.tolist()}


# path → (request schema, response schema, handler(request, models) → answer)
ENDPOINTS: dict[str, tuple[type[BaseModel], type[BaseModel],
                           Callable[[BaseModel, ModelService], dict]]] = {
    "/api/trace": (TraceRequest, TraceResponse, lambda req, _: compute.vectors_trace(req)),
    "/api/mask": (MaskRequest, MaskResponse, lambda req, _: compute.mask_view(req)),
    "/api/model/attentions": (ModelRequest, AttentionsResponse, _attentions),
    "/api/model/neuron": (NeuronRequest, NeuronResponse,
                          lambda req, models: models.neuron(req.sentence, req.layer, req.head,
                                                            req.token)),
}
GETS: dict[str, Callable[[], dict]] = {"/api/colors": scale_spec}


def answer(path: str, body, models: ModelService) -> dict:
    """The explorer's answer to ``POST path`` with JSON ``body`` (``GET`` when body is None)."""
    if body is None and path in GETS:
        return {"status": 200, "data": GETS[path]()}
    if path not in ENDPOINTS:
        return {"status": 404, "detail": f"no endpoint {path!r} in the notebook widgets "
                f"(they answer {', '.join(sorted([*ENDPOINTS, *GETS]))})"}
    request_schema, response_schema, handler = ENDPOINTS[path]
    try:
        req = request_schema.model_validate(body)
    except ValidationError as exc:
        # pydantic's locations start at the model's fields; the explorer's at "body"
        errors = [{**e, "loc": ("body", *e["loc"])} for e in exc.errors()]
        detail, fields = describe_validation_errors(errors)
        return {"status": 422, "detail": detail, "errors": fields}
    try:
        data = handler(req, models)
    except InputError as exc:
        return {"status": 422, "detail": str(exc)}
    except ModelUnavailable as exc:
        return {"status": 503, "detail": str(exc)}
    return {"status": 200, "data": response_schema.model_validate(data).model_dump(mode="json")}
