"""One tensor against its reference: paired by name and shape, measured (metrics), then judged
(a single value such as the loss by the scalar rule, every other tensor by the dynamo rule)."""

from __future__ import annotations

import torch

from workbench.numerics.metrics import (
    RULE_SCALAR,
    MetricsVerdict,
    ScalarTolerance,
    VerdictRule,
    check_scalars,
    compute_metrics,
    judge,
    loss_scale,
    scalar_tolerance,
)
from workbench.numerics.records import (
    TensorComparison,
    Unmatched,
)


def compare_tensor(
    name: str,
    kind: str,
    target: torch.Tensor,
    reference: torch.Tensor,
    fp64: torch.Tensor | None,
    rule: VerdictRule,
    spread: float | None = None,
    module_type: str = "",
    scalar: ScalarTolerance | None = None,
) -> TensorComparison:
    """One tensor's metrics and verdict: a one-element tensor given a `scalar` tolerance (a
    loss) is judged as a value by it, every other tensor by the dynamo rule."""
    rtol, atol = rule.tolerances(target.dtype, reference.dtype)
    metrics = compute_metrics(name, kind, target, reference, fp64, rtol=rtol, atol=atol)
    metrics.reference_spread = spread
    if scalar is not None and target.numel() == 1:
        values = (float(target.double().sum()), float(reference.double().sum()))
        return TensorComparison(metrics, scalar_verdict(name, values, scalar), module_type, values)
    return TensorComparison(metrics, judge(metrics, rule), module_type)


def scalar_verdict(
    name: str, values: tuple[float, float], tolerance: ScalarTolerance
) -> MetricsVerdict:
    check = check_scalars(name, [values[0]], [values[1]], tolerance)
    return MetricsVerdict(check.passed, RULE_SCALAR, check.sentence())


def scalar_tolerance_of(
    name: str, kind: str, dtype: torch.dtype, reference_losses: list[float]
) -> ScalarTolerance:
    """The tolerance of a one-element tensor computed at `dtype`: a loss (the loss, or an
    output named loss) is floored at the loss's scale over the reference's trajectory; any
    other single value at its own size alone."""
    is_loss = kind == "loss" or name == "loss"
    return scalar_tolerance(dtype, loss_scale(reference_losses) if is_loss else 0.0)


def pair_by_name(
    target: dict[str, torch.Tensor],
    reference: dict[str, torch.Tensor],
    order: list[str],
    reference_order: list[str],
) -> tuple[list[str], Unmatched]:
    """Names present in both with equal shapes (in `order`), and what could not be paired."""
    unmatched = Unmatched(
        only_reference=[n for n in reference_order if n not in target],
        only_target=[n for n in order if n not in reference],
    )
    paired = []
    for name in order:
        if name not in reference:
            continue
        if target[name].shape != reference[name].shape:
            unmatched.shape_differs.append(
                f"{name} {tuple(target[name].shape)} vs {tuple(reference[name].shape)}"
            )
            continue
        paired.append(name)
    return paired, unmatched
