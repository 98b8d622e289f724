"""The R-ratio gate's rules beside AWS's formula: R only for tensors with enough elements to carry
a distance (a loss, a metric or a small tensor is judged as a value against the precision's
tolerance for its size), R per component re-run alone (one planted fault reads as one failing
component), and what R was computed against when there is no fp64 run; then the trajectory's
tolerance from the reference's own sensitivity (its run from weights one ulp away). Each rule
with a case that must pass and one that must fail, on constructed records and tensors (real
torch); the whole planted-miscompile comparison is in test_acceptance.py."""

import math
from types import SimpleNamespace

import pytest
import torch
from torch import nn

from tests.fixtures.numerics_cases import compare_values
from workbench.errors import BadInput
from workbench.numerics.acceptance_records import (
    GATE_FAIL,
    GATE_PASS,
    JUDGED_AS_R,
    JUDGED_AS_VALUE,
    AcceptanceRule,
    LayerRatio,
    RunAcceptance,
    min_ratio_elements,
)
from workbench.numerics.metrics import (
    VerdictRule,
    loss_floor,
    trajectory_sensitivity,
)
from workbench.numerics.ratio import layer_ratios, ratio_basis, ratio_gate
from workbench.numerics.records import INHERITED, OWN, RunResult
from workbench.numerics.references import nudge_weights
from workbench.numerics.tensors import compare_tensor
from workbench.numerics.training import SENSITIVITY_SOURCE, widen_by_sensitivity

THRESHOLD = AcceptanceRule().r_threshold
RULE = VerdictRule()


# --- how many elements R needs ----------------------------------------------------------------


def test_r_needs_163_elements_at_1_2_and_below_that_a_sound_runs_r_is_noise():
    """At the minimum, two equal error draws give R > 1.2 about 1% of the time; with one element
    (a loss) about 40% of the time, as the Mamba's loss R ranged 0.37-6.62 over six batches."""
    n = min_ratio_elements(THRESHOLD)
    assert n == 163
    generator = torch.Generator().manual_seed(0)

    def share_above(elements: int) -> float:
        run = torch.randn(4000, elements, generator=generator, dtype=torch.float64)
        baseline = torch.randn(4000, elements, generator=generator, dtype=torch.float64)
        ratio = run.square().mean(1).sqrt() / baseline.square().mean(1).sqrt()
        return float((ratio > THRESHOLD).double().mean())

    assert share_above(n) < 0.02
    assert share_above(1) > 0.35
    with pytest.raises(BadInput, match="r_threshold 1.0: use a number above 1"):
        AcceptanceRule(r_threshold=1.0)


# --- a loss is judged as a value --------------------------------------------------------------


def _comparison(name, kind, run, reference, fp64):
    return compare_tensor(name, kind, run, reference, fp64, RULE)


def _run(precision, layers, outputs, losses=(4.85,)):
    run = RunResult(
        run={"label": f"cpu {precision} compiled", "precision": precision}, role="target"
    )
    run.layers, run.outputs, run.reference_losses = layers, outputs, list(losses)
    return run


def _loss(value, exact=4.852, precision="bf16-autocast"):
    """A one-element loss output against its fp64 value (the reference's fp32 loss equal)."""
    exact_tensor = torch.tensor(exact, dtype=torch.float64)
    return _comparison("loss", "output", torch.tensor(value), torch.tensor(exact), exact_tensor)


def test_a_loss_a_few_ulps_from_exact_is_judged_as_a_value_and_passes():
    """The Mamba case: the compiled run's loss is 3.4e-4 from exact, the eager bf16 run's 5e-5:
    R would be 6.8; as a value it is far inside bf16's tolerance for a loss of 4.85."""
    compiled = _run("bf16-autocast", [], [_loss(4.852 + 3.4e-4)])
    eager = _run("bf16-autocast", [], [_loss(4.852 + 5e-5)])
    (ratio,) = layer_ratios(compiled, eager, THRESHOLD)
    assert ratio.judged == JUDGED_AS_VALUE and ratio.elements == 1
    assert ratio.run_error / ratio.precision_error > 6  # what R alone would read
    assert ratio.ratio <= THRESHOLD
    status, measured = ratio_gate(RunAcceptance("b", [ratio]), THRESHOLD)
    assert status == GATE_PASS and "values within: loss 0.00034 from exact" in measured


def test_a_loss_5_percent_off_fails_as_a_value():
    compiled = _run("bf16-autocast", [], [_loss(4.852 * 1.05)])
    eager = _run("bf16-autocast", [], [_loss(4.852 + 5e-5)])
    (ratio,) = layer_ratios(compiled, eager, THRESHOLD)
    assert ratio.judged == JUDGED_AS_VALUE and ratio.ratio > THRESHOLD
    status, measured = ratio_gate(RunAcceptance("b", [ratio]), THRESHOLD)
    assert status == GATE_FAIL and "outputs above 1.2: loss 0.243 from exact" in measured


def test_a_tensor_of_enough_elements_keeps_r_and_fails_it_at_1_5():
    generator = torch.Generator().manual_seed(3)
    exact = torch.randn(64, 16, generator=generator, dtype=torch.float64)
    noise = torch.randn(64, 16, generator=generator, dtype=torch.float64) * 1e-3
    eager = _comparison("logits", "output", (exact + noise).float(), exact.float(), exact)
    worse = _comparison("logits", "output", (exact + 1.5 * noise).float(), exact.float(), exact)
    (good,) = layer_ratios(
        _run("bf16-autocast", [], [eager]), _run("bf16-autocast", [], [eager]), 1.2
    )
    (bad,) = layer_ratios(
        _run("bf16-autocast", [], [worse]), _run("bf16-autocast", [], [eager]), 1.2
    )
    assert good.judged == bad.judged == JUDGED_AS_R and good.elements == 1024
    assert good.ratio == pytest.approx(1.0) and bad.ratio == pytest.approx(1.5, rel=0.01)


# --- R per component, re-run alone -----------------------------------------------------------


def _layer(name, ratio, cause="", alone=None):
    return LayerRatio(
        name, "layer", "Linear", ratio, ratio, 1.0, 512, JUDGED_AS_R, 1.0, alone, cause, ""
    )


def test_one_planted_fault_reads_as_one_failing_component_and_the_rest_inherited():
    ratios = [
        _layer("first", 0.9),
        _layer("planted", 3500.0, OWN, 3500.0),
        _layer("act", 2400.0, INHERITED, 1.01),
        _layer("head", 2300.0, INHERITED, 0.06),
        _layer("norm", 1.0),
    ]
    status, measured = ratio_gate(RunAcceptance("basis", ratios), THRESHOLD)
    assert status == GATE_FAIL
    assert measured.startswith("1 of 5 components fail alone (planted (Linear) R 3.5e+03 alone")
    assert "2 more above 1.2 in the model only, inherited (R alone <= 1.2: act, head)" in measured


def test_layers_above_only_in_the_model_with_sound_outputs_pass():
    """AWS's stage 2 judges each component alone; a layer that only inherits passes it."""
    ratios = [_layer("a", 1.3, INHERITED, 1.0), _layer("b", 1.0)]
    ratios.append(LayerRatio("logits", "output", "", 1.05, 1.0, 1.0, 4096))
    status, measured = ratio_gate(RunAcceptance("basis", ratios), THRESHOLD)
    assert status == GATE_PASS and measured.startswith("no component of 2 has R above 1.2 alone")
    ratios[-1].ratio = 1.6  # the end-to-end R fails even when no component does alone
    assert ratio_gate(RunAcceptance("basis", ratios), THRESHOLD)[0] == GATE_FAIL


# --- what R was computed against -------------------------------------------------------------


def test_without_an_fp64_run_r_names_the_fp32_reference_and_why():
    run = _run("bf16-autocast", [], [])
    baseline = _run("bf16-autocast", [], [])
    baseline.run["label"] = "cpu bf16-autocast eager"
    failed = SimpleNamespace(fp64_error="grouped_mm has no float64 kernel")
    with_fp64 = SimpleNamespace(fp64_error=None)
    named = ratio_basis(run, baseline, failed)
    assert "fp64 run" not in named.split("(")[0]
    assert named.startswith("error against the fp32 reference (the fp64 run could not run: ")
    assert "grouped_mm has no float64 kernel" in named
    assert ratio_basis(run, baseline, with_fp64).startswith("error against the fp64 run over")
    fp32 = _run("fp32", [], [])
    assert "its own error is not known" in ratio_basis(fp32, None, failed)


# --- the trajectory's tolerance from the reference's own sensitivity -------------------------


def test_nudge_moves_every_weight_by_exactly_one_ulp():
    model = nn.Linear(64, 64)
    before = [p.detach().clone() for p in model.parameters()]
    nudge_weights(model)
    for old, new in zip(before, model.parameters(), strict=True):
        up = torch.nextafter(old, torch.tensor(math.inf))
        down = torch.nextafter(old, torch.tensor(-math.inf))
        moved_up = new.detach() == up
        assert bool((moved_up | (new.detach() == down)).all())
        assert 0.3 < float(moved_up.double().mean()) < 0.7


# A chaotic but sound training run: the loss falls to 3e-4 and reordering moves its late steps.
REFERENCE = [2.3 * (3e-4 / 2.3) ** (step / 19) for step in range(20)]
FP64 = [v * (1 + 1e-7) for v in REFERENCE]
NUDGED = [v + (4e-5 if step > 10 else 0.0) for step, v in enumerate(REFERENCE)]


def _trajectory(run_losses, nudged):
    comparison = compare_values("trajectory", run_losses, REFERENCE, FP64, RULE)
    sensitivity = trajectory_sensitivity(REFERENCE, nudged)
    widen_by_sensitivity(comparison, sensitivity.rmse, SENSITIVITY_SOURCE, RULE)
    return comparison


def test_a_chaotic_sound_trajectory_passes_within_the_references_own_sensitivity():
    """Compiled drifts late as far as the one-ulp reference run does: the fixed fp64 yardstick
    failed it, the measured sensitivity passes it and says so."""
    compiled = [v - (5e-5 if step > 10 else 0.0) for step, v in enumerate(REFERENCE)]
    without = compare_values("trajectory", compiled, REFERENCE, FP64, RULE)
    assert not without.verdict.passed
    judged = _trajectory(compiled, NUDGED)
    assert judged.verdict.passed and SENSITIVITY_SOURCE in judged.verdict.reason
    floor = loss_floor(torch.float32, REFERENCE, FP64, RULE.multiplier, NUDGED)
    assert floor.sensitivity == pytest.approx(8e-5) and "one-ulp sensitivity 8e-05" in floor.text(
        0.01
    )


def test_a_planted_drift_fails_although_the_reference_is_sensitive():
    """A compiled-only learning-rate change: 3% lower loss from step 2 on, beyond twice what one
    ulp moves the reference."""
    drifted = [v * (0.97 if step else 1.0) for step, v in enumerate(REFERENCE)]
    judged = _trajectory(drifted, NUDGED)
    assert not judged.verdict.passed
    floor = loss_floor(torch.float32, REFERENCE, FP64, RULE.multiplier, NUDGED)
    assert abs(drifted[1] - REFERENCE[1]) > 0.01 * REFERENCE[1] + floor.at(0.01)
