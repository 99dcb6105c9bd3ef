"""The same GPT as :mod:`qkv.tasks.gpt`, written in torch (nanoGPT's ``model.py``, with biases
and the tanh GELU): the benchmark peer of ``benchmarks/gpt_vs_torch.py`` and the oracle of
tests/test_gpt.py. It lives here, outside the package: qkv never needs torch.

:func:`from_qkv` copies a :class:`qkv.tasks.gpt.GPT`'s weights into it (``nn.Linear`` stores
``W`` as ``(d_out, d_in)``, the transpose of qkv's row convention), so both start from the same
numbers; :class:`TorchRun` then runs nanoGPT's training loop on the same batches as
:meth:`qkv.tasks.gpt.GPTRun.train_step` draws (the batch generator ``[seed, 1]``).
"""

from __future__ import annotations

import time

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from qkv.tasks.gpt import GPT, GPTConfig, get_batch


class Block(nn.Module):
    def __init__(self, c: GPTConfig):
        super().__init__()
        C = c.n_embd
        self.n_head = c.n_head
        self.ln_1, self.ln_2 = nn.LayerNorm(C), nn.LayerNorm(C)
        self.c_attn, self.c_proj = nn.Linear(C, 3 * C), nn.Linear(C, C)
        self.c_fc, self.mlp_proj = nn.Linear(C, 4 * C), nn.Linear(4 * C, C)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(C, dim=2)
        # (B, H, T, d): 4-D inputs, torch's fast SDPA path
        q, k, v = (t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # (B, H, T, d)
        x = x + self.c_proj(y.transpose(1, 2).reshape(B, T, C))
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class TorchGPT(nn.Module):
    def __init__(self, c: GPTConfig):
        super().__init__()
        self.config = c
        self.wte = nn.Embedding(c.vocab_size, c.n_embd)
        self.wpe = nn.Embedding(c.block_size, c.n_embd)
        self.h = nn.ModuleList(Block(c) for _ in range(c.n_layer))
        self.ln_f = nn.LayerNorm(c.n_embd)

    def forward(self, idx, targets=None):
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1]))  # (B, T, C)
        for block in self.h:
            x = block(x)
        logits = self.ln_f(x) @ self.wte.weight.T  # (B, T, V): tied output embedding
        if targets is None:
            return logits
        return logits, F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


def _pairs(tm: TorchGPT, i: int):
    """(torch parameter, qkv names it holds, transposed?) for block ``i``."""
    b, p = tm.h[i], f"h.{i}."
    return [(b.ln_1.weight, [p + "ln1.weight"], False), (b.ln_1.bias, [p + "ln1.bias"], False),
            (b.c_attn.weight, [p + "attn.w_q", p + "attn.w_k", p + "attn.w_v"], True),
            (b.c_attn.bias, [p + "attn.b_q", p + "attn.b_k", p + "attn.b_v"], False),
            (b.c_proj.weight, [p + "attn.w_o"], True), (b.c_proj.bias, [p + "attn.b_o"], False),
            (b.ln_2.weight, [p + "ln2.weight"], False), (b.ln_2.bias, [p + "ln2.bias"], False),
            (b.c_fc.weight, [p + "mlp.fc1.weight"], True),
            (b.c_fc.bias, [p + "mlp.fc1.bias"], False),
            (b.mlp_proj.weight, [p + "mlp.fc2.weight"], True),
            (b.mlp_proj.bias, [p + "mlp.fc2.bias"], False)]


def mapping(tm: TorchGPT):
    """Every torch parameter with the qkv parameter names it concatenates (along the output
    axis) and whether it is stored transposed."""
    out = [(tm.wte.weight, ["wte.weight"], False), (tm.wpe.weight, ["wpe.weight"], False),
           (tm.ln_f.weight, ["ln_f.weight"], False), (tm.ln_f.bias, ["ln_f.bias"], False)]
    for i in range(len(tm.h)):
        out += _pairs(tm, i)
    return out


def from_qkv(model: GPT, dtype=torch.float32) -> TorchGPT:
    """A TorchGPT holding ``model``'s weights."""
    tm = TorchGPT(model.config).to(dtype)
    with torch.no_grad():
        for param, names, transposed in mapping(tm):
            arr = np.concatenate([model.params[n] for n in names], axis=-1)
            param.copy_(torch.from_numpy(arr.T.copy() if transposed else arr))
    return tm


def grads_as_qkv(tm: TorchGPT) -> dict[str, np.ndarray]:
    """Each torch parameter's ``.grad`` split back into qkv's names and layout."""
    grads = {}
    for param, names, transposed in mapping(tm):
        g = param.grad.detach().numpy()
        g = g.T if transposed else g
        for name, part in zip(names, np.split(g, len(names), axis=-1), strict=True):
            grads[name] = part
    return grads


def optimizer(tm: TorchGPT, c: GPTConfig) -> torch.optim.AdamW:
    """nanoGPT's ``configure_optimizers``: weight decay on ≥ 2-D parameters only."""
    decay = [p for p in tm.parameters() if p.dim() >= 2]
    rest = [p for p in tm.parameters() if p.dim() < 2]
    return torch.optim.AdamW([{"params": decay, "weight_decay": c.weight_decay},
                              {"params": rest, "weight_decay": 0.0}],
                             lr=c.lr, betas=(0.9, c.beta2))


class TorchRun:
    """nanoGPT's training loop, one step at a time, on the batches a :class:`GPTRun` with the
    same config draws (generator ``[seed, 1]``); ``seconds`` counts the time inside steps."""

    def __init__(self, tm: TorchGPT, c: GPTConfig):
        self.tm, self.config, self.opt = tm, c, optimizer(tm, c)
        self.rng = np.random.default_rng([c.seed, 1])
        self.step, self.seconds = 0, 0.0

    def train_step(self, data: np.ndarray) -> float:
        c = self.config
        x, y = get_batch(data, self.rng, c.batch, c.block_size)
        t0 = time.perf_counter()
        for group in self.opt.param_groups:
            group["lr"] = c.lr_at(self.step)
        _, loss = self.tm(torch.from_numpy(x), torch.from_numpy(y))
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.tm.parameters(), c.grad_clip)
        self.opt.step()
        self.seconds += time.perf_counter() - t0
        self.step += 1
        return loss.item()


@torch.no_grad()
def mean_loss(tm: TorchGPT, x: np.ndarray, y: np.ndarray, chunk: int = 256) -> float:
    """Mean cross-entropy over windows ``x, y (n, block)`` (as :func:`qkv.tasks.gpt.mean_loss`)."""
    total = 0.0
    for i in range(0, len(x), chunk):
        _, loss = tm(torch.tensor(x[i: i + chunk]), torch.tensor(y[i: i + chunk]))
        total += float(loss) * y[i: i + chunk].size
    return total / y.size
