"""The sentences of notebook 03's report: the headline, each run's line and explanation, the
reading of what to do, and the advice by precision recipe. They are worded from the records
(records.py), which save them beside the numbers; nothing here judges a run."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from workbench.checks import Numerics
from workbench.numerics.acceptance_records import GATE_ORDER, GateResult
from workbench.numerics.recipes import CAST, LOSS_SCALE_INIT
from workbench.numerics.statuses import (
    INHERITED,
    JUDGED_FAIL,
    JUDGED_PASS,
    OWN,
    ROLE_TARGET,
    TRIVIAL,
)
from workbench.scorecard import ATTENTION, Finding

if TYPE_CHECKING:  # the records import this module to save its sentences
    from workbench.numerics.records import Judgement, NumericsResult, RunResult


# What the saved tolerances mean, in 03_numerics.json beside their numbers.
HELD_OUT_TOLERANCE_MEANS = (
    "held-out loss: |run - reference| <= loss_tolerance x max(|run|, |reference|) + "
    "loss_floor (the run's unit roundoff times the reference's held-out loss); task "
    "metric: |run - reference| <= metric_tolerance x max(1, |reference|); both widened "
    "by the two reference runs' spread; scores after a NaN/Inf loss are not evidence "
    "and are withheld (not_evidence)"
)
LOSS_SCALING_MEANS = (
    "fp16-autocast: torch.amp.GradScaler, as torch.amp trains fp16 (initial scale "
    f"{LOSS_SCALE_INIT:g}, halved on overflow, a skipped step changes no weight); "
    "every other precision: none, so fp16-cast's gradient underflow shows"
)

# Advice when a layer's error is its own, by precision recipe (reference: neuron.md 2.3 for the
# Trainium bf16 recipes).
_OWN_ADVICE = {
    "fp16": "keep it in fp32 or use bf16 (fp16's range ends at 65504)",
    "bf16-cast": (
        "keep it in fp32, or use bf16 autocast (fp32 weights); pure bf16 training on Trainium "
        "wants stochastic rounding (NEURON_RT_STOCHASTIC_ROUNDING_EN=1) or fp32 master weights"
    ),
    "bf16-autocast": "keep it in fp32 (run it outside autocast)",
    "fp32 compiled": (
        "the compiler changes its result: compare it compiled and eager, and look for "
        "reduced-precision settings (float32 matmul precision, NEURON_CC_FLAGS --auto-cast)"
    ),
    "fp32 eager": (
        "this device's kernel computes it differently: check the float32 matmul precision and "
        "TF32 flags and, on Neuron, NEURON_CC_FLAGS --auto-cast"
    ),
}


def short_label(run: RunResult) -> str:
    return f"{run.run['precision']} {'compiled' if run.run['compiled'] else 'eager'}"


# What to do when a run's error builds up over training with no single layer to blame, by
# precision recipe (the Trainium bf16 recipes: neuron.md 2.3).
_DRIFT_ADVICE = {
    "bf16-cast": (
        "bf16 weights without stochastic rounding drift: on Trainium train them with "
        "NEURON_RT_STOCHASTIC_ROUNDING_EN=1 or fp32 master weights, or use bf16-autocast"
    ),
}
_DRIFT_DEFAULT = "keep fp32 (or autocast) for this model"


def cost_advice(run: RunResult) -> str:
    """What to do about a failed precision cost, in a few words: the layer's remedy where one
    layer diverges on its own, else the recipe's remedy for error that builds up in training;
    either way a difference the user accepts is stated with loss_tolerance or metric_tolerance."""
    if run.first_divergence is not None:
        remedy = own_advice(run)
    else:
        remedy = _DRIFT_ADVICE.get(run.run["precision"], _DRIFT_DEFAULT)
    return f"{remedy}; or accept the difference with loss_tolerance or metric_tolerance"


def own_advice(run: RunResult) -> str:
    precision = run.run["precision"]
    if precision.startswith("fp16"):
        return _OWN_ADVICE["fp16"]
    if precision == "fp32":
        return _OWN_ADVICE["fp32 compiled" if run.run["compiled"] else "fp32 eager"]
    return _OWN_ADVICE[precision]


def first_gate_failure(result: NumericsResult) -> tuple[RunResult, GateResult] | None:
    """The gate that fails first, in the gates' order, and the first run failing it."""
    failing = [
        (GATE_ORDER.index(gate.gate), index, run, gate)
        for index, run in enumerate(result.chosen_runs)
        if run.acceptance is not None
        for gate in run.acceptance.gates
        if gate.failed
    ]
    if not failing:
        return None
    _, _, run, gate = min(failing, key=lambda item: (item[0], item[1]))
    return run, gate


def acceptance_headline(result: NumericsResult) -> str:
    """Which acceptance gate failed first, with its numbers, or that every run passes them."""
    first = first_gate_failure(result)
    if first is not None:
        run, gate = first
        return (
            f"Acceptance: {gate.gate} fails first, in {short_label(run)}: {gate.measured} "
            f"(gate: {gate.threshold})"
        )
    judged = [r for r in result.chosen_runs if r.acceptance is not None and r.acceptance.gates]
    skipped = sorted(
        {g.gate for r in judged for g in r.acceptance.gates if g.status != "pass"}  # type: ignore[union-attr]
    )
    text = f"Acceptance: all {len(judged)} runs pass every gate judged"
    if skipped:
        text += f" ({', '.join(skipped)} not judged)"
    return text


def convergence_finding(result: NumericsResult) -> Finding | None:
    """Notebook 04's batch failing convergence parity, as the finding the verdict counts."""
    study = result.recommended_convergence
    if study is None or study.passed is not False:
        return None
    return Finding(ATTENTION, f"convergence of {study.label}: {study.note}", Numerics.CONVERGENCE)


def headline(result: NumericsResult) -> str:
    """One line: blockers first (NaN/Inf with their step and tensor), then both verdicts, over
    the migration's own precisions; informative runs last, said to be outside the verdict."""
    runs = result.chosen_runs
    ok = [r for r in runs if r.status == "ok"]
    parts = [
        f"Blocker: {r.nonfinite.sentence(short_label(r))}" for r in ok if r.nonfinite is not None
    ]
    parts.append(acceptance_headline(result))
    unfaithful = [r for r in ok if r.fidelity and r.fidelity.status == JUDGED_FAIL]
    parts += [
        f"Blocker: {short_label(r)} does not compute what the CPU computes at its precision"
        for r in unfaithful
        if r.nonfinite is None
    ]
    parts.append(_fidelity_part(result, ok))
    parts.append(_cost_part(runs, ok))
    broken = [r for r in runs if r.status != "ok"]
    if broken:
        parts.append(f"{len(broken)} could not run ({', '.join(short_label(r) for r in broken)})")
    recommended = convergence_finding(result)
    if recommended is not None:
        parts.append(recommended.reason)
    if result.script_loop is not None:
        loop = result.script_loop
        parts.append(
            f"the script's own loop: {'pass' if loop.passed else 'needs attention'} over "
            f"{loop.compared_steps} steps"
        )
    informative = [informative_outcome(r) for r in result.informative_runs]
    if informative:
        parts.append(
            f"informative, not in the verdict (not in precisions): {', '.join(informative)}"
        )
    return "; ".join(parts) + "."


def _fidelity_part(result: NumericsResult, ok: list[RunResult]) -> str:
    trivial = sum(1 for r in ok if r.fidelity and r.fidelity.status == TRIVIAL)
    judged = [r for r in ok if r.fidelity and r.fidelity.status in (JUDGED_PASS, JUDGED_FAIL)]
    faithful = sum(1 for r in judged if r.fidelity is not None and r.fidelity.passed)
    pieces = []
    if judged:
        pieces.append(f"{faithful} of {len(judged)} runs match the CPU at their precision")
    if trivial:
        pieces.append(
            f"trivially true for {trivial} eager run{'s' if trivial > 1 else ''} on the "
            "reference's own CPU"
        )
    return f"device fidelity on {result.target['name']}: " + (", ".join(pieces) or "not judged")


def _cost_part(runs: list[RunResult], ok: list[RunResult]) -> str:
    within = [r for r in ok if r.precision_cost and r.precision_cost.passed]
    cost = f"precision cost: {len(within)} of {len(runs)} runs within tolerance"
    # A gate's failure is said in the acceptance part: here only a failed precision cost.
    attention = [
        r
        for r in ok
        if r.verdict and r.verdict.status == ATTENTION and r.precision_cost
        if not r.precision_cost.passed
    ]
    if attention:
        first = attention[0]
        # The failed rule's name only ("loss trajectory"): the headline gives its numbers, and
        # the run's row and the reading give the rest.
        reason = first.precision_cost.reason if first.precision_cost else ""
        rule = reason.split("; ")[0].split(": ")[0]
        cost += f", {short_label(first)} needs attention ({rule})"
    return cost


def informative_outcome(run: RunResult) -> str:
    """An informative run's outcome in a few words: "fp16-autocast eager pass"."""
    if run.status != "ok":
        return f"{short_label(run)} could not run ({run.failed_phase})"
    if run.nonfinite is not None and run.nonfinite.step is not None:
        return f"{short_label(run)} turns NaN/Inf at step {run.nonfinite.step}"
    return f"{short_label(run)} {run.verdict.status if run.verdict else 'not judged'}"


def run_line(run: RunResult) -> str:
    """A run's verdict and both judgements in a few words: the console prints it, and the
    report's runs table holds the same words, so the two never disagree."""
    label = run.label if run.chosen else f"{run.label} (informative, not in the verdict)"
    if run.verdict is None:
        return f"{label}: not judged"
    if run.status != "ok":
        return f"{label}: could not run ({run.failed_phase})"
    return (
        f"{label}: {run.verdict.status}; device fidelity {judgement_cell(run.fidelity)}; "
        f"precision cost {judgement_cell(run.precision_cost)}"
    )


def judgement_cell(judgement: Judgement | None) -> str:
    """A judgement's status, with the names of the rules it failed: "fail (loss trajectory)"."""
    if judgement is None:
        return ""
    if judgement.failed and judgement.status == JUDGED_FAIL:
        return f"{judgement.status} ({', '.join(judgement.failed)})"
    return judgement.status


def run_explanation(run: RunResult) -> str:
    """Why a run got its verdict, with the numbers: said once, below the runs table."""
    if run.status != "ok":
        first_line = (run.error or "").splitlines()[0] if run.error else "no error recorded"
        return f"{run.label} could not run ({run.failed_phase}): {first_line}"
    # "status (reason)", never "pass: reason", which reads like a credential to the scrubber.
    parts = [run.label]
    if not run.chosen:
        parts.append(
            f"Informative: {run.run['precision']} is not among this migration's precisions, so "
            f"its verdict ({run.verdict.status if run.verdict else 'none'}) is not the "
            "notebook's; name it in precisions to have it judged"
        )
    if run.skipped_steps:
        parts.append(_skipped_sentence(run))
    if run.fidelity is not None:
        parts.append(f"device fidelity {run.fidelity.status} ({run.fidelity.reason})")
    if run.precision_cost is not None:
        parts.append(f"precision cost {run.precision_cost.status} ({run.precision_cost.reason})")
    if run.validation is not None and run.validation.not_evidence:
        parts.append(f"held-out scores after training {run.validation.not_evidence}")
    return ". ".join(parts) + "."


def _skipped_sentence(run: RunResult) -> str:
    steps = ", ".join(str(s) for s in run.skipped_steps)
    plural = "s" if len(run.skipped_steps) > 1 else ""
    return (
        f"torch.amp's GradScaler skipped the update of step{plural} {steps} (gradients "
        "overflowed at the scale in use; it halves the scale and changes no weight, as fp16 "
        "training under torch.amp does)"
    )


def _divergence_sentence(run: RunResult) -> str:
    divergence = run.first_divergence
    assert divergence is not None and divergence.attribution.own is not None
    own = divergence.attribution.own
    others = [a.layer for a in run.attributions if a.cause == OWN and a.layer != divergence.layer]
    also = ""
    if others:
        shown = ", ".join(others[:5]) + (f" and {len(others) - 5} more" if len(others) > 5 else "")
        also = f" Later layers that also diverge on their own: {shown}."
    inherited = sum(1 for a in run.attributions if a.cause == INHERITED)
    carried = f" {inherited} flagged layers only carry error from upstream." if inherited else ""
    return (
        f"{run.label}: first divergence at layer {divergence.title}, whose own error is "
        f"{_factor(own.factor)} its {own.dtype} band (own RMSE {own.own_rmse:.3g} against "
        f"{own.band:.3g} from rounding alone): {own_advice(run)}.{also}{carried}"
    )


def _factor(value: float) -> str:
    return "NaN/Inf, not" if not math.isfinite(value) else f"{value:.3g}x"


def _run_reading(run: RunResult) -> list[tuple[str, str]]:
    items: list[tuple[str, str]] = []
    if run.nonfinite is not None:
        items.append(
            (
                "fail",
                f"{run.nonfinite.sentence(run.label)}. "
                + (
                    "Pure 16-bit training keeps weights and optimizer state in 16 bits, where "
                    "small values (Adam's squared gradients, its eps 1e-8) underflow and large "
                    "ones overflow: train with autocast (fp32 weights; for fp16 with a "
                    "torch.amp.GradScaler, as fp16-autocast runs) or in bf16."
                    if run.run.get("method") == CAST
                    else "Keep the layer it names in fp32, or train in bf16 (fp32's range)."
                ),
            )
        )
    if run.fidelity is not None and run.fidelity.status == JUDGED_FAIL:
        items.append(
            (
                "fail",
                f"{run.label} does not compute what the CPU computes at {run.run['precision']}: "
                f"{run.fidelity.reason}.",
            )
        )
    if run.first_divergence is not None:
        items.append(("warn", _divergence_sentence(run)))
    cost = run.precision_cost
    if cost is not None and not cost.passed and run.first_divergence is None and not run.nonfinite:
        # The numbers are below the runs table; here only what to do about them.
        items.append(
            (
                "warn",
                f"{run.label}: no single layer is to blame, the error builds up over "
                f"{'training' if 'loss trajectory' in cost.failed else 'the model'}: compare "
                f"its loss curve with the reference's; {cost_advice(run)}.",
            )
        )
    return items


def reading(result: NumericsResult) -> list[tuple[str, str]]:
    """What to do, as (kind, sentence) pairs: kind is one of markup.BANNER_KINDS."""
    # The verdict itself is said once, at the top of the report; this lists what to do.
    items: list[tuple[str, str]] = []
    reproducibility = result.reproducibility
    if not reproducibility.deterministic:
        items.append(("warn", reproducibility.note))
    for run in result.runs:
        if run.status != "ok":
            first_line = (run.error or "").splitlines()[0] if run.error else ""
            items.append(("fail", f"{run.label} could not run ({run.failed_phase}): {first_line}"))
            continue
        if run.role == ROLE_TARGET and run.chosen:
            items += _run_reading(run)
        elif run.role == ROLE_TARGET:
            items += [
                ("info", f"Informative, not in the verdict: {text}")
                for _, text in _run_reading(run)
            ]
        if run.unmatched_layers:
            items.append(("warn", f"{run.label}: {run.unmatched_layers.describe('layers')}."))
    items += [("warn", note) for note in result.notes]
    if result.fp64_error:
        items.append(
            (
                "warn",
                "The fp64 yardstick could not run, so tensors are judged by closeness alone: "
                f"{result.fp64_error.splitlines()[0]}",
            )
        )
    settings = result.numerics_settings
    if settings["stochastic_rounding"].startswith("on"):
        items.append(
            (
                "info",
                "NEURON_RT_STOCHASTIC_ROUNDING_EN=1: bf16 results on Trainium vary from run to "
                "run, so compare their loss curves rather than single values.",
            )
        )
    auto_cast = settings["neuronx_cc"]["auto_cast"]
    if settings["neuronx_cc"]["in_effect"] and auto_cast in ("matmult", "all"):
        items.append(
            (
                "warn",
                f"NEURON_CC_FLAGS --auto-cast={auto_cast}: neuronx-cc computes fp32 "
                f"{'matmuls' if auto_cast == 'matmult' else 'ops'} in "
                f"{settings['neuronx_cc']['auto_cast_type']}, so the fp32 runs here are not fp32.",
            )
        )
    return items
