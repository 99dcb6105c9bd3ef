"""The explorer's FastAPI app: one page, its assets, and a small JSON API over qkv.

- ``GET /`` the page; ``GET /static/<path>`` its assets (the ES modules ``main.js``,
  ``core/*.js``, ``views/*.js`` and ``style.css``), read from the package once at start-up (no
  endpoint touches the file system afterwards, none writes).
- ``POST /api/projections`` (view 1), ``/api/trace`` (2), ``/api/scale`` (3), ``/api/mask`` (4),
  ``/api/mistakes`` (5), ``/api/cost`` (6), ``/api/seq2seq`` (7), ``/api/model/attentions`` and
  ``/api/model/neuron`` (8): validated by :mod:`qkv.explore.schemas`, computed by qkv.
- ``POST /api/farback``, ``/api/farback/curves``, ``/api/seq2seq/curves``, ``/api/cost/growth``,
  ``/api/cost/recall``, ``/api/cost/recall/curves``: the lesson's measured claims
  (:mod:`qkv.explore.lesson_schemas`); ``/api/projections/frozen`` (view 1's toy trained with
  the W's learned or frozen, :mod:`qkv.explore.frozen_ws`).

Bad input is a 422 with a sentence for a person (``detail``) and one entry per problem
(``errors``) — only for pydantic's validation errors and :class:`InputError`; any other
exception is a bug and a 500. A missing model is a 503. A POST must say
``Content-Type: application/json`` (415 otherwise), so a form or ``text/plain`` request from
another site's page cannot make the server compute. No CORS headers are sent, so other sites'
pages cannot read the API; the Host header must name the address the server was bound to or a
loopback name (a guard against DNS rebinding); a Content-Security-Policy keeps the page from
loading anything from elsewhere.
"""

from __future__ import annotations

import json
from importlib import resources

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException

import qkv

from . import (
    circuit_service,
    compute,
    cost_service,
    farback_service,
    frozen_ws,
    gpt_service,
    head_sizes,
    lessons,
    own_heads_service,
    projections,
    seq2seq_service,
)
from .classroom import Classroom
from .errors import InputError, describe_validation_errors
from .fairqueue import FairService
from .gpt_schemas import (
    GPTGenerateRequest,
    GPTGenerateResponse,
    GPTInductionRequest,
    GPTInductionResponse,
    GPTPredictRequest,
    GPTPredictResponse,
    GPTRolesRequest,
    GPTRolesResponse,
    GPTWhereRequest,
    GPTWhereResponse,
)
from .hosts import LOOPBACK_HOSTS, HostCheck
from .joincode import JoinGate
from .lesson_schemas import (
    CurvesRequest,
    FarbackCurvesResponse,
    FarbackRequest,
    FarbackResponse,
    GrowthRequest,
    GrowthResponse,
    RecallCurvesResponse,
    RecallRequest,
    RecallResponse,
    Seq2SeqCurvesResponse,
)
from .limits import BodyLimits
from .model_service import ModelService, ModelUnavailable
from .projection_schemas import ProjectionRequest, ProjectionResponse
from .schemas import (
    AttentionsResponse,
    CostRequest,
    CostResponse,
    ErrorResponse,
    MaskRequest,
    MaskResponse,
    MistakesRequest,
    MistakesResponse,
    ModelRequest,
    NeuronRequest,
    NeuronResponse,
    ScaleRequest,
    ScaleResponse,
    Seq2SeqRequest,
    Seq2SeqResponse,
    TraceRequest,
    TraceResponse,
)
from .shipped import Unavailable

# The kinds of file served from static/ (index.html is served at /, learned_2d.json by the API).
ASSET_TYPES = {".js": "text/javascript; charset=utf-8", ".css": "text/css; charset=utf-8"}
SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}
BAD_INPUT = {
    422: {"model": ErrorResponse, "description": "the request breaks a rule (message)"},
    413: {"model": ErrorResponse, "description": "the request body is over 1 MB"},
    415: {"model": ErrorResponse, "description": "the body is not sent as application/json"},
}
# FastAPI's words for a body it cannot even decode (e.g. bytes that are not UTF-8).
UNPARSEABLE = "There was an error parsing the body"
NO_MODEL = {503: {"model": ErrorResponse,
                  "description": "the model is not installed or cannot be loaded"}}


def _read_static() -> dict[str, bytes]:
    """Every file under static/, by its path there ("main.js", "views/scale.js"), read once."""
    found = {}

    def walk(folder, prefix: str) -> None:
        for entry in folder.iterdir():
            if entry.is_dir():
                walk(entry, f"{prefix}{entry.name}/")
            elif entry.is_file():
                found[prefix + entry.name] = entry.read_bytes()

    walk(resources.files("qkv.explore") / "static", "")
    return found


def asset_type(path: str) -> str | None:
    """The media type /static/<path> is served with, or None if such files are not served."""
    suffix = path[path.rfind("."):] if "." in path else ""
    return ASSET_TYPES.get(suffix)


def create_app(allowed_hosts: list[str] | None = None,
               model_service: ModelService | None = None,
               classroom: Classroom | None = None) -> FastAPI:
    """The explorer app. ``allowed_hosts``: Host header values accepted (loopback names by
    default); ``model_service``: where MiniLM comes from (lazy by default); ``classroom``: a
    join code to ask for, and a fair queue for the heavy endpoints (``GET /api/queue``)."""
    # No /docs or /redoc: FastAPI's pages load Swagger/ReDoc from a CDN, and this app is offline.
    app = FastAPI(title="qkv explore", version=qkv.__version__,
                  description="softmax(Q Kᵀ/√d_k) V, computed by qkv, for a page to draw.",
                  docs_url=None, redoc_url=None)
    static = _read_static()
    models = model_service or ModelService()
    if classroom is not None:  # innermost: a heavy request waits its turn, body in hand
        app.add_middleware(FairService, queue=classroom.queue)
    app.add_middleware(BodyLimits)  # the body, read in full, bounded

    def post_paths() -> set[str]:
        return {r.path for r in app.routes if "POST" in (getattr(r, "methods", None) or ())}

    @app.middleware("http")
    async def json_only(request: Request, call_next):
        if request.method == "POST" and request.url.path in post_paths():
            kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
            if kind != "application/json":
                said = f"Content-Type {kind!r}" if kind else "no Content-Type"
                return JSONResponse(status_code=415, content={
                    "detail": f"the request has {said}: send the body as JSON with "
                              "Content-Type: application/json", "errors": []})
        return await call_next(request)

    if classroom is not None:  # nothing is answered before the join code (or its cookie)
        app.add_middleware(JoinGate, code=classroom.code, guesses=classroom.guesses)
    app.add_middleware(HostCheck, allowed_hosts=allowed_hosts or LOOPBACK_HOSTS)

    @app.middleware("http")
    async def security_headers(request: Request, call_next):
        response = await call_next(request)
        for name, value in SECURITY_HEADERS.items():
            response.headers.setdefault(name, value)
        return response

    @app.exception_handler(RequestValidationError)
    async def invalid_request(request: Request, exc: RequestValidationError):
        detail, errors = describe_validation_errors(exc.errors())
        return JSONResponse(status_code=422, content={"detail": detail, "errors": errors})

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException):
        if exc.status_code == 400 and exc.detail == UNPARSEABLE:
            detail = "the request body is not valid JSON text (it must be UTF-8 encoded JSON)"
            return JSONResponse(status_code=422, content={"detail": detail, "errors": []})
        return JSONResponse(status_code=exc.status_code, content={"detail": str(exc.detail)},
                            headers=getattr(exc, "headers", None))

    @app.exception_handler(InputError)  # a valid request that cannot be answered as asked
    async def refused(request: Request, exc: InputError):
        return JSONResponse(status_code=422, content={"detail": str(exc), "errors": []})

    @app.exception_handler(Unavailable)  # views 6–8, 10 without their shipped models
    async def shipped_unavailable(request: Request, exc: Exception):
        return JSONResponse(status_code=503, content={"detail": str(exc), "errors": []})

    @app.exception_handler(ModelUnavailable)
    async def model_unavailable(request: Request, exc: ModelUnavailable):
        return JSONResponse(status_code=503, content={"detail": str(exc), "errors": []})

    @app.get("/", include_in_schema=False)
    def page() -> Response:
        return Response(static["index.html"], media_type="text/html; charset=utf-8")

    @app.get("/static/{path:path}", include_in_schema=False)
    def asset(path: str) -> Response:
        kind = asset_type(path)
        if kind is None or path not in static:  # only files read at start-up: no traversal
            return JSONResponse(status_code=404, content={"detail": f"no asset {path!r}"})
        return Response(static[path], media_type=kind)

    @app.get("/api/colors")
    def colors() -> dict:
        """The weight colour scale of qkv.render (the one `qkv look` and `qkv.show` use)."""
        from qkv.render.colors import scale_spec

        return scale_spec()

    learned = json.loads(static["learned_2d.json"])

    @app.get("/api/projections/learned")
    def learned_projections() -> dict:
        """W_Q, W_K, W_V of a trained 2-D toy (scripts/fit_projection_toy.py), for the
        projections view's "learned" preset."""
        return learned

    @app.get("/api/queue")
    def queue() -> dict:
        """No queue here: a server without ``--classroom`` runs every request at once. (A
        classroom's queue answers this path itself, with each waiting request's place: see
        :mod:`.fairqueue`.) Answered, not a 404, so a page's poll is never a console error."""
        return {"classroom": False, "waiting": []}

    @app.get("/api/health")
    def health() -> dict:
        """Is the server up? (Does not load the model.)"""
        return {"ok": True, "qkv": qkv.__version__}

    @app.post("/api/trace", response_model=TraceResponse, responses=BAD_INPUT)
    def trace(req: TraceRequest) -> dict:
        """View 2: qkv.explain of the given queries, keys and values (and optional mask)."""
        return compute.vectors_trace(req)

    @app.post("/api/scale", response_model=ScaleResponse, responses=BAD_INPUT)
    def scale(req: ScaleRequest) -> dict:
        """View 3: the scores' softmax at scale 1/(τ·√d_k), and random d_k-dim vectors."""
        return compute.scale_view(req)

    @app.post("/api/mask", response_model=MaskResponse, responses=BAD_INPUT)
    def mask(req: MaskRequest) -> dict:
        """View 4: a token grid under a mask built from presets and clicked cells."""
        return compute.mask_view(req)

    @app.post("/api/projections", response_model=ProjectionResponse, responses=BAD_INPUT)
    def projected(req: ProjectionRequest) -> dict:
        """Q = X W_Q, K = X W_K, V = X W_V of 2-D points (d_k, d_v = 2 or 1), qkv.explain(Q, K,
        V), each W as rotation · stretch · rotation, and one query's lookup."""
        return projections.projections(req)

    @app.post("/api/mistakes", response_model=MistakesResponse, responses=BAD_INPUT)
    def mistakes(req: MistakesRequest) -> dict:
        """View 5: the right attention and the lesson's common mistakes, both computed by qkv."""
        return lessons.mistakes(req)

    head_sizes.register(app, BAD_INPUT)  # view 5: d_k = d_model / heads, in real models
    frozen_ws.register(app, BAD_INPUT)  # view 1: the W's learned together, or one frozen

    @app.post("/api/cost", response_model=CostResponse, responses=BAD_INPUT)
    def cost(req: CostRequest) -> dict:
        """View 6: n × n sizes, work and memory; the kernel's tile classification for a mask."""
        return lessons.cost(req)

    @app.post("/api/seq2seq", response_model=Seq2SeqResponse,
              responses={**BAD_INPUT, 503: {"model": ErrorResponse,
                                            "description": "qkv.tasks.seq2seq is missing"}})
    def seq2seq(req: Seq2SeqRequest) -> dict:
        """View 7: the shipped seq2seq models (attention vs fixed context) decoding the input."""
        return seq2seq_service.decode(req.input)

    @app.post("/api/seq2seq/curves", response_model=Seq2SeqCurvesResponse,
              responses={**BAD_INPUT, 503: {"model": ErrorResponse,
                                            "description": "checkpoints missing"}})
    def seq2seq_curves(req: CurvesRequest) -> dict:
        """Accuracy by input length of both shipped seq2seq models on held-out inputs."""
        return seq2seq_service.curves()

    @app.post("/api/farback", response_model=FarbackResponse,
              responses={**BAD_INPUT, 503: {"model": ErrorResponse,
                                            "description": "checkpoints missing"}})
    def farback(req: FarbackRequest) -> dict:
        """The shipped far-back models reading one series: predictions, the truth, and the
        attention model's weights over the steps."""
        return farback_service.read(req.seed, req.event_lag, req.event_sign,
                                    req.distractor_lags)

    @app.post("/api/farback/curves", response_model=FarbackCurvesResponse,
              responses={**BAD_INPUT, 503: {"model": ErrorResponse,
                                            "description": "checkpoints missing"}})
    def farback_curves(req: CurvesRequest) -> dict:
        """Accuracy by lag of the three shipped far-back models on the held-out set."""
        return farback_service.curves()

    @app.post("/api/cost/growth", response_model=GrowthResponse, responses=BAD_INPUT)
    def cost_growth(req: GrowthRequest) -> dict:
        """Time against n: small n timed now, large n from the shipped `qkv bench scaling`
        results."""
        return {"live": cost_service.live(req.max_n, req.budget, req.repeats),
                "shipped": cost_service.shipped()}

    no_recall = {503: {"model": ErrorResponse, "description": "the MQAR models are missing"}}

    @app.post("/api/cost/recall/curves", response_model=RecallCurvesResponse,
              responses={**BAD_INPUT, **no_recall})
    def cost_recall_curves(req: CurvesRequest) -> dict:
        """What the n² buys: the shipped MQAR run's accuracy per (length, pairs)."""
        return cost_service.recall_curves()

    @app.post("/api/cost/recall", response_model=RecallResponse,
              responses={**BAD_INPUT, **no_recall})
    def cost_recall(req: RecallRequest) -> dict:
        """The shipped attention and state-space models answering one recall sequence."""
        if req.pairs is None:
            pairs, asked = cost_service.recall_example(req.seed, req.n_pairs)
        else:
            pairs = [list(p) for p in req.pairs]
            asked = req.asked if req.asked is not None else [k for k, _ in pairs]
        return cost_service.recall_answers(pairs, asked)

    no_gpt = {503: {"model": ErrorResponse, "description": "the shipped GPT cannot be loaded"}}

    @app.post("/api/gpt/predict", response_model=GPTPredictResponse,
              responses={**BAD_INPUT, **no_gpt})
    def gpt_predict(req: GPTPredictRequest) -> dict:
        """View 10: the GPT's causal attention, next-character bars and head pushes."""
        return gpt_service.predict(req.prompt, req.temperature,
                                   [(x.layer, x.head) for x in req.ablate], req.ablation)

    @app.post("/api/gpt/generate", response_model=GPTGenerateResponse,
              responses={**BAD_INPUT, **no_gpt})
    def gpt_generate(req: GPTGenerateRequest) -> dict:
        """View 10: generation one character per step through the KV cache."""
        return gpt_service.generate(req.prompt, req.steps, req.temperature, req.seed)

    @app.post("/api/gpt/roles", response_model=GPTRolesResponse,
              responses={**BAD_INPUT, **no_gpt})
    def gpt_roles(req: GPTRolesRequest) -> dict:
        """View 10: every head's previous-token and induction scores."""
        return gpt_service.roles(req.n_sequences, req.seed)

    @app.post("/api/gpt/where", response_model=GPTWhereResponse,
              responses={**BAD_INPUT, **no_gpt})
    def gpt_where(req: GPTWhereRequest) -> dict:
        """View 10: the validation-text prompt where switching one head off matters most."""
        return gpt_service.where(req.layer, req.head, req.ablation)

    @app.post("/api/gpt/induction", response_model=GPTInductionResponse,
              responses={**BAD_INPUT, **no_gpt})
    def gpt_induction(req: GPTInductionRequest) -> dict:
        """View 10: the attention-only model's phase change and its induction head."""
        return gpt_service.induction()

    circuit_service.register(app, {**BAD_INPUT, **no_gpt})  # the induction model's circuit
    own_heads_service.register(app, {**BAD_INPUT, **no_gpt})  # does the GPT grow one?

    @app.post("/api/model/attentions", response_model=AttentionsResponse,
              responses={**BAD_INPUT, **NO_MODEL})
    def attentions(req: ModelRequest) -> dict:
        """View 8: the model's attention weights, every layer and head, and its masked pairs."""
        result = models.attention_map(req.sentence)
        layers, heads = result.weights.shape[:2]
        return {"tokens": result.tokens, "layers": layers, "heads": heads,
                "weights": result.weights.tolist(), "model": models.name,
                "special": models.special(result.tokens),
                "allowed": None if result.allowed is None else result.allowed.tolist()}

    @app.post("/api/model/neuron", response_model=NeuronResponse,
              responses={**BAD_INPUT, **NO_MODEL})
    def neuron(req: NeuronRequest) -> dict:
        """View 8: the neuron view, qkv.explain(q[h, [i]], k[h], v[h]) of one head's inputs."""
        return models.neuron(req.sentence, req.layer, req.head, req.token)

    return app
