"""What a numerics run's result stores of where its numbers stopped being finite and of its
held-out score: records without torch, so 03_numerics.json is read back (compare, collect,
export-metrics) without loading it. nonfinite.py and validation.py compute them."""

from __future__ import annotations

import math
from dataclasses import dataclass

DEFAULT_VALIDATION_BATCHES = 4


@dataclass
class NonFinite:
    """The first NaN/Inf of a run."""

    step: int | None  # first optimizer step (1-based) whose loss is NaN or Inf
    loss: float | None  # that loss
    tensor: str | None  # the first non-finite tensor, in the order training computes them
    where: str  # that tensor in words: "parameter 0.bias after the optimizer update of step 5"

    def sentence(self, label: str) -> str:
        loss = "the loss stays finite"
        if self.step is not None:
            loss = f"loss becomes {_kind(self.loss)} at step {self.step}"
        return f"{label}: {loss}; first non-finite tensor: {self.where}"


def _kind(value: float | None) -> str:
    return "NaN" if value is None or math.isnan(value) else "Inf"


def first_nonfinite_step(losses: list[float]) -> int | None:
    return next((i for i, v in enumerate(losses, 1) if not math.isfinite(v)), None)


@dataclass
class HeldOutScore:
    loss: float  # mean over the held-out samples
    metric: float | None  # the workload's task metric, sample-weighted over the batches
