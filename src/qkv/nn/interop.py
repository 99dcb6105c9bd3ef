"""Conversions between :class:`qkv.nn.MultiHeadAttention` and ``torch.nn.MultiheadAttention``.

torch stores the three input projections packed and in (out, in) layout::

    in_proj_weight (3·E, E) = [W_Qᵀ; W_Kᵀ; W_Vᵀ]      in_proj_bias (3·E,) = [b_q; b_k; b_v]
    out_proj.weight (E, E)  = W_Oᵀ                    out_proj.bias (E,)  = b_o

qkv stores each W in the lesson's row convention (d_in, d_out), so every matrix is transposed on
the way. torch's boolean masks mean **True = masked out** (``attn_mask``, ``key_padding_mask``),
the opposite of qkv's; :func:`masks_from_torch` wraps them in ``qkv.deny`` so nothing is flipped
by hand. torch is imported lazily: it is a test-time oracle, never a dependency of qkv.
"""

from __future__ import annotations

import numpy as np

from .. import masks as qmasks


def _np(t, dtype) -> np.ndarray:
    return t.detach().cpu().numpy().astype(dtype)


def mha_from_torch(cls, module, dtype=np.float32):
    """A ``cls`` (MultiHeadAttention) with the weights of ``module``, copied."""
    import torch

    if not isinstance(module, torch.nn.MultiheadAttention):
        raise TypeError(f"from_torch needs a torch.nn.MultiheadAttention, got "
                        f"{type(module).__name__}")
    if not module._qkv_same_embed_dim:
        raise ValueError("from_torch: kdim/vdim different from embed_dim are not supported "
                         f"(got kdim={module.kdim}, vdim={module.vdim}, "
                         f"embed_dim={module.embed_dim})")
    if module.bias_k is not None or module.add_zero_attn:
        raise ValueError("from_torch: add_bias_kv / add_zero_attn are not supported")
    e, h = module.embed_dim, module.num_heads
    bias = module.in_proj_bias is not None
    mha = cls(e, h, bias=bias, rng=0, dtype=dtype)
    w_q, w_k, w_v = (_np(w, dtype).T for w in module.in_proj_weight.chunk(3, dim=0))
    mha.params.update(w_q=np.ascontiguousarray(w_q), w_k=np.ascontiguousarray(w_k),
                      w_v=np.ascontiguousarray(w_v),
                      w_o=np.ascontiguousarray(_np(module.out_proj.weight, dtype).T))
    if bias:
        b_q, b_k, b_v = (_np(b, dtype) for b in module.in_proj_bias.chunk(3, dim=0))
        mha.params.update(b_q=b_q, b_k=b_k, b_v=b_v, b_o=_np(module.out_proj.bias, dtype))
    return mha


def mha_to_torch(mha, *, batch_first: bool = True):
    """A ``torch.nn.MultiheadAttention`` computing the same function as ``mha``."""
    import torch

    if mha.n_kv_heads != mha.n_heads:
        raise ValueError(f"to_torch: torch.nn.MultiheadAttention has no grouped-query attention "
                         f"(n_heads={mha.n_heads}, n_kv_heads={mha.n_kv_heads})")
    if mha.n_heads * mha.d_head != mha.d_model:
        raise ValueError(f"to_torch: torch needs n_heads·d_head == d_model, got "
                         f"{mha.n_heads}·{mha.d_head} != {mha.d_model}")
    if mha.scale is not None:
        raise ValueError("to_torch: torch.nn.MultiheadAttention always scales by 1/√d_head")
    tdtype = {np.dtype(np.float32): torch.float32, np.dtype(np.float64): torch.float64,
              np.dtype(np.float16): torch.float16}[mha.dtype]
    module = torch.nn.MultiheadAttention(mha.d_model, mha.n_heads, bias=mha.has_bias,
                                         batch_first=batch_first, dtype=tdtype)
    p = mha.params
    with torch.no_grad():
        packed = np.concatenate([p["w_q"].T, p["w_k"].T, p["w_v"].T], axis=0)  # (3E, E)
        module.in_proj_weight.copy_(torch.from_numpy(np.ascontiguousarray(packed)))
        module.out_proj.weight.copy_(torch.from_numpy(np.ascontiguousarray(p["w_o"].T)))
        if mha.has_bias:
            module.in_proj_bias.copy_(torch.from_numpy(
                np.concatenate([p["b_q"], p["b_k"], p["b_v"]])))
            module.out_proj.bias.copy_(torch.from_numpy(p["b_o"].copy()))
    return module


def masks_from_torch(attn_mask=None, key_padding_mask=None):
    """torch.nn.MultiheadAttention's boolean masks (True = masked out) → one qkv mask.

    ``attn_mask`` ``(Nq, Nk)`` or ``(B·H, Nq, Nk)`` and ``key_padding_mask`` ``(B, Nk)``, as
    NumPy or torch bool arrays. The result applies to MultiHeadAttention's head-split problem
    ``(B, H, Nq, Nk)``. Float (additive) torch masks are not masks: pass them as a bias.
    """
    parts = []
    for name, m in (("attn_mask", attn_mask), ("key_padding_mask", key_padding_mask)):
        if m is None:
            continue
        arr = m.detach().cpu().numpy() if hasattr(m, "detach") else np.asarray(m)
        if arr.dtype != bool:
            raise TypeError(f"masks_from_torch: {name} must be bool (True = masked out), got "
                            f"{arr.dtype}; additive float masks belong in bias=")
        if name == "key_padding_mask":
            if arr.ndim != 2:
                raise ValueError(f"masks_from_torch: key_padding_mask must be (B, Nk), got "
                                 f"{arr.shape}")
            arr = arr[:, None, None, :]  # (B, 1, 1, Nk)
        parts.append(qmasks.deny(arr))
    if not parts:
        return None
    mask = parts[0]
    for extra in parts[1:]:
        mask = mask & extra
    return mask
