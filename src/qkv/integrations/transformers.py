"""qkv as a Hugging Face transformers attention implementation, with the weights kept.

    import qkv.integrations.transformers            # registers "qkv" (also: register())
    model = AutoModel.from_pretrained(path, attn_implementation="qkv")
    model(**inputs, output_attentions=True).attentions   # exact weights, as eager gives

    with qkv.integrations.transformers.record(layers=[2], heads=[8], rows=[-1]) as rec:
        model(**inputs)                              # no n × n matrix is built
    rec.weights[2][0]                                # (B, 1 head, 1 row, Nk) for layer 2, call 0

    with qkv.integrations.transformers.capture(layers=[2]) as cap:
        model(**inputs)                              # what layer 2's attention received
    call = cap.calls[2][0]                           # q, k, v (after RoPE), mask, scale
    allowed_pairs(call)                              # (B, Hq, Nq, Nk) bool: the mask it ran

Each attention call of the model goes through :func:`attention_forward`: the torch tensors
``query (B, Hq, Nq, D)``, ``key``/``value (B, Hkv, Nk, D)`` become NumPy views (CPU only), and
``qkv.attention`` computes the output tile by tile, grouped-query attention kept as GQA (query
head h reads kv head ``h // (Hq // Hkv)``, no ``repeat_kv`` copy). transformers' mask — a 4-D
bool array built by its ``sdpa_mask`` (registered for "qkv" too), ``None`` when plain causal,
or a 4-D float additive mask a caller passed — is translated by :func:`translate_mask` into
qkv's named masks (``causal()``, ``window(w)``, ``padding(lengths)``), which let the kernel
skip whole tiles, and into ``qkv.allow(...)`` only for patterns it does not name. Gradients flow
through ``qkv.attention_backward`` (FlashAttention-2's backward).

Refused with a ValueError naming the argument: attention dropout > 0 (training mode with
``attention_dropout`` set), ``softcap`` (Gemma-2), attention sinks (``s_aux``, gpt-oss),
``position_bias`` (T5-style relative bias), tensors not on the CPU. bfloat16 is computed in
float32 and rounded back (qkv computes float16/32/64).

Difference from ``eager``: a query row that may attend to no key (a left-padding position in a
causal model) gives zeros in qkv, where eager spreads uniform weights over masked keys; such
rows are padding and never read.
"""

from __future__ import annotations

import contextlib
import contextvars
from dataclasses import dataclass, field

import numpy as np

import qkv

from .._install import install_hint

try:
    import torch
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask
except ImportError as e:  # a missing package, or a transformers older than 4.53
    raise ImportError(
        f"qkv.integrations.transformers needs transformers>=4.53 and torch ({e}): "
        f"{install_hint('hf')}, and torch, which transformers' models run on: "
        "pip install torch==2.13.0 (the version qkv is tested with)") from e

__all__ = ["NAME", "Call", "Capture", "Recorder", "allowed_pairs", "attention_forward", "capture",
           "record", "register", "translate_mask"]

NAME = "qkv"
# torch dtypes qkv computes in directly; bfloat16 goes through float32.
_NATIVE = {torch.float16, torch.float32, torch.float64}


def register(name: str = NAME) -> str:
    """Register qkv under ``name`` in transformers' attention and mask interfaces; idempotent.

    Returns ``name``, to pass as ``attn_implementation=``. Importing this module registers
    ``"qkv"`` already.
    """
    AttentionInterface.register(name, attention_forward)
    # The mask transformers builds for "qkv": sdpa's 4-D bool mask (True = may attend), or None
    # when the pattern is plain causal / no mask at all — both map onto qkv's named masks.
    AttentionMaskInterface.register(name, sdpa_mask)
    return name


# --------------------------------------------------------------------------- masks


@dataclass(frozen=True)
class Translated:
    """A transformers mask as qkv sees it: ``mask`` for qkv.attention and how it was read."""

    mask: qkv.masks.Mask | None
    bias: np.ndarray | None
    description: str  # e.g. "causal & padding", "window(3)", "allow(4-D array)"


def translate_mask(attention_mask, nq: int, nk: int, is_causal: bool) -> Translated:
    """transformers' ``attention_mask`` for one attention call → qkv's mask (and bias).

    Args:
        attention_mask: ``None``, a bool tensor/array ``(B or 1, H or 1, Nq, Nk)`` with True =
            may attend (sdpa's convention), or a float additive mask of that shape (0 = attend,
            the dtype's minimum or −inf = masked; other values are a bias).
        nq, nk: queries and keys of the call.
        is_causal: what transformers would do with ``attention_mask=None`` (sdpa's rule:
            causal only when Nq > 1, aligned top-left).

    A bool mask is matched against ``base & keys`` where base is no mask, ``causal()`` or
    ``window(w)`` (qkv's bottom-right alignment, which is the KV-cache case) and ``keys`` the
    keys any query may see: right padding becomes ``padding(lengths)``, other key patterns
    ``allow((B, 1, 1, Nk))``. The match is checked element by element, so the result is
    always the same mask; anything else stays an explicit ``allow(array)``.
    """
    if attention_mask is None:
        if not is_causal or nq == 1:
            return Translated(None, None, "none")
        if nq == nk:
            return Translated(qkv.causal(), None, "causal")
        # sdpa's is_causal aligns top-left when Nq != Nk.
        return Translated(qkv.allow(np.tri(nq, nk, dtype=bool)), None, "allow(top-left causal)")
    m = attention_mask.detach().cpu().numpy() if isinstance(attention_mask, torch.Tensor) \
        else np.asarray(attention_mask)
    if m.ndim != 4 or m.shape[-2:] != (nq, nk):
        raise ValueError(
            f"attention_mask: expected a 4-D mask (B, H, {nq}, {nk}) for {nq} queries and "
            f"{nk} keys, got shape {m.shape}")
    bias = None
    if m.dtype != bool:
        if not np.issubdtype(m.dtype, np.floating):
            raise TypeError(f"attention_mask: expected bool or float, got dtype {m.dtype}")
        # Additive float mask: the dtype's minimum (or −inf) means "masked", as in eager.
        allowed = m > np.finfo(m.dtype).min / 2
        rest = np.where(allowed, m, 0)
        bias = rest if rest.any() else None
        m = allowed
    translated = _named(m, nq, nk)
    return Translated(translated[0], bias, translated[1] + (" + bias" if bias is not None else ""))


def _named(m: np.ndarray, nq: int, nk: int) -> tuple[qkv.masks.Mask | None, str]:
    """A bool (B, H, Nq, Nk) mask as named qkv masks when it is one, else allow(m)."""
    if m.all():
        return None, "none"
    if m.shape[1] != 1:
        return qkv.allow(m), "allow(4-D array)"
    planes = m[:, 0]  # (B, Nq, Nk)
    i = np.arange(nq)[:, None] + (nk - nq)  # query positions, bottom-right aligned
    j = np.arange(nk)[None, :]
    back = i - j  # (Nq, Nk): how far key j lies behind query i
    reach = back[planes.any(axis=0)]
    candidates = [(None, "", np.ones((nq, nk), bool)), (qkv.causal(), "causal", back >= 0)]
    if reach.size and reach.min() >= 0:
        w = int(reach.max())
        candidates.append((qkv.window(w), f"window({w})", (back >= 0) & (back <= w)))
    for base, name, allowed in candidates:
        # Keys that some query may see (keys no query could reach under base count as seen).
        keys = planes.any(axis=1) | ~allowed.any(axis=0)[None]  # (B, Nk)
        if not np.array_equal(planes, allowed[None] & keys[:, None, :]):
            continue
        if keys.all():
            return base, name
        lengths = keys.sum(axis=1)
        if np.array_equal(keys, np.arange(nk)[None, :] < lengths[:, None]):
            keymask, keyname = qkv.padding(lengths), "padding"
        else:
            keymask, keyname = qkv.allow(keys[:, None, None, :]), "allow(keys)"
        return (keymask, keyname) if base is None else (base & keymask, f"{name} & {keyname}")
    return qkv.allow(m), "allow(4-D array)"


# --------------------------------------------------------------------------- weights on demand


@dataclass
class Recorder:
    """Weights of chosen layers, heads and rows, collected while a model runs.

    ``weights[layer]`` is a list with one float32/64 array ``(B, len(heads), len(rows), Nk)``
    per attention call of that layer (one per forward pass; one per step in generate).
    ``heads=None`` / ``rows=None`` mean all of them. Rows may be negative (``-1``: the last
    query of each call, i.e. the new token during generation).
    """

    layers: tuple[int, ...] | None
    heads: tuple[int, ...] | None
    rows: tuple[int, ...] | None
    max_bytes: int | None = None
    weights: dict[int, list[np.ndarray]] = field(default_factory=dict)

    def wants(self, layer) -> bool:
        return self.layers is None or layer in self.layers


_RECORDER: contextvars.ContextVar[Recorder | None] = contextvars.ContextVar(
    "qkv_transformers_recorder", default=None)


def _index_tuple(name: str, value) -> tuple[int, ...] | None:
    if value is None:
        return None
    if isinstance(value, int | np.integer) and not isinstance(value, bool):
        value = [value]
    try:
        items = tuple(int(x) for x in value)
    except (TypeError, ValueError):
        raise TypeError(f"{name} must be None, an int or a list of ints, got {value!r}") from None
    if any(isinstance(x, bool) for x in value):
        raise TypeError(f"{name} must be ints, got {value!r}")
    return items


@contextlib.contextmanager
def record(layers=None, heads=None, rows=None, *, max_bytes=None):
    """Collect exact weights of chosen ``layers``, ``heads`` and query ``rows`` (None = all).

    Only the requested rows are computed (``qkv.attention_weights(..., rows=...)``) and only
    the requested heads, so the memory is ``B · len(heads) · len(rows) · Nk`` per call instead
    of eager's ``B · H · N · N`` for every layer. The model's outputs are unchanged.
    """
    rec = Recorder(_index_tuple("layers", layers), _index_tuple("heads", heads),
                   _index_tuple("rows", rows), max_bytes)
    token = _RECORDER.set(rec)
    try:
        yield rec
    finally:
        _RECORDER.reset(token)


# --------------------------------------------------------------------------- the attention call


def _numpy(t: torch.Tensor, name: str) -> np.ndarray:
    if t.device.type != "cpu":
        raise ValueError(f"{name} is on {t.device}; qkv runs attention on the CPU: model.to('cpu')")
    if t.dtype not in _NATIVE:
        t = t.float()  # bfloat16: computed in float32, rounded back by the caller
    return t.detach().numpy()


class _Attention(torch.autograd.Function):
    """qkv.attention forward, qkv.attention_backward backward (lse kept, weights recomputed)."""

    @staticmethod
    def forward(ctx, q, k, v, mask, bias, scale):
        qn, kn, vn = _numpy(q, "query"), _numpy(k, "key"), _numpy(v, "value")
        out, lse = qkv.attention(qn, kn, vn, mask, bias, scale, return_lse=True)
        ctx.saved = (qn, kn, vn, out, lse, mask, bias, scale, q.dtype, k.dtype, v.dtype)
        return torch.from_numpy(np.ascontiguousarray(out)).to(q.dtype)

    @staticmethod
    def backward(ctx, dout):
        qn, kn, vn, out, lse, mask, bias, scale, *dtypes = ctx.saved
        grads = qkv.attention_backward(qn, kn, vn, out, lse,
                                       dout.detach().to(torch.from_numpy(out).dtype).numpy(),
                                       mask, bias, scale)
        dq, dk, dv = (torch.from_numpy(np.ascontiguousarray(g)).to(d)
                      for g, d in zip(grads, dtypes, strict=True))
        return dq, dk, dv, None, None, None


def attention_forward(module, query, key, value, attention_mask, dropout=0.0, scaling=None,
                      is_causal=None, **kwargs):
    """transformers' attention-interface signature, computed by qkv.

    ``query (B, Hq, Nq, D)``, ``key``/``value (B, Hkv, Nk, D)`` → ``(out (B, Nq, Hq, D),
    weights (B, Hq, Nq, Nk) or None)``; weights when ``output_attentions`` is asked for (as a
    call argument or in the config).
    """
    if dropout:
        raise ValueError(
            f"dropout: qkv's attention has no dropout, got dropout={dropout} (the module is in "
            "training mode with attention_dropout > 0); call model.eval() or set "
            "config.attention_dropout = 0")
    for name in ("softcap", "s_aux", "sinks", "position_bias"):
        if kwargs.get(name) is not None:
            raise ValueError(
                f"{name}: qkv's transformers backend does not support {name} (given for "
                f"{type(module).__name__}); use attn_implementation='eager' for this model")
    nq, nk = query.shape[-2], key.shape[-2]
    if is_causal is None:
        is_causal = getattr(module, "is_causal", True)
    tr = translate_mask(attention_mask, nq, nk, bool(is_causal))
    bias = None if tr.bias is None else tr.bias.astype(_numpy(query[..., :0], "query").dtype)
    out = _Attention.apply(query, key, value, tr.mask, bias, scaling)  # (B, Hq, Nq, D)

    weights = None
    if _weights_requested(module, kwargs):
        w = qkv.attention_weights(_numpy(query, "query"), _numpy(key, "key"), tr.mask, bias,
                                  scaling)
        weights = torch.from_numpy(w).to(query.dtype)  # (B, Hq, Nq, Nk)
    rec = _RECORDER.get()
    if rec is not None:
        _record_call(rec, module, query, key, tr, bias, scaling)
    cap = _CAPTURE.get()
    if cap is not None:
        _capture_call(cap, module, query, key, value, tr, bias, scaling)
    return out.transpose(1, 2).contiguous(), weights


def _weights_requested(module, kwargs) -> bool:
    """Did the caller ask for ``output_attentions``?

    Most models pass the call's ``output_attentions`` down to the attention function; some
    (GPT-2) do not, and transformers then only knows it through the collector its
    ``capture_outputs`` decorator sets for the call, which we read when it exists.
    """
    want = kwargs.get("output_attentions")
    if want is not None:
        return bool(want)
    if getattr(getattr(module, "config", None), "output_attentions", False):
        return True
    collecting = _COLLECTOR.get() if _COLLECTOR is not None else None
    return bool(collecting) and "attentions" in collecting


try:  # transformers ≥ 5: the outputs being captured for the current forward call
    from transformers.utils.output_capturing import _active_collector as _COLLECTOR
except ImportError:  # pragma: no cover - older transformers pass output_attentions down
    _COLLECTOR = None


def _record_call(rec: Recorder, module, query, key, tr: Translated, bias, scaling) -> None:
    layer = getattr(module, "layer_idx", None)
    if layer is None:
        raise ValueError(
            f"record(layers=...): {type(module).__name__} has no layer_idx, so its layer "
            "cannot be told apart; this model is not supported by record()")
    if not rec.wants(layer):
        return
    q, k = _numpy(query, "query"), _numpy(key, "key")  # (B, Hq, Nq, D), (B, Hkv, Nk, D)
    hq, hkv = q.shape[1], k.shape[1]
    if rec.heads is not None:
        bad = [h for h in rec.heads if not -hq <= h < hq]
        if bad:
            raise ValueError(f"record(heads=...): head {bad[0]} but layer {layer} has {hq} heads")
        heads = [h % hq for h in rec.heads]
        # Each chosen query head with the kv head it reads (GQA), as a plain multi-head problem.
        q = q[:, heads]
        k = k[:, [h // (hq // hkv) for h in heads]]
        if bias is not None and bias.shape[1] != 1:
            bias = bias[:, heads]
    w = qkv.attention_weights(q, k, tr.mask, bias, scaling,
                              rows=None if rec.rows is None else list(rec.rows),
                              max_bytes=rec.max_bytes)
    rec.weights.setdefault(layer, []).append(w)


# --------------------------------------------------------------------------- inputs, for views


@dataclass(frozen=True)
class Call:
    """What one attention call of a layer received, as NumPy copies (for the neuron view).

    ``q (B, Hq, Nq, D)``, ``k``/``v (B, Hkv, Nk, D)`` (positions already applied, e.g. RoPE),
    ``mask`` the qkv mask it ran with (see :func:`translate_mask`), ``bias`` the additive
    bias or None, ``scale`` the scale the model passed (None: qkv's 1/√D).
    ``qkv.explain(q[b, h], k[b, h // (Hq // Hkv)], v[...], mask, bias, scale)`` is then
    exactly the call of query head h.
    """

    q: np.ndarray
    k: np.ndarray
    v: np.ndarray
    mask: qkv.masks.Mask | None
    bias: np.ndarray | None
    scale: float | None
    description: str


@dataclass
class Capture:
    """``calls[layer]``: one :class:`Call` per attention call of that layer, in order."""

    layers: tuple[int, ...] | None
    calls: dict[int, list[Call]] = field(default_factory=dict)


_CAPTURE: contextvars.ContextVar[Capture | None] = contextvars.ContextVar(
    "qkv_transformers_capture", default=None)


@contextlib.contextmanager
def capture(layers=None):
    """Keep the inputs of every attention call of ``layers`` (None = all) as :class:`Call`.

    Memory is the layers' q, k, v: ``B · (Hq + 2·Hkv) · N · D`` numbers per call, no n × n
    matrix. The model's outputs are unchanged.
    """
    cap = Capture(_index_tuple("layers", layers))
    token = _CAPTURE.set(cap)
    try:
        yield cap
    finally:
        _CAPTURE.reset(token)


def _capture_call(cap: Capture, module, query, key, value, tr: Translated, bias,
                  scaling) -> None:
    layer = getattr(module, "layer_idx", None)
    if layer is None:
        raise ValueError(
            f"capture(layers=...): {type(module).__name__} has no layer_idx, so its layer "
            "cannot be told apart; this model is not supported by capture()")
    if cap.layers is not None and layer not in cap.layers:
        return
    q, k, v = (np.array(_numpy(t, name)) for t, name in
               ((query, "query"), (key, "key"), (value, "value")))  # copies, not views
    cap.calls.setdefault(layer, []).append(
        Call(q, k, v, tr.mask, bias, None if scaling is None else float(scaling),
             tr.description))


def allowed_pairs(call: Call) -> np.ndarray:
    """The pairs ``call``'s mask lets attend: bool ``(B, Hq, Nq, Nk)``, True = may attend.

    The mask bound to the call's problem (``qkv.engine.prepare``) and written out densely by
    the same ``dense`` the reference uses, so it is the very rule the kernel applied.
    """
    from qkv.engine import prepare

    b, hq, nq, _ = call.q.shape
    nk = call.k.shape[-2]
    if call.mask is None:
        return np.ones((b, hq, nq, nk), dtype=bool)
    # Shapes only: one zero feature per position (the scores do not matter here).
    p = prepare(np.zeros((b, hq, nq, 1)), np.zeros((b, call.k.shape[1], nk, 1)), None, call.mask)
    dense = p.mask.dense(p.q_pos, p.k_pos)  # (B or 1, Hq or 1, Nq, Nk)
    return np.broadcast_to(dense, (b, hq, nq, nk)).copy()


register()
