"""Ring attention (Liu et al., 2023): exact attention over sequences sharded across MPI ranks.

Each of P ranks holds a shard of the queries and a shard of the keys and values (see
``layout.py``). The key/value shards travel around the ring, rank r sending to r+1:

    step t = 0 … P−1: rank r holds the kv shard that rank (r − t) mod P started with.
                      It posts Isend(shard → r+1) and Irecv(next shard ← r−1), computes its
                      queries against the shard it holds with the engine's tiled kernel, giving
                      a partial (out_t, lse_t) normalised within that shard, merges it exactly
                          lse = logaddexp(lse, lse_t)
                          out = out · exp(lse_old − lse) + out_t · exp(lse_t − lse)
                      and only then waits for the transfer, which has run during the compute
                      (a thread moves it, as over TCP a message moves only inside MPI calls:
                      ``_computing``).

Masks and biases are evaluated at *global* positions (``qkv.engine.prepare(..., positions=)``),
so causal, window, prefix, padding and documents masks mean what they mean on the full arrays.
A shard whose tiles are all EMPTY for this rank's queries is not computed at all (it still
travels on). Per step and rank the compute is 4·(N/P)²·D flops (q kᵀ and p v) against
2·(N/P)·D values moved (one k and one v shard): communication hides behind compute once N/P is
large enough (docs/distributed.md). Memory per rank is the local q, out, lse and two kv buffers:
O((N/P)·D).

Backward (FlashAttention-2's, per pair of shards): with the *final* out and lse every pair's
weights are the global ones, so each rank adds the gradients of its queries against each kv
shard it sees — dq stays home. Each rank keeps its own kv shard home and adds its own part of
its own dk/dv in two halves of its query rows: at step 0 (while the first kv shard arrives)
and after the ring (while its accumulator comes home). Every other shard's dk/dv accumulator
travels one step behind the shard, P − 1 hops: started by the owner's right neighbour, added
to by each rank (``engine.backward(..., into=)``), home to the owner last. Forward and backward
alike compute every step inside ``_computing``: a thread moves the transfers in flight
(``_channel.Channel.progressing``).
"""

from __future__ import annotations

import time
from contextlib import contextmanager
from dataclasses import dataclass, replace

import numpy as np

from .. import engine
from ..engine import Problem, as_array, check_like, kernel_config, merge, prepare, unbroadcast
from . import _channel
from ._channel import RingError
from ._mpi import communicator, mpi
from .layout import check_layout, positions, shard_length

__all__ = ["RingError", "ring_attention", "ring_attention_backward"]

TAG_KV, TAG_GRAD = 71, 72


# --------------------------------------------------------------------------------------------
# Agreeing on the global problem
# --------------------------------------------------------------------------------------------
def _agree(comm, error: Exception | None, timeout: float, meta=None) -> list:
    """Collective: every rank's ``meta``; if any rank failed, every rank raises that error.

    A rank that raised alone would leave the others waiting in the ring forever. Bounded in
    time: past ``timeout`` the job is aborted (a rank that never calls in is dead or lost).
    """
    sent = None if error is None else (type(error).__name__, str(error))
    gathered = _channel.allgather(comm, (sent, meta), timeout)
    for rank, (err, _) in enumerate(gathered):
        if err is not None:
            kind, message = err
            cls = {"TypeError": TypeError, "ValueError": ValueError}.get(kind)
            message = f"{message} (on rank {rank})"
            raise (cls(message) if cls else RingError(f"{kind}: {message}")) from error
    return [m for _, m in gathered]


# arguments that must be the same on every rank: a difference is a silently wrong answer
AGREE = ("mask", "bias", "scale", "check_finite")


@dataclass
class _Ring:
    comm: object
    rank: int
    size: int
    p: Problem  # this rank's queries against its own kv shard, validated
    k_shapes: list  # kv shard shapes as each rank passed them
    v_shapes: list
    k_pos: list  # global key positions of each rank's shard
    nq_total: int
    nk_total: int
    channel: _channel.Channel | None = None  # this call's private communicator

    @property
    def left(self) -> int:
        return (self.rank - 1) % self.size

    @property
    def right(self) -> int:
        return (self.rank + 1) % self.size

    def problem(self, src: int, k: np.ndarray, v: np.ndarray) -> Problem:
        """This rank's queries against the kv shard that rank ``src`` owns."""
        return replace(self.p, k=np.broadcast_to(k, (*self.p.batch_shape, *k.shape[-3:]))
                       if not self.p.two_d else k[None],
                       v=np.broadcast_to(v, (*self.p.batch_shape, *v.shape[-3:]))
                       if not self.p.two_d else v[None],
                       k_pos=self.k_pos[src])

    def run(self, body):
        """``body()`` on every rank, or an error on every rank (see ``_channel``)."""
        ch = self.channel
        try:
            result = body()
        except _channel.Aborted as exc:  # another rank failed: stop here too
            ch.finish(failed=True)
            raise RingError(str(exc)) from None
        except BaseException as exc:  # this rank failed: tell the others, then raise
            ch.fail(exc)
            ch.finish(failed=True)
            raise
        ch.finish(failed=False)
        return result


def _setup(q, k, v, mask, bias, scale, comm, layout, check_finite, stats, timeout,
           check=None) -> _Ring:
    error, meta = None, None
    try:
        wait = _channel.default_timeout(timeout)
    except ValueError as exc:
        wait, error = _channel.DEFAULT_TIMEOUT, exc
    try:
        comm = communicator(comm)
    except TypeError as exc:  # tell the ranks we can reach (usually COMM_WORLD), then raise
        comm, error = mpi().COMM_WORLD, exc
    rank, size = comm.Get_rank(), comm.Get_size()
    try:
        if error is not None:
            raise error
        check_layout(layout)
        if stats is not None and not isinstance(stats, dict):
            raise TypeError(f"stats must be a dict to fill (or None), got {type(stats).__name__}")
        arrays = [as_array(x, name) for x, name in ((q, "q"), (k, "k"), (v, "v"))]
        for name, arr in zip("qkv", arrays, strict=True):
            if arr.ndim < 2:
                raise ValueError(f"{name} has shape {arr.shape}: it needs at least 2 dims (N, D)")
        agree = {name: _channel.fingerprint(value) for name, value in
                 zip(AGREE, (mask, bias, scale, check_finite), strict=True)}
        meta = (layout, *(a.shape for a in arrays), arrays[0].dtype.str, agree)
    except Exception as exc:  # shared with every rank, then raised
        error = exc
    metas = _agree(comm, error, wait, meta)

    # Checks on what every rank sent: the same on every rank, so each raises the same error.
    layouts = [m[0] for m in metas]
    if len(set(layouts)) > 1:
        raise ValueError(f"layout differs across ranks ({layouts}): pass the same on every rank")
    differ = [name for name in AGREE if len({m[5][name] for m in metas}) > 1]
    if differ:
        raise ValueError(
            f"{' and '.join(differ)} {'differ' if len(differ) > 1 else 'differs'} across "
            f"ranks: ring attention computes one problem, so every rank must pass the same "
            f"{', '.join(differ)} (compared by value before "
            "the first transfer)"
        )
    q_shapes, k_shapes, v_shapes = ([m[i] for m in metas] for i in (1, 2, 3))
    nq_total = sum(s[-2] for s in q_shapes)
    nk_total = sum(s[-2] for s in k_shapes)
    for name, shapes, n in (("q", q_shapes, nq_total), ("k", k_shapes, nk_total),
                            ("v", v_shapes, nk_total)):
        if len({s[:-2] + s[-1:] for s in shapes}) > 1:
            raise ValueError(
                f"{name} shards have shapes {shapes} across ranks: all but the sequence axis "
                "(-2) must be the same on every rank"
            )
        lengths = [s[-2] for s in shapes]
        expected = [shard_length(n, r, size, layout) for r in range(size)]
        if lengths != expected:
            raise ValueError(
                f"{name} shards have lengths {lengths} across ranks, but a {layout} layout of "
                f"{n} positions over {size} ranks has lengths {expected}: make them with "
                f"qkv.distributed.shard({name}, layout={layout!r})"
            )
    if len({m[4] for m in metas}) > 1:
        raise TypeError(f"dtypes differ across ranks ({[m[4] for m in metas]}): use one dtype")

    k_pos = [positions(nk_total, r, size, layout) for r in range(size)]
    error, p = None, None
    try:  # the engine's own checks (dtypes, heads, mask and bias against the global sizes)
        p = prepare(q, k, v, mask, bias, scale, check_finite=check_finite,
                    positions=(positions(nq_total, rank, size, layout), k_pos[rank],
                               nq_total, nk_total))
        if check is not None:
            check(p)
    except Exception as exc:  # shared with every rank, then raised
        error = exc
    _agree(comm, error, wait)
    return _Ring(comm, rank, size, p, k_shapes, v_shapes, k_pos, nq_total, nk_total,
                 _channel.Channel(comm, wait))


# --------------------------------------------------------------------------------------------
# The ring
# --------------------------------------------------------------------------------------------
@contextmanager
def _computing(ch: _channel.Channel, stats: dict):
    """Compute one piece of a ring step while a thread moves the transfers in flight; timed.

    The one way the ring's transfers progress, forward and backward: over TCP, OpenMPI moves a
    large message only while a process is inside an MPI call, so a step computed without one
    left its transfer stalled until the wait — ranks waited a whole transfer or more even when
    the compute took 3× as long (docs/distributed.md, "Transfers that progress during the
    compute"). ``ch.progressing()`` runs ``MPI_Testall`` on a parked thread meanwhile; the
    block inside must make no MPI call. The seconds go to ``stats["compute_s"]`` and to the
    channel's deadline (a peer waits up to twice the longest step).
    """
    started = time.perf_counter()
    with ch.progressing():
        yield
    elapsed = time.perf_counter() - started
    ch.computed(elapsed)
    stats["compute_s"] += elapsed


def _blocks(p: Problem, ch: _channel.Channel) -> list[tuple[int, int]]:
    """Query row ranges ``[(q0, q1), ...]`` to compute one forward step in.

    While a transfer is in flight the forward computes its step in blocks of queries, whole
    query tiles, one per worker thread (the engine tiles and threads each block as it would the
    whole step); the last step, with nothing in flight, in one piece. Query rows are
    independent, so the blocks change no result. Why blocks, now that a thread moves the
    transfers (``_computing``): they are the engine calls the forward made when it polled
    between them, so its results stay bitwise the same; a block's partial (out_t, lse_t) holds
    a block's rows, not the shard's; and one engine call per step, tried beside them in one
    interleaved run over 1 Gbit/s TCP, waited no less per transfer (a longer tail at N = 2048).
    """
    if not ch.pending:  # nothing in flight (the last step): one piece
        return [(0, p.nq)]
    with kernel_config() as cfg:
        rows = cfg.tile_q * cfg.num_workers(float("inf"))
    return [(q0, min(q0 + rows, p.nq)) for q0 in range(0, p.nq, rows)]


def _rows(p: Problem, q0: int, q1: int) -> Problem:
    """The problem of query rows q0:q1 only (their global positions go with them)."""
    return replace(p, q=p.q[..., q0:q1, :], q_pos=p.q_pos[q0:q1])


def _travel(ring: _Ring, k: np.ndarray, v: np.ndarray, stats: dict, progress=None):
    """Yield ``(src, k_src, v_src)`` for t = 0 … P−1 while the next shard is in flight.

    k and v travel packed in one byte buffer (one message per step; bytes, as MPI has no
    float16). Two buffers alternate: one is computed on and sent, the other receives. The
    channel owns every buffer it sent from or received into until the request completes.
    """
    dtype = np.dtype(ring.p.dtype)
    ch = ring.channel

    def nbytes(src):
        return (np.prod(ring.k_shapes[src]) + np.prod(ring.v_shapes[src])) * dtype.itemsize

    def unpack(buf, src):
        kn = int(np.prod(ring.k_shapes[src]))
        flat = buf.view(dtype)
        return flat[:kn].reshape(ring.k_shapes[src]), flat[kn:].reshape(ring.v_shapes[src])

    most = int(max(nbytes(s) for s in range(ring.size)))
    bufs = [np.empty(most, np.uint8) for _ in range(min(ring.size, 2))]
    cur = bufs[0][: int(nbytes(ring.rank))]
    k_cur, v_cur = unpack(cur, ring.rank)
    k_cur[...], v_cur[...] = k, v
    for t in range(ring.size):
        src = (ring.rank - t) % ring.size
        reqs, nxt = [], None
        if t < ring.size - 1:
            nxt = bufs[(t + 1) % 2][: int(nbytes((src - 1) % ring.size))]
            reqs = [ch.irecv(nxt, source=ring.left, tag=TAG_KV),
                    ch.isend(cur, dest=ring.right, tag=TAG_KV)]
        yield (src, *unpack(cur, src))
        started = time.perf_counter()
        ch.wait(reqs, f"the kv shard from rank {ring.left} (step {t + 1})")
        stats["wait_s"] += time.perf_counter() - started
        if reqs:
            stats["hop_waits"].append(("kv", time.perf_counter() - started))
        if progress is not None:
            progress(t, src)
        cur = nxt


def _new_stats(stats: dict | None) -> dict:
    stats = {} if stats is None else stats
    stats.clear()
    stats.update(computed=[], skipped=[], compute_s=0.0, wait_s=0.0,
                 hop_waits=[])
    return stats


def ring_attention(q, k, v, mask=None, bias=None, scale=None, comm=None, layout="zigzag",
                   return_lse=False, *, check_finite=True, stats=None, timeout=None,
                   progress=None):
    """Exact attention on sequence shards: this rank's part of ``qkv.attention`` on the full arrays.

    Collective: every rank of ``comm`` (default ``MPI.COMM_WORLD``) calls it with its shards,
    and the same ``mask``, ``bias``, ``scale``, ``layout`` and ``check_finite`` (compared by
    value before the first transfer: a difference raises ValueError on every rank).

    Args:
        q: this rank's query shard ``(..., Hq, nq_r, Dk)``, e.g. ``shard(q_full, layout=...)``.
        k, v: this rank's key and value shards ``(..., Hkv, nk_r, Dk)``, ``(..., Hkv, nk_r, Dv)``.
            The query and key sequences are sharded independently (cross-attention: Nq != Nk).
        mask: any qkv mask, built for the *full* sequences (``documents`` ids and ``padding``
            lengths are global); evaluated at the global positions of each tile.
        bias: a rule such as ``qkv.alibi()`` or a dense array broadcastable to the full
            ``(..., Hq, Nq, Nk)``.
        scale: multiplies q kᵀ; default ``1/sqrt(Dk)``.
        layout: how the sequences were sharded, ``"zigzag"`` or ``"contiguous"``.
        return_lse: also return ``lse (..., Hq, nq_r)`` (the backward needs it).
        stats: a dict to fill with ``computed`` / ``skipped`` (source ranks of the kv shards),
            ``compute_s`` and ``wait_s`` (seconds computing and waiting for transfers), and
            ``hop_waits``: ``("kv" | "dkv", seconds)`` for each transfer received.
        timeout: seconds a rank waits for a peer (beyond twice its longest compute step) before
            it declares that peer dead and aborts the job; default ``$QKV_RING_TIMEOUT`` or 60.
        progress: called as ``progress(step, src)`` on this rank after each ring step.

    Returns:
        ``out (..., Hq, nq_r, Dv)`` in the inputs' dtype, or ``(out, lse)``; rows with no
        allowed key anywhere are zeros with ``lse = -inf``.

    Raises:
        On every rank, the same error when any rank's input is wrong; if a rank fails once the
        ring has started, that rank raises its error and every other rank :class:`RingError`.
    """
    ring = _setup(q, k, v, mask, bias, scale, comm, layout, check_finite, stats, timeout)
    stats = _new_stats(stats)

    def body():
        p, c = ring.p, ring.p.compute
        out = np.zeros(p.out_shape(p.v.shape[-1]), dtype=c)  # (*batch, Hq, nq_r, Dv), merged
        lse = np.full(p.out_shape(1)[:-1], -np.inf, dtype=c)  # (*batch, Hq, nq_r)
        for src, k_src, v_src in _travel(ring, np.asarray(k), np.asarray(v), stats, progress):
            part = ring.problem(src, k_src, v_src)
            if not engine.has_work(part):
                stats["skipped"].append(src)
                continue
            with _computing(ring.channel, stats):  # the next shard moves meanwhile
                for q0, q1 in _blocks(part, ring.channel):
                    block = _rows(part, q0, q1)
                    if engine.has_work(block):
                        out_t, lse_t = engine.forward(block)  # normalised within this kv shard
                        merge(out[..., q0:q1, :], lse[..., q0:q1], out_t, lse_t)
            stats["computed"].append(src)
        return out, lse

    out, lse = ring.run(body)
    p = ring.p
    out = p.present(out.astype(p.dtype, copy=False))
    return (out, p.present(lse, -2)) if return_lse else out


def ring_attention_backward(q, k, v, out, lse, dout, mask=None, bias=None, scale=None, comm=None,
                            layout="zigzag", *, check_finite=True, stats=None, timeout=None,
                            progress=None):
    """Gradients ``(dq, dk, dv)`` of this rank's shards: its part of ``qkv.attention_backward``.

    Collective. ``q``, ``k``, ``v``, ``mask``, ``bias``, ``scale``, ``layout``, ``stats``,
    ``timeout`` and ``progress`` are as for :func:`ring_attention`; ``out`` and ``lse`` are what
    it returned on this rank (``return_lse=True``) and ``dout`` is ∂loss/∂out for this rank's
    queries, same shape as out. dq is summed at home over the kv shards; each other kv shard's
    dk/dv accumulator travels the ring one step behind the shard (P − 1 hops) and comes home
    complete. Results have the shapes and dtype of this rank's q, k and v.
    """
    held = {}

    def check(p):
        shape = p.out_shape(p.v.shape[-1])
        shown = p.present(np.empty(shape, dtype=bool)).shape
        held["out"] = check_like(out, "out", shown, "ring_attention(q, k, v) output").reshape(shape)
        held["dout"] = check_like(dout, "dout", shown, "ring_attention(q, k, v) output") \
            .reshape(shape)
        held["lse"] = check_like(lse, "lse", shown[:-1], "the lse of ring_attention(...)") \
            .reshape(shape[:-1])
        if check_finite:
            for name in ("out", "dout"):
                if not np.isfinite(held[name]).all():
                    raise ValueError(f"{name} contains NaN or inf")

    ring = _setup(q, k, v, mask, bias, scale, comm, layout, check_finite, stats, timeout, check)
    stats = _new_stats(stats)
    p, c = ring.p, ring.p.compute
    ch, size = ring.channel, ring.size

    def grad_sizes(src):
        return int(np.prod(ring.k_shapes[src])), int(np.prod(ring.v_shapes[src]))

    def waited(reqs, what, hop=None):
        started = time.perf_counter()
        ch.wait(reqs, what)
        stats["wait_s"] += time.perf_counter() - started
        if hop is not None:
            stats["hop_waits"].append((hop, time.perf_counter() - started))

    def contribute(part, acc, src, q0, q1):
        """Add the gradients of query rows q0:q1 against shard ``src`` (``part``): dq at home,
        dk | dv into the flat accumulator ``acc``, while a thread moves the transfers."""
        block = _rows(part, q0, q1)
        if not engine.has_work(block):
            return False
        nk_, nv_ = grad_sizes(src)
        flat_k, flat_v = ((p.batch_size, p.hkv, part.nk, d) for d in (p.dk, p.dv))
        # The shard's own batch dims (no broadcasting): the accumulator *is* dk | dv, flat.
        direct = nk_ == np.prod(flat_k) and nv_ == np.prod(flat_v)
        into = ((acc[:nk_].reshape(flat_k), acc[nk_:].reshape(flat_v)) if direct
                else (np.zeros(flat_k, c), np.zeros(flat_v, c)))
        with _computing(ch, stats):  # the transfers in flight move meanwhile
            dq_b, dk_b, dv_b = engine.backward(
                block, held["out"][..., q0:q1, :], held["lse"][..., q0:q1],
                held["dout"][..., q0:q1, :], into=into)
            dq[:, :, q0:q1] += dq_b
            if not direct:  # k or v broadcast along batch dims: sum back to the shard's shape
                for g, shape, flat in ((dk_b, ring.k_shapes[src], acc[:nk_]),
                                       (dv_b, ring.v_shapes[src], acc[nk_:])):
                    flat += unbroadcast(g.reshape(*p.batch_shape, *g.shape[-3:]), shape,
                                        p.two_d).reshape(-1)
        return True

    dq = np.zeros((p.batch_size, p.hq, p.nq, p.dk), dtype=c)  # (B, Hq, nq_r, Dk), stays home
    home = np.zeros(sum(grad_sizes(ring.rank)), dtype=c)  # dk | dv of this rank's own shard

    def body():
        most = max(sum(grad_sizes(s)) for s in range(size))
        # Accumulators: two leaving (one may still be in flight while the next is summed),
        # one arriving. With the two kv buffers of _travel: at most 3 buffers in flight.
        leaving = [np.empty(most, dtype=c) for _ in range(min(size - 1, 2))]
        arriving = np.empty(most, dtype=c) if size > 1 else None
        sends = [None, None]
        with kernel_config() as cfg:  # the own shard's split, in whole query tiles
            half = min(p.nq, -(-p.nq // 2 // cfg.tile_q) * cfg.tile_q)
        own = ring.problem(ring.rank, np.asarray(k), np.asarray(v))  # kept home, never received
        for t, (src, k_src, v_src) in enumerate(_travel(ring, np.asarray(k), np.asarray(v),
                                                        stats, progress)):
            if t == 0:  # our own shard, its first half: hides the first kv shard's transfer
                worked = contribute(own, home, src, 0, half)
                stats["computed" if worked else "skipped"].append(src)
                continue
            # Shard src's accumulator: started here at t = 1 (src's right neighbour), else
            # arriving from the left — summed there while we compute our own part of it.
            i = (t - 1) % 2
            if sends[i] is not None:  # this buffer left two steps ago: make sure it has gone
                waited([sends[i]], f"rank {ring.right} to take a gradient accumulator")
            nk_, nv_ = grad_sizes(src)
            acc = leaving[i][: nk_ + nv_]
            acc[...] = 0
            recv = None
            if t >= 2:
                recv = ch.irecv(arriving[: nk_ + nv_].view(np.uint8), source=ring.left,
                                tag=TAG_GRAD)
            worked = contribute(ring.problem(src, k_src, v_src), acc, src, 0, p.nq)
            stats["computed" if worked else "skipped"].append(src)
            if recv is not None:
                waited([recv], f"a gradient accumulator from rank {ring.left}", "dkv")
                acc += arriving[: nk_ + nv_]
            sends[i] = ch.isend(acc.view(np.uint8), dest=ring.right, tag=TAG_GRAD)
        # The rest of our own shard, while its accumulator makes the last hop home (P − 1 hops:
        # from our right neighbour, the first to add to it, round to our left one).
        recv = None
        if size > 1:
            recv = ch.irecv(arriving[: home.size].view(np.uint8), source=ring.left,
                            tag=TAG_GRAD)
        worked = contribute(own, home, ring.rank, half, p.nq)
        if worked and ring.rank in stats["skipped"]:
            stats["skipped"].remove(ring.rank)
            stats["computed"].insert(0, ring.rank)
        if recv is not None:
            waited([recv], f"the last gradient accumulator from rank {ring.left}", "dkv")
            np.add(home, arriving[: home.size], out=home)
            waited([r for r in sends if r is not None],
                   f"rank {ring.right} to take a gradient accumulator")

    ring.run(body)
    nk_, _ = grad_sizes(ring.rank)
    dk = home[:nk_].reshape(ring.k_shapes[ring.rank])
    dv = home[nk_:].reshape(ring.v_shapes[ring.rank])
    dq = unbroadcast(dq.reshape(*p.batch_shape, *dq.shape[-3:]), np.shape(q), p.two_d)
    return tuple(g.astype(p.dtype, copy=False) for g in (dq, dk, dv))
