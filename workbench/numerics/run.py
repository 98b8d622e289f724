"""Notebook 03's runs: does the target (device, precision, compiled) compute what the reference
computes? This module plans the runs and runs each against the reference; one failing run never
stops the others.

The reference is fp32 eager on the CPU, run twice, with fp64 as the yardstick (references), on
one fixed batch (batch). Per run this compares every leaf module's output in execution order
and finds the first layer that diverges on its own (layers), then the final outputs, the loss,
the gradients, the loss trajectory, the task metric and the held-out scores (training); a
low-precision run is also checked against the CPU at its own precision (matched). Metrics come
first (metrics, tensors), then verdicts judge them (verdicts).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from time import perf_counter
from typing import TypedDict

import torch

from workbench.errors import describe_error
from workbench.numerics import acceptance, records, verdicts
from workbench.numerics.batch import load_batch
from workbench.numerics.capture import (
    PRECISIONS,
    LayerCall,
    LayerCapture,
    ModelBuilder,
    RunSpec,
    TrainingCapture,
    TrainingLoop,
    capture_layers,
)
from workbench.numerics.layers import attribute, compare_layers, needs_attribution
from workbench.numerics.matched import add_matched_checks
from workbench.numerics.nonfinite import find_first_nonfinite, first_nonfinite_step
from workbench.numerics.process_settings import numerics_settings
from workbench.numerics.records import (
    OWN,
    ROLE_PRECISION_BASELINE,
    ROLE_TARGET,
    Attribution,
    BatchSource,
    FirstDivergence,
    NumericsResult,
    NumericsSettings,
    Reproducibility,
    RunResult,
    TensorComparison,
    TensorVerdict,
    Unmatched,
)
from workbench.numerics.references import (
    ReferenceRuns,
    prepared_model,
    recorded_run,
    run_references,
    train_run,
)
from workbench.numerics.script_loop import compare_script_loop, trajectory_yardstick
from workbench.numerics.training import TrainingFields, compare_training, final_comparisons
from workbench.numerics.validation import HeldOutBatches, HeldOutScore, held_out_batches
from workbench.targets import get_target
from workbench.targets.base import Target
from workbench.targets.compiling import CompileFailed
from workbench.workload import Batch, Workload
from workbench.workloads.copies import independent_copy


def tensor_verdict(
    checked: list[TensorComparison],
    unmatched_outputs: Unmatched,
    unmatched_gradients: Unmatched,
) -> TensorVerdict:
    """The final tensors a run's verdict judges (outputs, loss, gradients, trajectory): all pass,
    and none went unpaired."""
    failed = [c.name for c in checked if not c.verdict.passed]
    unmatched = [
        u.describe(what)
        for u, what in ((unmatched_outputs, "outputs"), (unmatched_gradients, "gradients"))
        if u
    ]
    passed = not failed and not unmatched
    if passed:
        summary = f"all {len(checked)} tensors pass"
    else:
        parts = []
        if failed:
            shown = ", ".join(failed[:4]) + (
                f" and {len(failed) - 4} more" if len(failed) > 4 else ""
            )
            parts.append(f"{len(failed)} of {len(checked)} tensors fail ({shown})")
        parts += unmatched
        summary = "; ".join(parts)
    return TensorVerdict(passed, len(checked), failed, summary)


def _phase_of(exc: BaseException, phase: str, spec: RunSpec) -> str:
    """Compiler errors surface at the first call: name them, so they read as compile failures."""
    dynamo_errors = getattr(torch._dynamo.exc, "TorchDynamoException", ())
    if isinstance(exc, CompileFailed) or (spec.compiled and isinstance(exc, dynamo_errors)):
        return "compile"
    return phase


@dataclass
class _Stage:
    """The stage a run has reached: a failure is recorded as a failure of that stage."""

    name: str = "setup"


class _LayerFields(TypedDict):
    """The RunResult fields of the run's layers: every leaf's output against the reference's,
    and where the run first diverges."""

    layers: list[TensorComparison]
    unmatched_layers: Unmatched
    attributions: list[Attribution]
    first_divergence: FirstDivergence | None


def compare_run(
    spec: RunSpec,
    build: ModelBuilder,
    batch: Batch,
    refs: ReferenceRuns,
    workload: Workload,
    settings: NumericsSettings,
    *,
    role: str = ROLE_TARGET,
    calls_out: dict[str, LayerCall] | None = None,
) -> RunResult:
    """One run against the reference; a run that cannot run is recorded with its reason.
    `calls_out` receives the run's layer calls (what a later re-run of one layer needs)."""
    started = perf_counter()
    stage = _Stage()
    chosen = role != ROLE_TARGET or is_chosen(spec, settings)
    try:
        layers, training, untrained = _train(
            spec, build, batch, workload, settings.steps, refs.held_out, stage
        )
        stage.name = "layers"
        if calls_out is not None:
            calls_out.update(layers.calls)
        found = _compare_layers(layers, spec, build, refs, settings, untrained)
        task_name = workload.task_metric_name if workload.task_metric else ""
        compared = compare_training(training, refs, settings.rule, spec.precision.dtype, task_name)
        tensors = tensor_verdict(
            final_comparisons(compared),
            compared["unmatched_outputs"],
            compared["unmatched_gradients"],
        )
        nonfinite = None
        if _turned_nonfinite(found, compared):
            stage.name = "non-finite replay"
            model, _ = prepared_model(build, spec)
            loop = TrainingLoop.of(workload, settings.steps)
            nonfinite = find_first_nonfinite(model, *spec.place_batch(batch), spec, loop)
    except Exception as exc:  # recorded; the other runs are still compared
        return RunResult(
            run=spec.describe(),
            role=role,
            status="failed",
            failed_phase=_phase_of(exc, stage.name, spec),
            error=str(describe_error(exc)),
            seconds=perf_counter() - started,
            chosen=chosen,
        )
    return RunResult(
        run=spec.describe(),
        role=role,
        **found,
        **compared,
        tensors=tensors,
        nonfinite=nonfinite,
        seconds=perf_counter() - started,
        chosen=chosen,
    )


def _train(
    spec: RunSpec,
    build: ModelBuilder,
    batch: Batch,
    workload: Workload,
    steps: int,
    held_out: HeldOutBatches,
    stage: _Stage,
) -> tuple[LayerCapture, TrainingCapture, torch.nn.Module | None]:
    """The run's layer outputs and its training, and a model still at the initial weights where
    one is left over (a compiled run's layer pass never trains its model)."""
    model, _ = prepared_model(build, spec)
    if not spec.compiled:
        stage.name = "training"
        return (*recorded_run(model, spec, batch, workload, steps, held_out), None)
    stage.name = "layers"
    layers = capture_layers(model, spec.place(batch[0]), spec)
    untrained = model  # the layer pass never trains it: re-runs use its leaves
    stage.name = "setup"
    model, _ = prepared_model(build, spec)
    stage.name = "training"
    training = train_run(model, spec, batch, workload, steps, None, held_out)
    return layers, training, untrained


def _compare_layers(
    layers: LayerCapture,
    spec: RunSpec,
    build: ModelBuilder,
    refs: ReferenceRuns,
    settings: NumericsSettings,
    untrained: torch.nn.Module | None,
) -> _LayerFields:
    """Every leaf against the reference's; each flagged leaf re-run alone on the reference's
    inputs, to tell its own error from what it inherited (attribute)."""
    compared, unmatched = compare_layers(layers, refs, settings.rule)
    flagged = [c for c in compared if needs_attribution(c, settings.cost)]

    def initial_model() -> torch.nn.Module:
        # Training moved the eager model's weights on: its re-runs get a fresh copy.
        nonlocal untrained
        if untrained is None:
            untrained, _ = prepared_model(build, spec)
        return untrained

    # A compiled run's layers are re-run eager at its precision: one compile per layer would
    # cost minutes, and what the compiler adds is the device-fidelity verdict's question.
    rerun_spec = RunSpec(spec.target, spec.precision) if spec.compiled else spec
    attributions = [
        attribute(c.name, layers, initial_model, rerun_spec, refs, settings.cost) for c in flagged
    ]
    first_own = next((a for a in attributions if a.cause == OWN), None)
    first_divergence = None
    if first_own is not None:
        comparison = next(c for c in compared if c.name == first_own.layer)
        first_divergence = FirstDivergence(
            first_own.layer,
            comparison.module_type,
            compared.index(comparison) + 1,
            comparison,
            first_own,
        )
    return _LayerFields(
        layers=compared,
        unmatched_layers=unmatched,
        attributions=attributions,
        first_divergence=first_divergence,
    )


def _turned_nonfinite(found: _LayerFields, compared: TrainingFields) -> bool:
    """NaN/Inf in a loss, or in a step-1 tensor where the reference is finite."""
    if first_nonfinite_step(compared["losses"]) is not None:
        return True
    checked = (*found["layers"], *final_comparisons(compared))
    return any(c.metrics.new_nonfinite for c in checked)


def plan_runs(
    target: Target, reference_target: Target, settings: NumericsSettings
) -> list[tuple[RunSpec, str]]:
    """Eager runs on the target (the migration's precisions, then the informative ones), CPU
    eager baselines for low precisions the target runs do not already provide, then compiled
    runs (slowest last, so the others are on record first)."""
    eager = settings.precisions + settings.informative_only
    plan = [(RunSpec(target, PRECISIONS[p]), ROLE_TARGET) for p in eager]
    same_device = target.device == reference_target.device
    low = [p for p in dict.fromkeys(eager + settings.compiled_precisions) if PRECISIONS[p].is_low]
    for name in low:
        if not (same_device and name in eager):
            plan.append((RunSpec(reference_target, PRECISIONS[name]), ROLE_PRECISION_BASELINE))
    plan += [
        (RunSpec(target, PRECISIONS[p], compiled=True), ROLE_TARGET)
        for p in settings.compiled_precisions
    ]
    return plan


def is_chosen(spec: RunSpec, settings: NumericsSettings) -> bool:
    """Whether a target run is of a precision the migration uses: every compiled run is, an
    eager one where `precisions` names its precision."""
    return spec.compiled or spec.precision.name in settings.precisions


@dataclass
class _Reference:
    """What every run is compared with, measured once before the first run."""

    initial: torch.nn.Module  # the one build every run copies
    build: ModelBuilder
    batch: Batch
    source: BatchSource
    held_out: HeldOutBatches
    refs: ReferenceRuns
    prepared: acceptance.Prepared


def run_numerics(
    workload: Workload,
    target: Target,
    settings: NumericsSettings | None = None,
    *,
    baseline_artifact: Path | None = None,
    retuning_result: Path | None = None,
    log: Callable[[str], None] = print,
) -> NumericsResult:
    """Every planned run against the reference; one failing run never stops the others.
    `retuning_result`: notebook 04's result file, whose batch is trained over the seeds too.
    In stages: the reference, every run measured, every run judged (a 16-bit run's fidelity
    needs its CPU baseline), notebook 04's batch, the script loop; then the result is built."""
    settings = settings or NumericsSettings()
    started = perf_counter()
    reference_target = get_target("cpu")
    reference = _measure_reference(workload, reference_target, settings, baseline_artifact, log)
    runs, sides = _measure_runs(workload, target, reference_target, settings, reference, log)
    _judge_runs(runs, sides, reference, reference_target, settings, log)
    recommended, recommended_note = (None, None)
    if retuning_result is not None:
        recommended, recommended_note = acceptance.recommended_study(
            retuning_result,
            workload,
            reference.initial,
            target,
            reference.prepared.seeds,
            settings,
        )
    script_loop = compare_script_loop(
        workload, target, settings.steps, settings.rule, trajectory_yardstick(reference.refs)
    )
    if script_loop is not None:
        log(script_loop.sentence())
    data = NumericsResult(
        workload=workload.describe(),
        target=target.describe(),
        settings=settings,
        rule_statement=f"{settings.rule.statement()} {settings.cost.statement()}",
        **_reference_fields(workload, reference),
        notes=_notes(workload, reference.refs)
        + reference.prepared.notes
        + ([recommended_note] if recommended_note else []),
        numerics_settings=numerics_settings(target),
        runs=runs,
        wall_seconds=perf_counter() - started,
        recommended_convergence=recommended,
        script_loop=script_loop,
    )
    log(f"verdict {records.notebook_verdict(data).status}. {records.headline(data)}")
    return data


class _ReferenceFields(TypedDict):
    """The NumericsResult fields that describe the reference side."""

    reference_label: str
    yardstick_label: str
    fp64_error: str | None
    batch: BatchSource
    reproducibility: Reproducibility
    held_out_source: str
    held_out_samples: int
    task_metric: str | None
    reference_held_out: tuple[HeldOutScore | None, HeldOutScore | None]
    reference_losses: list[float]
    fp64_losses: list[float] | None
    dropout_disabled: list[str]
    acceptance_set: str


def _reference_fields(workload: Workload, reference: _Reference) -> _ReferenceFields:
    refs = reference.refs
    aset = reference.prepared.acceptance_set
    return _ReferenceFields(
        reference_label=refs.spec.label,
        yardstick_label=refs.fp64_spec.label,
        fp64_error=refs.fp64_error,
        batch=reference.source,
        reproducibility=refs.reproducibility,
        held_out_source=reference.held_out.source,
        held_out_samples=reference.held_out.samples,
        task_metric=workload.task_metric_name if workload.task_metric else None,
        reference_held_out=(refs.training.held_out_before, refs.training.held_out_after),
        reference_losses=refs.training.losses,
        fp64_losses=refs.fp64_training.losses if refs.fp64_training else None,
        dropout_disabled=refs.dropout_disabled,
        acceptance_set=aset.description if aset else "",
    )


def _measure_reference(
    workload: Workload,
    reference_target: Target,
    settings: NumericsSettings,
    baseline_artifact: Path | None,
    log: Callable[[str], None],
) -> _Reference:
    """The fixed batch, the held-out data, the reference runs and the acceptance gates'
    reference side (acceptance.prepare)."""
    initial = workload.build_model("cpu")

    def build() -> torch.nn.Module:
        # The same weights in every run: a copy of one build, without re-running its init.
        return independent_copy(initial)

    batch, source = load_batch(workload, build, baseline_artifact, settings.rule)
    held_out = held_out_batches(workload, settings.validation_batches)
    refs = run_references(
        build, batch, workload, settings.steps, reference_target, held_out=held_out
    )
    log(f"reference {refs.spec.label} (twice) and yardstick {refs.fp64_spec.label} captured")
    if not refs.reproducibility.deterministic:
        log(refs.reproducibility.note)
    prepared = acceptance.prepare(workload, build, refs, held_out, settings)
    log(f"acceptance set and {len(prepared.reference_seeds)} reference convergence runs measured")
    return _Reference(initial, build, batch, source, held_out, refs, prepared)


def _measure_runs(
    workload: Workload,
    target: Target,
    reference_target: Target,
    settings: NumericsSettings,
    reference: _Reference,
    log: Callable[[str], None],
) -> tuple[list[RunResult], dict[str, acceptance.RunSide]]:
    """Every planned run against the reference, with its precision cost and what the gates
    judge later; the runs in plan order, the gates' measurements by run label."""
    refs, build = reference.refs, reference.build
    runs = []
    sides: dict[str, acceptance.RunSide] = {}
    for spec, role in plan_runs(target, reference_target, settings):
        calls: dict[str, LayerCall] = {}
        result = compare_run(
            spec, build, reference.batch, refs, workload, settings, role=role, calls_out=calls
        )
        if result.status == "ok":
            result.precision_cost = verdicts.precision_cost(
                result, settings.cost, refs.trajectory_spread, refs.metric_spread
            )
            sides[result.label] = acceptance.measure_run(
                result, spec, build, reference.prepared, workload, settings, refs
            )
            sides[result.label].calls = calls
        runs.append(result)
        log(_progress_line(result))
    return runs, sides


def _judge_runs(
    runs: list[RunResult],
    sides: dict[str, acceptance.RunSide],
    reference: _Reference,
    reference_target: Target,
    settings: NumericsSettings,
    log: Callable[[str], None],
) -> None:
    """Every run judged once all are in: low-precision runs against their CPU baselines, the
    acceptance gates, then device fidelity and each run's verdict."""
    reference_device = str(reference_target.device)
    add_matched_checks(runs, reference_device, settings.rule)
    acceptance.judge_runs(
        runs, sides, reference.prepared, reference.refs, reference.build, reference_target, settings
    )
    for result in runs:
        if result.status == "ok":
            result.fidelity = verdicts.fidelity(result, reference_device)
        result.verdict = verdicts.run_verdict(result)
        # Judged only now (a 16-bit run's fidelity needs its CPU baseline): the same words
        # as the report's runs table.
        log(records.run_line(result))


def _notes(workload: Workload, refs: ReferenceRuns) -> list[str]:
    """What could not be compared, one sentence each; every other comparison still ran."""
    notes = []
    if not refs.training.outputs:
        notes.append(
            f"The model of workload {workload.name!r} returns no floating-point tensor that can "
            "be found (outputs are searched through tuples, lists and dicts), so outputs are not "
            "compared; layers, loss, gradients, the trajectory and the held-out loss still are."
        )
    if workload.task_metric is None:
        notes.append(
            f"Workload {workload.name!r} has no task metric, so none is compared on held-out "
            "data; give its Workload a task_metric to have one judged (the held-out loss still is)."
        )
    return notes


def _progress_line(result: RunResult) -> str:
    """What a finished run did, before any verdict: the verdicts follow once every run is in."""
    if result.status != "ok":
        return f"{result.label}: could not run ({result.failed_phase}): {result.error}"
    return f"{result.label}: measured [{result.seconds:.1f} s]"
