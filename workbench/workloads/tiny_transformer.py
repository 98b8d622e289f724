"""tiny-transformer: a small decoder-only language model.

Embedding, causal scaled-dot-product attention, layer norm and an MLP per block: the op mix of
the transformers people migrate, small enough for well under a second per CPU training step.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from workbench.workloads.contract import (
    TASK_LANGUAGE_MODEL,
    Batch,
    Workload,
    perplexity,
    token_cross_entropy,
)

VOCAB = 256
D_MODEL = 64
HEADS = 4
LAYERS = 2
SEQ_LEN = 32


class CausalSelfAttention(nn.Module):
    def __init__(self, d_model: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        q, k, v = self.qkv(x).split(c, dim=-1)
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.proj(y.transpose(1, 2).reshape(b, t, c))


class Block(nn.Module):
    def __init__(self, d_model: int, heads: int) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(d_model)
        self.attn = CausalSelfAttention(d_model, heads)
        self.ln2 = nn.LayerNorm(d_model)
        self.mlp = nn.Sequential(
            nn.Linear(d_model, 4 * d_model), nn.GELU(), nn.Linear(4 * d_model, d_model)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class TinyDecoder(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.tok = nn.Embedding(VOCAB, D_MODEL)
        self.pos = nn.Embedding(SEQ_LEN, D_MODEL)
        self.blocks = nn.ModuleList(Block(D_MODEL, HEADS) for _ in range(LAYERS))
        self.ln_f = nn.LayerNorm(D_MODEL)
        self.head = nn.Linear(D_MODEL, VOCAB)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(tokens.shape[1], device=tokens.device)
        x = self.tok(tokens) + self.pos(positions)
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln_f(x))


def _batch(size: int, generator: torch.Generator) -> Batch:
    # Arithmetic sequences with a random start and stride: learnable, so the loss really falls.
    start = torch.randint(VOCAB, (size, 1), generator=generator)
    stride = torch.randint(1, 8, (size, 1), generator=generator)
    sequence = (start + stride * torch.arange(SEQ_LEN + 1)) % VOCAB
    return (sequence[:, :-1],), sequence[:, 1:]


def make_workload() -> Workload:
    return Workload(
        name="tiny-transformer",
        model_factory=TinyDecoder,
        batch_maker=_batch,
        loss_fn=token_cross_entropy,
        optimizer_factory=lambda params: torch.optim.AdamW(params, lr=3e-3),
        batch_size=8,
        task=TASK_LANGUAGE_MODEL,
        sequence_length=SEQ_LEN,
        task_metric=perplexity,
        task_metric_name="perplexity",
        description=f"decoder LM: {LAYERS} blocks, d_model {D_MODEL}, vocab {VOCAB}, seq {SEQ_LEN}",
    )
