"""AWS's R-ratio, per layer and per output: how much error a run adds next to what its precision
costs on the CPU (neuron-framework-equivalence, stage 2).

AWS defines R = ||target - ref_fp32|| / (||ref_lowprec - ref_fp32|| + eps), ref_lowprec being the
CPU run at the target's precision: R near 1 is healthy, above tau_R = 1.2 a bug, below 1 extra
precision. Here both errors are measured against the fp64 run rather than the fp32 reference.
Where the precision's error dominates (bf16, fp16) that is the same number; it also defines R for
an fp32 run, whose ref_lowprec is the fp32 reference itself (AWS's denominator would be zero),
and for a layer that a 16-bit recipe still computes in fp32 (autocast keeps LayerNorm in fp32),
where a reordered fp32 sum would otherwise read as infinitely worse. The denominator (AWS's eps)
is never below torch.testing.assert_close's fp32 rtol times the output's RMS (1.3e-6, about 22
fp32 roundings): fp32 kernels differ by a few roundings without a bug (Inductor's GELU measured
here 1.4x eager's error against fp64, both under 3 roundings), so below that floor a ratio of two
rounding errors says nothing. Without an fp64 run, the fp32 reference is the exact value, as in
AWS's formula, and every sentence says so.

R is a ratio of two distances, each an RMS over the tensor's elements; it carries a distance only
when there are enough of them. For n independent rounding errors of equal size on both sides, ln R
has a standard deviation of about 1/sqrt(n) (half the log of an F(n, n) variable), so a sound run
stays under tau_R with 99% confidence only from n >= (z_0.99 / ln tau_R)^2 elements: 163 at 1.2.
A smaller tensor, and a single value above all (a loss, a metric: one draw of each error, whose
ratio ranges over an order of magnitude between batches of a sound run), is judged as a value:
its distance from the exact value may reach tau_R times the larger of the CPU run's distance and
the precision's own tolerance for a value of its size (assert_close's rtol of the run's precision
times the value's scale: the loss's largest size over the reference's trajectory, else its RMS),
never below the two reference runs' spread.

A layer's R in the model includes what it inherits from upstream. Every layer above the threshold
is also re-run alone on the fp32 reference's inputs (with the run's compiler for a compiled run),
as AWS computes each component's R in isolation with shared fp32 weights: a fault reads as the
one component whose isolated R is above the threshold, and the layers after it as inherited.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from workbench.errors import describe_error
from workbench.numerics.acceptance_records import (
    GATE_FAIL,
    GATE_NOT_JUDGED,
    GATE_PASS,
    JUDGED_AS_R,
    JUDGED_AS_VALUE,
    GateStatus,
    LayerRatio,
    RatioFailure,
    RunAcceptance,
    min_ratio_elements,
)
from workbench.numerics.capture import FP32, PRECISIONS, LayerCall, RunSpec, rerun_layer
from workbench.numerics.metrics import DTYPE_TOLERANCES, TensorMetrics, dtype_name, loss_scale
from workbench.numerics.records import INHERITED, OWN, UNKNOWN, RunResult, TensorComparison
from workbench.numerics.references import ReferenceRuns

FP32_FLOOR = DTYPE_TOLERANCES["float32"][0]  # relative to the output's RMS


def _run_error(metrics: TensorMetrics) -> float:
    """The run's RMSE against the exact value: fp64 where there is one, else the reference."""
    if metrics.target_rmse_vs_fp64 is not None:
        return metrics.target_rmse_vs_fp64
    return metrics.rmse


def ratio_of(run_error: float, precision_error: float, reference_rms: float) -> float:
    """R with its floor: the denominator is never below assert_close's fp32 rtol x the RMS."""
    return _divide(run_error, max(precision_error, FP32_FLOOR * reference_rms))


def _divide(run_error: float, denominator: float) -> float:
    if not math.isfinite(run_error):
        return math.inf
    if denominator == 0:
        return 0.0 if run_error == 0 else math.inf
    return run_error / denominator


@dataclass(frozen=True)
class Denominator:
    """How one tensor's R is taken: as a distance ratio, or as a value with the precision's
    tolerance as the least denominator."""

    judged: str  # JUDGED_AS_R | JUDGED_AS_VALUE
    floor: float  # the least denominator


def denominator_of(elements: int, scale: float, precision: str, threshold: float) -> Denominator:
    """A tensor of at least min_ratio_elements(threshold) elements gets R with the fp32 floor
    (1.3e-6 x its RMS `scale`); a smaller one, and a single value, is judged as a value: the
    floor is assert_close's rtol of the run's precision times its `scale`."""
    if elements >= min_ratio_elements(threshold):
        return Denominator(JUDGED_AS_R, FP32_FLOOR * scale)
    dtype = PRECISIONS[precision].dtype
    rtol = DTYPE_TOLERANCES.get(dtype_name(dtype), DTYPE_TOLERANCES["float32"])[0]
    return Denominator(JUDGED_AS_VALUE, rtol * scale)


def _precision_error(run: RunResult, baseline: RunResult | None, name: str) -> float | None:
    """The denominator's error: the CPU run at the run's precision against the exact value (the
    reference's own error against fp64 for an fp32 run); None when it is not known."""
    if run.run["precision"] == FP32.name:
        comparison = _by_name(run).get(name)
        if comparison is None:
            return None
        metrics = comparison.metrics
        return metrics.reference_rmse_vs_fp64 if metrics.reference_rmse_vs_fp64 is not None else 0.0
    if baseline is None:
        return None
    other = _by_name(baseline).get(name)
    return None if other is None else _run_error(other.metrics)


def _by_name(run: RunResult) -> dict[str, TensorComparison]:
    return {c.name: c for c in (*run.layers, *run.outputs)}


def _scale(comparison: TensorComparison, reference_losses: list[float]) -> float:
    """The size a value is judged at: a loss's largest size over the reference's trajectory
    (training drives it far below its start), any other tensor's RMS."""
    metrics = comparison.metrics
    if comparison.name == "loss" and metrics.numel == 1:
        return max(loss_scale(reference_losses), metrics.reference_rms)
    return metrics.reference_rms


def layer_ratios(run: RunResult, baseline: RunResult | None, threshold: float) -> list[LayerRatio]:
    """R of every layer (execution order) and output of `run`; `baseline` is the CPU eager run
    at its precision (unused for fp32). Layers the baseline lacks get no R."""
    ratios = []
    for kind, comparisons in (("layer", run.layers), ("output", run.outputs)):
        for comparison in comparisons:
            precision_error = _precision_error(run, baseline, comparison.name)
            if precision_error is None:
                continue
            metrics = comparison.metrics
            error = math.inf if metrics.new_nonfinite else _run_error(metrics)
            scale = _scale(comparison, run.reference_losses)
            how = denominator_of(metrics.numel, scale, run.run["precision"], threshold)
            spread = metrics.reference_spread or 0.0
            denominator = max(precision_error, spread, how.floor)
            ratios.append(
                LayerRatio(
                    name=comparison.name,
                    kind=kind,
                    module_type=comparison.module_type,
                    ratio=_divide(error, denominator),
                    run_error=error,
                    precision_error=precision_error,
                    elements=metrics.numel,
                    judged=how.judged,
                    denominator=denominator,
                )
            )
    return ratios


def exact_name(refs: ReferenceRuns) -> str:
    """What R's errors are measured against, in words: fp64, or the fp32 reference and why."""
    if refs.fp64_error is None:
        return "the fp64 run"
    return f"the fp32 reference (the fp64 run could not run: {refs.fp64_error})"


def ratio_basis(run: RunResult, baseline: RunResult | None, refs: ReferenceRuns) -> str:
    exact = exact_name(refs)
    if run.run["precision"] == FP32.name:
        if refs.fp64_error is not None:
            return (
                f"error against {exact} over 1.3e-6 x the output's RMS: the fp32 reference is "
                "the exact value here, so its own error is not known"
            )
        return f"error against {exact} over the fp32 reference's own error against it"
    if baseline is None:
        return f"no CPU eager {run.run['precision']} run completed: R is not measured"
    return f"error against {exact} over {baseline.label}'s error against it"


def _rms(tensor: torch.Tensor) -> float:
    return float(tensor.double().square().mean().sqrt()) if tensor.numel() else 0.0


def _rmse(a: torch.Tensor, b: torch.Tensor) -> float:
    difference = (a.double() - b.double()).reshape(-1)
    if not difference.numel():
        return 0.0
    if not bool(torch.isfinite(difference).all()):
        return math.inf
    return float(difference.square().mean().sqrt())


@dataclass
class ComponentRerun:
    """What re-running one component alone needs: the run's and the CPU baseline's specs and
    recorded calls, and builders of their models at the initial weights (each built once)."""

    calls: dict[str, LayerCall]
    baseline_calls: dict[str, LayerCall] | None
    build_run: Callable[[], torch.nn.Module]
    build_baseline: Callable[[], torch.nn.Module]
    spec: RunSpec
    baseline_spec: RunSpec
    refs: ReferenceRuns
    threshold: float
    _models: dict[str, torch.nn.Module] = field(default_factory=dict, repr=False)

    def run_model(self) -> torch.nn.Module:
        if "run" not in self._models:
            self._models["run"] = self.build_run()
        return self._models["run"]

    def baseline_model(self) -> torch.nn.Module:
        if "baseline" not in self._models:
            self._models["baseline"] = self.build_baseline()
        return self._models["baseline"]


def attribute_ratio(layer: str, rerun: ComponentRerun) -> tuple[str, float | None, str]:
    """Re-run `layer` of the run alone on the reference's inputs (through the run's compiler
    when it is a compiled run, so a miscompiled layer shows), and of the CPU run at its
    precision on the same inputs: R of the re-run says whether the error is the layer's own
    (cause, isolated R, note)."""
    refs, spec, threshold = rerun.refs, rerun.spec, rerun.threshold
    tensor = refs.layers.by_key().get(layer)
    if tensor is None or tensor.call_key not in rerun.calls:
        return UNKNOWN, None, f"{layer} was not recorded in the reference: it is not re-run"
    reference_call = refs.layers.calls[tensor.call_key]
    try:
        assert reference_call.inputs is not None  # the reference keeps every layer's inputs
        own = rerun_layer(
            rerun.run_model(), rerun.calls[tensor.call_key], reference_call.inputs, spec
        )[tensor.index]
        if refs.fp64_layers is not None:
            exact = refs.fp64_on_reference_inputs(tensor.call_key)[tensor.index]
        else:
            exact = tensor.value
        if spec.precision.name == FP32.name:
            precision_output = tensor.value  # the fp32 reference on its own inputs
        else:
            calls = rerun.baseline_calls or rerun.calls
            call = calls.get(tensor.call_key, rerun.calls[tensor.call_key])
            outputs = rerun_layer(
                rerun.baseline_model(), call, reference_call.inputs, rerun.baseline_spec
            )
            precision_output = outputs[tensor.index]
    except Exception as exc:  # the layer could not run alone: say so, keep the run
        return UNKNOWN, None, f"re-running {layer} alone failed: {describe_error(exc)}"
    how = denominator_of(exact.numel(), _rms(exact), spec.precision.name, threshold)
    own_error = math.inf if not bool(torch.isfinite(own).all()) else _rmse(own, exact)
    own_ratio = _divide(own_error, max(_rmse(precision_output, exact), how.floor))
    shown = f"{own_ratio:.3g}" if math.isfinite(own_ratio) else "NaN/Inf"
    where = f"({'compiled, ' if spec.compiled else ''}on the reference's inputs)"
    if own_ratio > threshold:
        return (
            OWN,
            own_ratio,
            f"{layer} re-run alone {where} has R {shown} > {threshold:g}: the error is its own",
        )
    return (
        INHERITED,
        own_ratio,
        f"{layer} re-run alone {where} has R {shown} <= {threshold:g}: its error is inherited from "
        "upstream",
    )


def isolate_components(ratios: list[LayerRatio], rerun: ComponentRerun) -> None:
    """Every layer above the threshold in the model, re-run alone: its isolated R and cause."""
    for ratio in ratios:
        if ratio.kind == "layer" and not ratio.ratio <= rerun.threshold:
            cause, isolated, note = attribute_ratio(ratio.name, rerun)
            ratio.isolated_ratio, ratio.isolated_cause, ratio.isolated_note = isolated, cause, note


def first_ratio_failure(ratios: list[LayerRatio], threshold: float) -> RatioFailure | None:
    """The first layer in execution order (1-based position) whose R in the model exceeds the
    threshold, with what its re-run alone found."""
    layers = [r for r in ratios if r.kind == "layer"]
    for position, ratio in enumerate(layers, 1):
        if not ratio.ratio <= threshold:
            return RatioFailure(
                layer=ratio.name,
                module_type=ratio.module_type,
                position=position,
                ratio=ratio.ratio,
                cause=ratio.isolated_cause or UNKNOWN,
                own_ratio=ratio.isolated_ratio,
                note=ratio.isolated_note,
            )
    return None


def _r(value: float | None) -> str:
    if value is None:
        return "not measured"
    return f"{value:.3g}" if math.isfinite(value) else "NaN/Inf"


def _names(ratios: list[LayerRatio], limit: int = 3) -> str:
    shown = ", ".join(r.name for r in ratios[:limit])
    return shown + (f" and {len(ratios) - limit} more" if len(ratios) > limit else "")


def _output(ratio: LayerRatio, threshold: float) -> str:
    """An output's R, or for a value its distance from the exact value against what it may be."""
    if ratio.judged == JUDGED_AS_VALUE:
        return (
            f"{ratio.name} {ratio.run_error:.3g} from exact ({threshold * ratio.denominator:.3g} "
            "allowed)"
        )
    return f"{ratio.name} R {_r(ratio.ratio)}"


def ratio_gate(acceptance: RunAcceptance, threshold: float) -> tuple[GateStatus, str]:
    """The R-ratio gate: it fails when a component's R alone exceeds the threshold (or its
    re-run could not say), or an output's R does (AWS's end-to-end R); a layer above the
    threshold only in the model inherits its error and does not fail it on its own. Values
    (fewer elements than R needs) are shown as distances against what they are allowed."""
    ratios = acceptance.ratios
    if not ratios:
        return GATE_NOT_JUDGED, acceptance.ratio_basis or "no layer could be compared"
    layers = [r for r in ratios if r.kind == "layer"]
    above = [r for r in layers if not r.ratio <= threshold]
    own = [r for r in above if r.isolated_cause != INHERITED]
    inherited = [r for r in above if r.isolated_cause == INHERITED]
    outputs = [r for r in ratios if r.kind == "output" and not r.ratio <= threshold]
    parts = []
    if own:
        alone = "; ".join(
            f"{r.name} ({r.module_type or r.kind}) R {_r(r.isolated_ratio)} alone, "
            f"{_r(r.ratio)} in the model"
            + ("" if r.isolated_cause == OWN else f": {r.isolated_note}")
            for r in own
        )
        parts.append(f"{len(own)} of {len(layers)} components fail alone ({alone})")
    else:
        parts.append(f"no component of {len(layers)} has R above {threshold:g} alone")
    if inherited:
        parts.append(
            f"{len(inherited)} more above {threshold:g} in the model only, inherited (R alone "
            f"<= {threshold:g}: {_names(inherited)})"
        )
    if outputs:
        parts.append(
            f"outputs above {threshold:g}: " + ", ".join(_output(r, threshold) for r in outputs)
        )
    tensors = [r for r in ratios if r.judged == JUDGED_AS_R]
    if tensors:
        worst = max(tensors, key=lambda r: r.ratio if not math.isnan(r.ratio) else math.inf)
        parts.append(f"largest R {_r(worst.ratio)} at {worst.kind} {worst.name}")
    values = [
        r for r in ratios if r.judged == JUDGED_AS_VALUE and r.kind == "output" and r not in outputs
    ]
    if values:
        parts.append("values within: " + ", ".join(_output(r, threshold) for r in values))
    status: GateStatus = GATE_FAIL if own or outputs else GATE_PASS
    return status, "; ".join(parts) + f"; R: {acceptance.ratio_basis}"
