"""Numerics: does the target (device, precision, compiled) compute what the reference computes?

The reference is fp32 eager on the CPU, with an fp64 run of the same weights and batch as the
error yardstick. Every run starts from the same initial weights (the state dict is copied) and
the same fixed batch (notebook 01's reference artifact when it matches, else the workload's
seeded batch). Per run this compares every leaf module's output in execution order, the final
outputs, the loss, every parameter's gradient after one backward, the loss trajectory over N
optimizer steps and the workload's task metric. Metrics come first (metrics.py), then the
verdict rule judges them; the first failing layer is re-run on the reference's inputs to tell
its own error from the error it inherited.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from time import perf_counter
from typing import Any

import torch

from workbench.baseline.reference import BASELINE_REFERENCE_FILE, load_reference, state_sha256
from workbench.environment.manifest import legacy_setting
from workbench.errors import BadInput, WorkbenchError, describe_error
from workbench.numerics.capture import (
    FP32,
    FP64,
    PRECISIONS,
    LayerCapture,
    LayerRecorder,
    ModelBuilder,
    RunSpec,
    TrainingCapture,
    capture_layers,
    capture_training,
    disable_dropout,
    float_tensors,
    rerun_layer,
)
from workbench.numerics.metrics import VerdictRule, compute_metrics, judge
from workbench.numerics.records import (
    INHERITED,
    OWN,
    ROLE_PRECISION_BASELINE,
    ROLE_TARGET,
    UNKNOWN,
    Attribution,
    BatchSource,
    Comparison,
    FirstDivergence,
    MatchedCheck,
    NumericsResult,
    NumericsSettings,
    RunResult,
    RunVerdict,
    TaskComparison,
    Unmatched,
)
from workbench.redact import redact_environment
from workbench.targets import get_target
from workbench.targets.base import CompileFailed, Target
from workbench.workload import Batch, Workload

# Environment variables that change numerics (neuron.md 2.3, 2.8), read through the redaction.
NUMERICS_VARIABLES = (
    "NEURON_CC_FLAGS",
    "NEURON_RT_STOCHASTIC_ROUNDING_EN",
    "NEURON_RT_STOCHASTIC_ROUNDING_SEED",
    "XLA_USE_BF16",
    "XLA_DOWNCAST_BF16",
)


@dataclass
class ReferenceRuns:
    spec: RunSpec
    layers: LayerCapture
    training: TrainingCapture
    fp64_spec: RunSpec
    fp64_layers: LayerCapture | None
    fp64_training: TrainingCapture | None
    fp64_error: str | None
    dropout_disabled: list[str]
    build: ModelBuilder
    _fp64_model: torch.nn.Module | None = field(default=None, repr=False)

    def fp64_model(self) -> torch.nn.Module:
        """The fp64 model at the initial weights, for layer re-runs: built when first needed."""
        if self._fp64_model is None:
            self._fp64_model, _ = prepared_model(self.build, self.fp64_spec)
        return self._fp64_model


def prepared_model(build: ModelBuilder, spec: RunSpec) -> tuple[torch.nn.Module, list[str]]:
    model = build()
    model.train()
    disabled = disable_dropout(model)
    return spec.place_model(model), disabled


def _train(
    model: torch.nn.Module,
    spec: RunSpec,
    batch: Batch,
    workload: Workload,
    steps: int,
    recorder: LayerRecorder | None,
) -> TrainingCapture:
    inputs, targets = batch
    return capture_training(
        model,
        spec.place(inputs),
        targets.to(spec.target.device),
        spec,
        loss_fn=workload.loss_fn,
        make_optimizer=workload.make_optimizer,
        steps=steps,
        task_metric=workload.task_metric,
        recorder=recorder,
    )


def _capture_run(
    build: ModelBuilder,
    batch: Batch,
    spec: RunSpec,
    workload: Workload,
    steps: int,
    *,
    keep_inputs: bool,
) -> tuple[LayerCapture, TrainingCapture, list[str]]:
    """An eager run whose first training step also records every layer."""
    model, dropout = prepared_model(build, spec)
    recorder = LayerRecorder(model, keep_inputs=keep_inputs)
    training = _train(model, spec, batch, workload, steps, recorder)
    return recorder.capture(), training, dropout


def run_references(
    build: ModelBuilder, batch: Batch, workload: Workload, steps: int, reference_target: Target
) -> ReferenceRuns:
    """The fp32 eager reference (with its layer inputs kept) and the fp64 yardstick."""
    spec = RunSpec(reference_target, FP32)
    fp64_spec = RunSpec(reference_target, FP64)
    try:
        layers, training, dropout = _capture_run(
            build, batch, spec, workload, steps, keep_inputs=True
        )
    except Exception as exc:
        raise WorkbenchError(
            f"The reference run ({spec.label}) of workload {workload.name!r} failed, so there "
            f"is nothing to compare against: {describe_error(exc)}"
        ) from exc
    fp64_layers = fp64_training = fp64_error = None
    try:
        fp64_layers, fp64_training, _ = _capture_run(
            build, batch, fp64_spec, workload, steps, keep_inputs=False
        )
    except Exception as exc:  # some ops have no float64 kernel: closeness still judges
        fp64_error = str(describe_error(exc))
    return ReferenceRuns(
        spec, layers, training, fp64_spec, fp64_layers, fp64_training, fp64_error, dropout, build
    )


def _compare(
    name: str,
    kind: str,
    target: torch.Tensor,
    reference: torch.Tensor,
    fp64: torch.Tensor | None,
    rule: VerdictRule,
) -> Comparison:
    rtol, atol = rule.tolerances(target.dtype, reference.dtype)
    metrics = compute_metrics(name, kind, target, reference, fp64, rtol=rtol, atol=atol)
    return Comparison(metrics, judge(metrics, rule))


def _pair(
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


def compare_layers(
    layers: LayerCapture, refs: ReferenceRuns, rule: VerdictRule
) -> tuple[list[Comparison], Unmatched]:
    """Each target layer output against the reference's of the same name, in target order."""
    target = {t.key: t.value for t in layers.tensors}
    reference = {t.key: t.value for t in refs.layers.tensors}
    fp64 = {t.key: t.value for t in refs.fp64_layers.tensors} if refs.fp64_layers else {}
    names, unmatched = _pair(
        target, reference, [t.key for t in layers.tensors], [t.key for t in refs.layers.tensors]
    )
    comparisons = [_compare(n, "layer", target[n], reference[n], fp64.get(n), rule) for n in names]
    return comparisons, unmatched


def attribute(
    layer: str,
    layers: LayerCapture,
    model: Callable[[], torch.nn.Module],
    spec: RunSpec,
    refs: ReferenceRuns,
    rule: VerdictRule,
) -> Attribution:
    """Re-run the target's `layer` (a leaf of `model()`, the run's placed model at the initial
    weights) on the reference's inputs, and the fp64 layer on the same inputs as the yardstick:
    failing again there means the error is the layer's own."""
    tensor = layers.by_key()[layer]
    reference_tensor = refs.layers.by_key()[layer]
    try:
        reference_call = refs.layers.calls[tensor.call_key]
        assert reference_call.inputs is not None  # the reference keeps every layer's inputs
        call = layers.calls[tensor.call_key]
        isolated = rerun_layer(model(), call, reference_call.inputs, spec)[tensor.index]
        fp64 = None
        if refs.fp64_layers is not None:
            fp64_call = refs.fp64_layers.calls[tensor.call_key]
            fp64 = rerun_layer(refs.fp64_model(), fp64_call, reference_call.inputs, refs.fp64_spec)[
                tensor.index
            ]
    except Exception as exc:  # the layer could not be run alone: say so, keep the run
        return Attribution(
            layer, UNKNOWN, None, f"re-running {layer} alone failed: {describe_error(exc)}"
        )
    comparison = _compare(
        layer, "layer re-run on reference inputs", isolated, reference_tensor.value, fp64, rule
    )
    if comparison.verdict.passed:
        note = (
            f"{layer} fed the reference's inputs passes ({comparison.verdict.reason}): its "
            "error is inherited from upstream"
        )
        return Attribution(layer, INHERITED, comparison, note)
    note = (
        f"{layer} fed the reference's inputs still fails ({comparison.verdict.reason}): the "
        "error is its own"
    )
    return Attribution(layer, OWN, comparison, note)


def _trajectory(losses: list[float], dtype: torch.dtype) -> torch.Tensor:
    # Each loss was a `dtype` value: rebuilt in that dtype, the rule judges it at its tolerances.
    return torch.tensor(losses, dtype=torch.float64).to(dtype)


def _output_names(count: int) -> list[str]:
    return ["outputs"] if count == 1 else [f"outputs[{i}]" for i in range(count)]


def compare_training(
    result: RunResult,
    training: TrainingCapture,
    refs: ReferenceRuns,
    rule: VerdictRule,
    task_name: str,
) -> None:
    """Outputs, loss, gradients, trajectory and task metric of one run, into `result`."""
    ref, fp64 = refs.training, refs.fp64_training
    names, target_names = _output_names(len(ref.outputs)), _output_names(len(training.outputs))
    target_out = dict(zip(target_names, training.outputs, strict=True))
    reference_out = dict(zip(names, ref.outputs, strict=True))
    fp64_out = dict(zip(names, fp64.outputs, strict=True)) if fp64 else {}
    paired, result.unmatched_outputs = _pair(target_out, reference_out, target_names, names)
    result.outputs = [
        _compare(n, "output", target_out[n], reference_out[n], fp64_out.get(n), rule)
        for n in paired
    ]
    result.loss = _compare(
        "loss", "loss", training.loss, ref.loss, fp64.loss if fp64 else None, rule
    )
    paired, result.unmatched_gradients = _pair(
        training.gradients, ref.gradients, list(training.gradients), list(ref.gradients)
    )
    result.gradients = [
        _compare(
            n,
            "gradient",
            training.gradients[n],
            ref.gradients[n],
            fp64.gradients.get(n) if fp64 else None,
            rule,
        )
        for n in paired
    ]
    result.losses = training.losses
    result.trajectory = _compare(
        "trajectory",
        "trajectory",
        _trajectory(training.losses, training.loss.dtype),
        _trajectory(ref.losses, ref.loss.dtype),
        _trajectory(fp64.losses, torch.float64) if fp64 else None,
        rule,
    )
    agreement = None
    if training.predictions is not None and ref.predictions is not None:
        if training.predictions.shape == ref.predictions.shape:
            agreement = float((training.predictions == ref.predictions).double().mean())
    result.task = TaskComparison(
        name=task_name,
        reference_initial=ref.task_metric_initial,
        target_initial=training.task_metric_initial,
        reference_final=ref.task_metric_final,
        target_final=training.task_metric_final,
        prediction_agreement=agreement,
    )


def run_verdict(result: RunResult) -> RunVerdict:
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
    return RunVerdict(passed, len(checked), failed, summary)


def _phase_of(exc: BaseException, phase: str, spec: RunSpec) -> str:
    """Compiler errors surface at the first call: name them, so they read as compile failures."""
    dynamo_errors = getattr(torch._dynamo.exc, "TorchDynamoException", ())
    if isinstance(exc, CompileFailed) or (spec.compiled and isinstance(exc, dynamo_errors)):
        return "compile"
    return phase


def compare_run(
    spec: RunSpec,
    build: ModelBuilder,
    batch: Batch,
    refs: ReferenceRuns,
    workload: Workload,
    settings: NumericsSettings,
    *,
    role: str = ROLE_TARGET,
) -> RunResult:
    """One run against the reference; a run that cannot run is recorded with its reason."""
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
        training = _train(model, spec, batch, workload, settings.steps, recorder)
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
        failing = [c for c in result.layers if not c.verdict.passed]
        # Eager re-runs are cheap; a compiled re-run compiles the layer alone, so compiled runs
        # attribute only their first diverging layer.
        for comparison in failing[:1] if spec.compiled else failing:
            result.attributions.append(
                attribute(comparison.name, layers, initial_model, spec, refs, rule)
            )
        if failing:
            first = failing[0]
            result.first_divergence = FirstDivergence(
                first.name,
                result.layers.index(first) + 1,
                first,
                result.attributions[0],
            )
        task_name = workload.task_metric_name if workload.task_metric else ""
        compare_training(result, training, refs, rule, task_name)
        result.verdict = run_verdict(result)
    except Exception as exc:  # recorded; the other runs are still compared
        result.status = "failed"
        result.failed_phase = _phase_of(exc, phase, spec)
        result.error = str(describe_error(exc))
    result.seconds = perf_counter() - started
    return result


def matched_check(result: RunResult, baseline: RunResult, rule: VerdictRule) -> MatchedCheck | None:
    """`result` judged with `baseline`'s RMSE against fp64 as the yardstick, tensor by tensor."""
    yardsticks = {c.name: c.metrics.target_rmse_vs_fp64 for c in baseline.final_comparisons}
    failed, checked = [], 0
    for comparison in result.final_comparisons:
        budget = yardsticks.get(comparison.name)
        if budget is None:
            continue
        checked += 1
        if not judge(comparison.metrics, rule, budget_rmse=budget).passed:
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


def plan_runs(
    target: Target, reference_target: Target, settings: NumericsSettings
) -> list[tuple[RunSpec, str]]:
    """Eager runs on the target, CPU eager baselines for low precisions the target runs do not
    already provide, then compiled runs (slowest last, so the others are on record first)."""
    plan = [(RunSpec(target, PRECISIONS[p]), ROLE_TARGET) for p in settings.precisions]
    same_device = target.device == reference_target.device
    low = [
        p
        for p in dict.fromkeys(settings.precisions + settings.compiled_precisions)
        if PRECISIONS[p].is_low
    ]
    for name in low:
        if not (same_device and name in settings.precisions):
            plan.append((RunSpec(reference_target, PRECISIONS[name]), ROLE_PRECISION_BASELINE))
    plan += [
        (RunSpec(target, PRECISIONS[p], compiled=True), ROLE_TARGET)
        for p in settings.compiled_precisions
    ]
    return plan


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


def _flag_value(flags: str, flag: str) -> str | None:
    # `--auto-cast` must not match `--auto-cast-type`; both `=value` and `value` forms occur.
    match = re.search(rf"{re.escape(flag)}(?![\w-])(?:=|\s+)(\S+)", flags)
    return match.group(1) if match else None


def numerics_settings(target: Target) -> dict[str, Any]:
    """The settings that change numerics, as in effect in this process (environment redacted)."""
    environment = redact_environment(os.environ)
    variables = {name: environment.get(name) for name in NUMERICS_VARIABLES}
    flags = variables["NEURON_CC_FLAGS"] or ""
    rounding = variables["NEURON_RT_STOCHASTIC_ROUNDING_EN"]
    return {
        "environment": {
            name: value if value is not None else "unset" for name, value in variables.items()
        },
        "neuronx_cc": {
            "in_effect": target.is_trainium,
            "auto_cast": _flag_value(flags, "--auto-cast")
            or "not set (neuronx-cc default: none since Neuron 2.27, matmult before)",
            "auto_cast_type": _flag_value(flags, "--auto-cast-type")
            or "not set (neuronx-cc default: bf16)",
        },
        "stochastic_rounding": (
            "on: bf16 results vary from run to run" if rounding == "1" else "off or unset"
        ),
        "torch": {
            "float32_matmul_precision": legacy_setting(torch.get_float32_matmul_precision),
            "cuda_matmul_allow_tf32": legacy_setting(lambda: torch.backends.cuda.matmul.allow_tf32),
            "cudnn_allow_tf32": legacy_setting(lambda: torch.backends.cudnn.allow_tf32),
            "deterministic_algorithms": torch.are_deterministic_algorithms_enabled(),
            "default_dtype": str(torch.get_default_dtype()).removeprefix("torch."),
        },
    }


def _state_hash(build: ModelBuilder) -> str:
    return state_sha256(build())


def load_batch(
    workload: Workload, build: ModelBuilder, artifact: Path | None, rule: VerdictRule
) -> tuple[Batch, BatchSource]:
    """Notebook 01's fixed batch when its artifact is for this workload and these weights;
    otherwise the workload's seeded batch. Either way the choice and its reason are recorded."""
    own = workload.batch("cpu")
    if artifact is None or not Path(artifact).is_file():
        where = f" at {artifact}" if artifact else ""
        return own, BatchSource(
            "the workload's seeded batch",
            str(artifact) if artifact else None,
            False,
            f"no notebook 01 reference artifact{where}: the reference is built here",
        )
    try:
        saved = load_reference(Path(artifact))
        expected = workload.spec or workload.name
        if saved.get("workload") != expected or saved.get("seed") != workload.seed:
            raise ValueError(
                f"it is for workload {saved.get('workload')!r} seed {saved.get('seed')!r}, "
                f"not {expected!r} seed {workload.seed}"
            )
        if saved.get("state_sha256") != _state_hash(build):
            raise ValueError("its initial weights differ from this workload's (state hash)")
        inputs, targets = tuple(saved["inputs"]), saved["targets"]
        model = build().eval()
        with torch.no_grad():
            reference = float_tensors(model(*inputs))
            fp64_model = build().double().eval()
            fp64 = float_tensors(
                fp64_model(*[t.double() if t.is_floating_point() else t for t in inputs])
            )
        baseline = float_tensors(saved["outputs"])
        comparison = None
        if len(baseline) == len(reference) == 1 and baseline[0].shape == reference[0].shape:
            comparison = _compare(
                "notebook 01 outputs", "output", baseline[0], reference[0], fp64[0], rule
            )
    except Exception as exc:  # an unreadable or foreign artifact: say why, build our own
        return own, BatchSource(
            "the workload's seeded batch",
            str(artifact),
            False,
            f"notebook 01's artifact was not used: {exc}",
        )
    return (inputs, targets), BatchSource(
        f"notebook 01's fixed batch ({Path(artifact).name})",
        str(artifact),
        True,
        "same workload, seed and initial weights (state hash) as notebook 01",
        comparison,
        str(saved.get("device")),
    )


def baseline_artifact_path(requested: str, out_dir: Path) -> Path:
    """Notebook 01's reference artifact: the named file, or the one in `out_dir`.

    A named file that does not exist is BadInput; a missing default only means the reference
    is built here (a run of notebook 03 alone has no notebook 01 beside it).
    """
    if not requested:
        return Path(out_dir) / BASELINE_REFERENCE_FILE
    path = Path(requested).expanduser()
    if not path.is_file():
        raise BadInput(
            f"baseline_reference {requested!r} is not a file; give the path of a "
            f"{BASELINE_REFERENCE_FILE} written by notebook 01, or leave it empty."
        )
    return path


def run_numerics(
    workload: Workload,
    target: Target,
    settings: NumericsSettings | None = None,
    *,
    baseline_artifact: Path | None = None,
    log: Callable[[str], None] = print,
) -> NumericsResult:
    """Every planned run against the reference; one failing run never stops the others."""
    settings = settings or NumericsSettings()
    started = perf_counter()
    reference_target = get_target("cpu")
    initial = workload.build_model("cpu")
    state = {k: v.detach().clone() for k, v in initial.state_dict().items()}

    def build() -> torch.nn.Module:
        # The same weights in every run: the workload's model with the first build's state dict.
        model = workload.build_model("cpu")
        model.load_state_dict(state)
        return model

    batch, source = load_batch(workload, build, baseline_artifact, settings.rule)
    refs = run_references(build, batch, workload, settings.steps, reference_target)
    log(f"reference {refs.spec.label} and yardstick {refs.fp64_spec.label} captured")
    runs = []
    for spec, role in plan_runs(target, reference_target, settings):
        result = compare_run(spec, build, batch, refs, workload, settings, role=role)
        runs.append(result)
        log(f"{result.label}: {_log_line(result)}")
    add_matched_checks(runs, str(reference_target.device), settings.rule)
    return NumericsResult(
        workload=workload.describe(),
        target=target.describe(),
        settings=settings,
        rule_statement=settings.rule.statement(),
        reference_label=refs.spec.label,
        yardstick_label=refs.fp64_spec.label,
        fp64_error=refs.fp64_error,
        batch=source,
        reference_losses=refs.training.losses,
        fp64_losses=refs.fp64_training.losses if refs.fp64_training else None,
        dropout_disabled=refs.dropout_disabled,
        numerics_settings=numerics_settings(target),
        runs=runs,
        wall_seconds=perf_counter() - started,
    )


def _log_line(result: RunResult) -> str:
    if result.status != "ok":
        return f"could not run ({result.failed_phase}): {result.error}"
    assert result.verdict is not None
    text = ("PASS" if result.verdict.passed else "FAIL") + f", {result.verdict.summary}"
    if result.first_divergence:
        fd = result.first_divergence
        text += f"; first diverging layer {fd.layer} ({fd.attribution.cause})"
    return text + f" [{result.seconds:.1f} s]"
