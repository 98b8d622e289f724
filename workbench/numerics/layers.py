"""Layer by layer: every leaf module's output against the reference's, and for each layer the
dynamo rule flags, a re-run alone on the reference's inputs whose own error against its
precision band says whether it diverges itself or carries error from upstream."""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from workbench.errors import describe_error
from workbench.numerics.capture import (
    AUTOCAST,
    CAST,
    LayerCapture,
    RunSpec,
    rerun_layer,
)
from workbench.numerics.metrics import (
    UNIT_ROUNDOFF,
    PrecisionCostRule,
    VerdictRule,
    own_error,
)
from workbench.numerics.records import (
    INHERITED,
    OWN,
    UNKNOWN,
    Attribution,
    TensorComparison,
    Unmatched,
)
from workbench.numerics.references import (
    ReferenceRuns,
)
from workbench.numerics.tensors import (
    compare_tensor,
    pair_by_name,
)


def compare_layers(
    layers: LayerCapture, refs: ReferenceRuns, rule: VerdictRule
) -> tuple[list[TensorComparison], Unmatched]:
    """Each target layer output against the reference's of the same name, in target order."""
    target = {t.key: t for t in layers.tensors}
    reference = {t.key: t.value for t in refs.layers.tensors}
    fp64 = {t.key: t.value for t in refs.fp64_layers.tensors} if refs.fp64_layers else {}
    names, unmatched = pair_by_name(
        {k: t.value for k, t in target.items()},
        reference,
        [t.key for t in layers.tensors],
        [t.key for t in refs.layers.tensors],
    )
    comparisons = [
        compare_tensor(
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


def needs_attribution(comparison: TensorComparison, cost: PrecisionCostRule) -> bool:
    """Whether a layer is re-run to find whose error it is: the dynamo rule fails it, and its
    error in the full run exceeds band_factor times the band of one rounding of its output
    (u x RMS, at least the reference's own error). A 16-bit run fails the dynamo rule nearly
    everywhere; only a layer this far off can hold an error of its own above its band."""
    if comparison.verdict.passed:
        return False
    metrics = comparison.metrics
    if metrics.new_nonfinite or metrics.target_rmse_vs_fp64 is None:
        return True
    u = UNIT_ROUNDOFF.get(metrics.target_dtype, UNIT_ROUNDOFF["float32"])
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
