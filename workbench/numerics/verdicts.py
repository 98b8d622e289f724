"""The two questions a run answers, each judged by its own stated rule, and the run's verdict.

Device fidelity: does the run compute what the CPU computes at the same precision? An fp32 run
is judged against the fp32 reference, a 16-bit run against the CPU eager run of its precision,
both with the dynamo rule (metrics.judge). An eager run on the reference's own CPU is that CPU
run, so its fidelity is trivially true, and the report says so.

Precision cost: what does this precision do to this model? No layer may add, on the reference's
inputs, far more error than its precision's rounding alone gives; every loss stays finite; the
loss at every step and the held-out loss stay within loss_tolerance of the reference's (a
relative tolerance with an absolute floor, metrics.LossFloor), and the held-out task metric
within its tolerance, each widened by the spread of the two reference runs. Nothing measured
after the first NaN/Inf loss is judged: it is not evidence.

The run's verdict: blocker when it turns NaN/Inf, fails device fidelity or fails an acceptance
gate (AWS's liveness, R-ratio, teacher-forced cosine and KL, token match, downstream evaluation),
attention when its precision cost or its convergence parity over seeds fails or it could not run,
pass otherwise.
"""

from __future__ import annotations

import math

from workbench.numerics.acceptance_records import ATTENTION_GATES, GateResult
from workbench.numerics.capture import FP32
from workbench.numerics.metrics import (
    PrecisionCostRule,
    ScalarTolerance,
    check_scalars,
    metric_allowance,
)
from workbench.numerics.records import (
    Judgement,
    NumericsRunVerdict,
    RunResult,
    ValidationComparison,
)
from workbench.numerics.statuses import (
    COULD_NOT_RUN,
    JUDGED_FAIL,
    JUDGED_PASS,
    NOT_JUDGED,
    TRIVIAL,
    JudgementStatus,
)
from workbench.numerics.wording import cost_advice
from workbench.scorecard import ATTENTION, BLOCKER, PASS


def _percent(value: float) -> str:
    return f"{value * 100:.3g}%"


def fidelity(run: RunResult, reference_device: str) -> Judgement:
    on_reference_cpu = run.run["device"] == reference_device and not run.run["compiled"]
    if on_reference_cpu:
        return Judgement(
            TRIVIAL,
            f"eager on the reference's own {reference_device}: this run is the CPU's "
            f"{run.run['precision']} computation, so there is no device to tell apart",
        )
    if run.run["precision"] == FP32.name:
        assert run.tensors is not None
        status: JudgementStatus = JUDGED_PASS if run.tensors.passed else JUDGED_FAIL
        failed = [] if run.tensors.passed else ["dynamo rule against the fp32 reference"]
        return Judgement(status, f"against the fp32 reference: {run.tensors.summary}", failed)
    if run.matched is None:
        return Judgement(
            NOT_JUDGED,
            f"no CPU eager {run.run['precision']} run completed to compare it with",
        )
    matched: JudgementStatus = JUDGED_PASS if run.matched.passed else JUDGED_FAIL
    failed = [] if run.matched.passed else [f"dynamo rule against {run.matched.baseline}"]
    return Judgement(matched, run.matched.summary, failed)


def precision_cost(
    run: RunResult, rule: PrecisionCostRule, trajectory_spread: float, metric_spread: float
) -> Judgement:
    """`trajectory_spread`: the two reference runs' largest relative loss difference over the
    steps (and on held-out data); `metric_spread`: their held-out metric difference."""
    failed: list[tuple[str, str]] = []
    passed: list[str] = []
    if run.nonfinite is not None:
        # Every later number is NaN or follows from one: the first non-finite tensor says it all.
        if run.validation is not None:
            run.validation.passed = False
        return Judgement(
            JUDGED_FAIL, run.nonfinite.sentence("NaN/Inf").split(": ", 1)[1], ["finite"]
        )
    divergence = run.first_divergence
    if divergence is not None and divergence.attribution.own is not None:
        own = divergence.attribution.own
        factor = "NaN/Inf" if not math.isfinite(own.factor) else f"{own.factor:.3g}x"
        failed.append(
            (
                "layer band",
                f"layer {divergence.title} adds {factor} its {own.dtype} band on its own "
                f"(at most {rule.band_factor:g}x)",
            )
        )
    else:
        passed.append(f"no layer above {rule.band_factor:g}x its band")
    allowance = rule.loss_tolerance + trajectory_spread
    if run.losses and run.reference_losses and run.loss_floor is not None:
        tolerance = ScalarTolerance(allowance, run.loss_floor.at(allowance))
        check = check_scalars("loss", run.losses, run.reference_losses, tolerance)
        run.trajectory_check = check
        if check.passed:
            passed.append(f"loss within tolerance at all {check.compared} steps")
        else:
            failed.append(("loss trajectory", f"loss trajectory: {check.sentence()}"))
    validation = run.validation
    if validation is not None and validation.loss_deviation is not None:
        validation.passed = _held_out(validation, rule, allowance, metric_spread, failed, passed)
    if failed:
        return Judgement(JUDGED_FAIL, "; ".join(text for _, text in failed), [n for n, _ in failed])
    return Judgement(JUDGED_PASS, "; ".join(passed))


def _held_out(
    validation: ValidationComparison,
    rule: PrecisionCostRule,
    allowance: float,
    metric_spread: float,
    failed: list[tuple[str, str]],
    passed: list[str],
) -> bool:
    """The held-out loss and task metric after training against the reference's: whether both
    stay within tolerance, each failed rule added to `failed` and each kept one to `passed`."""
    held_out_ok = True
    assert validation.after is not None and validation.reference_after is not None
    floor = validation.loss_floor.at(allowance) if validation.loss_floor else 0.0
    tolerance = ScalarTolerance(allowance, floor)
    check = check_scalars(
        "held-out loss", [validation.after.loss], [validation.reference_after.loss], tolerance
    )
    validation.loss_check = check
    if not check.passed:
        held_out_ok = False
        failed.append(("held-out loss", f"after training, {check.sentence()}"))
    validation.loss_allowance = allowance
    reference = validation.reference_after
    if validation.metric_difference is not None and reference and reference.metric is not None:
        metric_room = metric_allowance(rule.metric_tolerance, reference.metric) + metric_spread
        validation.metric_allowance = metric_room
        difference = validation.metric_difference
        if not abs(difference) <= metric_room:
            held_out_ok = False
            failed.append(
                (
                    "held-out metric",
                    f"the held-out task metric after training is {validation.after.metric:.4g} "
                    f"against the reference's {reference.metric:.4g} (difference "
                    f"{difference:+.3g}, tolerance {metric_room:.3g})",
                )
            )
        else:
            passed.append(
                f"held-out metric {validation.after.metric:.4g} vs {reference.metric:.4g}"
            )
    return held_out_ok


def run_verdict(run: RunResult) -> NumericsRunVerdict:
    label = run.label
    if run.status != "ok":
        return NumericsRunVerdict(COULD_NOT_RUN, f"{label} could not run ({run.failed_phase})")
    if run.nonfinite is not None:
        return NumericsRunVerdict(BLOCKER, run.nonfinite.sentence(label))
    assert run.fidelity is not None and run.precision_cost is not None
    if run.fidelity.status == JUDGED_FAIL:
        return NumericsRunVerdict(BLOCKER, f"{label}: device fidelity fails: {run.fidelity.reason}")
    gates = run.acceptance.gates if run.acceptance is not None else []
    blocking = [g for g in gates if g.failed and g.gate not in ATTENTION_GATES]
    if blocking:
        return NumericsRunVerdict(BLOCKER, f"{label}: {_gate_sentence(blocking[0])}")
    if not run.precision_cost.passed:
        return NumericsRunVerdict(
            ATTENTION,
            f"{label}: precision cost fails: {run.precision_cost.reason}; "
            f"to do: {cost_advice(run)}",
        )
    attention = [g for g in gates if g.failed]
    if attention:
        return NumericsRunVerdict(ATTENTION, f"{label}: {_gate_sentence(attention[0])}")
    fidelity_words = "trivially true" if run.fidelity.status == TRIVIAL else run.fidelity.status
    passed = sum(1 for g in gates if g.status == "pass")
    gate_words = f"; {passed} of {len(gates)} acceptance gates pass" if gates else ""
    return NumericsRunVerdict(
        PASS,
        f"{label}: device fidelity {fidelity_words}; precision cost within tolerance{gate_words}",
    )


def _gate_sentence(gate: GateResult) -> str:
    return f"{gate.gate} fails: {gate.measured} (gate: {gate.threshold}; {gate.source})"
