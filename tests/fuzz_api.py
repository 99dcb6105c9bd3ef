"""Fuzzing qkv's public API against a literal float64 formula, outcome by outcome (issue 23).

Hypothesis draws calls to every public entry point — ``attention``, ``attention_weights`` with
``rows=``, ``attention_backward`` with ``dlse``/``return_dbias``/dropout, ``explain``, ``merge``,
every mask and their compositions and length alignment, ``alibi``, ``softcap``, ``score_mod``,
``nn.MultiHeadAttention`` and ``KVCache`` — under odd kernel configurations, with valid inputs,
extreme ones (zero sizes, ints, 1e±30, subnormals, NaN/inf in and out of masked slots, huge
parameters, an lse that belongs to other inputs) and invalid ones. Each outcome is one of

    correct        the result matches this module's own float64 formula within the dtype's bound
    clear error    a ValueError/TypeError that names the argument at fault (for inputs that may
                   be refused: invalid, or extreme, e.g. scores past the dtype's range)
    unclear error  any other exception, or a refusal of a valid input
    silent wrong   a finite result that is not the formula's
    NaN/Inf        a NaN or inf where the formula's result is finite
    warning        a warning leaked (under ``python -W error`` it would be an exception)

and the gate is 0 of the last four. The formula here is written from the documentation
(README, docstrings), independently of qkv's reference and masks.

The CI runs a fixed-seed subset (tests/test_fuzz_api.py); the long run is::

    python tests/fuzz_api.py --calls 12000 [--seed 0]

which prints the table of outcomes (calls per class) and the first failing calls, and exits 1
if any call is in a failing class.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
import warnings
from collections import Counter
from dataclasses import dataclass, field

import numpy as np
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st

import qkv
from helpers import EPS, lse_atol, output_atol
from layouts import LAYOUTS, lay
from qkv.engine import gemm, has_numba, kernel_config

CLASSES = ("correct", "clear error", "unclear error", "silent wrong", "NaN/Inf", "warning")
FAILING = CLASSES[2:]


@dataclass
class Case:
    """One call: ``call()`` runs it; ``judge(result)`` says correct / silent wrong / NaN/Inf.
    ``may_fail``: a clear refusal is right (invalid or extreme input); ``names``: the arguments
    a refusal must name (any one of them)."""

    label: str
    call: object
    judge: object
    may_fail: bool
    names: tuple[str, ...]
    config: dict = field(default_factory=dict)
    wrong: tuple[str, ...] = ()  # refusals that are wrong here, whatever they name

    def __repr__(self):
        return f"{self.label} under kernel_config({self.config})"


# -----------------------------------------------------------------------------------------------
# Classifying one call
# -----------------------------------------------------------------------------------------------
def names_argument(message: str, names) -> bool:
    return any(re.search(rf"(?<![\w.]){re.escape(n)}(?!\w)", message) for n in names)


def classify(case: Case) -> tuple[str, str]:
    """(outcome class, detail) of one call."""
    result = None
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            with kernel_config(**case.config):
                result = case.call()
        except (ValueError, TypeError) as e:
            clear = (case.may_fail and names_argument(str(e), case.names)
                     and not any(w in str(e) for w in case.wrong))
            outcome, detail = ("clear error" if clear else "unclear error"), \
                f"{type(e).__name__}: {e}"
        except Exception as e:  # every other exception is an unclear error
            outcome, detail = "unclear error", f"{type(e).__name__}: {e}"
        else:
            outcome = None
    if outcome is None:  # judged outside the capture: the formula's own warnings are not qkv's
        with np.errstate(all="ignore"):
            outcome, detail = case.judge(result)
    leaked = [w for w in caught if not issubclass(w.category, DeprecationWarning)
              or "qkv" in str(w.filename)]
    if leaked and outcome not in FAILING:
        outcome, detail = "warning", f"{leaked[0].category.__name__}: {leaked[0].message}"
    return outcome, detail


def compare(pairs) -> tuple[str, str]:
    """pairs of (name, got, expected, atol): NaN/Inf where expected is finite but got is not;
    silent wrong where finite and off by more than atol; else correct."""
    for name, got, want, atol in pairs:
        got = np.asarray(got, dtype=np.float64)
        want = np.asarray(want, dtype=np.float64)
        if got.shape != want.shape:
            return "silent wrong", f"{name} has shape {got.shape}, expected {want.shape}"
        finite = np.isfinite(want)
        if (~np.isfinite(got) & finite).any():
            return "NaN/Inf", f"{name} is not finite where the formula's is"
        same_inf = (got == want) | ~finite  # −inf lse, or the caller's NaN: not compared
        err = np.where(same_inf, 0.0, np.abs(got - np.where(finite, want, 0)))
        if err.size and err.max() > atol:
            return "silent wrong", f"{name} off by {err.max():.3g} (allowed {atol:.3g})"
    return "correct", ""


# -----------------------------------------------------------------------------------------------
# The formula, literally, in float64 (from the README and docstrings)
# -----------------------------------------------------------------------------------------------
def positions(nq, nk, klen, qlen, batch):
    """Query positions per flat batch element: i + key_lengths[b] − query_lengths[b]."""
    nb = int(np.prod(batch))
    k = np.broadcast_to(np.asarray(nk if klen is None else klen), batch).reshape(nb)
    q = np.broadcast_to(np.asarray(nq if qlen is None else qlen), batch).reshape(nb)
    return np.arange(nq)[None, :] + (k - q)[:, None]  # (B, Nq)


def dense_mask(spec, batch, hq, nq, nk) -> np.ndarray:
    """``(B, Hq, Nq, Nk)`` bool, True = may attend, from a mask description (see draw_mask)."""
    nb = int(np.prod(batch))
    kind = spec[0]
    i = np.arange(nq)[None, None, :, None]
    j = np.arange(nk)[None, None, None, :]
    if kind == "none":
        return np.ones((nb, hq, nq, nk), bool)
    if kind in ("window", "prefix"):
        _, a, b, klen, qlen = spec
        pos = positions(nq, nk, klen, qlen, batch)[:, None, :, None]  # (B, 1, Nq, 1)
        if kind == "window":
            ok = np.ones((nb, 1, nq, nk), bool)
            if a is not None:
                ok &= j >= pos - a
            if b is not None:
                ok &= j <= pos + b
        else:
            n = np.broadcast_to(np.asarray(a), batch).reshape(nb)[:, None, None, None]
            ok = (j < n) | (j <= pos)
        return np.broadcast_to(ok, (nb, hq, nq, nk))
    if kind == "padding":
        _, klen, qlen = spec
        kl = np.broadcast_to(klen, batch).reshape(nb)[:, None, None, None]
        ok = j < kl
        if qlen is not None:
            ok = ok & (i < np.broadcast_to(qlen, batch).reshape(nb)[:, None, None, None])
        return np.broadcast_to(ok, (nb, hq, nq, nk))
    if kind == "documents":
        _, qid, kid = spec
        qid = np.broadcast_to(qid, (*batch, nq)).reshape(nb, nq)
        kid = np.broadcast_to(kid, (*batch, nk)).reshape(nb, nk)
        return np.broadcast_to((qid[:, :, None] == kid[:, None, :])[:, None], (nb, hq, nq, nk))
    if kind == "packed_causal":  # each document causal from its own bottom-right corner
        _, qlens, klens, before = spec
        ok = np.zeros((nq, nk), bool)
        q0 = k0 = 0
        for a, c in zip(qlens, klens, strict=True):
            for r in range(a):
                p = r + c - a  # local key position of local query r (< 0: sees no key)
                for j in range(c):
                    ok[q0 + r, k0 + j] = j <= p and (before is None or j >= p - before)
            q0, k0 = q0 + a, k0 + c
        return np.broadcast_to(ok, (nb, hq, nq, nk))
    if kind in ("allow", "deny"):
        arr = np.broadcast_to(spec[1], (*batch, hq, nq, nk)).reshape(nb, hq, nq, nk)
        return arr if kind == "allow" else ~arr
    if kind == "predicate":
        return np.broadcast_to(((i + j) % 3 != 1), (nb, hq, nq, nk))
    if kind == "not":
        return ~dense_mask(spec[1], batch, hq, nq, nk)
    parts = [dense_mask(s, batch, hq, nq, nk) for s in spec[1:]]
    return np.logical_and.reduce(parts) if kind == "and" else np.logical_or.reduce(parts)


def build_mask(spec):
    """The qkv mask for a description."""
    kind = spec[0]
    if kind == "none":
        return None
    if kind == "window":
        _, a, b, klen, qlen = spec
        if a is None and b == 0:
            return qkv.causal(key_lengths=klen, query_lengths=qlen)
        return qkv.window(a, b, key_lengths=klen, query_lengths=qlen)
    if kind == "prefix":
        return qkv.prefix(spec[1], key_lengths=spec[3], query_lengths=spec[4])
    if kind == "padding":
        return qkv.padding(spec[1], spec[2])
    if kind == "documents":
        return qkv.documents(spec[1], spec[2])
    if kind == "packed_causal":
        return qkv.packed_causal(spec[1], spec[2], before=spec[3])
    if kind == "allow":
        return qkv.allow(spec[1])
    if kind == "deny":
        return qkv.deny(spec[1])
    if kind == "predicate":
        return qkv.predicate(lambda i, j: (i + j) % 3 != 1)
    if kind == "not":
        return ~build_mask(spec[1])
    parts = [build_mask(s) for s in spec[1:]]
    out = parts[0]
    for m in parts[1:]:
        out = (out & m) if kind == "and" else (out | m)
    return out


def _kinds(spec) -> str:
    if spec[0] in ("and", "or"):
        return "(" + f" {spec[0]} ".join(_kinds(s) for s in spec[1:]) + ")"
    if spec[0] == "not":
        return "~" + _kinds(spec[1])
    if spec[0] in ("window", "prefix"):
        return f"{spec[0]}({spec[1]!r}, {spec[2]!r}, lengths {spec[3] is not None})"
    return spec[0]


def score_mod_fn(scores, b, h, q_idx, k_idx):
    """A FlexAttention-style modifier: a relative-position tilt per head."""
    return scores + 0.25 * (h + 1) * np.tanh((k_idx - q_idx) / 4.0)


@dataclass
class Problem:
    """The float64 formula's view of one drawn problem."""

    q: np.ndarray
    k: np.ndarray
    v: np.ndarray
    mask: tuple
    bias: object  # None, ("dense", array) or ("alibi", slopes, klen, qlen)
    scale: float | None
    softcap: float | None
    score_mod: bool
    dropout: float
    dropout_seed: int
    check_finite: bool = True

    @property
    def batch(self):
        return np.broadcast_shapes(*(np.shape(x)[:-3] for x in (self.q, self.k, self.v)))

    def __repr__(self):
        arrays = ", ".join(f"{n} {np.shape(x)} strides {np.asarray(x).strides}"
                           f"{'' if np.asarray(x).flags.aligned else ' unaligned'}"
                           for n, x in (("q", self.q), ("k", self.k), ("v", self.v)))
        mag = float(np.nanmax(np.abs(np.where(np.isinf(self.q), 0, self.q)), initial=0))
        return (f"{np.asarray(self.q).dtype} {arrays} |q|≤{mag:.3g}, mask {_kinds(self.mask)}, "
                f"bias {None if self.bias is None else self.bias[0]}, scale {self.scale}, "
                f"softcap {self.softcap}, score_mod {self.score_mod}, dropout {self.dropout}, "
                f"check_finite {self.check_finite}")

    def kwargs(self, with_dropout=True):
        kw = dict(mask=build_mask(self.mask), bias=self.qkv_bias(), scale=self.scale,
                  softcap=self.softcap, check_finite=self.check_finite)
        if self.score_mod:
            kw["score_mod"] = score_mod_fn
        if with_dropout and self.dropout:
            kw.update(dropout=self.dropout, dropout_seed=self.dropout_seed)
        return kw

    def qkv_bias(self):
        if self.bias is None:
            return None
        if self.bias[0] == "dense":
            return self.bias[1]
        _, slopes, klen, qlen = self.bias
        return qkv.alibi(slopes, key_lengths=klen, query_lengths=qlen)

    def bias_dense(self, batch, hq, nq, nk):
        nb = int(np.prod(batch))
        if self.bias is None:
            return np.zeros((nb, hq, nq, nk))
        if self.bias[0] == "dense":
            b = np.asarray(self.bias[1], np.float64)
            return np.broadcast_to(b, (*batch, hq, nq, nk)).reshape(nb, hq, nq, nk)
        _, slopes, klen, qlen = self.bias
        slopes = qkv.alibi_slopes(hq) if slopes is None else np.asarray(slopes, np.float64)
        sl = np.broadcast_to(slopes, (*batch, hq)).reshape(nb, hq)
        pos = positions(nq, nk, klen, qlen, batch)  # (B, Nq)
        dist = np.abs(pos[:, None, :, None] - np.arange(nk)[None, None, None, :])
        return -sl[:, :, None, None] * dist

    def formula(self):
        """Everything in float64: weights, out, lse, and what the backward needs."""
        batch = self.batch
        nb = int(np.prod(batch))

        def flat(x):  # (*batch, H, N, D) → (B, H, N, D); 2-D inputs are one head
            x = np.asarray(x, dtype=np.float64)
            x = x[None] if x.ndim == 2 else x
            return np.broadcast_to(x, (*batch, *x.shape[-3:])).reshape(nb, *x.shape[-3:])

        q, k, v = flat(self.q), flat(self.k), flat(self.v)
        hq, nq, dk = q.shape[-3:]
        hkv, nk = k.shape[-3], k.shape[-2]
        g = hq // hkv if hkv else 1
        ke, ve = np.repeat(k, g, axis=1), np.repeat(v, g, axis=1)  # (B, Hq, Nk, D)
        scale = 1 / np.sqrt(dk) if self.scale is None else self.scale
        allowed = dense_mask(self.mask, batch, hq, nq, nk)
        with np.errstate(all="ignore"):
            raw = np.einsum("bhid,bhjd->bhij", q, ke) * scale
            if self.softcap is not None:
                # A pair that reads the caller's inf (check_finite=False) has no defined capped
                # score: c·tanh(±inf/c) = ±c here, but scaling q first may underflow it to 0 and
                # 0·inf is NaN — either is the caller's garbage. Such rows are not compared.
                bad = ~np.isfinite(q).all(-1)[..., :, None] | ~np.isfinite(ke).all(-1)[..., None, :]
                raw = np.where(bad, np.nan, raw)
            s = raw if self.softcap is None else self.softcap * np.tanh(raw / self.softcap)
            s = s + self.bias_dense(batch, hq, nq, nk)
            if self.score_mod:
                ii = np.arange(nq)[:, None]
                jj = np.arange(nk)[None, :]
                for b in range(nb):
                    for h in range(hq):
                        s[b, h] = score_mod_fn(s[b, h], b, h, ii, jj)
            masked = np.where(allowed, s, -np.inf)
            m = masked.max(axis=-1, keepdims=True, initial=-np.inf)
            m = np.where(np.isneginf(m), 0.0, m)
            e = np.exp(masked - m)
            total = e.sum(axis=-1, keepdims=True)
            has = total != 0  # a row with no key: 0 and −inf; a NaN score: NaN, as written
            w = np.where(has, e / np.where(has, total, 1), 0.0)
            lse = np.where(has[..., 0], np.log(total[..., 0]) + m[..., 0], -np.inf)
            kept = self.kept(batch, hq, nq, nk)
            wk = w * kept
            # Σ over the pairs with a weight only: garbage in a masked slot is not read.
            out = np.einsum("bhij,bhijd->bhid", wk,
                            np.where((wk != 0)[..., None], ve[:, :, None, :, :], 0.0))
        return dict(q=q, k=k, v=v, ke=ke, ve=ve, raw=raw, w=w, kept=kept, out=out, lse=lse,
                    g=g, scale=scale, batch=batch, nb=nb)

    def kept(self, batch, hq, nq, nk):
        if not self.dropout:
            return np.ones((1, 1, 1, 1))
        # The drop pattern is qkv's (a seeded hash); the formula takes it as given.
        # (It depends on positions and the seed only: zeros stand in for q, k.)
        z = qkv.engine.dropout_scales(np.zeros(np.shape(self.q)), np.zeros(np.shape(self.k)),
                                      build_mask(self.mask), dropout=self.dropout,
                                      dropout_seed=self.dropout_seed)
        return np.broadcast_to(z, (*batch, hq, nq, nk)).reshape(int(np.prod(batch)), hq, nq, nk)


def present(x: np.ndarray, shape_batch, two_d: bool):
    """(B, H, N, D) → (*batch, H, N, D), or (N, D) for 2-D problems."""
    x = x.reshape(*shape_batch, *x.shape[1:])
    return x[0] if two_d else x


def unbroadcast(grad: np.ndarray, shape) -> np.ndarray:
    extra = grad.ndim - len(shape)
    grad = grad.sum(axis=tuple(range(extra))) if extra > 0 else grad
    axes = tuple(i for i, n in enumerate(shape) if n == 1 and grad.shape[i] != 1)
    return (grad.sum(axis=axes, keepdims=True) if axes else grad).reshape(shape)


def backward_formula(pr: Problem, f, dout, dlse):
    """dq, dk, dv (and dbias) of sum(out · dout) + sum(lse · dlse), in float64."""
    nb, batch = f["nb"], f["batch"]
    w, kept, ve, ke, q = f["w"], f["kept"], f["ve"], f["ke"], f["q"]
    hq, nq = q.shape[1], q.shape[2]
    do = np.broadcast_to(dout, (*batch, hq, nq, ve.shape[-1])).reshape(nb, hq, nq, ve.shape[-1])
    with np.errstate(all="ignore"):
        live = (w != 0)[..., None]
        dv = np.einsum("bhij,bhid->bhjd", w * kept, do)
        dp = np.einsum("bhid,bhijd->bhij", do, np.where(live, ve[:, :, None], 0.0)) * kept
        ds = w * (dp - (w * dp).sum(axis=-1, keepdims=True))
        if dlse is not None:
            ds = ds + w * np.broadcast_to(dlse, (*batch, hq, nq)).reshape(nb, hq, nq)[..., None]
        dbias = ds
        if pr.softcap is not None:
            ds = ds * (1 - np.tanh(f["raw"] / pr.softcap) ** 2)
        dq = np.einsum("bhij,bhjd->bhid", ds, ke) * f["scale"]
        dk = np.einsum("bhij,bhid->bhjd", ds, q) * f["scale"]
    g = f["g"]
    hkv = hq // g
    dk = dk.reshape(nb, hkv, g, *dk.shape[2:]).sum(2)
    dv = dv.reshape(nb, hkv, g, *dv.shape[2:]).sum(2)
    return dq, dk, dv, dbias


# -----------------------------------------------------------------------------------------------
# Drawing problems
# -----------------------------------------------------------------------------------------------
DTYPES = (np.float64, np.float32, np.float16)
# Odd tile configurations: every one the kernel accepts must give the formula's answer.
CONFIGS = st.fixed_dictionaries({}, optional={
    "small": st.sampled_from([0, 1, 6, 256 * 512]),
    "tile_q": st.sampled_from([1, 2, 3, 5, 256]),
    "tile_k": st.sampled_from([1, 2, 3, 5, 512]),
    "tile_k_unmasked": st.sampled_from([1, 2, 4, 1024]),
    "split_min": st.sampled_from([1, 2, 256]),
    "backend": st.sampled_from(["numpy", "compiled"] if has_numba() else ["numpy"]),
    "workers": st.sampled_from([1, 2]),
    "thread_min_work": st.sampled_from([0, 1 << 22]),
    # the tile GEMMs on each BLAS this machine has (NumPy's OpenBLAS; MKL, the test extra), and
    # the compiled tile loop switched on or off: every path runs on every machine
    "gemm": st.sampled_from([b for b in ("numpy", "mkl") if gemm.address(np.float32, b)]
                            or ["numpy"]),
    "fused": st.booleans(),
})
# Memory layouts of every array argument (issue 48): each drawn on its own; "C" half the time
LAYOUT = st.one_of(st.just("C"), st.sampled_from(LAYOUTS))


@st.composite
def lengths(draw, batch, n, optional=True):
    if optional and draw(st.booleans()):
        return None
    return np.asarray(draw(st.lists(st.integers(0, n), min_size=int(np.prod(batch)),
                                    max_size=int(np.prod(batch)))), dtype=np.int64).reshape(batch)


@st.composite
def draw_mask(draw, batch, hq, nq, nk, depth=0):
    kinds = (["none"] if depth == 0 else []) + [
        "causal", "window", "prefix", "padding", "documents", "packed_causal", "allow", "deny",
        "predicate"] + (
        ["and", "or", "not"] if depth < 2 else [])
    kind = draw(st.sampled_from(kinds))
    aligned = batch != () and draw(st.booleans())
    klen = draw(lengths(batch, nk)) if aligned else None
    qlen = draw(lengths(batch, nq)) if aligned else None
    if kind == "causal":
        return ("window", None, 0, klen, qlen)
    if kind == "window":
        bound = st.one_of(st.none(), st.integers(0, 4), st.sampled_from([2**30, 2**40]))
        return ("window", draw(bound), draw(bound), klen, qlen)
    if kind == "prefix":
        n = draw(st.one_of(st.integers(0, nk + 1),
                           lengths(batch, nk + 1, optional=False) if batch else st.just(0)))
        return ("prefix", n, None, klen, qlen)
    if kind == "padding":
        return ("padding", draw(lengths(batch, nk, optional=False)) if batch
                else np.asarray(draw(st.integers(0, nk))), draw(lengths(batch, nq))
                if batch else None)
    if kind == "documents":
        qid = np.sort(np.asarray(draw(st.lists(st.integers(0, 2), min_size=nq, max_size=nq)),
                              dtype=np.int64))
        kid = np.sort(np.asarray(draw(st.lists(st.integers(0, 2), min_size=nk, max_size=nk)),
                              dtype=np.int64))
        return ("documents", np.broadcast_to(qid, (*batch, nq)).copy(),
                np.broadcast_to(kid, (*batch, nk)).copy())
    if kind == "packed_causal":  # Nq and Nk cut into the same number of documents
        docs = draw(st.integers(1, 3))
        cuts = [sorted(draw(st.lists(st.integers(0, n), min_size=docs - 1, max_size=docs - 1)))
                for n in (nq, nk)]
        qlens, klens = (np.diff([0, *c, n]) for c, n in zip(cuts, (nq, nk), strict=True))
        return ("packed_causal", qlens, klens, draw(st.one_of(st.none(), st.integers(0, 4))))
    if kind in ("allow", "deny"):
        shape = draw(st.sampled_from([(nq, nk), (hq, nq, nk), (*batch, hq, nq, nk),
                                      (*batch, 1, nq, nk)]))
        seed_ = draw(st.integers(0, 2**16))
        return (kind, np.random.default_rng(seed_).random(shape) < 0.7)
    if kind == "predicate":
        return ("predicate",)
    if kind == "not":
        return ("not", draw(draw_mask(batch, hq, nq, nk, depth + 1)))
    if kind in ("and", "or"):
        return (kind, draw(draw_mask(batch, hq, nq, nk, depth + 1)),
                draw(draw_mask(batch, hq, nq, nk, depth + 1)))
    return ("none",)


MAGNITUDES = {"normal": 1.0, "tiny": 1e-30, "subnormal": 1e-310, "large": 1e4, "huge": 1e30,
              "scores": 1e8, "edge": 1e17}
# float16 holds at most 65504: its extremes are its own (issue 36: |q|, |k| ≈ 60,000, whose
# scores pass 1e9 in the float32 compute, and v near the top of the range with dropout).
MAGNITUDES_F16 = {"normal": 1.0, "tiny": 1e-4, "subnormal": 1e-7, "large": 1e3, "huge": 2e4,
                  "scores": 3e4, "edge": 6e4}


@st.composite
def problems(draw, extreme: bool, batch_ok=True, laid_out=False):
    """One problem; ``laid_out``: tiles of several rows and columns (up to 48 × 48, D ≥ 2) and
    every array in a layout other than C order, where a misread stride shows."""
    # laid out: float32 and float16 (the compiled tile loop's dtypes) more often than float64
    dtype = np.dtype(draw(st.sampled_from([np.float32, np.float16, *DTYPES] if laid_out
                                          else DTYPES)))
    batch = draw(st.sampled_from([(), (1,), (2,), (2, 1)] if batch_ok else [()]))
    if draw(st.integers(0, 9)) == 0:
        batch = (0,) if batch else batch  # zero-size batch
    hkv = draw(st.integers(1, 2))
    hq = hkv * draw(st.integers(1, 2))
    small_n = st.integers(0, 6) if extreme else st.integers(8, 48) if laid_out else \
        st.integers(1, 9)
    nq, nk = draw(small_n), draw(small_n)
    dk = draw(st.integers(2, 8) if laid_out else st.integers(1, 5))
    layout = st.sampled_from(LAYOUTS[1:]) if laid_out else LAYOUT
    dv = draw(st.integers(0, 4)) if extreme else draw(st.integers(1, 4))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    table = MAGNITUDES_F16 if dtype == np.float16 else MAGNITUDES
    mag = table[draw(st.sampled_from(list(table))) if extreme else "normal"]
    two_d = batch == () and hq == hkv == 1 and draw(st.booleans())
    top = float(np.finfo(dtype).max)

    def arr(*shape, m=1.0):
        # normal draws times m, kept inside the dtype (a float16 of 6e4 · 2.5 would be inf,
        # which is the NaN/inf cases' business, not this one's), in a memory layout of its own
        x = np.clip(rng.standard_normal(shape) * m, -top, top).astype(dtype)
        return lay(x[0] if two_d else x, draw(layout))

    q = arr(*batch, hq, nq, dk, m=mag)
    k = arr(*batch, hkv, nk, dk, m=mag)
    # v: q's and k's magnitude, 1, or (float32/64) overflow-sized: a quarter of the dtype's top,
    # so Nk of its rows summed before the softmax's division would pass it (the output, a
    # blend, would not)
    v_mags = [mag, 1.0] + ([top / 4] if dtype != np.float16 else [])
    v = arr(*batch, hkv, nk, dv, m=draw(st.sampled_from(v_mags)) if extreme else 1.0)
    mask = draw(draw_mask(batch, hq, nq, nk)) if not two_d else ("none",)
    # laid out: mostly the compiled tile loop's problems (no bias, softcap, score_mod, dropout)
    plain = laid_out and draw(st.integers(0, 3)) > 0
    bias_kind = "none" if plain else draw(st.sampled_from(["none", "dense", "alibi"]))
    bias = None
    if bias_kind == "dense":
        shape = draw(st.sampled_from([(nq, nk), (hq, nq, nk), (*batch, hq, nq, nk)]))
        shape = shape if not two_d else (nq, nk)
        bias = ("dense", lay((rng.standard_normal(shape) * 2).astype(dtype), draw(LAYOUT)))
    elif bias_kind == "alibi" and not two_d:
        slopes = None if draw(st.booleans()) else rng.random(hq)
        aligned = batch != () and draw(st.booleans())
        bias = ("alibi", slopes, draw(lengths(batch, nk)) if aligned else None,
                draw(lengths(batch, nq)) if aligned else None)
    scale = draw(st.one_of(st.none(), st.sampled_from([0.5, 2.0, -1.0, 1e-30] if extreme
                                                        else [0.5, 2.0])))
    softcap = None if plain else draw(st.one_of(st.none(), st.sampled_from([0.5, 5.0, 50.0])))
    score_mod = not plain and draw(st.integers(0, 5)) == 0
    dropout = 0.0 if plain else draw(st.sampled_from([0.0, 0.0, 0.0, 0.3]))
    return Problem(q, k, v, mask, bias, scale, softcap, score_mod, dropout,
                   draw(st.integers(0, 99)))


def garbage(pr: Problem, rng_seed: int, in_masked_only: bool) -> Problem:
    """NaN/inf in q, k or v with check_finite=False: in masked slots only, or anywhere."""
    rng = np.random.default_rng(rng_seed)
    k, v = pr.k.copy(), pr.v.copy()
    if k.shape[-2] == 0:
        return pr
    if in_masked_only:
        # a padded tail: keys past the length are garbage, and the mask says so
        nk = k.shape[-2]
        cut = int(rng.integers(0, nk))
        k[..., cut:, :] = np.nan
        if v.size:
            v[..., cut:, :] = np.inf
        batch = pr.batch
        klen = np.full(batch, cut) if batch else np.asarray(cut)
        mask = ("padding", klen, None)
        if pr.mask[0] != "none":
            mask = ("and", pr.mask, mask)
        if k.ndim == 2:  # a 2-D problem has no batch dims: keep it 2-D, no batch-shaped mask
            return pr
        return Problem(pr.q, k, v, mask, pr.bias, pr.scale, pr.softcap, pr.score_mod,
                       pr.dropout, pr.dropout_seed, check_finite=False)
    idx = tuple(int(rng.integers(0, n)) if n else 0 for n in k.shape)
    if 0 in k.shape:
        return pr
    k[idx] = rng.choice([np.nan, np.inf, -np.inf])
    return Problem(pr.q, k, v, pr.mask, pr.bias, pr.scale, pr.softcap, pr.score_mod,
                   pr.dropout, pr.dropout_seed, check_finite=False)


# -----------------------------------------------------------------------------------------------
# Cases, per entry point
# -----------------------------------------------------------------------------------------------
ALL_ARGS = ("q", "k", "v", "mask", "bias", "scale", "softcap", "lse", "out", "dout", "dlse",
            "rows", "dropout", "score_mod", "key_lengths", "query_lengths", "n", "before",
            "after", "alibi", "q_ids", "k_ids", "padding", "window", "prefix", "documents",
            "allow", "deny", "causal", "lengths", "x", "context", "out_b", "lse_b", "explain",
            "attention", "attention_backward", "slopes", "gradients")


def tolerances(pr: Problem, f):
    q, k, v = f["q"], f["k"], f["v"]
    scale = f["scale"]
    dtype = np.asarray(pr.v).dtype
    bias = None if pr.bias is None else pr.bias_dense(f["batch"], q.shape[1], q.shape[2],
                                                          k.shape[2])
    qf, kf, vf = (np.where(np.isfinite(x), x, 0) for x in (q, k, v))
    vf = vf.astype(dtype)  # (the helpers read the dtype off v)
    if pr.softcap is not None:
        # The capped score c·tanh(s/c) carries the raw score's rounding times tanh' ≤ 1 — no
        # smaller where s is moderate, for q·k may cancel terms far larger than itself — and is
        # never off by more than 2c: the bound the weights see is the smaller of the two (but
        # at least c, the capped scores' own size). As a (1, 1) q and k, for the helpers.
        compute = np.dtype(np.float32) if dtype == np.float16 else np.dtype(dtype)
        raw = abs(scale) * q.shape[-1] * _max(qf) * _max(kf)
        cap = pr.softcap
        bound = max(cap, min(raw, 2 * cap / (8 * EPS[compute])))
        qf = np.full((1, 1), np.sqrt(bound / abs(scale)) if scale else 0.0)
        kf = qf
    # dropout scales the kept weights by 1/(1 − rate): the output's rounding grows with it
    atol_out = output_atol(qf, kf, vf, scale, bias) * max(_max(f["kept"]), 1.0)
    atol_lse = lse_atol(qf, kf, np.dtype(dtype), scale, bias)
    compute = np.dtype(np.float32) if dtype == np.float16 else np.dtype(dtype)
    # the step flushes weights below the compute dtype's normal range; results round to dtype
    vmax = float(np.abs(vf).max()) if vf.size else 0.0
    floor = (k.shape[2] + 1) * (float(np.finfo(compute).tiny) * max(vmax, 1) +
                                4 * float(np.finfo(dtype).smallest_subnormal))
    return atol_out + floor, atol_lse + floor, qf, kf, vf, bias


def _max(x) -> float:
    x = np.asarray(x, dtype=np.float64)
    return float(np.abs(x[np.isfinite(x)]).max(initial=0.0))


def grad_tolerances(f, qf, kf, vf, bias, do, dlse):
    """Absolute errors allowed in (dq, dk, dv, dbias): the first-order analysis of
    ``helpers.grad_atols``, with the dlse term (dS gains P ∘ dlse), dropout's 1/(1 − rate), and
    for float16 the rounding of out (Δ = rowsum(dO ∘ O) reads the float16 out) — plus a floor
    for weights flushed below the compute dtype's normal range."""
    dtype = np.dtype(vf.dtype)
    compute = np.dtype(np.float32) if dtype == np.float16 else dtype
    eps = EPS[compute]
    nq, dk_, dv_ = f["q"].shape[2], f["q"].shape[3], f["v"].shape[3]
    scale = abs(f["scale"])
    s_bound = scale * dk_ * _max(qf) * _max(kf) + _max(0 if bias is None else bias)
    delta = 8 * eps * (1 + s_bound) + (4 * EPS[dtype] if dtype == np.float16 else 0)
    kept = _max(f["kept"]) or 1.0
    ds_bound = 2 * dv_ * _max(do) * _max(vf) * kept + 2 * _max(0 if dlse is None else dlse)
    floor = 4 * float(np.finfo(compute).tiny) * (f["k"].shape[2] + 1) * (nq + 1) * max(
        ds_bound, 1) * max(_max(qf), _max(kf), _max(vf), 1)
    return (delta * scale * ds_bound * _max(kf) + floor,
            delta * scale * ds_bound * _max(qf) * nq + floor,
            delta * nq * _max(do) * dv_ * kept + floor,
            delta * ds_bound * nq + floor)


def attention_case(pr: Problem, extreme: bool) -> Case:
    def call():
        return qkv.attention(pr.q, pr.k, pr.v, return_lse=True, **pr.kwargs())

    def judge(result):
        out, lse = result
        f = pr.formula()
        a_out, a_lse, *_ = tolerances(pr, f)
        two_d = np.ndim(pr.q) == 2
        return compare([("out", out, present(f["out"], f["batch"], two_d), a_out),
                        ("lse", lse, present(f["lse"][..., None], f["batch"], two_d)[..., 0],
                         a_lse)])

    return Case(f"attention: {pr!r}", call, judge, extreme or not pr.check_finite, ALL_ARGS)


def weights_case(pr: Problem, rows, extreme: bool) -> Case:
    def call():
        return qkv.attention_weights(pr.q, pr.k, rows=rows, **pr.kwargs(with_dropout=False))

    def judge(result):
        f = pr.formula()
        w = f["w"]
        idx = np.arange(w.shape[2])[slice(None) if rows is None else rows] \
            if rows is None or isinstance(rows, slice) else np.asarray(rows, dtype=np.intp)
        want = present(w[:, :, idx], f["batch"], np.ndim(pr.q) == 2)
        a_out, *_ = tolerances(pr, f)
        vmax = max(float(np.abs(f["v"][np.isfinite(f["v"])]).max(initial=0)), 1e-300)
        return compare([("weights", result, want, a_out / vmax + 1e-300)])

    return Case(f"attention_weights(rows={rows!r}): {pr!r}", call, judge, extreme, ALL_ARGS)


def backward_case(pr: Problem, lse_shift: float, with_dlse: bool, dbias: bool,
                  extreme: bool, deterministic: bool = False, layouts=None) -> Case:
    """``layouts``: the memory layout of out, lse, dout and dlse as handed to the backward."""
    layouts = dict.fromkeys(("out", "lse", "dout", "dlse"), "C") | (layouts or {})
    dbias = dbias and pr.bias is not None and pr.bias[0] == "dense"
    rng = np.random.default_rng(7)
    # the backward refuses a score_mod (no derivative): the invalid cases check that
    pr = Problem(pr.q, pr.k, pr.v, pr.mask, pr.bias, pr.scale, pr.softcap, False, pr.dropout,
                 pr.dropout_seed, pr.check_finite)

    def call():
        kw = pr.kwargs()
        out, lse = qkv.attention(pr.q, pr.k, pr.v, return_lse=True, **kw)
        dout = lay(rng.standard_normal(out.shape).astype(out.dtype), layouts["dout"])
        dlse = lay(rng.standard_normal(lse.shape), layouts["dlse"]) if with_dlse else None
        grads = qkv.attention_backward(pr.q, pr.k, pr.v, lay(out, layouts["out"]),
                                       lay(lse + lse_shift, layouts["lse"]), dout, dlse=dlse,
                                       return_dbias=dbias, deterministic=deterministic, **kw)
        return grads, dout, dlse

    def judge(result):
        grads, dout, dlse = result
        # A shifted lse that was not refused must still give the gradients (the backward
        # renormalises its weights, or the shift is below the lse's own rounding: 1e59 + 3).
        f = pr.formula()
        two_d = np.ndim(pr.q) == 2
        do = dout if not two_d else dout[None]
        dl = None if dlse is None else (dlse if not two_d else dlse[None])
        dq, dk, dv, db = backward_formula(pr, f, do, dl)
        batch = f["batch"]
        want = [unbroadcast(present(dq, batch, two_d), np.shape(pr.q)),
                unbroadcast(present(dk, batch, two_d), np.shape(pr.k)),
                unbroadcast(present(dv, batch, two_d), np.shape(pr.v))]
        _, _, qf, kf, vf, bias = tolerances(pr, f)
        atols = grad_tolerances(f, qf, kf, vf, bias, do, dl)
        # + rounding to the output dtype: 4 of its eps relative, and its smallest subnormal
        # (a float16 gradient of 1e-26 is 0 there)
        out_dtype = np.dtype(pr.v.dtype)
        tiny = float(np.finfo(out_dtype).smallest_subnormal)
        pairs = [(n, g, w_, a + 4 * EPS[out_dtype] * _max(w_) + tiny) for n, g, w_, a in
                 zip(("dq", "dk", "dv"), grads[:3], want, atols[:3], strict=True)]
        if dbias:
            want_b = unbroadcast(present(db, batch, two_d), np.shape(pr.bias[1]))
            pairs.append(("dbias", grads[3], want_b, atols[3] + 4 * EPS[np.dtype(pr.v.dtype)] *
                          _max(want_b)))
        return compare(pairs)

    # a shifted lse must be refused by naming it; an extreme input may be refused earlier, by
    # the forward that made the lse (scores past the dtype's range, a float16 output overflow)
    names = ("lse", *(ALL_ARGS if extreme else ())) if lse_shift else ALL_ARGS
    # the forward's own lse refused would be the backward's mistake
    wrong = () if lse_shift else ("lse does not belong",)
    return Case(f"attention_backward(lse{lse_shift:+g}, dlse={with_dlse}, dbias={dbias}, "
                f"deterministic={deterministic}, layouts {layouts}): "
                f"{pr!r}",
                call, judge, extreme or bool(lse_shift) or not pr.check_finite, names,
                wrong=wrong)


def explain_case(pr: Problem) -> Case:
    plain = Problem(pr.q, pr.k, pr.v, pr.mask, pr.bias, pr.scale, None, False, 0.0, 0)

    def call():
        trace = qkv.explain(pr.q, pr.k, pr.v, mask=build_mask(pr.mask), bias=pr.qkv_bias(),
                            scale=pr.scale)
        # every rendering of every trace explain returns (issue 36: zero-size axes raised)
        for render in (str, lambda t: json.dumps(t.to_dict(), allow_nan=False),
                       lambda t: t._repr_html_()):
            if not isinstance(render(trace), str):
                raise AssertionError("a rendering of the trace is not text")
        if trace.weights.size:
            qkv.show(trace)._repr_html_()
        return trace

    def judge(trace):
        f = plain.formula()
        two_d = np.ndim(pr.q) == 2
        return compare([
            ("weights", trace.weights, present(f["w"], f["batch"], two_d), 1e-12),
            ("output", trace.output, present(f["out"], f["batch"], two_d),
             1e-12 * max(1, float(np.abs(f["v"]).max(initial=0)))),
        ])

    return Case(f"explain: {pr!r}", call, judge, False, ALL_ARGS)


def merge_case(pr: Problem, cut: int) -> Case:
    """Two key sets, each attended alone, merged through their lse = attention over both."""
    nk = pr.k.shape[-2]
    cut = min(cut, nk)
    plain = Problem(pr.q, pr.k, pr.v, ("none",), None, pr.scale, pr.softcap, False, 0.0, 0)

    def call():
        kw = dict(scale=pr.scale, softcap=pr.softcap)
        out, lse = qkv.attention(pr.q, pr.k[..., :cut, :], pr.v[..., :cut, :], return_lse=True,
                                 **kw)
        out_b, lse_b = qkv.attention(pr.q, pr.k[..., cut:, :], pr.v[..., cut:, :],
                                     return_lse=True, **kw)
        out = out.astype(lse.dtype)  # merge runs in the compute dtype
        qkv.merge(out, lse, out_b, lse_b)
        return out, lse

    def judge(result):
        f = plain.formula()
        a_out, a_lse, *_ = tolerances(plain, f)
        two_d = np.ndim(pr.q) == 2
        return compare([("out", result[0], present(f["out"], f["batch"], two_d), 3 * a_out),
                        ("lse", result[1], present(f["lse"][..., None], f["batch"],
                                                   two_d)[..., 0], 3 * a_lse)])

    return Case(f"merge(cut={cut}): {pr!r}", call, judge, False, ALL_ARGS)


def mha_case(seed_: int, n: int, heads: tuple[int, int], causal: bool, decode: bool) -> Case:
    """nn.MultiHeadAttention against the formula, in full or token by token with a KVCache."""
    h, hkv = heads
    d_model = 4 * h
    mha = qkv.nn.MultiHeadAttention(d_model, h, hkv, rng=seed_, dtype=np.float64)
    x = np.random.default_rng(seed_).standard_normal((2, n, d_model))
    mask = qkv.causal() if causal or decode else None

    def call():
        if not decode:
            return mha.forward(x, mask=mask)[0]
        cache = qkv.nn.KVCache(1)
        return np.concatenate([mha.forward(x[:, t:t + 1], mask=mask, cache=cache[0])[0]
                               for t in range(n)], axis=1)

    def judge(y):
        p = mha.params
        d = mha.d_head

        def heads_of(t, nh):
            return t.reshape(2, n, nh, d).transpose(0, 2, 1, 3)

        pq = heads_of(x @ p["w_q"] + p["b_q"], h)
        pk = heads_of(x @ p["w_k"] + p["b_k"], hkv)
        pv = heads_of(x @ p["w_v"] + p["b_v"], hkv)
        pr = Problem(pq, pk, pv, ("window", None, 0, None, None) if mask is not None
                     else ("none",), None, None, None, False, 0.0, 0)
        out = pr.formula()["out"].reshape(2, h, n, d).transpose(0, 2, 1, 3).reshape(2, n, h * d)
        want = out @ p["w_o"] + p["b_o"]
        return compare([("y", y, want, 1e-10)])

    label = f"MultiHeadAttention({d_model}, {h}, {hkv}){' + KVCache' if decode else ''}"
    return Case(label, call, judge, False, ALL_ARGS)


def invalid_cases(draw) -> Case:
    """Inputs every entry point must refuse by name."""
    q = np.random.default_rng(0).standard_normal((3, 2))
    which = draw(st.integers(0, 22))
    table = {
        0: ("attention(q=ints ragged)", lambda: qkv.attention([[1, 2], [3]], q, q), ("q",)),
        1: ("attention(q bools)", lambda: qkv.attention(q > 0, q, q), ("q",)),
        2: ("attention(k strings)", lambda: qkv.attention(q, [["a", "b"]], q), ("k",)),
        3: ("attention(v=None)", lambda: qkv.attention(q, q, None), ("v",)),
        4: ("attention(raw bool mask)", lambda: qkv.attention(q, q, q, mask=np.ones((3, 3),
                                                                                      bool)),
            ("mask",)),
        5: ("attention(scale=inf)", lambda: qkv.attention(q, q, q, scale=np.inf), ("scale",)),
        6: ("attention(softcap=0)", lambda: qkv.attention(q, q, q, softcap=0), ("softcap",)),
        7: ("weights(rows=bools)", lambda: qkv.attention_weights(q, q, rows=[True, False]),
            ("rows",)),
        8: ("weights(rows out of range)", lambda: qkv.attention_weights(q, q, rows=[5]),
            ("rows",)),
        9: ("backward(ragged out)", lambda: qkv.attention_backward(
            q, q, q, [[1, 2], [1]], np.zeros(3), q), ("out",)),
        10: ("backward(lse NaN)", lambda: qkv.attention_backward(
            q, q, q, q, np.full(3, np.nan), q), ("lse",)),
        11: ("backward(dout shape)", lambda: qkv.attention_backward(
            q, q, q, q, np.zeros(3), q[:2]), ("dout",)),
        12: ("explain(v=None)", lambda: qkv.explain(q, q, None), ("v",)),
        13: ("merge(lists)", lambda: qkv.merge([[1.0]], [0.0], [[1.0]], [0.0]), ("out",)),
        14: ("merge(shapes)", lambda: qkv.merge(np.zeros((2, 3)), np.zeros(2), np.zeros((3, 3)),
                                                np.zeros(3)), ("out_b",)),
        15: ("merge(complex)", lambda: qkv.merge(np.zeros((2, 3)), np.zeros(2),
                                                 np.zeros((2, 3), complex), np.zeros(2)),
             ("out_b",)),
        16: ("window(key_lengths past Nk)", lambda: qkv.attention(
            q[None, None], q[None, None], q[None, None],
            mask=qkv.window(2**30, key_lengths=[2**30 + 2])),
            ("key_lengths",)),
        17: ("causal(query_lengths past Nq)", lambda: qkv.attention(
            q[None, None], q[None, None], q[None, None], mask=qkv.causal(query_lengths=[4])),
            ("query_lengths",)),
        18: ("window(before=-1)", lambda: qkv.window(-1), ("before",)),
        19: ("MultiHeadAttention.forward(1-D x)", lambda: qkv.nn.MultiHeadAttention(4, 2)
             .forward(np.zeros(4)), ("x",)),
        20: ("alibi(slopes strings)", lambda: qkv.alibi(["a"]), ("slopes",)),
        21: ("documents(float ids)", lambda: qkv.documents([0.5, 1.0]), ("q_ids",)),
        22: ("backward(score_mod)", lambda: qkv.attention_backward(
            q, q, q, q, np.zeros(3), q, score_mod=score_mod_fn), ("score_mod",)),
    }
    label, call, names = table[which]
    return Case(label, call, lambda r: ("silent wrong", f"accepted: {type(r).__name__}"), True,
                names)


@st.composite
def cases(draw) -> Case:
    """One call to one public entry point (see the module doc)."""
    kind = draw(st.sampled_from(["attention", "weights", "backward", "explain", "merge", "nn",
                                 "invalid", "garbage", "layouts", "layouts"]))
    extreme = draw(st.integers(0, 3)) == 0
    config = draw(CONFIGS)
    if kind == "invalid":
        return invalid_cases(draw)
    if kind == "nn":
        case = mha_case(draw(st.integers(0, 99)), draw(st.integers(1, 6)),
                        draw(st.sampled_from([(1, 1), (2, 1), (2, 2)])), draw(st.booleans()),
                        draw(st.booleans()))
        case.config = config
        return case
    if kind == "layouts":  # every array in a layout other than C order, tiles that show it
        pr = draw(problems(False, laid_out=True))
        config = {**config, "small": 0}  # tiled, whatever the sizes: the tile loops' paths
        case = (attention_case(pr, False) if draw(st.booleans()) else
                backward_case(pr, 0.0, draw(st.booleans()), False, False, draw(st.booleans()),
                              dict(out=draw(st.sampled_from(LAYOUTS[1:6])),
                                   lse=draw(st.sampled_from(LAYOUTS[1:6])),
                                   dout=draw(st.sampled_from(LAYOUTS[1:])),
                                   dlse=draw(st.sampled_from(LAYOUTS[1:])))))
        case.label = f"laid out: {case.label}"
        case.config = config
        return case
    pr = draw(problems(extreme))
    if kind == "garbage":
        pr = garbage(pr, draw(st.integers(0, 99)), draw(st.booleans()))
        case = attention_case(pr, True)
    elif kind == "attention":
        case = attention_case(pr, extreme)
    elif kind == "weights":
        nq = pr.q.shape[-2]
        rows = draw(st.one_of(
            st.none(),
            st.lists(st.integers(-nq, nq - 1), max_size=6) if nq else st.just([]),
            st.builds(slice, st.integers(0, 4), st.integers(0, 9), st.integers(1, 2))))
        case = weights_case(pr, rows, extreme)
    elif kind == "backward":
        shift = draw(st.sampled_from([0.0, 0.0, 0.0, -800.0, 3.0]))
        # out and lse keep their values (a broadcast view would change them: not theirs)
        same_values = st.sampled_from([x for x in LAYOUTS if x != "broadcast"])
        layouts = dict(out=draw(same_values), lse=draw(same_values), dout=draw(LAYOUT),
                       dlse=draw(LAYOUT))
        case = backward_case(pr, shift, draw(st.booleans()), draw(st.booleans()), extreme,
                             draw(st.booleans()), layouts)
    elif kind == "explain":
        case = explain_case(pr)
        case.may_fail = extreme
    else:
        case = merge_case(pr, draw(st.integers(0, 9)))
        case.may_fail = extreme
    case.config = config
    return case


# -----------------------------------------------------------------------------------------------
# Running
# -----------------------------------------------------------------------------------------------
def run(calls: int, seed_: int = 0, show: int = 5) -> tuple[Counter, list]:
    """Draw ``calls`` cases with Hypothesis from ``seed_``; return (counts per class, failures)."""
    counts: Counter = Counter()
    failures: list = []

    @seed(seed_)
    @settings(max_examples=calls, deadline=None, database=None, derandomize=False,
              suppress_health_check=list(HealthCheck), phases=["generate"])
    @given(cases())
    def one(case):
        outcome, detail = classify(case)
        counts[outcome] += 1
        if outcome in FAILING and len(failures) < show:
            failures.append((outcome, repr(case), detail))

    one()
    return counts, failures


def table(counts: Counter) -> str:
    total = sum(counts.values())
    lines = [f"{'outcome':<15}{'calls':>8}", "-" * 23]
    lines += [f"{c:<15}{counts.get(c, 0):>8}" for c in CLASSES]
    lines += ["-" * 23, f"{'total':<15}{total:>8}"]
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=12000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    started = time.monotonic()
    counts, failures = run(args.calls, args.seed, show=20)
    print(table(counts))
    print(f"({time.monotonic() - started:.0f} s, seed {args.seed})")
    for outcome, case, detail in failures:
        print(f"\n[{outcome}] {case}\n    {detail}")
    return 1 if any(counts.get(c) for c in FAILING) else 0


if __name__ == "__main__":
    sys.exit(main())
