"""The acceptance gates a port to Neuron is judged by, measured for every run of notebook 03 and
judged in AWS's order: liveness, the R-ratio per layer and output, teacher-forced cosine and KL,
free-running greedy token match and NxD's logit matching (top-1 agreement for models that do not
generate), the downstream evaluation, then convergence parity (MLPerf's RCP checker). Metrics
first (ratio, token_match, evaluation, convergence), then the gates judge them here, each with
its threshold and source (acceptance_records.AcceptanceRule).

The reference side is measured once (`prepare`), each run's side right after the run
(`measure_run`), and the gates are judged once every run is in (`judge_runs`): a 16-bit run's
R-ratio and tie tolerance need the CPU run at its precision, which may come later.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch

from workbench.errors import describe_error
from workbench.numerics import convergence as conv
from workbench.numerics import token_match
from workbench.numerics.acceptance_records import (
    ATTENTION_GATES,
    CONVERGENCE,
    COSINE,
    DOWNSTREAM,
    GATE_FAIL,
    GATE_NOT_JUDGED,
    GATE_ORDER,
    GATE_PASS,
    KL,
    LIVENESS,
    LOGIT_MATCH,
    R_RATIO,
    TOKEN_MATCH,
    AcceptanceRule,
    Agreement,
    ConvergenceStudy,
    DownstreamScore,
    GateResult,
    GateStatus,
    RunAcceptance,
)
from workbench.numerics.capture import FP32, LayerCall, ModelBuilder, RunSpec
from workbench.numerics.evaluation import evaluate
from workbench.numerics.ratio import (
    ComponentRerun,
    first_ratio_failure,
    isolate_components,
    layer_ratios,
    ratio_basis,
    ratio_gate,
)
from workbench.numerics.records import ROLE_TARGET, NumericsSettings, RunResult
from workbench.numerics.references import ReferenceRuns, prepared_model
from workbench.numerics.token_match import AcceptanceSet, PositionStats
from workbench.numerics.validation import HeldOutBatches
from workbench.targets.base import Target
from workbench.workload import Workload


@dataclass
class Prepared:
    """The reference side of the gates, shared by every run; nothing here is saved as is."""

    acceptance_set: AcceptanceSet | None
    downstream_reference: dict[str, float] | None
    seeds: list[int]  # the candidate's runs
    reference_trajectories: list[list[float]] | None  # held-out loss per step, per reference run
    notes: list[str] = field(default_factory=list)
    reference_seeds: list[int] = field(default_factory=list)
    target_loss: float | None = None  # the convergence study's target quality
    no_target: str = ""  # why there is none


@dataclass
class RunSide:
    """What a run measured for the gates that is judged later, against other runs."""

    calls: dict[str, LayerCall] = field(default_factory=dict)
    stats: PositionStats | None = None
    agreement_error: str | None = None


def _eval_model(build: ModelBuilder, spec: RunSpec) -> torch.nn.Module:
    model, _ = prepared_model(build, spec)
    return model.eval()


def prepare(
    workload: Workload,
    build: ModelBuilder,
    refs: ReferenceRuns,
    held_out: HeldOutBatches,
    settings: NumericsSettings,
) -> Prepared:
    """The acceptance set with the reference's (and fp64's) logits on it, the reference's
    downstream scores and its trajectories over the seeds; what cannot be measured is one
    sentence each, and the rest still is."""
    notes: list[str] = []
    model = _eval_model(build, refs.spec)
    aset = _reference_logits(workload, build, model, refs, held_out, settings, notes)
    downstream = _reference_downstream(workload, model, refs, notes)
    seeds = conv.seeds_of(workload, settings.convergence_seeds)
    reference_seeds = conv.reference_seeds_of(workload, settings.convergence_seeds)
    if len(seeds) < conv.MINIMUM_RUNS:
        notes.append(
            f"convergence_seeds is {len(seeds)}: olympic scoring drops the best and the worst "
            f"run, so convergence parity is shown but not tested; use {conv.MINIMUM_RUNS} or "
            "more runs (5 by default, as MLPerf's smallest run count)."
        )
    trajectories = conv.trajectories(
        refs.spec,
        workload,
        reference_seeds,
        settings.convergence_steps,
        conv.TrainingRecipe(workload.batch_size),
    )
    target, no_target = conv.target_loss(trajectories, settings.convergence_steps)
    return Prepared(
        aset, downstream, seeds, trajectories, notes, reference_seeds, target, no_target
    )


def _reference_logits(
    workload: Workload,
    build: ModelBuilder,
    model: torch.nn.Module,
    refs: ReferenceRuns,
    held_out: HeldOutBatches,
    settings: NumericsSettings,
    notes: list[str],
) -> AcceptanceSet | None:
    """The acceptance set with the reference's and fp64's logits on it; None, with a note,
    where they cannot be taken."""
    try:
        aset, more = token_match.build_acceptance_set(
            workload,
            model,
            held_out,
            settings.prompts,
            settings.prompt_tokens,
            settings.generated_tokens,
            refs.spec,
        )
        notes += more
        reference = token_match.logits_on(model, refs.spec, workload, aset)
        fp64 = None
        if refs.fp64_error is None:
            fp64 = token_match.logits_on(
                _eval_model(build, refs.fp64_spec), refs.fp64_spec, workload, aset
            )
        token_match.set_reference(aset, reference, fp64)
    except Exception as exc:  # one sentence; every other gate is still judged
        notes.append(
            f"The reference's logits on the held-out data could not be taken "
            f"({describe_error(exc)}), so liveness, cosine, KL and token match are not judged."
        )
        return None
    return aset


def _reference_downstream(
    workload: Workload, model: torch.nn.Module, refs: ReferenceRuns, notes: list[str]
) -> dict[str, float] | None:
    """The reference's downstream scores; None, with a note, where there are none."""
    if workload.downstream_eval is None:
        notes.append(
            f"Workload {workload.name!r} names no downstream_eval, so the downstream gate is not "
            "judged; give its Workload a downstream_eval to have one."
        )
        return None
    try:
        return evaluate(workload, model, refs.spec)
    except Exception as exc:
        notes.append(
            f"The downstream_eval of workload {workload.name!r} raised on the reference "
            f"({describe_error(exc)}), so the downstream gate is not judged."
        )
        return None


def measure_run(
    result: RunResult,
    spec: RunSpec,
    build: ModelBuilder,
    prepared: Prepared,
    workload: Workload,
    settings: NumericsSettings,
    refs: ReferenceRuns,
) -> RunSide:
    """The run's logits on the acceptance set, its downstream scores and its trajectories over
    the seeds (the last two for target runs only), each through the run's own forward."""
    side = RunSide()
    acceptance = RunAcceptance()
    result.acceptance = acceptance
    try:
        forward: Callable[..., object] = spec.forward_of(_eval_model(build, spec))
    except Exception as exc:  # the run's other phases ran; these gates say why they cannot
        side.agreement_error = str(describe_error(exc))
        return side
    if prepared.acceptance_set is not None:
        try:
            logits = token_match.logits_on(forward, spec, workload, prepared.acceptance_set)
            generated = token_match.generated_by(forward, spec, workload, prepared.acceptance_set)
            side.stats = token_match.position_stats(prepared.acceptance_set, logits, generated)
        except Exception as exc:
            side.agreement_error = str(describe_error(exc))
    if result.role != ROLE_TARGET:
        return side
    if prepared.downstream_reference is not None:
        score = DownstreamScore(reference=dict(prepared.downstream_reference))
        try:
            score.run = evaluate(workload, forward, spec)
        except Exception as exc:
            score.error = f"the downstream_eval raised on {result.label} ({describe_error(exc)})"
        acceptance.downstream = score
    if prepared.reference_trajectories is not None:
        acceptance.convergence = _convergence(
            result, spec, prepared, prepared.reference_trajectories, workload, settings, refs
        )
    return side


def _convergence(
    result: RunResult,
    spec: RunSpec,
    prepared: Prepared,
    reference_trajectories: list[list[float]],
    workload: Workload,
    settings: NumericsSettings,
    refs: ReferenceRuns,
) -> ConvergenceStudy:
    """The run's convergence parity over the seeds against the reference's trajectories."""
    same = (
        spec.target.device == refs.spec.target.device
        and spec.precision.name == FP32.name
        and not spec.compiled
        and refs.reproducibility.deterministic
    )
    label = f"{result.label} against {refs.spec.label}"
    try:
        # The reference's own computation, shown deterministic: its first runs are reused.
        losses = (
            []
            if prepared.target_loss is None
            else reference_trajectories[: len(prepared.seeds)]
            if same
            else conv.trajectories(
                spec,
                workload,
                prepared.seeds,
                conv.CANDIDATE_STEP_FACTOR * settings.convergence_steps,
                conv.TrainingRecipe(workload.batch_size),
                stop_at=prepared.target_loss,
            )
        )
    except Exception as exc:
        return ConvergenceStudy(
            label,
            prepared.seeds,
            settings.convergence_steps,
            note=f"the runs could not train: {describe_error(exc)}",
            verdict="not tested",
        )
    return conv.judge_study(
        label,
        prepared.seeds,
        prepared.reference_seeds,
        settings.convergence_steps,
        reference_trajectories,
        losses,
        settings.acceptance.alpha,
        prepared.target_loss,
        prepared.no_target,
    )


def _tolerance(
    run: RunResult,
    baseline_side: RunSide | None,
    aset: AcceptanceSet,
) -> torch.Tensor | None:
    """The tie tolerance: the logit error of the CPU run at the run's precision, against
    the fp64 run for an fp32 run (the reference is that CPU run) or the fp32 reference."""
    if run.run["precision"] == FP32.name:
        return aset.exact_error
    if baseline_side is None or baseline_side.stats is None:
        return None
    return baseline_side.stats.error


def judge_runs(
    runs: list[RunResult],
    sides: dict[str, RunSide],
    prepared: Prepared,
    refs: ReferenceRuns,
    build: ModelBuilder,
    reference_target: Target,
    settings: NumericsSettings,
) -> None:
    """Every target run's R-ratios (every layer above the threshold re-run alone: own or
    inherited), agreement, and gates, in order."""
    rule = settings.acceptance
    reference_device = str(reference_target.device)
    baselines = {
        r.run["precision"]: r
        for r in runs
        if r.status == "ok" and r.run["device"] == reference_device and not r.run["compiled"]
    }
    for run in runs:
        if run.status != "ok" or run.role != ROLE_TARGET:
            continue
        acceptance = run.acceptance or RunAcceptance()
        run.acceptance = acceptance
        precision = run.run["precision"]
        baseline = None if precision == FP32.name else baselines.get(precision)
        acceptance.ratio_basis = ratio_basis(run, baseline, refs)
        if precision == FP32.name or baseline is not None:
            acceptance.ratios = layer_ratios(run, baseline, rule.r_threshold)
        if any(r.kind == "layer" and not r.ratio <= rule.r_threshold for r in acceptance.ratios):
            spec = _spec_of(run, reference_target, refs)
            baseline_spec = RunSpec(reference_target, spec.precision)
            other_side = sides.get(baseline.label) if baseline is not None else None
            rerun = ComponentRerun(
                sides.get(run.label, RunSide()).calls,
                other_side.calls if other_side else None,
                _builder(build, spec),
                _builder(build, baseline_spec),
                spec,
                baseline_spec,
                refs,
                rule.r_threshold,
            )
            isolate_components(acceptance.ratios, rerun)
        acceptance.first_ratio_failure = first_ratio_failure(acceptance.ratios, rule.r_threshold)
        side = sides.get(run.label)
        baseline_side = sides.get(baseline.label) if baseline is not None else None
        if prepared.acceptance_set is not None and side is not None and side.stats is not None:
            acceptance.agreement = _agreement(
                run, baseline, side.stats, baseline_side, prepared.acceptance_set, refs, rule
            )
        agreement_error = side.agreement_error if side else None
        acceptance.gates = gates(acceptance, rule, prepared, agreement_error)


def _agreement(
    run: RunResult,
    baseline: RunResult | None,
    stats: PositionStats,
    baseline_side: RunSide | None,
    aset: AcceptanceSet,
    refs: ReferenceRuns,
    rule: AcceptanceRule,
) -> Agreement:
    """The run's agreement with the reference, ties judged within the CPU run's own error at
    the run's precision (the fp32 reference's for an fp32 run)."""
    tolerance = _tolerance(run, baseline_side, aset)
    named = (
        refs.spec.label
        if run.run["precision"] == FP32.name
        else (baseline.label if baseline else None)
    )
    return token_match.agreement(
        aset,
        stats,
        tolerance,
        rule.cosine_p5,
        named if tolerance is not None else None,
        rule.divergence_tolerance,
    )


def _builder(build: ModelBuilder, spec: RunSpec) -> Callable[[], torch.nn.Module]:
    return lambda: prepared_model(build, spec)[0]


def _spec_of(run: RunResult, reference_target: Target, refs: ReferenceRuns) -> RunSpec:
    """The RunSpec a result was run with, from its record: same target object where it can."""
    from workbench.numerics.capture import PRECISIONS
    from workbench.targets import get_target

    target = (
        reference_target
        if run.run["target"] == reference_target.name
        else get_target(run.run["target"])
    )
    return RunSpec(target, PRECISIONS[run.run["precision"]], compiled=run.run["compiled"])


def _share(agreement: Agreement) -> str:
    """The exact rate first, then what else the gated rate counts and where tokens first differ."""
    how = "free-running greedy tokens" if agreement.free_running else "positions"
    text = (
        f"{agreement.exact_rate:.1%} exact ({agreement.exact_matches} of {agreement.compared} {how}"
    )
    if not agreement.free_running and agreement.near_ties:
        text += f"; {agreement.rate:.1%} with {agreement.near_ties} ties excused"
    if agreement.first_mismatch:
        text += f"; first differs at {agreement.first_mismatch}"
    return text + ")"


def _logit_matching(agreement: Agreement) -> str:
    errors = ", ".join(f"{k} {v:.3g}" for k, v in agreement.topk_errors.items())
    text = (
        f"{agreement.divergences} of {agreement.compared} teacher-forced positions diverge"
        f" (largest divergence difference {agreement.divergence_difference_max or 0:.3g}, "
        f"tolerance {agreement.divergence_tolerance:g}; {agreement.near_ties} ties excused); "
        f"{agreement.positions_outside_tolerance} positions outside the top-k tolerances "
        f"(largest relative errors: {errors})"
    )
    if agreement.first_logit_failure:
        text += f"; first failure at {agreement.first_logit_failure}"
    return text


def gates(
    acceptance: RunAcceptance,
    rule: AcceptanceRule,
    prepared: Prepared,
    agreement_error: str | None,
) -> list[GateResult]:
    """Every gate on one run, in order, with what was measured, its threshold and source."""
    statements = {name: (threshold, source) for name, threshold, source in rule.statements()}
    results: list[GateResult] = []

    def add(name: str, status: GateStatus, measured: str) -> None:
        threshold, source = statements[name]
        results.append(GateResult(name, status, measured, threshold, source))

    found = acceptance.agreement
    if found is None:
        why = (
            f"not measured: {agreement_error}"
            if agreement_error
            else "no acceptance set (see the notes)"
        )
        for name in (LIVENESS, COSINE, KL, TOKEN_MATCH):
            add(name, GATE_NOT_JUDGED, why)
    else:
        add_agreement(found, rule, add)
    add(R_RATIO, *ratio_gate(acceptance, rule.r_threshold))
    add_downstream(acceptance.downstream, rule, prepared, add)
    add_convergence(acceptance.convergence, add)
    order = {name: i for i, name in enumerate(GATE_ORDER)}
    return sorted(results, key=lambda g: order[g.gate])


def add_agreement(
    found: Agreement, rule: AcceptanceRule, add: Callable[[str, GateStatus, str], None]
) -> None:
    """The gates on the run's logits and tokens: liveness, cosine, KL, token match (or top-1
    agreement) and, for a model that generates, logit matching."""
    add(LIVENESS, GATE_PASS if found.rate >= rule.liveness else GATE_FAIL, _share(found))
    cosine_ok = found.cosine_p5 >= rule.cosine_p5 and found.cosine_below_share <= 0.05
    add(
        COSINE,
        GATE_PASS if cosine_ok else GATE_FAIL,
        f"p5 {found.cosine_p5:.6g}, {found.cosine_below_share:.1%} of {found.compared} "
        f"positions below {rule.cosine_p5:g}",
    )
    kl_ok = found.kl_p95 <= rule.kl_p95 and found.kl_max <= rule.kl_max
    add(
        KL,
        GATE_PASS if kl_ok else GATE_FAIL,
        f"p95 {found.kl_p95:.3g}, max {found.kl_max:.3g} nats over {found.compared} positions",
    )
    add(
        found.kind,
        GATE_PASS if found.rate >= rule.token_match else GATE_FAIL,
        _share(found)
        + (
            f"; ties: within twice {found.baseline}'s logit error"
            if found.baseline and not found.free_running
            else ""
        ),
    )
    if found.logits_matched is not None:
        add(
            LOGIT_MATCH,
            GATE_PASS if found.logits_matched else GATE_FAIL,
            _logit_matching(found),
        )


def add_downstream(
    score: DownstreamScore | None,
    rule: AcceptanceRule,
    prepared: Prepared,
    add: Callable[[str, GateStatus, str], None],
) -> None:
    if score is None:
        add(DOWNSTREAM, GATE_NOT_JUDGED, "no downstream evaluation (see the notes)")
        return
    if score.error:
        add(DOWNSTREAM, GATE_NOT_JUDGED, score.error)
        return
    drops = score.drops()
    failing = [t for t, d in drops.items() if not d <= rule.downstream_tolerance]
    text = "; ".join(
        f"{task} {score.reference[task]:.4g} -> {score.run[task]:.4g} ({-drop * 100:+.3g} points)"
        for task, drop in drops.items()
    )
    add(DOWNSTREAM, GATE_FAIL if failing else GATE_PASS, text)


def add_convergence(
    study: ConvergenceStudy | None, add: Callable[[str, GateStatus, str], None]
) -> None:
    if study is None:
        add(CONVERGENCE, GATE_NOT_JUDGED, "not measured")
        return
    statuses: dict[bool | None, GateStatus] = {
        True: GATE_PASS,
        False: GATE_FAIL,
        None: GATE_NOT_JUDGED,
    }
    status = statuses[study.passed]
    add(CONVERGENCE, status, study.note)


def is_attention(gate: GateResult) -> bool:
    return gate.gate in ATTENTION_GATES


def recommended_study(
    path: Path,
    workload: Workload,
    initial: torch.nn.Module,
    target: Target,
    seeds: list[int],
    settings: NumericsSettings,
) -> tuple[ConvergenceStudy | None, str | None]:
    """Notebook 04's batch and accumulation against the original batch, steps to target over the
    runs (the original over twice as many), fp32 eager on the target; (None, sentence) when 04's
    result is there but cannot be used, or the study cannot run."""
    recommendation, note = conv.recommended_recipe(path, workload, initial)
    if recommendation is None:
        return None, note
    original = conv.TrainingRecipe(workload.batch_size)
    spec = RunSpec(target, FP32)
    reference_seeds = conv.seeds_of(workload, conv.REFERENCE_RUN_FACTOR * len(seeds))
    try:
        baseline = conv.trajectories(
            spec, workload, reference_seeds, settings.convergence_steps, original
        )
        target_quality, no_target = conv.target_loss(baseline, settings.convergence_steps)
        candidate = (
            conv.trajectories(
                spec,
                workload,
                seeds,
                conv.CANDIDATE_STEP_FACTOR * settings.convergence_steps,
                recommendation.recipe,
                stop_at=target_quality,
            )
            if target_quality is not None
            else []
        )
    except Exception as exc:
        return None, (
            f"The convergence check of {recommendation.source} could not run: "
            f"{describe_error(exc)}."
        )
    study = conv.judge_study(
        f"{recommendation.recipe.describe()} from {recommendation.source} against the original "
        f"{original.describe()}, {spec.label}, in optimizer steps",
        seeds,
        reference_seeds,
        settings.convergence_steps,
        baseline,
        candidate,
        settings.acceptance.alpha,
        target_quality,
        no_target,
    )
    return study, None
