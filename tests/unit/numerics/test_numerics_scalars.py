"""Notebook 03's rules for single values: a loss or a held-out score is judged as a value
(relative tolerance with a floor from its precision and scale), not by the per-tensor error
ratio; a loss training drove far down keeps a floor; nothing after a NaN is evidence; the
console says what the report says. Constructed tensors and records, plus one short real run."""

import math
from types import SimpleNamespace

import pytest
import torch
from torch import nn

from tests.fixtures.numerics_cases import classifier, compare_values
from workbench.numerics import records, verdicts, views, wording
from workbench.numerics.capture import PRECISIONS
from workbench.numerics.matched import matched_check
from workbench.numerics.metrics import (
    RULE_SCALAR,
    PrecisionCostRule,
    ScalarTolerance,
    VerdictRule,
    check_scalars,
    compute_metrics,
    judge,
    loss_floor,
    scalar_tolerance,
)
from workbench.numerics.records import NumericsSettings, RunResult
from workbench.numerics.run import run_numerics
from workbench.numerics.statuses import JUDGED_FAIL, JUDGED_PASS
from workbench.numerics.tensors import scalar_tolerance_of
from workbench.numerics.training import _validation
from workbench.numerics.validation import HeldOutScore
from workbench.targets.cpu import CpuTarget

RULE = VerdictRule()
FP32_LOSS = 2.302585
# A loss trajectory that training drives from 2.23 to 0.0003, as a ResNet on one batch does.
DECAYED = [2.23 * (0.0003 / 2.23) ** (step / 19) for step in range(20)]


def _loss(value: float, reference: float, precision: str = "bf16-autocast") -> RunResult:
    """A run whose only final tensor is its loss, compared as compare_training compares it."""
    dtype = PRECISIONS[precision].dtype
    comparison = compare_values(
        "loss",
        value,
        reference,
        reference,
        RULE,
        scalar=scalar_tolerance_of("loss", "loss", dtype, [reference]),
    )
    run = RunResult(
        run={"label": f"cpu {precision}", "precision": precision, "compiled": False}, role="target"
    )
    run.loss, run.losses, run.reference_losses = comparison, [value], [FP32_LOSS]
    return run


# --- a single value is judged as a value ------------------------------------------------------


def test_a_bf16_loss_within_1e5_passes_even_when_the_eager_bf16_loss_sits_on_fp32():
    """The Qwen2 case: eager bf16's loss equals fp32's, so its error is zero and an error ratio
    against it fails any difference; as a value, 1e-5 relative is far inside bf16's tolerance."""
    baseline = _loss(FP32_LOSS, FP32_LOSS)
    compiled = _loss(FP32_LOSS * (1 + 1e-5), FP32_LOSS)
    assert compiled.loss.verdict.rule == RULE_SCALAR and compiled.loss.verdict.passed
    # What the error-ratio rule says with the eager run's (zero) error as the yardstick:
    assert not judge(compiled.loss.metrics, RULE, budget_rmse=0.0).passed
    matched = matched_check(compiled, baseline, RULE)
    assert matched.passed, matched.summary


def test_a_bf16_loss_off_by_5_percent_fails_as_a_value():
    baseline = _loss(FP32_LOSS, FP32_LOSS)
    off = _loss(FP32_LOSS * 1.05, FP32_LOSS)
    assert not off.loss.verdict.passed and "allowed" in off.loss.verdict.reason
    matched = matched_check(off, baseline, RULE)
    assert not matched.passed and matched.failed == ["loss"]


def test_the_scalar_tolerance_is_floored_at_the_loss_scale():
    tolerance = scalar_tolerance(torch.float32, scale=2.23)
    assert tolerance.rtol == 1.3e-6 and tolerance.atol == pytest.approx(1.3e-6 * 2.23)
    assert tolerance.passes(0.0003 + 2e-6, 0.0003)  # within rtol of the loss's scale
    assert not tolerance.passes(0.0003 + 1e-5, 0.0003)
    assert not tolerance.passes(math.nan, 0.0003)


def test_a_trajectory_check_fails_at_the_first_step_that_is_not_a_number():
    tolerance = ScalarTolerance(0.01, 0.0)
    check = check_scalars("loss", [1.0, math.nan, 5.0], [1.0, 1.0, 1.0], tolerance)
    assert not check.passed and check.step == 2 and "not a finite number" in check.sentence()
    fine = check_scalars("loss", [1.0, 1.001, 0.999], [1.0, 1.0, 1.0], tolerance)
    assert fine.passed and fine.compared == 3


# --- the floor of the loss tolerance ----------------------------------------------------------


def _trajectory_run(losses: list[float], reference: list[float], dtype=torch.float32):
    run = RunResult(run={"label": "cpu fp32 compiled", "precision": "fp32"}, role="target")
    run.losses, run.reference_losses = losses, reference
    # The fp64 trajectory equal to the reference's: no noise credit, only the stated floors.
    run.loss_floor = loss_floor(dtype, reference, list(reference), RULE.multiplier)
    return run


def test_a_decayed_fp32_loss_4e5_off_passes_the_precision_cost():
    """The ResNet-18 case: 4e-5 on a loss of 0.0003 is 13% of it, but 2e-5 of the loss's scale."""
    run = _trajectory_run([*DECAYED[:-1], DECAYED[-1] + 4e-5], DECAYED)
    assert abs(run.losses[-1] - DECAYED[-1]) / DECAYED[-1] > 0.1  # what the old rule judged
    cost = verdicts.precision_cost(run, PrecisionCostRule(), 0.0, 0.0)
    assert cost.status == JUDGED_PASS, cost.reason


def test_a_loss_10_percent_off_at_its_start_fails_the_precision_cost():
    run = _trajectory_run([DECAYED[0] * 1.1, *DECAYED[1:]], DECAYED)
    cost = verdicts.precision_cost(run, PrecisionCostRule(), 0.0, 0.0)
    assert cost.status == JUDGED_FAIL and cost.failed == ["loss trajectory"]
    assert run.trajectory_check.step == 1


def test_a_loss_that_stalls_late_while_the_reference_decays_fails():
    """The floor is a share of the loss's scale, not a licence: 0.01 against 0.0003 fails."""
    run = _trajectory_run([*DECAYED[:-1], 0.01], DECAYED)
    cost = verdicts.precision_cost(run, PrecisionCostRule(), 0.0, 0.0)
    assert cost.status == JUDGED_FAIL and run.trajectory_check.step == 20


def test_the_floor_holds_the_precisions_rounding_and_the_fp64_noise():
    reference = [2.0, 1.0]
    floor = loss_floor(torch.bfloat16, reference, [2.0, 1.001], multiplier=2.0)
    assert floor.rounding == pytest.approx(2.0**-8 * 2.0)
    assert floor.fp64_noise == pytest.approx(0.002)
    assert floor.at(0.01) == pytest.approx(2.0**-8 * 2.0)
    assert loss_floor(torch.float32, reference, None, 2.0).at(0.01) == pytest.approx(2e-4)


def test_a_gradient_with_its_sign_flipped_still_fails():
    gradient = torch.linspace(-1, 1, 256)
    fp64 = gradient.double()
    assert judge(
        compute_metrics("g", "gradient", gradient, gradient, fp64, rtol=1.3e-6, atol=1e-5), RULE
    ).passed
    flipped = compute_metrics("g", "gradient", -gradient, gradient, fp64, rtol=1.3e-6, atol=1e-5)
    assert not judge(flipped, RULE).passed and flipped.cosine == pytest.approx(-1.0)


# --- after a NaN, nothing is evidence ---------------------------------------------------------


def _capture(losses, after):
    return SimpleNamespace(
        losses=losses, held_out_before=HeldOutScore(2.3, 0.074), held_out_after=after
    )


def test_a_nan_runs_later_held_out_improvement_is_not_evidence():
    reference = _capture([2.3, 2.2, 2.1], HeldOutScore(2.0, 0.074))
    nan_run = _capture([2.3, math.nan, math.nan], HeldOutScore(math.nan, 0.121))
    validation = _validation(nan_run, reference, torch.float16)
    assert validation.after is None and validation.metric_difference is None
    assert "not evidence" in validation.not_evidence and "step 2" in validation.not_evidence
    run = RunResult(run={"label": "cpu fp16-cast eager", "precision": "fp16-cast"}, role="target")
    run.validation, run.losses = validation, nan_run.losses
    assert views._metric_cell(run) == "not evidence (after NaN/Inf)"
    assert views._final_loss(run) == "not finite"
    assert "0.121" not in views._metric_cell(run)
    finite = _validation(
        _capture([2.3, 2.2, 2.1], HeldOutScore(2.0, 0.08)), reference, torch.float32
    )
    assert finite.not_evidence is None and finite.metric_difference == pytest.approx(0.006)


def test_a_held_out_loss_that_is_not_finite_withholds_its_metric():
    reference = _capture([2.3, 2.2], HeldOutScore(2.0, 0.074))
    run = _validation(_capture([2.3, 2.2], HeldOutScore(math.inf, 0.5)), reference, torch.float16)
    assert run.after.metric is None and run.metric_difference is None
    assert run.loss_deviation == math.inf and "not finite" in run.not_evidence


# --- the console says what the report says ----------------------------------------------------


def _mlp() -> nn.Module:
    return nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 4))


MLP = classifier("mlp", _mlp, 8)


@pytest.fixture(scope="module")
def logged():
    lines: list[str] = []
    settings = NumericsSettings(
        precisions=("fp32", "bf16-autocast"), compiled_precisions=(), steps=3
    )
    result = run_numerics(MLP, CpuTarget(), settings, log=lines.append)
    return result, lines


def test_the_console_prints_each_runs_table_cells_and_the_headline(logged):
    result, lines = logged
    rows = {row["run"]: row for row in views.verdict_rows(result)}
    for run in result.runs:
        line = records.run_line(run)
        assert line in lines
        row = rows[run.label]
        assert f"device fidelity {row['device fidelity']};" in line
        assert line.endswith(f"precision cost {row['precision cost']}")
    assert lines[-1].endswith(wording.headline(result))


def test_the_console_never_prints_the_fp32_tensor_count_of_a_16_bit_run(logged):
    """A bf16 run fails the fp32 dynamo rule on nearly every tensor by design; the report does
    not judge it by that count, so the console does not print it either."""
    result, lines = logged
    bf16 = result.run("cpu bf16-autocast eager")
    assert not bf16.tensors.passed and "tensors fail" in bf16.tensors.summary
    assert bf16.verdict.status == "pass"
    assert not any(bf16.tensors.summary in line for line in lines)


def test_the_verdict_is_said_once_and_table_cells_stay_short(logged):
    result, _ = logged
    items = wording.reading(result)
    verdict = records.notebook_verdict(result)
    assert not any(verdict.reason in text for _, text in items)
    for row in views.verdict_rows(result):
        assert all(len(str(value)) <= 60 for value in row.values()), row
    explanation = wording.run_explanation(result.run("cpu bf16-autocast eager"))
    assert "device fidelity" in explanation and "precision cost" in explanation
