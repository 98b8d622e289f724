"""After training: the final outputs, the loss, every parameter's gradient after one backward,
the loss trajectory over N optimizer steps, the task metric, and the loss and task metric on
held-out batches, each against the reference's. Nothing after the first NaN/Inf loss counts as
evidence."""

from __future__ import annotations

import math
from dataclasses import replace
from typing import TypedDict

import torch

from workbench.numerics.capture import TrainingCapture
from workbench.numerics.metrics import (
    LossFloor,
    VerdictRule,
    judge,
    loss_floor,
)
from workbench.numerics.nonfinite import first_nonfinite_step
from workbench.numerics.records import (
    TaskComparison,
    TensorComparison,
    Unmatched,
    ValidationComparison,
)
from workbench.numerics.references import (
    ReferenceRuns,
    output_names,
    relative_gap,
)
from workbench.numerics.tensors import (
    compare_tensor,
    pair_by_name,
    scalar_tolerance_of,
)
from workbench.numerics.validation import HeldOutScore

SENSITIVITY_SOURCE = (
    "the reference's own sensitivity: its trajectory from weights and inputs one ulp away"
)
GRADIENT_SENSITIVITY_SOURCE = (
    "the reference's own sensitivity: its gradient from weights and inputs one ulp away"
)


def _trajectory(losses: list[float], dtype: torch.dtype) -> torch.Tensor:
    # Each loss was a `dtype` value: rebuilt in that dtype, the rule judges it at its tolerances.
    return torch.tensor(losses, dtype=torch.float64).to(dtype)


class TrainingFields(TypedDict):
    """The RunResult fields a run's training decides, against the reference's: computed here
    and passed to RunResult as they are, so the run's record is built once, whole."""

    outputs: list[TensorComparison]
    unmatched_outputs: Unmatched
    loss: TensorComparison
    gradients: list[TensorComparison]
    unmatched_gradients: Unmatched
    losses: list[float]
    trajectory: TensorComparison
    trajectory_deviation: float
    trajectory_worst_step: int | None
    reference_losses: list[float]
    loss_floor: LossFloor
    task: TaskComparison
    validation: ValidationComparison
    skipped_steps: list[int]  # steps whose update the loss scaler skipped


def final_comparisons(fields: TrainingFields) -> list[TensorComparison]:
    """What the tensors verdict judges, in RunResult.final_comparisons' order."""
    return [*fields["outputs"], fields["loss"], *fields["gradients"], fields["trajectory"]]


def compare_training(
    training: TrainingCapture,
    refs: ReferenceRuns,
    rule: VerdictRule,
    dtype: torch.dtype,
    task_name: str,
) -> TrainingFields:
    """Outputs, loss, gradients, trajectory, task metric and held-out score of a run at `dtype`
    against the reference's. Nothing that follows the first NaN/Inf loss is kept as evidence
    (see _validation)."""
    ref, fp64 = refs.training, refs.fp64_training
    outputs, unmatched_outputs = _compare_outputs(training, refs, rule, dtype)
    gradients, unmatched_gradients = _compare_gradients(training, refs, rule)
    deviation, worst_step = relative_gap(training.losses, ref.losses)
    nudged = refs.sensitivity.losses if refs.sensitivity else None
    held_out_gap = refs.sensitivity.held_out_gap if refs.sensitivity else None
    return TrainingFields(
        outputs=outputs,
        unmatched_outputs=unmatched_outputs,
        loss=compare_tensor(
            "loss",
            "loss",
            training.loss,
            ref.loss,
            fp64.loss if fp64 else None,
            rule,
            refs.spread.get(("loss", "loss")),
            scalar=scalar_tolerance_of("loss", "loss", dtype, ref.losses),
        ),
        gradients=gradients,
        unmatched_gradients=unmatched_gradients,
        losses=training.losses,
        trajectory=_compare_trajectory(training, refs, rule),
        trajectory_deviation=deviation,
        trajectory_worst_step=worst_step,
        reference_losses=list(ref.losses),
        loss_floor=loss_floor(
            dtype, ref.losses, fp64.losses if fp64 else None, rule.multiplier, nudged
        ),
        task=_task(training, ref, task_name),
        validation=_validation(
            training, ref, dtype, None if held_out_gap is None else rule.multiplier * held_out_gap
        ),
        skipped_steps=training.skipped_steps,
    )


def _compare_outputs(
    training: TrainingCapture, refs: ReferenceRuns, rule: VerdictRule, dtype: torch.dtype
) -> tuple[list[TensorComparison], Unmatched]:
    """The run's output tensors against the reference's, paired by name."""
    ref, fp64 = refs.training, refs.fp64_training
    names, target_names = output_names(ref), output_names(training)
    target_out = dict(zip(target_names, training.outputs, strict=True))
    reference_out = dict(zip(names, ref.outputs, strict=True))
    fp64_out = dict(zip(names, fp64.outputs, strict=True)) if fp64 else {}
    paired, unmatched = pair_by_name(target_out, reference_out, target_names, names)
    compared = [
        compare_tensor(
            n,
            "output",
            target_out[n],
            reference_out[n],
            fp64_out.get(n),
            rule,
            refs.spread.get(("output", n)),
            scalar=scalar_tolerance_of(n, "output", dtype, ref.losses),
        )
        for n in paired
    ]
    return compared, unmatched


def _compare_gradients(
    training: TrainingCapture, refs: ReferenceRuns, rule: VerdictRule
) -> tuple[list[TensorComparison], Unmatched]:
    """Every parameter's first gradient against the reference's, widened by the reference's
    own gradient sensitivity where that is measured."""
    ref, fp64 = refs.training, refs.fp64_training
    paired, unmatched = pair_by_name(
        training.gradients, ref.gradients, list(training.gradients), list(ref.gradients)
    )
    compared = [
        compare_tensor(
            n,
            "gradient",
            training.gradients[n],
            ref.gradients[n],
            fp64.gradients.get(n) if fp64 else None,
            rule,
            refs.spread.get(("gradient", n)),
        )
        for n in paired
    ]
    gradient_spreads = refs.sensitivity.gradients if refs.sensitivity else {}
    for comparison in compared:
        moved = gradient_spreads.get(comparison.name)
        widen_by_sensitivity(comparison, moved, GRADIENT_SENSITIVITY_SOURCE, rule)
    return compared, unmatched


def _compare_trajectory(
    training: TrainingCapture, refs: ReferenceRuns, rule: VerdictRule
) -> TensorComparison:
    """The loss per step against the reference's, widened by the reference's own sensitivity."""
    ref, fp64 = refs.training, refs.fp64_training
    trajectory = compare_tensor(
        "trajectory",
        "trajectory",
        _trajectory(training.losses, training.loss.dtype),
        _trajectory(ref.losses, ref.loss.dtype),
        _trajectory(fp64.losses, torch.float64) if fp64 else None,
        rule,
        refs.spread.get(("trajectory", "losses")),
    )
    sensitivity = refs.sensitivity.rmse if refs.sensitivity else None
    widen_by_sensitivity(trajectory, sensitivity, SENSITIVITY_SOURCE, rule)
    return trajectory


def _task(training: TrainingCapture, ref: TrainingCapture, task_name: str) -> TaskComparison:
    """The task metric before and after training, and how often the first step's predictions
    agree with the reference's."""
    nan_step = first_nonfinite_step(training.losses)
    agreement = None
    if training.predictions is not None and ref.predictions is not None:
        if training.predictions.shape == ref.predictions.shape:
            agreement = float((training.predictions == ref.predictions).double().mean())
    return TaskComparison(
        name=task_name,
        reference_initial=ref.task_metric_initial,
        target_initial=training.task_metric_initial,
        reference_final=ref.task_metric_final,
        target_final=None if nan_step is not None else training.task_metric_final,
        prediction_agreement=agreement,
        not_evidence=_not_evidence(nan_step),
    )


def widen_by_sensitivity(
    comparison: TensorComparison, sensitivity: float | None, source: str, rule: VerdictRule
) -> None:
    """Judge a tensor again with the reference's own sensitivity as its spread, where that is
    larger than the two reference runs' spread: a run that reorders its sums moves its
    trajectory, and a net's gradients across ReLU kinks, as far as the reference's own run from
    weights and inputs one ulp away moves them, times the dynamo multiplier (the rule's factor
    on every yardstick). The rule's other branches (closeness, NaN/Inf) read no spread."""
    metrics = comparison.metrics
    if sensitivity is None or not sensitivity > (metrics.reference_spread or 0.0):
        return
    metrics.reference_spread = sensitivity
    metrics.spread_source = source
    comparison.verdict = judge(metrics, rule)


def _not_evidence(nan_step: int | None) -> str | None:
    if nan_step is None:
        return None
    return (
        f"not evidence: the loss is NaN/Inf from step {nan_step}, so what the run scores after "
        "it measures nothing the model computes"
    )


def _validation(
    training: TrainingCapture,
    ref: TrainingCapture,
    dtype: torch.dtype,
    sensitivity: float | None = None,
) -> ValidationComparison:
    """The held-out scores after training against the reference's; `sensitivity` floors the
    held-out loss's tolerance (the reference's own one-ulp gap, times the multiplier). After a
    NaN/Inf loss, or a held-out loss that is not finite, the task metric is withheld (a NaN
    model's arg-max picks a class all the same, so its accuracy can even rise), and after a
    NaN/Inf training loss the held-out loss too: neither is evidence."""
    after, reference = training.held_out_after, ref.held_out_after
    reason = _not_evidence(first_nonfinite_step(training.losses))
    if reason is None and after is not None and not math.isfinite(after.loss):
        reason = "not evidence: the held-out loss is not finite, so its task metric is withheld"
        after = HeldOutScore(after.loss, None)
    elif reason is not None:
        after = None
    loss_deviation = metric_difference = None
    if after is not None and reference is not None:
        loss_deviation = abs(after.loss - reference.loss) / abs(reference.loss or 1.0)
        if not math.isfinite(after.loss):
            loss_deviation = math.inf
        if after.metric is not None and reference.metric is not None:
            metric_difference = after.metric - reference.metric
    scores = [s.loss for s in (ref.held_out_before, reference) if s is not None]
    return ValidationComparison(
        before=training.held_out_before,
        after=after,
        reference_before=ref.held_out_before,
        reference_after=reference,
        loss_deviation=loss_deviation,
        metric_difference=metric_difference,
        metric_allowance=None,
        loss_allowance=None,
        loss_floor=replace(loss_floor(dtype, scores, None, 0.0), sensitivity=sensitivity),
        not_evidence=reason,
    )
