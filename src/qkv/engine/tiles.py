"""How the kernel cuts a problem into tiles (:class:`TilePlan`), and the knobs for it
(:class:`KernelConfig`).

The configuration lives in a context variable, read once at the start of each attention call and
passed explicitly to the worker threads — so tests and benchmarks change it for a block of code
without touching module globals::

    with qkv.engine.kernel_config(tile_q=8, tile_k=16, small=0, backend="numpy") as cfg:
        qkv.attention(q, k, v, mask=qkv.causal())

:class:`TileStats` counts what the kernel did (tiles computed, skipped, the pairs they held, the
path taken); pass one as ``kernel_config(stats=...)``. :func:`work_fraction` says what share of
the dense work a mask's plan computes, without running it.
"""

from __future__ import annotations

import contextlib
import contextvars
import importlib.util
import os
import sys
import threading
from collections import Counter
from dataclasses import dataclass, field, fields, replace

import numpy as np

from . import gemm
from .gemm import GEMMS
from .masks import EMPTY, FULL, KIND_NAMES, PARTIAL, BoundMask, Layout, Mask

BACKENDS = ("auto", "compiled", "numpy")


@dataclass
class TileStats:
    """Counters filled by the kernel while a config holding them is active (thread-safe).

    ``tiles[kind]`` counts tiles by kind as the kernel visited them ("empty" tiles were skipped,
    "full" and "partial" ones computed), summed over every batch element, head and pass, and
    ``pairs[kind]`` the (query, key) pairs they held; ``paths`` counts calls by path
    ("tiled"/"small" × "compiled"/"numpy"; "tiled fused" too when the tiled forward ran its
    loops compiled whole, "tiled fused backward" when the tiled backward did). The small path
    plans no tiles. ``copies[operand]`` counts the bytes copied because of an operand's memory
    layout (:mod:`.operands`: a Fortran-ordered k copied into rows for the fused loop, say).
    """

    tiles: Counter = field(default_factory=Counter)
    pairs: Counter = field(default_factory=Counter)
    paths: Counter = field(default_factory=Counter)
    copies: Counter = field(default_factory=Counter)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add_tile(self, kind: int, pairs: int = 0) -> None:
        with self._lock:
            self.tiles[KIND_NAMES[kind]] += 1
            self.pairs[KIND_NAMES[kind]] += pairs

    def add_path(self, name: str) -> None:
        with self._lock:
            self.paths[name] += 1

    def add_copy(self, operand: str, nbytes: int) -> None:
        with self._lock:
            self.copies[operand] += nbytes

    @property
    def computed(self) -> int:
        return self.tiles["full"] + self.tiles["partial"]

    @property
    def skipped(self) -> int:
        return self.tiles["empty"]

    @property
    def work_fraction(self) -> float:
        """The share of the planned pairs that were computed (full or partial tiles): 1.0
        without a mask, ~0.5 for a causal one at best (nan when nothing was planned)."""
        total = sum(self.pairs.values())
        return (self.pairs["full"] + self.pairs["partial"]) / total if total else float("nan")


@dataclass(frozen=True)
class KernelConfig:
    """Tile sizes and paths, measured against torch in one interleaved run (benchmarks/).

    - ``tile_q`` query rows per tile (512: a tile's K and V are read once for twice the rows,
      and fewer, larger work items; measured 10–25% faster than 256 on dense, causal and odd
      sizes, for a 2 MiB score tile per worker instead of 1 MiB);
      ``tile_k`` keys per tile under a mask (smaller: less
      wasted in partial tiles); ``tile_k_unmasked`` keys per tile without one — and the widest
      key tile a run of FULL tiles of one query tile is merged into (fewer, larger GEMMs).
    - ``split_min``: partial tiles of masks that classify from index ranges split in halves,
      the longer side first, down to this size, so the empty and full parts of a diagonal or
      band tile are skipped or computed without the mask (:class:`TilePlan`). 256, not finer:
      each tile costs ~25 µs of Python (and a GIL handoff between workers) beside its GEMMs,
      and 128 × 128 tiles run their GEMMs at 0.6 of a large tile's rate — measured on causal
      N=2048 (8 heads, 2 workers): 36 ms at 128 (53.1% of the dense pairs computed), 30–32 ms
      at 256 (56.3%); N=8192: 356–372 vs 336–356 ms; a 256-key window the same at both.
    - ``small``: problems with at most this many scores per head run all heads at once.
    - ``thread_min_work``: below this many multiply-adds, threads cost more than they save.
    - ``workers``: threads for tiles (None: ``QKV_NUM_THREADS`` or the usable cores).
    - ``backend``: "compiled" (Numba, the ``qkv[fast]`` extra), "numpy", or "auto" (compiled if
      Numba is installed). float64 always runs the NumPy step (it is the exactness dtype).
    - ``pin``: each worker keeps one core for the length of a call (``QKV_PIN=0``: not) — on a
      2-vCPU VM the scheduler otherwise left both workers on one core for most of a call
      (:mod:`.threads`; ``python benchmarks/small_call.py`` measures both).
    - ``gemm``: who computes the tile GEMMs — "mkl" (the ``qkv[mkl]`` extra), "numpy", or
      "auto" (MKL if installed on an Intel CPU; :mod:`.gemm` says why).
    - ``fused``: the tiled forward runs each query block's loop of tiles as one compiled call
      where it can (:mod:`.step.fused`: the compiled step, the BLAS's GEMMs called inside,
      float32, no bias, softcap, score_mod or dropout), and the tiled backward each work
      item's loop for a query head (no dbias either); False: the loops in Python, call by
      call (to compare).
    - ``stats``: a :class:`TileStats` to fill, or None.
    """

    tile_q: int = 512
    tile_k: int = 512
    tile_k_unmasked: int = 1024
    split_min: int = 256
    small: int = 256 * 512
    thread_min_work: int = 1 << 22
    workers: int | None = None
    backend: str = "auto"
    gemm: str = "auto"
    pin: bool = True
    fused: bool = True
    stats: TileStats | None = None

    def __post_init__(self):
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name in ("tile_q", "tile_k", "tile_k_unmasked", "split_min") and (
                    not isinstance(value, int) or value < 1):
                raise ValueError(f"kernel_config: {f.name} must be a positive int, got {value!r}")
        if self.backend not in BACKENDS:
            raise ValueError(f"kernel_config: backend must be one of {BACKENDS}, "
                             f"got {self.backend!r}")
        for name in ("pin", "fused"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"kernel_config: {name} must be True or False, "
                                 f"got {getattr(self, name)!r}")
        if self.gemm not in GEMMS:
            raise ValueError(f"kernel_config: gemm must be one of {GEMMS}, got {self.gemm!r}")
        if self.workers is not None and (not isinstance(self.workers, int) or self.workers < 1):
            raise ValueError(f"kernel_config: workers must be a positive int or None, "
                             f"got {self.workers!r}")

    def key_tile(self, masked: bool) -> int:
        return self.tile_k if masked else max(self.tile_k, self.tile_k_unmasked)

    def num_workers(self, work: float) -> int:
        if work < self.thread_min_work:
            return 1
        return self.workers or cpu_workers()

    def resolved_backend(self) -> str:
        """"compiled" or "numpy": what this config runs (float32/float16 problems)."""
        if self.backend == "auto":
            return "compiled" if has_numba() else "numpy"
        if self.backend == "compiled" and not has_numba():
            from .._install import install_hint

            raise ModuleNotFoundError(
                f"kernel_config(backend='compiled') needs Numba: {install_hint('fast')}",
                name="numba")
        return self.backend

    def resolved_gemm(self) -> str:
        """"mkl" or "numpy": who computes this config's tile GEMMs."""
        return gemm.resolve(self.gemm)


_numba_found: bool | None = None  # find_spec's answer, looked up once per process


def has_numba() -> bool:
    """Whether Numba can be imported (without importing it: ``import qkv`` stays light)."""
    global _numba_found
    if "numba" in sys.modules:
        return sys.modules["numba"] is not None
    if _numba_found is None:  # a search of sys.path (~0.1 ms): once, not on every call
        _numba_found = importlib.util.find_spec("numba") is not None
    return _numba_found


def cpu_workers() -> int:
    """Threads for tiles: ``QKV_NUM_THREADS`` if set, else the cores this process may use."""
    env = os.environ.get("QKV_NUM_THREADS")
    if env:
        try:
            return max(1, int(env))
        except ValueError:
            raise ValueError(f"QKV_NUM_THREADS must be a positive int, got {env!r}") from None
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


_default = KernelConfig(backend=os.environ.get("QKV_BACKEND", "auto"),
                        gemm=os.environ.get("QKV_GEMM", "auto"),
                        pin=os.environ.get("QKV_PIN", "1") != "0")
_current: contextvars.ContextVar[KernelConfig] = contextvars.ContextVar("qkv_kernel_config",
                                                                         default=_default)


def current() -> KernelConfig:
    """The configuration in force in this context."""
    return _current.get()


@contextlib.contextmanager
def kernel_config(**changes):
    """Run a block with some of :class:`KernelConfig`'s fields changed; yields the config."""
    config = replace(current(), **changes)
    token = _current.set(config)
    try:
        yield config
    finally:
        _current.reset(token)


def blocks(n: int, size: int) -> list[tuple[int, int]]:
    """``[(start, stop), ...]`` cutting ``range(n)`` into pieces of ``size``."""
    return [(start, min(start + size, n)) for start in range(0, n, size)]


# --------------------------------------------------------------------------------------------
# The tile plan: which tiles, of which kind
# --------------------------------------------------------------------------------------------
# A tile of the plan: (r0, r1, k0, k1, kind, block) — query rows r0:r1 of the query tile (relative
# to its first row), keys k0:k1, its kind and, for PARTIAL tiles, the lazy block of the mask.
Tile = tuple


class TilePlan:
    """The tiles of one call, planned from a bound mask before any is touched (FlexAttention's
    block mask: the plan is kept apart from the rule, and reused for every head and batch
    element the rule does not depend on).

    ``tiles(b, h, q0, q1)`` lists the tiles ``(r0, r1, k0, k1, kind, block)`` of query rows
    q0:q1, in order of keys, built in three moves:

    1. classify the cells ``keys k·tile_k … (k+1)·tile_k − 1`` for all the rows (``bound.tile``);
    2. split a PARTIAL cell in halves, the longer side first (keys on a tie), down to
       ``split_min`` — for masks that classify from index ranges cheaply (``bound.cheap``) — and
       keep a split only if some part of it came out EMPTY or FULL: a causal diagonal's
       256 × 256 square becomes two 128 × 128 PARTIAL triangles' squares, one FULL square and
       one skipped; a band's edges likewise;
    3. merge consecutive tiles of the same rows: FULL ones into key tiles of up to ``merge_k``
       keys (the keys left of a causal diagonal are one or a few wide GEMMs, as without a
       mask), and runs holding a PARTIAL one into PARTIAL tiles of up to ``tile_k`` keys (one
       block of the mask for them all: a band's edge is one tile per half of the rows, not
       three) — never across a multiple of ``align`` if given (a backward work item's keys, so
       that it owns the tiles of its keys whole).
    """

    def __init__(self, mask: BoundMask | None, q_pos: np.ndarray, k_pos: np.ndarray,
                 cfg: KernelConfig, tile_k: int, merge_k: int | None = None,
                 align: int | None = None):
        self.mask, self.q_pos, self.k_pos, self.cfg = mask, q_pos, k_pos, cfg
        self.cells, self.tile_k = blocks(len(k_pos), tile_k), tile_k
        self.merge_k = max(tile_k, merge_k or tile_k)
        self.align = align
        self.split = mask is not None and mask.cheap
        self._cache: dict = {}
        self._lock = threading.Lock()

    def tiles(self, b: int, h: int, q0: int, q1: int,
              keys: tuple[int, int] | None = None) -> list[Tile]:
        """The non-EMPTY tiles of query rows q0:q1 (of keys ``keys[0]:keys[1]`` only, if given:
        a backward work item's), counted into the config's stats."""
        mask = self.mask
        if mask is None:
            planned = [(0, q1 - q0, k0, k1, FULL, None)
                       for k0, k1 in blocks(len(self.k_pos), self.merge_k)]
        else:
            key = (b if mask.batch_dependent else 0, h if mask.head_dependent else 0, q0, q1)
            with self._lock:
                planned = self._cache.get(key)
            if planned is None:
                planned = self._plan(b, h, q0, q1)
                with self._lock:
                    self._cache[key] = planned
        if keys is not None:
            planned = [t for t in planned if keys[0] <= t[2] and t[3] <= keys[1]]
        stats = self.cfg.stats
        if stats is not None:
            for r0, r1, k0, k1, kind, _ in planned:
                stats.add_tile(kind, (r1 - r0) * (k1 - k0))
        return [t for t in planned if t[4] != EMPTY]

    def table(self, b: int, h: int, spans: list[tuple[int, int]],
              keys: tuple[int, int] | None = None) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`tiles` of the query blocks ``spans`` (``[(q0, q1), …]``, in order; of keys
        ``keys[0]:keys[1]`` only, if given) as arrays, for a compiled loop (:mod:`.step.fused`):
        ``(T, 6)`` int64 rows ``(r0, r1, k0, k1, partial, offset)``, query rows counted from the
        first span's q0, and one bool array holding every PARTIAL tile's block, transposed
        ``(tk, tr)`` as the step takes it, from its ``offset`` (at least one element). Made per
        call, not kept: kept for every query block, the blocks of a long masked problem would
        hold more memory than its tiles (the plan keeps them lazy)."""
        rows, parts, offset = [], [], 0
        start = spans[0][0] if spans else 0
        for q0, q1 in spans:
            for r0, r1, k0, k1, kind, block in self.tiles(b, h, q0, q1, keys):
                partial = kind == PARTIAL
                at = q0 - start
                rows.append((at + r0, at + r1, k0, k1, int(partial), offset if partial else 0))
                if partial:
                    parts.append(np.asarray(block(True), dtype=bool).ravel())  # (tk, tr), C
                    offset += parts[-1].size
        return (np.array(rows, dtype=np.int64).reshape(-1, 6),
                np.concatenate(parts) if parts else np.ones(1, dtype=bool))

    def _plan(self, b: int, h: int, q0: int, q1: int) -> list[Tile]:
        leaves: list[Tile] = []
        for k0, k1 in self.cells:
            leaves += self._visit(b, h, q0, 0, q1 - q0, k0, k1)
        return self._merged(b, h, q0, leaves)

    def _visit(self, b, h, q0, r0, r1, k0, k1) -> list[Tile]:
        """The leaves of one tile: itself, or its halves' leaves when that skips work."""
        kind, block = self.mask.tile(self.q_pos[q0 + r0: q0 + r1], self.k_pos[k0:k1], b, h)
        whole = [(r0, r1, k0, k1, kind, block)]
        if kind != PARTIAL or not self.split:
            return whole
        n_rows, n_keys = r1 - r0, k1 - k0
        if max(n_rows, n_keys) <= self.cfg.split_min:
            return whole
        if n_keys >= n_rows:  # halve the keys
            km = (k0 + k1) // 2
            parts = self._visit(b, h, q0, r0, r1, k0, km) + self._visit(b, h, q0, r0, r1, km, k1)
        else:  # halve the rows
            rm = (r0 + r1) // 2
            parts = self._visit(b, h, q0, r0, rm, k0, k1) + self._visit(b, h, q0, rm, r1, k0, k1)
        # Halves that are all PARTIAL skip nothing and apply the mask all the same: more,
        # smaller GEMMs for no saving. Keep the tile whole then.
        return parts if any(t[4] != PARTIAL for t in parts) else whole

    def _merged(self, b: int, h: int, q0: int, leaves: list[Tile]) -> list[Tile]:
        """Consecutive non-EMPTY leaves of the same rows merged, in order of keys (class doc)."""
        width, align = self.merge_k, self.align or len(self.k_pos) or 1
        out: list[list] = []
        runs: dict[tuple[int, int], list] = {}  # (r0, r1) → its last tile, still open
        for r0, r1, k0, k1, kind, block in sorted(leaves, key=lambda t: (t[2], t[0])):
            run = runs.get((r0, r1)) if kind != EMPTY else None
            if run is not None and run[3] == k0 and run[2] // align == (k1 - 1) // align:
                full = run[4] == FULL and kind == FULL
                if k1 - run[2] <= (width if full else self.tile_k):
                    run[3], run[4] = k1, (FULL if full else None)  # None: classify again
                    continue
            tile = [r0, r1, k0, k1, kind, block]
            out.append(tile)
            if kind == EMPTY:
                runs.pop((r0, r1), None)
            else:
                runs[(r0, r1)] = tile
        for tile in out:
            if tile[4] is None:  # a PARTIAL run: one block of the mask for all its keys
                r0, r1, k0, k1 = tile[:4]
                tile[4:] = self.mask.tile(self.q_pos[q0 + r0: q0 + r1], self.k_pos[k0:k1], b, h)
        return [tuple(t) for t in out]


def work_fraction(mask: Mask | None, nq: int, nk: int, *, batch_shape: tuple[int, ...] = (),
                  heads: int = 1, b: int = 0, h: int = 0, tile_k: int | None = None) -> float:
    """The share of the Nq × Nk pairs that the forward's plan computes for batch element ``b``
    and head ``h`` under the current :class:`KernelConfig` (1.0 without a mask; a causal mask
    needs (Nq + 1) / 2Nq of them) — read off :class:`TilePlan`, without computing anything."""
    cfg = current()
    if nq == 0 or nk == 0:
        return 0.0
    bound = None if mask is None else mask.bind(Layout(tuple(batch_shape), heads, nq, nk))
    plan = TilePlan(bound, np.arange(nq), np.arange(nk), cfg,
                    tile_k or cfg.key_tile(mask is not None), cfg.key_tile(False))
    computed = sum((r1 - r0) * (k1 - k0) for q0, q1 in blocks(nq, cfg.tile_q)
                   for r0, r1, k0, k1, _, _ in plan.tiles(b, h, q0, q1))
    return computed / (nq * nk)


__all__ = ["EMPTY", "FULL", "PARTIAL", "KernelConfig", "TilePlan", "TileStats", "blocks",
           "current", "kernel_config", "work_fraction"]
