"""The held-out score: the loss and the task metric on data the trajectory never trained on.

The batches are the workload's own `evaluation_batches` when it has them; otherwise a few
batches of its batch maker drawn with another seed than the training batch's. Each run scores
them at its initial weights and after its trajectory, in eval mode, through its own forward
(device, precision, compiler); the loss and the metric are computed in fp32 on the CPU, so the
judge is the same for every run.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from workbench.numerics.capture import RunSpec, as_fp32_cpu
from workbench.numerics.run_records import DEFAULT_VALIDATION_BATCHES as DEFAULT_VALIDATION_BATCHES
from workbench.numerics.run_records import HeldOutScore as HeldOutScore
from workbench.workload import Batch, Workload

# The training batch is drawn with the workload's seed; the held-out ones with this offset to it.
HELD_OUT_SEED_OFFSET = 1


@dataclass
class HeldOutBatches:
    batches: list[Batch]
    source: str  # where they came from, in words

    @property
    def samples(self) -> int:
        return sum(int(targets.shape[0]) for _, targets in self.batches)


def held_out_batches(workload: Workload, count: int) -> HeldOutBatches:
    """The workload's evaluation batches, or `count` batches drawn with another seed."""
    if workload.evaluation_batches is not None:
        batches = list(workload.evaluation_batches())
        return HeldOutBatches(batches, f"the workload's evaluation_batches ({len(batches)})")
    seed = workload.seed + HELD_OUT_SEED_OFFSET
    generator = torch.Generator().manual_seed(seed)
    batches = [workload.batch_maker(workload.batch_size, generator) for _ in range(count)]
    return HeldOutBatches(
        batches,
        f"{count} batches of {workload.batch_size} from the workload's batch maker with seed "
        f"{seed} (the training batch uses seed {workload.seed})",
    )


def evaluator(
    held_out: HeldOutBatches, spec: RunSpec, workload: Workload
) -> Callable[[nn.Module, Callable[..., Any]], HeldOutScore]:
    """A function that scores `held_out` with a run's model and forward, in eval mode."""

    def evaluate(model: nn.Module, forward: Callable[..., Any]) -> HeldOutScore:
        modes = [(module, module.training) for module in model.modules()]
        model.eval()
        loss_sum = metric_sum = 0.0
        samples = 0
        try:
            with torch.no_grad(), spec.autocast():
                for inputs, targets in held_out.batches:
                    outputs = as_fp32_cpu(workload.forward(forward, spec.place(inputs)))
                    count = int(targets.shape[0])
                    loss_sum += float(workload.compute_loss(outputs, targets)) * count
                    score = workload.score(outputs, targets)
                    if score is not None:
                        metric_sum += score * count
                    samples += count
        finally:
            # Restored module by module: dropout modules switched off stay off.
            for module, training in modes:
                module.training = training
        return HeldOutScore(
            loss=loss_sum / samples,
            metric=metric_sum / samples if workload.task_metric is not None else None,
        )

    return evaluate
