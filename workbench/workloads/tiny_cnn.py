"""tiny-cnn: convolutions, batch norm and pooling, the op mix of vision models."""

from __future__ import annotations

import torch
from torch import nn

from workbench.workloads.contract import Batch, Workload


def _model() -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1),
        nn.BatchNorm2d(16),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(16, 32, 3, padding=1),
        nn.BatchNorm2d(32),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(32, 10),
    )


def _batch(size: int, generator: torch.Generator) -> Batch:
    images = torch.randn(size, 3, 32, 32, generator=generator)
    labels = torch.randint(10, (size,), generator=generator)
    return (images,), labels


def make_workload() -> Workload:
    return Workload(
        name="tiny-cnn",
        model_factory=_model,
        batch_maker=_batch,
        loss_fn=nn.functional.cross_entropy,
        optimizer_factory=lambda params: torch.optim.SGD(params, lr=0.05, momentum=0.9),
        batch_size=32,
        description="2 conv blocks with batch norm and pooling, 32x32 RGB, 10 classes",
    )
