"""KV cache for autoregressive decoding: each layer's keys and values, growing one step at a time.

Decoding token t with a cache costs O(t·d) per layer: the new query is projected, its k and v are
appended, and that single query attends to the t cached keys with :func:`qkv.attention` (the
causal mask aligns bottom-right, so one query against t keys sees all of them). Without a cache
every step would recompute all t keys and values, and a full causal forward is O(t²·d).

Storage doubles its capacity when full (amortised O(1) per appended position), so ``append``
never copies the whole history on every step.
"""

from __future__ import annotations

import numpy as np

from ..engine.problem import as_array


class LayerCache:
    """One attention layer's cached keys ``(..., Hkv, n, d_k)`` and values ``(..., Hkv, n, d_v)``.
    """

    def __init__(self):
        self._k = self._v = None
        self.length = 0

    @property
    def k(self) -> np.ndarray | None:
        return None if self._k is None else self._k[..., : self.length, :]

    @property
    def v(self) -> np.ndarray | None:
        return None if self._v is None else self._v[..., : self.length, :]

    def append(self, k_new: np.ndarray, v_new: np.ndarray,
               seqs=None) -> tuple[np.ndarray, np.ndarray]:
        """Append ``n_new`` positions; return (views of) all cached k and v."""
        _whole_batch(seqs)
        k_new, v_new = as_array(k_new, "k_new"), as_array(v_new, "v_new")
        if k_new.ndim < 3 or v_new.ndim < 3 or k_new.shape[-2] != v_new.shape[-2]:
            raise ValueError(
                f"LayerCache.append: k_new {k_new.shape} and v_new {v_new.shape} must be "
                "(..., Hkv, n_new, d) with the same n_new"
            )
        n_new = k_new.shape[-2]
        if self._k is None:
            cap = max(16, n_new)
            self._k = np.empty((*k_new.shape[:-2], cap, k_new.shape[-1]), k_new.dtype)
            self._v = np.empty((*v_new.shape[:-2], cap, v_new.shape[-1]), v_new.dtype)
        elif (k_new.shape[:-2] != self._k.shape[:-2] or k_new.shape[-1] != self._k.shape[-1]
              or v_new.shape[:-2] != self._v.shape[:-2] or v_new.shape[-1] != self._v.shape[-1]):
            raise ValueError(
                f"LayerCache.append: got k_new {k_new.shape}, v_new {v_new.shape} but the cache "
                f"holds k {self.k.shape}, v {self.v.shape}; only axis -2 (positions) may differ"
            )
        end = self.length + n_new
        if end > self._k.shape[-2]:  # grow geometrically
            cap = max(end, 2 * self._k.shape[-2])
            for name in ("_k", "_v"):
                old = getattr(self, name)
                grown = np.empty((*old.shape[:-2], cap, old.shape[-1]), old.dtype)
                grown[..., : self.length, :] = old[..., : self.length, :]
                setattr(self, name, grown)
        self._k[..., self.length: end, :] = k_new
        self._v[..., self.length: end, :] = v_new
        self.length = end
        return self.k, self.v

    def attention_args(self, seqs=None) -> dict:
        """The keyword arguments of ``qkv.attention(q, **args)``: the cached k and v (views)."""
        _whole_batch(seqs)
        return {"k": self.k, "v": self.v}

    @property
    def nbytes(self) -> int:
        """Bytes held by the two buffers (their capacity, which doubles when full)."""
        return 0 if self._k is None else self._k.nbytes + self._v.nbytes


def _whole_batch(seqs) -> None:
    if seqs is not None:
        raise ValueError(
            "LayerCache holds one length for the whole batch, so seqs= (a subset of sequences) "
            f"has no meaning for it, got seqs={seqs!r}; use qkv.nn.PagedKVCache for "
            "per-sequence lengths")


class KVCache:
    """Per-layer caches: ``cache[i]`` is the :class:`LayerCache` of attention layer ``i``.

    Usage (one decoding step through every layer ``i``)::

        cache = KVCache(n_layers)
        y = mha_i(x_new, mask=qkv.causal(), cache=cache[i])
    """

    def __init__(self, n_layers: int, new_layer=LayerCache):
        if isinstance(n_layers, bool) or not isinstance(n_layers, int) or n_layers < 1:
            raise ValueError(
                f"{type(self).__name__}: n_layers must be a positive int, got {n_layers!r}")
        self.layers = [new_layer() for _ in range(n_layers)]

    def __getitem__(self, i: int) -> LayerCache:
        return self.layers[i]

    def __len__(self) -> int:
        return len(self.layers)

    @property
    def length(self) -> int:
        """Positions cached so far (the same in every layer after a full step)."""
        return self.layers[0].length
