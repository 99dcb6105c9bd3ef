"""The engine: exact, tiled attention on NumPy (NumPy is its only dependency).

Modules, imports flowing downward only::

    api         attention, attention_weights, attention_backward   (the public entry points)
    trace       explain() → Trace: every intermediate, from the reference
    reference   the formula written literally in float64: the oracle
    paged       attention through a paged KV cache's block table (per-sequence lengths)
    kernel      the tiled loops: forward, weights, backward (FlashAttention-2)
    scratch     the workers' score-tile buffers, a few kept between calls (release_scratch)
    step/       the tile step: online softmax, probabilities, softmax grad (NumPy | compiled)
    tiles       KernelConfig (tile sizes, backend, threads), kernel_config(), TileStats, the
                tile plan (TilePlan: split partial tiles, merged runs), work_fraction
    problem     argument checking: prepare() → Problem
    masks/      mask rules, bound masks, tile classification, block_map
    bias        dense biases, ALiBi
    merge       exact merge of partial results through their lse
    shapes      broadcasting helpers
    threads     the worker pool

The small internal surface for packages above the engine (ring attention, benchmarks, tests)
is what this module exports: :func:`prepare` (with ``positions=`` for shards), :func:`forward`,
:func:`backward`, :func:`has_work`, :func:`merge`, :func:`kernel_config` / :class:`KernelConfig`
and :class:`TileStats`, :func:`block_map`, :func:`work_fraction`, :func:`backend`,
:func:`release_scratch` (before measuring a call's peak memory) and :func:`kept_bytes`.
Nothing above the engine needs a private name.
"""

import numpy as np

from .api import attention, attention_backward, attention_weights
from .bias import alibi, alibi_slopes
from .kernel import backward, forward, has_work, weights
from .masks import block_map
from .merge import merge
from .problem import Problem, as_array, check_like, prepare
from .scratch import kept_bytes, release_scratch
from .shapes import unbroadcast
from .tiles import KernelConfig, TileStats, blocks, current, has_numba, kernel_config, work_fraction
from .trace import Trace, explain

__all__ = [
    "KernelConfig",
    "Problem",
    "TileStats",
    "Trace",
    "alibi",
    "alibi_slopes",
    "as_array",
    "attention",
    "attention_backward",
    "attention_weights",
    "backend",
    "backward",
    "block_map",
    "blocks",
    "check_like",
    "current",
    "dropout_scales",
    "explain",
    "forward",
    "has_numba",
    "has_work",
    "kept_bytes",
    "kernel_config",
    "merge",
    "prepare",
    "release_scratch",
    "unbroadcast",
    "weights",
    "work_fraction",
]


def dropout_scales(q, k, mask=None, *, dropout: float, dropout_seed: int) -> np.ndarray:
    """The dropout mask ``attention(..., dropout=, dropout_seed=)`` applies, as Z / (1 − rate):
    ``(..., Hq, Nq, Nk)`` (materialised: for tests and small problems)."""
    from .reference import _dropout_scales

    p = prepare(q, k, None, mask, dropout=dropout, dropout_seed=dropout_seed)
    return p.present(_dropout_scales(p))


def backend() -> str:
    """The tile step float32/float16 problems run with now: "compiled" or "numpy"."""
    return current().resolved_backend()
