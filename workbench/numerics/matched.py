"""A run against the CPU eager run at its own precision: whether the target adds error beyond
what that precision costs anyway (the baseline's error against fp64 is the yardstick, never
below one rounding of the tensor at that precision: two correct implementations of a bf16 step,
eager and compiled, round a handful of values differently, and one value's rounding is a coin
toss, not a defect)."""

from __future__ import annotations

import torch

from workbench.numerics.capture import (
    FP32,
    PRECISIONS,
)
from workbench.numerics.metrics import (
    VerdictRule,
    judge,
)
from workbench.numerics.records import (
    MatchedCheck,
    RunResult,
    TensorComparison,
)
from workbench.numerics.tensors import (
    scalar_tolerance_of,
    scalar_verdict,
)


def matched_check(result: RunResult, baseline: RunResult, rule: VerdictRule) -> MatchedCheck | None:
    """`result` against `baseline`, tensor by tensor: a single value (a loss) by the scalar
    rule against the baseline's value, every other tensor by the dynamo rule with the
    baseline's RMSE against fp64 as the yardstick."""
    by_name = {c.name: c for c in baseline.final_comparisons}
    dtype = PRECISIONS[result.run["precision"]].dtype
    failed, checked = [], 0
    for comparison in result.final_comparisons:
        other = by_name.get(comparison.name)
        if other is None:
            continue
        if comparison.values is not None and other.values is not None:
            kind = comparison.metrics.kind
            tolerance = scalar_tolerance_of(comparison.name, kind, dtype, result.reference_losses)
            pair = (comparison.values[0], other.values[0])
            passed = scalar_verdict(comparison.name, pair, tolerance).passed
        elif other.metrics.target_rmse_vs_fp64 is None:
            continue
        else:
            budget = max(other.metrics.target_rmse_vs_fp64, one_rounding(comparison, dtype))
            passed = judge(comparison.metrics, rule, budget_rmse=budget).passed
        checked += 1
        if not passed:
            failed.append(comparison.name)
    if not checked:
        return None
    if failed:
        summary = (
            f"{len(failed)} of {checked} tensors exceed the error of {baseline.label} "
            f"({', '.join(failed[:3])}{' ...' if len(failed) > 3 else ''})"
        )
    else:
        summary = f"within the error of {baseline.label} on all {checked} tensors"
    return MatchedCheck(baseline.label, not failed, failed, summary)


def one_rounding(comparison: TensorComparison, dtype: torch.dtype) -> float:
    """Half a unit in the last place of `dtype` at the tensor's scale (its RMS): the error one
    correct rounding of its values at the run's precision leaves."""
    metrics = comparison.metrics
    if not dtype.is_floating_point:
        return 0.0
    return float(metrics.reference_rms) * torch.finfo(dtype).eps / 2


def add_matched_checks(runs: list[RunResult], reference_device: str, rule: VerdictRule) -> None:
    baselines = {
        r.run["precision"]: r
        for r in runs
        if r.status == "ok" and r.run["device"] == reference_device and not r.run["compiled"]
    }
    for result in runs:
        baseline = baselines.get(result.run["precision"])
        if result.status != "ok" or baseline is None or baseline is result:
            continue
        if result.run["precision"] == FP32.name:
            continue  # the fp32 reference is already the yardstick of the main verdict
        result.matched = matched_check(result, baseline, rule)
