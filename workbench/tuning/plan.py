"""Global batch planning: per-core batch x workers x accumulation steps = the global batch, the
learning-rate change a new global batch asks for, and a check that accumulating micro-batches
gives this workload the gradients of one big batch.

Learning-rate rules (methods.md e5): linear scaling for SGD (Goyal et al. 2017), square-root
scaling for the Adam family (Malladi et al. 2022; DeepSpeed's advice). Either way a retuned
global batch is a hyper-parameter change: re-validate convergence.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
from torch import nn
from torch.utils._pytree import tree_map

from workbench.errors import BadInput, describe_error
from workbench.workload import Batch, Workload, disable_dropout

LINEAR = "linear"
SQRT = "square root"
NO_RULE = "none"

_ADAM_FAMILY = tuple(
    getattr(torch.optim, name)
    for name in ("Adam", "AdamW", "Adamax", "NAdam", "RAdam", "SparseAdam")
    if hasattr(torch.optim, name)
)

# fp64 summation-order differences stay near 1e-15 relative; anything above this is structural.
ACCUMULATION_TOLERANCE = 1e-9
# A per-core batch below this share of the chosen one costs more throughput than an inexact
# global batch is worth.
_SMALLEST_SHARE_OF_CHOSEN = 0.5


def lr_scaling_rule(optimizer: torch.optim.Optimizer) -> tuple[str, str]:
    """The rule for this optimizer's type, and why."""
    name = type(optimizer).__name__
    if isinstance(optimizer, torch.optim.SGD):
        return LINEAR, f"{name}: linear scaling (Goyal et al. 2017), with a warm-up"
    if isinstance(optimizer, _ADAM_FAMILY):
        return SQRT, f"{name} is Adam-family: square-root scaling (Malladi et al. 2022)"
    return NO_RULE, f"{name}: no established rule; keep the learning rate and re-tune it"


def lr_factor(rule: str, new_global: int, reference_global: int) -> float | None:
    """Multiplier for the learning rate when the global batch goes from reference to new."""
    ratio = new_global / reference_global
    if rule == LINEAR:
        return ratio
    if rule == SQRT:
        return math.sqrt(ratio)
    return None if ratio != 1 else 1.0


@dataclass
class GlobalBatchPlan:
    name: str
    per_core_batch: int
    world_size: int
    accumulation_steps: int
    target_global_batch: int
    reference_global_batch: int
    optimizer: str
    lr_rule: str
    lr_rule_reason: str
    reference_lr: float | None
    lr_factor: float | None
    notes: list[str] = field(default_factory=list)

    @property
    def global_batch(self) -> int:
        return self.per_core_batch * self.world_size * self.accumulation_steps

    @property
    def exact(self) -> bool:
        return self.global_batch == self.target_global_batch

    @property
    def suggested_lr(self) -> float | None:
        if self.reference_lr is None or self.lr_factor is None:
            return None
        return self.reference_lr * self.lr_factor

    def equation(self) -> str:
        return (
            f"{self.per_core_batch} per core x {self.world_size} worker(s) x "
            f"{self.accumulation_steps} accumulation step(s) = {self.global_batch}"
        )


def split_global_batch(global_batch: int, world_size: int, largest: int) -> tuple[int, int]:
    """(per-core batch, accumulation steps) with per-core <= `largest` whose product with
    `world_size` is `global_batch` when some split keeps the per-core batch at least half of
    `largest` (or the whole per-worker share); otherwise the nearest such split."""
    if global_batch < world_size:
        return 1, 1
    steps = math.ceil(global_batch / (world_size * largest))
    share, remainder = divmod(global_batch, world_size)
    if remainder == 0:
        floor = min(share, math.ceil(largest * _SMALLEST_SHARE_OF_CHOSEN))
        for k in range(steps, share + 1):
            if share % k == 0 and share // k >= floor:
                return share // k, k
            if share // k < floor:
                break
    return max(1, min(largest, round(global_batch / (world_size * steps)))), steps


def plan_global_batch(
    name: str,
    target_global: int,
    largest_per_core: int,
    world_size: int,
    reference_global: int,
    optimizer: torch.optim.Optimizer,
) -> GlobalBatchPlan:
    """Split `target_global` over `world_size` workers with per-core batches up to
    `largest_per_core`, adding accumulation steps where one pass cannot hold it."""
    for label, value in (
        ("global batch", target_global),
        ("reference global batch", reference_global),
        ("per-core batch", largest_per_core),
        ("world size", world_size),
    ):
        if value < 1:
            raise BadInput(f"{label} {value}: must be 1 or more.")
    per_core, steps = split_global_batch(target_global, world_size, largest_per_core)
    rule, reason = lr_scaling_rule(optimizer)
    plan = GlobalBatchPlan(
        name,
        per_core,
        world_size,
        steps,
        target_global,
        reference_global,
        type(optimizer).__name__,
        rule,
        reason,
        _reference_lr(optimizer),
        None,
    )
    plan.lr_factor = lr_factor(rule, plan.global_batch, reference_global)
    if not plan.exact:
        plan.notes.append(
            f"{target_global} does not split into {world_size} worker(s) x accumulation steps "
            f"with a per-core batch near {largest_per_core}: the nearest is {plan.global_batch}"
        )
    if steps > 1:
        plan.notes.append(
            "with accumulation: divide each micro-batch loss by the steps (or sum and normalise "
            "by the items of all micro-batches), step the optimizer, scheduler and clipping once "
            "per global batch, and skip DDP's all-reduce on the other micro-batches (no_sync())"
        )
    if plan.global_batch != reference_global:
        plan.notes.append("a new global batch changes the training recipe: re-validate convergence")
    return plan


def _reference_lr(optimizer: torch.optim.Optimizer) -> float | None:
    lr = optimizer.param_groups[0].get("lr") if optimizer.param_groups else None
    return float(lr) if isinstance(lr, (int, float)) else None


@dataclass
class AccumulationCheck:
    micro_batch: int
    steps: int
    max_relative_error: float | None  # over parameters: ||g_acc - g_big|| / ||g_big||
    worst_parameter: str
    tolerance: float
    batch_statistics_layers: list[str]  # modules that normalise over the batch (BatchNorm)
    # Dropout layers, turned off for the check: their masks would differ between the two runs
    # through their shapes, which says nothing about accumulation.
    dropout_layers: list[str]
    method: str
    error: str | None = None

    @property
    def passed(self) -> bool:
        return self.max_relative_error is not None and self.max_relative_error <= self.tolerance

    def explanation(self) -> str:
        if self.error:
            return f"the check could not run: {self.error}"
        if self.passed:
            return (
                f"accumulating {self.steps} micro-batches of {self.micro_batch} gives the "
                f"gradients of one batch of {self.micro_batch * self.steps} (worst relative "
                f"difference {self.max_relative_error:.1e}, tolerance {self.tolerance:.0e})"
            )
        causes = []
        if self.batch_statistics_layers:
            causes.append(
                "batch-statistics layers see micro-batches, not the whole batch: "
                + ", ".join(self.batch_statistics_layers)
            )
        cause = "; ".join(causes) or "the loss is not a mean over equal-sized micro-batches"
        return (
            f"accumulation is NOT equivalent here (worst relative gradient difference "
            f"{self.max_relative_error:.1e} on {self.worst_parameter}): {cause}"
        )


def check_accumulation(
    workload: Workload, micro_batch: int, steps: int, tolerance: float = ACCUMULATION_TOLERANCE
) -> AccumulationCheck:
    """Gradients of one batch of micro_batch x steps against `steps` accumulated micro-batches,
    from the same weights and data, in float64 on the CPU (where summation order is the only
    other difference). Each micro-batch loss is divided by `steps`: with a mean-reduced loss
    over equal-sized micro-batches that reproduces the big batch's mean exactly."""
    if micro_batch < 1 or steps < 2:
        raise BadInput(f"accumulation check needs micro_batch >= 1 and steps >= 2, got {steps}.")
    probe = workload.build_model("cpu")
    check = AccumulationCheck(
        micro_batch,
        steps,
        None,
        "",
        tolerance,
        _modules_of(probe, nn.modules.batchnorm._BatchNorm),
        _modules_of(probe, nn.modules.dropout._DropoutNd),
        method=(
            f"float64 on the CPU, training mode, same initial weights and data; one batch of "
            f"{micro_batch * steps} against {steps} micro-batches of {micro_batch}, each loss "
            f"divided by {steps}; the workload's loss is mean-reduced over equal-sized "
            "micro-batches here (no padding), so the sum of the divided means is the big "
            "batch's mean; dropout is off in both runs"
        ),
    )
    try:
        inputs, targets = workload.batch("cpu", micro_batch * steps)
        inputs = tree_map(lambda t: t.double() if t.is_floating_point() else t, inputs)
        targets = targets.double() if targets.is_floating_point() else targets
        big = _gradients(workload, [(inputs, targets)], 1)
        chunks = [
            (
                tree_map(lambda t, i=i: t[i * micro_batch : (i + 1) * micro_batch], inputs),
                targets[i * micro_batch : (i + 1) * micro_batch],
            )
            for i in range(steps)
        ]
        accumulated = _gradients(workload, chunks, steps)
    except Exception as exc:  # the verdict says the check could not run, and why
        check.error = str(describe_error(exc))
        return check
    worst, worst_name = 0.0, ""
    for name, g_big in big.items():
        diff = (accumulated[name] - g_big).norm().item()
        scale = g_big.norm().item()
        relative = diff / scale if scale > 0 else diff
        if relative >= worst:
            worst, worst_name = relative, name
    check.max_relative_error, check.worst_parameter = worst, worst_name
    return check


def _gradients(
    workload: Workload,
    batches: list[Batch],
    divide_by: int,
) -> dict[str, torch.Tensor]:
    model = workload.build_model("cpu").double()
    model.train()
    disable_dropout(model)
    # The same RNG stream for both runs, for any other random layer.
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(workload.seed)
        for inputs, targets in batches:
            loss = workload.compute_loss(workload.forward(model, inputs), targets)
            (loss / divide_by).backward()
    return {
        name: p.grad.detach().clone() for name, p in model.named_parameters() if p.grad is not None
    }


def _modules_of(model: nn.Module, kind: type) -> list[str]:
    return [
        f"{name} ({type(m).__name__})" for name, m in model.named_modules() if isinstance(m, kind)
    ]
