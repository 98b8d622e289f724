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
AWS's formula.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from workbench.errors import describe_error
from workbench.numerics.acceptance_records import LayerRatio, RatioFailure
from workbench.numerics.capture import FP32, LayerCall, RunSpec, rerun_layer
from workbench.numerics.metrics import DTYPE_TOLERANCES, TensorMetrics
from workbench.numerics.records import INHERITED, OWN, UNKNOWN, RunResult, TensorComparison
from workbench.numerics.references import ReferenceRuns

FP32_FLOOR = DTYPE_TOLERANCES[torch.float32][0]  # relative to the output's RMS


def _run_error(metrics: TensorMetrics) -> float:
    """The run's RMSE against the exact value: fp64 where there is one, else the reference."""
    if metrics.target_rmse_vs_fp64 is not None:
        return metrics.target_rmse_vs_fp64
    return metrics.rmse


def ratio_of(run_error: float, precision_error: float, reference_rms: float) -> float:
    """R with its floor: the denominator is never below assert_close's fp32 rtol x the RMS."""
    denominator = max(precision_error, FP32_FLOOR * reference_rms)
    if not math.isfinite(run_error):
        return math.inf
    if denominator == 0:
        return 0.0 if run_error == 0 else math.inf
    return run_error / denominator


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


def layer_ratios(run: RunResult, baseline: RunResult | None) -> list[LayerRatio]:
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
            ratios.append(
                LayerRatio(
                    name=comparison.name,
                    kind=kind,
                    module_type=comparison.module_type,
                    ratio=ratio_of(error, precision_error, metrics.reference_rms),
                    run_error=error,
                    precision_error=precision_error,
                )
            )
    return ratios


def ratio_basis(run: RunResult, baseline: RunResult | None) -> str:
    exact = "the fp64 run"
    if run.run["precision"] == FP32.name:
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


def attribute_ratio(
    layer: str,
    calls: dict[str, LayerCall],
    baseline_calls: dict[str, LayerCall] | None,
    run_model: Callable[[], torch.nn.Module],
    baseline_model: Callable[[], torch.nn.Module],
    spec: RunSpec,
    baseline_spec: RunSpec,
    refs: ReferenceRuns,
    threshold: float,
) -> tuple[str, float | None, str]:
    """Re-run `layer` of the run alone on the reference's inputs (through the run's compiler
    when it is a compiled run, so a miscompiled layer shows), and of the CPU run at its
    precision on the same inputs: R of the re-run says whether the error is the layer's own
    (cause, own R, note)."""
    tensor = refs.layers.by_key().get(layer)
    if tensor is None or tensor.call_key not in calls:
        return UNKNOWN, None, f"{layer} was not recorded in the reference: it is not re-run"
    reference_call = refs.layers.calls[tensor.call_key]
    try:
        assert reference_call.inputs is not None  # the reference keeps every layer's inputs
        own = rerun_layer(run_model(), calls[tensor.call_key], reference_call.inputs, spec)[
            tensor.index
        ]
        if refs.fp64_layers is not None:
            exact = refs.fp64_on_reference_inputs(tensor.call_key)[tensor.index]
        else:
            exact = tensor.value
        if spec.precision.name == FP32.name:
            precision_output = tensor.value  # the fp32 reference on its own inputs
        else:
            call = (baseline_calls or calls).get(tensor.call_key, calls[tensor.call_key])
            rerun = rerun_layer(baseline_model(), call, reference_call.inputs, baseline_spec)
            precision_output = rerun[tensor.index]
    except Exception as exc:  # the layer could not run alone: say so, keep the run
        return UNKNOWN, None, f"re-running {layer} alone failed: {describe_error(exc)}"
    own_ratio = ratio_of(_rmse(own, exact), _rmse(precision_output, exact), _rms(exact))
    shown = f"{own_ratio:.3g}" if math.isfinite(own_ratio) else "NaN/Inf"
    how = "compiled, " if spec.compiled else ""
    if own_ratio > threshold:
        return (
            OWN,
            own_ratio,
            f"{layer} re-run alone ({how}on the reference's inputs) has R {shown} > "
            f"{threshold:g}: the error is its own",
        )
    return (
        INHERITED,
        own_ratio,
        f"{layer} re-run alone ({how}on the reference's inputs) has R {shown} <= "
        f"{threshold:g}: its error is inherited from upstream",
    )


def first_ratio_failure(
    run: RunResult, ratios: list[LayerRatio], threshold: float
) -> tuple[int, LayerRatio] | None:
    """The first layer in execution order (1-based position) whose R exceeds the threshold."""
    layers = [r for r in ratios if r.kind == "layer"]
    for position, ratio in enumerate(layers, 1):
        if not ratio.ratio <= threshold:
            return position, ratio
    return None


def ratio_failure(
    position: int, ratio: LayerRatio, cause: str, own_ratio: float | None, note: str
) -> RatioFailure:
    return RatioFailure(
        layer=ratio.name,
        module_type=ratio.module_type,
        position=position,
        ratio=ratio.ratio,
        cause=cause,
        own_ratio=own_ratio,
        note=note,
    )
