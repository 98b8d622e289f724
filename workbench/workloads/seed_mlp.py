"""seed-mlp: the reference smoke-test baseline, exactly.

Linear(128, 256) -> GELU -> Linear(256, 10), batch 64, AdamW lr 1e-3, cross-entropy, seed 42.
"""

from __future__ import annotations

import torch
from torch import nn

from workbench.workloads.contract import Batch, Workload


def _model() -> nn.Module:
    return nn.Sequential(nn.Linear(128, 256), nn.GELU(), nn.Linear(256, 10))


def _batch(size: int, generator: torch.Generator) -> Batch:
    inputs = torch.randn(size, 128, generator=generator)
    targets = torch.randint(10, (size,), generator=generator)
    return (inputs,), targets


def make_workload() -> Workload:
    return Workload(
        name="seed-mlp",
        model_factory=_model,
        batch_maker=_batch,
        loss_fn=nn.functional.cross_entropy,
        optimizer_factory=lambda params: torch.optim.AdamW(params, lr=1e-3),
        batch_size=64,
        seed=42,
        description="MLP 128-256-10 with GELU: the reference baseline",
    )
