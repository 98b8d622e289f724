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

import copy
from collections.abc import Callable
from pathlib import Path
from time import perf_counter

import torch

from workbench.errors import describe_error
from workbench.numerics import acceptance, records, verdicts
from workbench.numerics.batch import load_batch
from workbench.numerics.capture import (
    PRECISIONS,
    LayerCall,
    LayerRecorder,
    ModelBuilder,
    RunSpec,
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
    FirstDivergence,
    NumericsResult,
    NumericsSettings,
    RunResult,
    TensorVerdict,
)
from workbench.numerics.references import (
    ReferenceRuns,
    prepared_model,
    run_references,
    train_run,
)
from workbench.numerics.script_loop import compare_script_loop, trajectory_yardstick
from workbench.numerics.training import compare_training
from workbench.numerics.validation import held_out_batches
from workbench.targets import get_target
from workbench.targets.base import Target
from workbench.targets.compiling import CompileFailed
from workbench.workload import Batch, Workload


def tensor_verdict(result: RunResult) -> TensorVerdict:
    checked = result.final_comparisons
    failed = [c.name for c in checked if not c.verdict.passed]
    unmatched = [
        u.describe(what)
        for u, what in (
            (result.unmatched_outputs, "outputs"),
            (result.unmatched_gradients, "gradients"),
        )
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


def _turned_nonfinite(result: RunResult) -> bool:
    """NaN/Inf in a loss, or in a step-1 tensor where the reference is finite."""
    if first_nonfinite_step(result.losses) is not None:
        return True
    return any(c.metrics.new_nonfinite for c in (*result.layers, *result.final_comparisons))


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
    result = RunResult(run=spec.describe(), role=role)
    rule = settings.rule
    phase = "setup"
    try:
        model, _ = prepared_model(build, spec)
        recorder: LayerRecorder | None = None
        untrained: torch.nn.Module | None = None
        if spec.compiled:
            phase = "layers"
            layers = capture_layers(model, spec.place(batch[0]), spec)
            untrained = model  # the layer pass never trains it: re-runs use its leaves
            phase = "setup"
            model, _ = prepared_model(build, spec)
        else:
            recorder = LayerRecorder(model)
        phase = "training"
        training = train_run(model, spec, batch, workload, settings.steps, recorder, refs.held_out)
        result.skipped_steps = training.skipped_steps
        if recorder is not None:
            layers = recorder.capture()
        phase = "layers"

        def initial_model() -> torch.nn.Module:
            # Training moved the eager model's weights on: its re-runs get a fresh copy.
            nonlocal untrained
            if untrained is None:
                untrained, _ = prepared_model(build, spec)
            return untrained

        result.layers, result.unmatched_layers = compare_layers(layers, refs, rule)
        if calls_out is not None:
            calls_out.update(layers.calls)
        flagged = [c for c in result.layers if needs_attribution(c, settings.cost)]
        # A compiled run's layers are re-run eager at its precision: one compile per layer would
        # cost minutes, and what the compiler adds is the device-fidelity verdict's question.
        rerun_spec = RunSpec(spec.target, spec.precision) if spec.compiled else spec
        result.attributions = [
            attribute(c.name, layers, initial_model, rerun_spec, refs, settings.cost)
            for c in flagged
        ]
        first_own = next((a for a in result.attributions if a.cause == OWN), None)
        if first_own is not None:
            comparison = next(c for c in result.layers if c.name == first_own.layer)
            result.first_divergence = FirstDivergence(
                first_own.layer,
                comparison.module_type,
                result.layers.index(comparison) + 1,
                comparison,
                first_own,
            )
        task_name = workload.task_metric_name if workload.task_metric else ""
        compare_training(result, training, refs, rule, task_name)
        result.tensors = tensor_verdict(result)
        if _turned_nonfinite(result):
            phase = "non-finite replay"
            model, _ = prepared_model(build, spec)
            inputs, targets = batch
            result.nonfinite = find_first_nonfinite(
                model,
                spec.place(inputs),
                targets.to(spec.target.device),
                spec,
                loss_fn=workload.compute_loss,
                make_optimizer=workload.make_optimizer,
                steps=settings.steps,
                seed=workload.seed,
            )
    except Exception as exc:  # recorded; the other runs are still compared
        result.status = "failed"
        result.failed_phase = _phase_of(exc, phase, spec)
        result.error = str(describe_error(exc))
    result.seconds = perf_counter() - started
    return result


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
    `retuning_result`: notebook 04's result file, whose batch is trained over the seeds too."""
    settings = settings or NumericsSettings()
    started = perf_counter()
    reference_target = get_target("cpu")
    initial = workload.build_model("cpu")

    def build() -> torch.nn.Module:
        # The same weights in every run: a copy of one build, without re-running its init.
        return copy.deepcopy(initial)

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
    runs = []
    sides: dict[str, acceptance.RunSide] = {}
    for spec, role in plan_runs(target, reference_target, settings):
        calls: dict[str, LayerCall] = {}
        result = compare_run(
            spec, build, batch, refs, workload, settings, role=role, calls_out=calls
        )
        result.chosen = role != ROLE_TARGET or is_chosen(spec, settings)
        if result.status == "ok":
            result.precision_cost = verdicts.precision_cost(
                result, settings.cost, refs.trajectory_spread, refs.metric_spread
            )
            sides[result.label] = acceptance.measure_run(
                result, spec, build, prepared, workload, settings, refs
            )
            sides[result.label].calls = calls
        runs.append(result)
        log(_progress_line(result))
    reference_device = str(reference_target.device)
    add_matched_checks(runs, reference_device, settings.rule)
    acceptance.judge_runs(runs, sides, prepared, refs, build, reference_target, settings)
    recommended, recommended_note = (None, None)
    if retuning_result is not None:
        recommended, recommended_note = acceptance.recommended_study(
            retuning_result, workload, initial, target, prepared.seeds, settings
        )
    for result in runs:
        if result.status == "ok":
            result.fidelity = verdicts.fidelity(result, reference_device)
        result.verdict = verdicts.run_verdict(result)
        # Judged only now (a 16-bit run's fidelity needs its CPU baseline): the same words
        # as the report's runs table.
        log(records.run_line(result))
    script_loop = compare_script_loop(
        workload, target, settings.steps, settings.rule, trajectory_yardstick(refs)
    )
    if script_loop is not None:
        log(script_loop.sentence())
    before, after = refs.training.held_out_before, refs.training.held_out_after
    data = NumericsResult(
        workload=workload.describe(),
        target=target.describe(),
        settings=settings,
        rule_statement=f"{settings.rule.statement()} {settings.cost.statement()}",
        reference_label=refs.spec.label,
        yardstick_label=refs.fp64_spec.label,
        fp64_error=refs.fp64_error,
        batch=source,
        reproducibility=refs.reproducibility,
        held_out_source=held_out.source,
        held_out_samples=held_out.samples,
        task_metric=workload.task_metric_name if workload.task_metric else None,
        reference_held_out=(before, after),
        notes=_notes(workload, refs)
        + prepared.notes
        + ([recommended_note] if recommended_note else []),
        reference_losses=refs.training.losses,
        fp64_losses=refs.fp64_training.losses if refs.fp64_training else None,
        dropout_disabled=refs.dropout_disabled,
        numerics_settings=numerics_settings(target),
        runs=runs,
        wall_seconds=perf_counter() - started,
        acceptance_set=prepared.acceptance_set.description if prepared.acceptance_set else "",
        recommended_convergence=recommended,
        script_loop=script_loop,
    )
    log(f"verdict {records.notebook_verdict(data).status}. {records.headline(data)}")
    return data


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
