"""Numerics: does the target (device, precision, compiled) compute what the reference computes?

The reference is fp32 eager on the CPU, run twice with the same seed (two runs that differ are
reported, and every verdict is judged against their spread), with an fp64 run of the same
weights and batch as the error yardstick. Every run starts from the same initial weights (the
state dict is copied), the same fixed batch (notebook 01's reference artifact when it matches,
else the workload's seeded batch) and the same seed. Per run this compares every leaf module's
output in execution order, the final outputs, the loss, every parameter's gradient after one
backward, the loss trajectory over N optimizer steps, the task metric, and the loss and task
metric on held-out batches before and after the trajectory. Metrics come first (metrics), then
verdicts judge them (verdicts). Every layer the dynamo rule flags is re-run alone on the
reference's inputs: its own error against its precision band says whether it diverges itself
or carries error from upstream.
"""

from __future__ import annotations

import copy
import math
import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from time import perf_counter
from typing import Any

import torch
from torch.utils._pytree import tree_map

from workbench.baseline.reference import BASELINE_REFERENCE_FILE, load_reference, state_sha256
from workbench.environment.manifest import legacy_setting
from workbench.errors import BadInput, WorkbenchError, describe_error
from workbench.numerics import records, verdicts
from workbench.numerics.capture import (
    AUTOCAST,
    CAST,
    FP32,
    FP64,
    PRECISIONS,
    LayerCall,
    LayerCapture,
    LayerRecorder,
    ModelBuilder,
    RunSpec,
    TrainingCapture,
    capture_layers,
    capture_training,
    float_tensors,
    rerun_layer,
)
from workbench.numerics.metrics import (
    RULE_SCALAR,
    UNIT_ROUNDOFF,
    MetricsVerdict,
    PrecisionCostRule,
    ScalarTolerance,
    VerdictRule,
    check_scalars,
    compute_metrics,
    judge,
    loss_floor,
    loss_scale,
    own_error,
    scalar_tolerance,
)
from workbench.numerics.nonfinite import find_first_nonfinite, first_nonfinite_step
from workbench.numerics.records import (
    INHERITED,
    OWN,
    ROLE_PRECISION_BASELINE,
    ROLE_TARGET,
    UNKNOWN,
    Attribution,
    BatchSource,
    FirstDivergence,
    MatchedCheck,
    NumericsResult,
    NumericsSettings,
    Reproducibility,
    RunResult,
    TaskComparison,
    TensorComparison,
    TensorVerdict,
    Unmatched,
    ValidationComparison,
)
from workbench.numerics.validation import HeldOutBatches, HeldOutScore, evaluator, held_out_batches
from workbench.redact import redact_environment
from workbench.targets import get_target
from workbench.targets.base import Target
from workbench.targets.compiling import CompileFailed
from workbench.workload import Batch, Workload, disable_dropout

# Environment variables that change numerics (neuron.md 2.3, 2.8), read through the redaction.
NUMERICS_VARIABLES = (
    "NEURON_CC_FLAGS",
    "NEURON_RT_STOCHASTIC_ROUNDING_EN",
    "NEURON_RT_STOCHASTIC_ROUNDING_SEED",
    "XLA_USE_BF16",
    "XLA_DOWNCAST_BF16",
)


Spread = dict[tuple[str, str], float]  # (kind, name) -> RMSE between the two reference runs
NO_LAYERS = LayerCapture([], {})  # what a reference run that recorded no layer compares


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
    held_out: HeldOutBatches
    reproducibility: Reproducibility
    spread: Spread  # empty when the two reference runs agree exactly
    trajectory_spread: float  # largest relative loss difference of the two runs (and held out)
    metric_spread: float  # their held-out task metric difference
    _fp64_model: torch.nn.Module | None = field(default=None, repr=False)
    # Re-runs shared by every run: fp64 on the reference's inputs, and rounding alone per dtype.
    _fp64_outputs: dict[str, list[torch.Tensor]] = field(default_factory=dict, repr=False)
    _rounded: dict[tuple[Any, ...], list[torch.Tensor]] = field(default_factory=dict, repr=False)

    def fp64_model(self) -> torch.nn.Module:
        """The fp64 model at the initial weights, for layer re-runs: built when first needed."""
        if self._fp64_model is None:
            self._fp64_model, _ = prepared_model(self.build, self.fp64_spec)
        return self._fp64_model

    def fp64_on_reference_inputs(self, call_key: str) -> list[torch.Tensor]:
        """The fp64 layer fed the reference's inputs: what every run's re-run is measured by."""
        if call_key not in self._fp64_outputs:
            assert self.fp64_layers is not None
            inputs = self.layers.calls[call_key].inputs
            assert inputs is not None  # the reference keeps every layer's inputs
            self._fp64_outputs[call_key] = rerun_layer(
                self.fp64_model(), self.fp64_layers.calls[call_key], inputs, self.fp64_spec
            )
        return self._fp64_outputs[call_key]

    def rounded(
        self, call: LayerCall, weight_dtype: torch.dtype, output_dtypes: tuple[torch.dtype, ...]
    ) -> list[torch.Tensor]:
        """The exact (fp64) layer on the reference's inputs rounded to the dtypes `call` got,
        weights rounded to `weight_dtype`, outputs rounded to `output_dtypes`: what a perfect
        kernel at the run's precision gives."""
        key = (call.call_key, tuple(call.input_dtypes), weight_dtype, output_dtypes)
        if key not in self._rounded:
            assert self.fp64_layers is not None
            inputs = self.layers.calls[call.call_key].inputs
            assert inputs is not None
            fp64_call = self.fp64_layers.calls[call.call_key]
            module = copy.deepcopy(self.fp64_model().get_submodule(fp64_call.module_name))
            with torch.no_grad():
                for parameter in module.parameters():
                    parameter.copy_(parameter.to(weight_dtype).to(torch.float64))
            position = iter(call.input_dtypes)

            def round_input(tensor: Any) -> Any:
                if not isinstance(tensor, torch.Tensor):
                    return tensor
                dtype = next(position)
                if not tensor.is_floating_point():
                    return tensor
                return tensor.to(dtype).to(torch.float64)

            args, kwargs = tree_map(round_input, inputs)
            with torch.no_grad():
                outputs = float_tensors(module(*args, **kwargs))
            self._rounded[key] = [
                t.to(dtype) for t, dtype in zip(outputs, output_dtypes, strict=False)
            ]
        return self._rounded[key]


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
    held_out: HeldOutBatches | None,
    *,
    score_initial: bool = True,
) -> TrainingCapture:
    inputs, targets = batch
    return capture_training(
        model,
        spec.place(inputs),
        targets.to(spec.target.device),
        spec,
        loss_fn=workload.compute_loss,
        make_optimizer=workload.make_optimizer,
        steps=steps,
        task_metric=workload.score if workload.task_metric else None,
        recorder=recorder,
        seed=workload.seed,
        evaluate=evaluator(held_out, spec, workload) if held_out else None,
        score_initial=score_initial,
    )


def _capture_run(
    build: ModelBuilder,
    batch: Batch,
    spec: RunSpec,
    workload: Workload,
    steps: int,
    held_out: HeldOutBatches | None,
    *,
    keep_inputs: bool,
) -> tuple[LayerCapture, TrainingCapture, list[str]]:
    """An eager run whose first training step also records every layer."""
    model, dropout = prepared_model(build, spec)
    recorder = LayerRecorder(model, keep_inputs=keep_inputs)
    training = _train(model, spec, batch, workload, steps, recorder, held_out)
    return recorder.capture(), training, dropout


def _output_names(training: TrainingCapture) -> list[str]:
    """The names of a run's output tensors ("logits", "loss", "outputs[1]"): compared by name."""
    count = len(training.outputs)
    if len(training.output_names) == count:
        return training.output_names
    return ["outputs"] if count == 1 else [f"outputs[{i}]" for i in range(count)]


def _named_tensors(layers: LayerCapture, training: TrainingCapture) -> dict[tuple[str, str], Any]:
    named: dict[tuple[str, str], Any] = {("layer", t.key): t.value for t in layers.tensors}
    outputs = zip(_output_names(training), training.outputs, strict=True)
    named |= {("output", n): t for n, t in outputs}
    named[("loss", "loss")] = training.loss
    named |= {("gradient", n): t for n, t in training.gradients.items()}
    named[("trajectory", "losses")] = torch.tensor(training.losses, dtype=torch.float64)
    return named


def _relative_gap(run: list[float], reference: list[float]) -> tuple[float, int | None]:
    """Largest |run - reference| / |reference| over the steps, and the (1-based) step."""
    worst, at = 0.0, None
    for step, (a, b) in enumerate(zip(run, reference, strict=False), 1):
        gap = abs(a - b) / abs(b) if b else abs(a - b)
        if not math.isfinite(gap):
            return math.inf, step
        if gap > worst:
            worst, at = gap, step
    return worst, at


def reproducibility_of(
    first: tuple[LayerCapture, TrainingCapture],
    *others: tuple[LayerCapture | None, TrainingCapture],
) -> tuple[Reproducibility, Spread, float, float]:
    """Identically seeded reference runs, tensor by tensor against the first: exact agreement,
    or the spread every verdict is then judged against (dynamo's eager_two_runs_differ). A run
    without layers (None) is compared on everything else."""
    a = _named_tensors(*first)
    spread: Spread = {}
    largest, where = 0.0, None
    trajectory_spread = metric_spread = 0.0
    for layers, training in others:
        b = _named_tensors(layers or NO_LAYERS, training)
        for key, value in a.items():
            other = b.get(key)
            if other is None or other.shape != value.shape or torch.equal(value, other):
                continue
            difference = (value.double() - other.double()).nan_to_num()
            spread[key] = max(spread.get(key, 0.0), float(difference.square().mean().sqrt()))
            biggest = float(difference.abs().max())
            if biggest > largest:
                largest, where = biggest, f"{key[0]} {key[1]}"
        gap, _ = _relative_gap(training.losses, first[1].losses)
        trajectory_spread = max(trajectory_spread, gap)
        held = (first[1].held_out_after, training.held_out_after)
        if all(isinstance(h, HeldOutScore) for h in held):
            one, two = held
            loss_gap = abs(one.loss - two.loss) / abs(one.loss or 1.0)
            trajectory_spread = max(trajectory_spread, loss_gap)
            if one.metric is not None and two.metric is not None:
                metric_gap = abs(one.metric - two.metric)
                metric_spread = max(metric_spread, metric_gap)
                if metric_gap and where is None:
                    largest, where = metric_gap, "held-out task metric"
    if not spread and not trajectory_spread and not metric_spread:
        note = "Two identically seeded reference runs computed identical numbers."
        return Reproducibility(True, 0.0, None, note), spread, 0.0, 0.0
    note = (
        f"The reference is not deterministic: identically seeded runs differ, by up to "
        f"{largest:.3g} in {where}; every verdict is judged against their spread "
        "(nothing is widened beyond it). Look for unseeded randomness or nondeterministic "
        "kernels (torch.use_deterministic_algorithms)."
    )
    return Reproducibility(False, largest, where, note), spread, trajectory_spread, metric_spread


def run_references(
    build: ModelBuilder,
    batch: Batch,
    workload: Workload,
    steps: int,
    reference_target: Target,
    held_out: HeldOutBatches | None = None,
) -> ReferenceRuns:
    """The fp32 eager reference twice and the fp64 yardstick.

    The first reference run records every layer with its inputs. The second only has to agree,
    so it records no layer and scores held-out data only after its trajectory: when its
    outputs, loss, gradients, trajectory and held-out score equal the first run's bit for bit,
    so do the layers that produced them. When anything differs, a third run records every layer,
    so each layer also gets the spread its verdict is judged against.
    """
    held_out = held_out or held_out_batches(workload, 1)
    spec = RunSpec(reference_target, FP32)
    fp64_spec = RunSpec(reference_target, FP64)
    try:
        layers, training, dropout = _capture_run(
            build, batch, spec, workload, steps, held_out, keep_inputs=True
        )
        model, _ = prepared_model(build, spec)
        again = _train(model, spec, batch, workload, steps, None, held_out, score_initial=False)
        repeats: list[tuple[LayerCapture | None, TrainingCapture]] = [(None, again)]
        reproducibility, spread, trajectory_spread, metric_spread = reproducibility_of(
            (layers, training), *repeats
        )
        if not reproducibility.deterministic:
            third_layers, third, _ = _capture_run(
                build, batch, spec, workload, steps, held_out, keep_inputs=False
            )
            repeats.append((third_layers, third))
            reproducibility, spread, trajectory_spread, metric_spread = reproducibility_of(
                (layers, training), *repeats
            )
    except Exception as exc:
        raise WorkbenchError(
            f"The reference run ({spec.label}) of workload {workload.name!r} failed, so there "
            f"is nothing to compare against: {describe_error(exc)}"
        ) from exc
    fp64_layers = fp64_training = fp64_error = None
    try:
        fp64_layers, fp64_training, _ = _capture_run(
            build, batch, fp64_spec, workload, steps, None, keep_inputs=False
        )
    except Exception as exc:  # some ops have no float64 kernel: closeness still judges
        fp64_error = str(describe_error(exc))
    return ReferenceRuns(
        spec,
        layers,
        training,
        fp64_spec,
        fp64_layers,
        fp64_training,
        fp64_error,
        dropout,
        build,
        held_out,
        reproducibility,
        spread,
        trajectory_spread,
        metric_spread,
    )


def _compare(
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
        return TensorComparison(metrics, _scalar_verdict(name, values, scalar), module_type, values)
    return TensorComparison(metrics, judge(metrics, rule), module_type)


def _scalar_verdict(
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
) -> tuple[list[TensorComparison], Unmatched]:
    """Each target layer output against the reference's of the same name, in target order."""
    target = {t.key: t for t in layers.tensors}
    reference = {t.key: t.value for t in refs.layers.tensors}
    fp64 = {t.key: t.value for t in refs.fp64_layers.tensors} if refs.fp64_layers else {}
    names, unmatched = _pair(
        {k: t.value for k, t in target.items()},
        reference,
        [t.key for t in layers.tensors],
        [t.key for t in refs.layers.tensors],
    )
    comparisons = [
        _compare(
            n,
            "layer",
            target[n].value,
            reference[n],
            fp64.get(n),
            rule,
            refs.spread.get(("layer", n)),
            layers.calls[target[n].call_key].module_type,
        )
        for n in names
    ]
    return comparisons, unmatched


def _flagged(comparison: TensorComparison, cost: PrecisionCostRule) -> bool:
    """Whether a layer is re-run to find whose error it is: the dynamo rule fails it, and its
    error in the full run exceeds band_factor times the band of one rounding of its output
    (u x RMS, at least the reference's own error). A 16-bit run fails the dynamo rule nearly
    everywhere; only a layer this far off can hold an error of its own above its band."""
    if comparison.verdict.passed:
        return False
    metrics = comparison.metrics
    if metrics.new_nonfinite or metrics.target_rmse_vs_fp64 is None:
        return True
    u = UNIT_ROUNDOFF.get(getattr(torch, metrics.target_dtype), UNIT_ROUNDOFF[torch.float32])
    floor = max(
        u * metrics.reference_rms,
        metrics.reference_rmse_vs_fp64 or 0.0,
        metrics.reference_spread or 0.0,
    )
    return metrics.target_rmse_vs_fp64 > cost.band_factor * floor


def _weight_dtype(spec: RunSpec, output_dtype: torch.dtype) -> torch.dtype:
    """The dtype the run's layer computed its weights in: the cast dtype, autocast's dtype for
    an op autocast lowered (its output says so), fp32 otherwise."""
    if spec.precision.method == CAST:
        return spec.precision.dtype
    if spec.precision.method == AUTOCAST:
        return output_dtype
    return torch.float32


def attribute(
    layer: str,
    layers: LayerCapture,
    model: Callable[[], torch.nn.Module],
    spec: RunSpec,
    refs: ReferenceRuns,
    cost: PrecisionCostRule,
) -> Attribution:
    """Re-run the target's `layer` (a leaf of `model()`, the run's placed model at the initial
    weights) on the reference's inputs, and measure its own error against its precision band:
    far above the band, the error is the layer's own; within it, inherited from upstream."""
    tensor = layers.by_key()[layer]
    call = layers.calls[tensor.call_key]
    if refs.fp64_layers is None:
        return Attribution(layer, UNKNOWN, None, "no fp64 run to measure its own error against")
    try:
        reference_call = refs.layers.calls[tensor.call_key]
        assert reference_call.inputs is not None  # the reference keeps every layer's inputs
        outputs = rerun_layer(model(), call, reference_call.inputs, spec)
        fp64 = refs.fp64_on_reference_inputs(tensor.call_key)[tensor.index]
        dtypes = tuple(t.dtype for t in outputs)
        own = outputs[tensor.index]
        rounded = refs.rounded(call, _weight_dtype(spec, own.dtype), dtypes)[tensor.index]
    except Exception as exc:  # the layer could not be run alone: say so, keep the run
        return Attribution(
            layer, UNKNOWN, None, f"re-running {layer} alone failed: {describe_error(exc)}"
        )
    measured = own_error(
        layer, call.module_type, own, rounded, refs.layers.by_key()[layer].value, fp64
    )
    factor = f"{measured.factor:.3g}x" if math.isfinite(measured.factor) else "NaN/Inf, not"
    if measured.factor > cost.band_factor:
        note = (
            f"{layer} fed the reference's inputs adds {factor} its {measured.dtype} band on its "
            f"own (at most {cost.band_factor:g}x): the error is its own"
        )
        return Attribution(layer, OWN, measured, note)
    note = (
        f"{layer} fed the reference's inputs stays at {factor} its {measured.dtype} band: its "
        "error is inherited from upstream"
    )
    return Attribution(layer, INHERITED, measured, note)


def _trajectory(losses: list[float], dtype: torch.dtype) -> torch.Tensor:
    # Each loss was a `dtype` value: rebuilt in that dtype, the rule judges it at its tolerances.
    return torch.tensor(losses, dtype=torch.float64).to(dtype)


def compare_training(
    result: RunResult,
    training: TrainingCapture,
    refs: ReferenceRuns,
    rule: VerdictRule,
    task_name: str,
) -> None:
    """Outputs, loss, gradients, trajectory, task metric and held-out score, into `result`.
    Nothing that follows the first NaN/Inf loss is kept as evidence (see _validation)."""
    ref, fp64 = refs.training, refs.fp64_training
    spread = refs.spread
    dtype = PRECISIONS[result.run["precision"]].dtype
    names, target_names = _output_names(ref), _output_names(training)
    target_out = dict(zip(target_names, training.outputs, strict=True))
    reference_out = dict(zip(names, ref.outputs, strict=True))
    fp64_out = dict(zip(names, fp64.outputs, strict=True)) if fp64 else {}
    paired, result.unmatched_outputs = _pair(target_out, reference_out, target_names, names)
    result.outputs = [
        _compare(
            n,
            "output",
            target_out[n],
            reference_out[n],
            fp64_out.get(n),
            rule,
            spread.get(("output", n)),
            scalar=scalar_tolerance_of(n, "output", dtype, ref.losses),
        )
        for n in paired
    ]
    result.loss = _compare(
        "loss",
        "loss",
        training.loss,
        ref.loss,
        fp64.loss if fp64 else None,
        rule,
        spread.get(("loss", "loss")),
        scalar=scalar_tolerance_of("loss", "loss", dtype, ref.losses),
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
            spread.get(("gradient", n)),
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
        spread.get(("trajectory", "losses")),
    )
    result.trajectory_deviation, result.trajectory_worst_step = _relative_gap(
        training.losses, ref.losses
    )
    result.reference_losses = list(ref.losses)
    result.loss_floor = loss_floor(
        dtype, ref.losses, fp64.losses if fp64 else None, rule.multiplier
    )
    nan_step = first_nonfinite_step(training.losses)
    agreement = None
    if training.predictions is not None and ref.predictions is not None:
        if training.predictions.shape == ref.predictions.shape:
            agreement = float((training.predictions == ref.predictions).double().mean())
    result.task = TaskComparison(
        name=task_name,
        reference_initial=ref.task_metric_initial,
        target_initial=training.task_metric_initial,
        reference_final=ref.task_metric_final,
        target_final=None if nan_step is not None else training.task_metric_final,
        prediction_agreement=agreement,
        not_evidence=_not_evidence(nan_step),
    )
    result.validation = _validation(training, ref, dtype)


def _not_evidence(nan_step: int | None) -> str | None:
    if nan_step is None:
        return None
    return (
        f"not evidence: the loss is NaN/Inf from step {nan_step}, so what the run scores after "
        "it measures nothing the model computes"
    )


def _validation(
    training: TrainingCapture, ref: TrainingCapture, dtype: torch.dtype
) -> ValidationComparison:
    """The held-out scores after training against the reference's. After a NaN/Inf loss, or a
    held-out loss that is not finite, the task metric is withheld (a NaN model's arg-max picks
    a class all the same, so its accuracy can even rise), and after a NaN/Inf training loss
    the held-out loss too: neither is evidence."""
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
        loss_floor=loss_floor(dtype, scores, None, 0.0),
        not_evidence=reason,
    )


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
        training = _train(model, spec, batch, workload, settings.steps, recorder, refs.held_out)
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
        flagged = [c for c in result.layers if _flagged(c, settings.cost)]
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
            passed = _scalar_verdict(comparison.name, pair, tolerance).passed
        elif other.metrics.target_rmse_vs_fp64 is None:
            continue
        else:
            budget = other.metrics.target_rmse_vs_fp64
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
        saved_inputs = saved["inputs"]
        inputs = saved_inputs if isinstance(saved_inputs, dict) else tuple(saved_inputs)
        targets = saved["targets"]
        model = build().eval()
        with torch.no_grad():
            reference = float_tensors(workload.forward(model, inputs))
            fp64_model = build().double().eval()
            fp64_inputs = tree_map(lambda t: t.double() if t.is_floating_point() else t, inputs)
            fp64 = float_tensors(workload.forward(fp64_model, fp64_inputs))
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
    runs = []
    for spec, role in plan_runs(target, reference_target, settings):
        result = compare_run(spec, build, batch, refs, workload, settings, role=role)
        if result.status == "ok":
            result.precision_cost = verdicts.precision_cost(
                result, settings.cost, refs.trajectory_spread, refs.metric_spread
            )
        runs.append(result)
        log(_progress_line(result))
    reference_device = str(reference_target.device)
    add_matched_checks(runs, reference_device, settings.rule)
    for result in runs:
        if result.status == "ok":
            result.fidelity = verdicts.fidelity(result, reference_device)
        result.verdict = verdicts.run_verdict(result)
        # Judged only now (a 16-bit run's fidelity needs its CPU baseline): the same words
        # as the report's runs table.
        log(records.run_line(result))
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
        notes=_notes(workload, refs),
        reference_losses=refs.training.losses,
        fp64_losses=refs.fp64_training.losses if refs.fp64_training else None,
        dropout_disabled=refs.dropout_disabled,
        numerics_settings=numerics_settings(target),
        runs=runs,
        wall_seconds=perf_counter() - started,
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
