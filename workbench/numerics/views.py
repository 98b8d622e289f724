"""What notebook 03 shows and saves: the headline, verdict tables, the reading of what to do,
and the 03_numerics.json payload. Every shown string goes through workbench.markup."""

from __future__ import annotations

import math
from typing import Any

from IPython.display import display

from workbench import markup as show
from workbench.numerics.acceptance_records import JUDGED_AS_VALUE, min_ratio_elements
from workbench.numerics.metrics import budget_of
from workbench.numerics.records import NumericsResult, RunResult, notebook_verdict
from workbench.numerics.statuses import INHERITED, OWN
from workbench.numerics.wording import (
    acceptance_headline,
    first_gate_failure,
    headline,
    judgement_cell,
    reading,
    run_explanation,
    short_label,
)
from workbench.scorecard import BLOCKER, PASS


def _show_table(rows: list[dict[str, Any]], caption: str, when_empty: str | None = None) -> None:
    """The rows as a table; with no rows and a `when_empty` sentence, that sentence instead."""
    if not rows and when_empty is not None:
        display(show.banner(when_empty, "warn"))
        return
    display(show.table(rows, caption=caption))


def _verdict_cell(run: RunResult) -> str:
    if run.verdict is None:
        return ""
    if run.status != "ok":
        cell = f"could not run ({run.failed_phase})"
    else:
        cell = run.verdict.status.upper() if run.verdict.status != PASS else PASS
    return cell if run.chosen else f"{cell} (informative, not in the verdict)"


def _divergence_cell(run: RunResult) -> str:
    divergence = run.first_divergence
    if divergence is None:
        return "" if run.status == "ok" else "-"
    own = divergence.attribution.own
    factor = f", {own.factor:.3g}x its band" if own is not None else ""
    return f"{divergence.title}{factor}"


def _nonfinite_cell(run: RunResult) -> str:
    if run.nonfinite is None:
        return "none"
    return f"step {run.nonfinite.step}" if run.nonfinite.step is not None else "step 1 tensors"


def _loss_cell(run: RunResult) -> str:
    """The trajectory's step closest to failing (or the first that fails): its difference
    against what the tolerance allows there; nothing after a NaN/Inf."""
    step = run.first_nonfinite_step
    if step is not None:
        return f"NaN/Inf from step {step}"
    check = run.trajectory_check
    if check is None:
        return ""
    return f"{check.difference:.3g} of {check.allowed:.3g} at step {check.step}"


def _metric_cell(run: RunResult) -> str:
    validation = run.validation
    if validation is None:
        return ""
    if validation.not_evidence:
        return "not evidence (after NaN/Inf)"
    if validation.after is None or validation.reference_after is None:
        return ""
    if validation.after.metric is None or validation.reference_after.metric is None:
        return ""
    return f"{validation.reference_after.metric:.4g} -> {validation.after.metric:.4g}"


def _final_loss(run: RunResult) -> float | str | None:
    if not run.losses:
        return None
    return "not finite" if run.first_nonfinite_step is not None else run.losses[-1]


def verdict_rows(result: NumericsResult) -> list[dict[str, Any]]:
    """One short row per run; why each run got its verdict is said once, below the table."""
    rows = []
    for run in result.runs:
        rows.append(
            {
                "run": run.label,
                "role": run.role,
                "verdict": _verdict_cell(run),
                "device fidelity": judgement_cell(run.fidelity),
                "precision cost": judgement_cell(run.precision_cost),
                "first divergence": _divergence_cell(run),
                "NaN/Inf": _nonfinite_cell(run) if run.status == "ok" else "",
                "loss: difference of allowed": _loss_cell(run),
                f"held-out {result.task_metric or 'metric'} (ref -> run)": _metric_cell(run),
                "final loss": _final_loss(run),
                "seconds": run.seconds,
            }
        )
    return rows


def verdict(result: NumericsResult) -> None:
    """The verdict and headline, for a reader stepping through the notebook (the report opens
    with both, read from the result file, so its copy of this cell is dropped)."""
    verdict = notebook_verdict(result)
    display(show.banner(headline(result), show.VERDICT_BANNER[verdict.status]))


def verdicts(result: NumericsResult) -> None:
    """One short row per run, why each run got its verdict (once), then the rules in words."""
    _show_table(
        verdict_rows(result),
        f"Each run against {result.reference_label} (yardstick {result.yardstick_label}); "
        f"batch: {result.batch.description}; why each verdict, below",
    )
    for run in result.runs:
        kind = "ok" if run.verdict is not None and run.verdict.status == PASS else "warn"
        if run.verdict is not None and run.verdict.status == BLOCKER:
            kind = "fail"
        if not run.chosen:
            kind = "info"  # shown for comparison: it judges nothing
        display(show.banner(run_explanation(run), kind))
    rule, cost = result.settings.rule, result.settings.cost
    display(show.banner(f"Device fidelity rule: {rule.statement()}", "info"))
    display(show.banner(cost.statement(), "info"))
    reproducibility = result.reproducibility
    display(show.banner(reproducibility.note, "ok" if reproducibility.deterministic else "warn"))


def divergence_rows(result: NumericsResult) -> list[dict[str, Any]]:
    """Every layer the dynamo rule flags, per run, with its own error against its band."""
    rows = []
    for run in result.runs:
        by_name = {c.name: c for c in run.layers}
        divergence = run.first_divergence
        for attribution in run.attributions:
            comparison = by_name[attribution.layer]
            own = attribution.own
            rows.append(
                {
                    "run": run.label,
                    "layer": comparison.title,
                    "position": f"{run.layers.index(comparison) + 1} of {len(run.layers)}",
                    "cause": attribution.cause
                    + (
                        " (first divergence)"
                        if divergence and divergence.layer == comparison.name
                        else ""
                    ),
                    "own error / band": own.factor if own else None,
                    "own RMSE vs fp64": own.own_rmse if own else None,
                    "band (rounding alone)": own.band if own else None,
                    "amplification": own.amplification if own else None,
                    "RMSE vs fp64, full run": comparison.metrics.target_rmse_vs_fp64,
                    "dynamo budget": budget_of(comparison.metrics, result.settings.rule),
                    "note": attribution.note,
                }
            )
    return rows


def first_divergences(result: NumericsResult) -> None:
    rows = divergence_rows(result)
    diverging = [r.label for r in result.runs if r.first_divergence is not None]
    if not diverging:
        display(show.banner("No run has a layer whose own error is far above its band.", "ok"))
    if not rows:
        return
    _show_table(
        rows,
        "Every flagged layer (the dynamo rule fails it and its full-run error exceeds "
        f"{result.settings.cost.band_factor:g}x one rounding of its output), re-run "
        "alone on the reference's inputs at the run's precision: own when its own "
        f"error exceeds {result.settings.cost.band_factor:g}x its band, inherited "
        "otherwise",
    )


def validation_rows(result: NumericsResult) -> list[dict[str, Any]]:
    before, after = result.reference_held_out
    metric = result.task_metric
    rows = []
    for run in result.runs:
        validation = run.validation
        if run.status != "ok" or validation is None:
            continue
        if validation.not_evidence and validation.after is None:
            rows.append(
                {
                    "run": run.label,
                    "verdict": {True: "pass", False: "FAIL", None: ""}[validation.passed],
                    "loss after (ref / run)": "not evidence (after NaN/Inf)",
                }
            )
            continue
        if validation.after is None:
            continue
        row: dict[str, Any] = {
            "run": run.label,
            "verdict": {True: "pass", False: "FAIL", None: ""}[validation.passed],
            "loss before (ref / run)": _pair(before, validation.before, "loss"),
            "loss after (ref / run)": _pair(after, validation.after, "loss"),
            "loss deviation": validation.loss_deviation,
            "loss tolerance (relative)": validation.loss_allowance,
            "loss floor (absolute)": validation.loss_check.tolerance.atol
            if validation.loss_check
            else None,
        }
        if metric:
            row |= {
                f"{metric} before (ref / run)": _pair(before, validation.before, "metric"),
                f"{metric} after (ref / run)": "not evidence"
                if validation.not_evidence
                else _pair(after, validation.after, "metric"),
                f"{metric} difference": validation.metric_difference,
                f"{metric} tolerance": validation.metric_allowance,
            }
        rows.append(row)
    return rows


def _pair(reference: Any, run: Any, field: str) -> str:
    return _reference_and_run(getattr(reference, field, None), getattr(run, field, None))


def _reference_and_run(reference: float | None, run: float | None) -> str:
    """The reference's value, then the run's, to 4 significant digits; empty where either
    is missing."""
    if reference is None or run is None:
        return ""
    return f"{reference:.4g} / {run:.4g}"


def validation_table(result: NumericsResult) -> None:
    """The held-out loss and task metric, before and after the trajectory, reference vs run."""
    _show_table(
        validation_rows(result),
        f"Held-out data: {result.held_out_source} ({result.held_out_samples} samples), "
        f"in eval mode, after {result.settings.steps} optimizer steps",
    )


def sweep_runs(result: NumericsResult) -> list[RunResult]:
    """Eager runs on the target, one per precision: the precision sweep."""
    return [
        r for r in result.target_runs if r.status == "ok" and not r.run["compiled"] and r.layers
    ]


def sweep_rows(result: NumericsResult) -> list[dict[str, Any]]:
    runs = sweep_runs(result)
    if not runs:
        return []
    by_run = [{c.name: c for c in r.layers} for r in runs]
    names = list(dict.fromkeys(n for layers in by_run for n in layers))
    rows = []
    for name in names:
        reference = next((layers[name] for layers in by_run if name in layers), None)
        row: dict[str, Any] = {"layer": reference.title if reference else name}
        if reference is not None:
            row["fp32 reference vs fp64"] = reference.metrics.reference_relative_l2_vs_fp64
        for run, layers in zip(runs, by_run, strict=True):
            comparison = layers.get(name)
            cell: float | str | None = comparison.metrics.relative_l2 if comparison else None
            attribution = run.attribution(name)
            if attribution is not None and attribution.cause == OWN and attribution.own:
                cell = f"{cell:.3g} (own: {attribution.own.factor:.3g}x its band)"
            row[run.run["precision"]] = cell
        rows.append(row)
    return rows


def precision_sweep_table(result: NumericsResult) -> None:
    _show_table(
        sweep_rows(result),
        "Relative error ||run - reference|| / ||reference|| of each layer output, eager on "
        f"{result.target['name']}; the first column is the fp32 reference's own error "
        "against fp64",
        when_empty="No eager run on the target completed: no precision sweep.",
    )


def gradient_rows(result: NumericsResult) -> list[dict[str, Any]]:
    rows = []
    for run in result.runs:
        if run.status != "ok" or not run.gradients:
            continue
        worst = max(run.gradients, key=lambda c: c.metrics.relative_l2)
        passing = sum(c.verdict.passed for c in run.gradients)
        rows.append(
            {
                "run": run.label,
                "gradients passing": f"{passing} of {len(run.gradients)}",
                "worst parameter": worst.name,
                "its relative error": worst.metrics.relative_l2,
                "its cosine": worst.metrics.cosine,
                "not compared": run.unmatched_gradients.describe("gradients")
                if run.unmatched_gradients
                else "",
            }
        )
    return rows


def gradient_table(result: NumericsResult) -> None:
    _show_table(gradient_rows(result), "Gradients after one backward, by run")


def training_rows(result: NumericsResult) -> list[dict[str, Any]]:
    rows = []
    for run in result.runs:
        if run.status != "ok" or run.trajectory is None:
            continue
        task = run.task
        rows.append(
            {
                "run": run.label,
                "loss, precision cost": _check_cell(run.trajectory_check),
                "loss: difference of allowed": _loss_cell(run),
                "final loss (reference)": result.reference_losses[-1],
                "final loss (run)": _final_loss(run),
                "task metric": task.name if task else "",
                "initial (ref / run)": (
                    _reference_and_run(task.reference_initial, task.target_initial)
                    if task and task.name
                    else ""
                ),
                "final (ref / run)": _task_final(task),
                "same arg-max as reference": task.prediction_agreement if task else None,
            }
        )
    return rows


def _check_cell(check: Any) -> str:
    if check is None:
        return "not judged (NaN/Inf)"
    return "pass" if check.passed else "FAIL"


def _task_final(task: Any) -> str:
    if task is None or not task.name:
        return ""
    if task.not_evidence:
        return "not evidence (after NaN/Inf)"
    return _reference_and_run(task.reference_final, task.target_final)


def training_table(result: NumericsResult) -> None:
    _show_table(
        training_rows(result),
        f"Loss trajectory over {result.settings.steps} optimizer steps on the fixed "
        "batch, and the task metric on the first and the last step's outputs",
    )
    script_loop_table(result)


def script_loop_rows(result: NumericsResult) -> list[dict[str, Any]]:
    """The script's own loop (a `script:` workload only): its loss at each step on the
    reference and on the target, and the trajectory rule's verdict."""
    loop = result.script_loop
    if loop is None:
        return []
    trajectory = loop.trajectory
    return [
        {
            "run": "the script's own loop",
            "on": loop.target_label,
            "steps compared": loop.compared_steps,
            "final loss (reference)": loop.reference_losses[-1] if loop.reference_losses else None,
            "final loss (run)": loop.target_losses[-1] if loop.target_losses else None,
            "trajectory": "not compared" if trajectory is None else _check_cell(trajectory.verdict),
            "rule": "" if trajectory is None else trajectory.verdict.reason,
        }
    ]


def script_loop_table(result: NumericsResult) -> None:
    rows = script_loop_rows(result)
    if rows:
        _show_table(
            rows,
            "The script's own loop, run unmodified on the reference (cpu fp32 eager) "
            "and on the target from the same seed: its losses at each backward, judged by "
            "the trajectory rule",
        )


def _flat(prefix: str, value: Any) -> dict[str, Any]:
    if isinstance(value, dict):
        flat: dict[str, Any] = {}
        for key, inner in value.items():
            flat |= _flat(f"{prefix}.{key}" if prefix else str(key), inner)
        return flat
    return {prefix: value}


def settings_table(result: NumericsResult) -> None:
    facts = _flat("", result.numerics_settings)
    for run in result.runs:
        autocast = run.run["autocast"]
        if autocast:
            facts[f"autocast in {run.label}"] = f"{autocast['device_type']}, {autocast['dtype']}"
    facts["dropout modules switched off"] = ", ".join(result.dropout_disabled) or "none"
    display(show.key_values(facts, caption="Settings that change numerics, as in effect"))


def problems(result: NumericsResult) -> None:
    """Runs that could not run, what could not be matched, and where the batch came from."""
    lines: list[tuple[str, str]] = []
    for run in result.runs:
        if run.status != "ok":
            lines.append(("fail", f"{run.label} could not run ({run.failed_phase}): {run.error}"))
            continue
        for unmatched, what in (
            (run.unmatched_layers, "layers"),
            (run.unmatched_outputs, "outputs"),
            (run.unmatched_gradients, "gradients"),
        ):
            if unmatched:
                lines.append(("warn", f"{run.label}: {unmatched.describe(what)}."))
    if result.fp64_error:
        lines.append(("warn", f"fp64 yardstick failed: {result.fp64_error}"))
    batch = result.batch
    lines.append(("info", f"Batch: {batch.description}; {batch.note}."))
    if batch.baseline_outputs is not None:
        verdict = batch.baseline_outputs.verdict
        lines.append(
            (
                "ok" if verdict.passed else "warn",
                f"Notebook 01's eval-mode outputs ({batch.baseline_device}, fp32 eager) against "
                f"this reference: {'pass' if verdict.passed else 'FAIL'}, {verdict.reason}.",
            )
        )
    for kind, text in lines:
        display(show.banner(text, kind))


def what_to_do(result: NumericsResult) -> None:
    items = reading(result)
    if not items:
        display(show.banner("Nothing to act on: no run needs a change.", "ok"))
    for kind, text in items:
        display(show.banner(text, kind))


def gate_rows(result: NumericsResult) -> list[dict[str, Any]]:
    """One row per target run and gate, in the gates' order: what was measured, the outcome."""
    rows = []
    for run in result.target_runs:
        if run.acceptance is None:
            continue
        for gate in run.acceptance.gates:
            rows.append(
                {
                    "run": run.label,
                    "gate": gate.gate,
                    "outcome": gate.status if gate.status != "fail" else "FAIL",
                    "measured": gate.measured,
                }
            )
    return rows


def acceptance(result: NumericsResult) -> None:
    """The acceptance gates: which failed first, each gate's threshold and source, then every
    run's outcome per gate."""
    display(
        show.banner(acceptance_headline(result), "fail" if first_gate_failure(result) else "ok")
    )
    _show_table(
        [
            {"gate": name, "threshold": threshold, "source": source}
            for name, threshold, source in result.settings.acceptance.statements()
        ],
        "The acceptance gates, in the order they are judged",
    )
    _show_table(
        gate_rows(result),
        f"Each target run against the gates; agreement measured on "
        f"{result.acceptance_set or 'nothing (see the notes)'}",
    )


def ratio_rows(result: NumericsResult) -> list[dict[str, Any]]:
    """R of every layer and output, one column per target run; above the threshold marked."""
    runs = [r for r in result.target_runs if r.acceptance is not None and r.acceptance.ratios]
    threshold = result.settings.acceptance.r_threshold
    names: dict[str, str] = {}
    for run in runs:
        assert run.acceptance is not None
        for ratio in run.acceptance.ratios:
            title = f"{ratio.name} ({ratio.module_type})" if ratio.module_type else ratio.name
            names.setdefault(ratio.name, title if ratio.kind == "layer" else f"output {title}")
    rows = []
    for name, title in names.items():
        row: dict[str, Any] = {"layer or output": title}
        for run in runs:
            assert run.acceptance is not None
            found = next((r for r in run.acceptance.ratios if r.name == name), None)
            cell: float | str | None = found.ratio if found else None
            if found is not None and not found.ratio <= threshold:
                cell = f"{found.ratio:.3g} > {threshold:g}"
                if found.isolated_cause:
                    alone = found.isolated_ratio
                    shown = "not measured" if alone is None else f"{alone:.3g}"
                    cell += f" (alone {shown}, {found.isolated_cause})"
            if found is not None and found.judged == JUDGED_AS_VALUE:
                cell = f"{cell if isinstance(cell, str) else f'{found.ratio:.3g}'} (value)"
            row[short_label(run)] = cell
        rows.append(row)
    return rows


def ratio_table(result: NumericsResult) -> None:
    """AWS's R-ratio beside the per-layer view, the first layer above its threshold and the
    components whose R alone is above it."""
    threshold = result.settings.acceptance.r_threshold
    for run in result.target_runs:
        failure = run.acceptance.first_ratio_failure if run.acceptance else None
        if failure is not None:
            assert run.acceptance is not None
            alone = [r.name for r in run.acceptance.ratios if r.isolated_cause == OWN]
            own = f"; R above {threshold:g} alone: {', '.join(alone)}" if alone else ""
            display(
                show.banner(
                    f"{run.label}: first layer with R above {threshold:g}: {failure.layer} "
                    f"({failure.module_type}, position {failure.position}), R "
                    f"{failure.ratio:.3g}: {failure.note}{own}.",
                    "fail" if alone or failure.cause != INHERITED else "warn",
                )
            )
    _show_table(
        ratio_rows(result),
        f"R-ratio per layer (execution order) and output: the run's RMSE against fp64 "
        f"over the CPU run at its precision's (the fp32 reference's for fp32), never "
        f"below 1.3e-6 x the output's RMS; a layer above {threshold:g} also re-run alone "
        f"on the reference's inputs (own or inherited); '(value)': fewer than "
        f"{min_ratio_elements(threshold)} elements, so its floor is the precision's "
        f"tolerance for its size; AWS: R near 1 healthy, above {threshold:g} a bug",
        when_empty="No run has an R-ratio (see the notes).",
    )


def _steps(values: list[float]) -> str:
    return ", ".join("never" if not math.isfinite(v) else f"{v:g}" for v in values)


def convergence_rows(result: NumericsResult) -> list[dict[str, Any]]:
    """Steps to the target held-out loss, reference and candidate runs, the band the RCP
    checker's t-test allows, and the outcome."""
    studies = [
        (run.label, run.acceptance.convergence)
        for run in result.target_runs
        if run.acceptance is not None and run.acceptance.convergence is not None
    ]
    if result.recommended_convergence is not None:
        studies.append(("notebook 04's batch", result.recommended_convergence))
    rows = []
    for name, study in studies:
        band = (
            f"{study.fastest_allowed:.3g} to {study.slowest_allowed:.3g}"
            if study.fastest_allowed is not None and study.slowest_allowed is not None
            else None
        )
        rows.append(
            {
                "candidate": name,
                "target held-out loss": study.target_loss,
                "reference steps (olympic mean)": study.baseline_mean,
                "candidate steps (olympic mean)": study.candidate_mean,
                "allowed mean": band,
                "reference runs": _steps(study.baseline_steps),
                "candidate runs": _steps(study.candidate_steps),
                "p (one-sided)": study.p_value,
                "outcome": {True: "pass", False: "FAIL", None: "not tested"}[study.passed]
                + (f" ({study.verdict})" if study.verdict else ""),
                "reading": study.note,
            }
        )
    return rows


def convergence_table(result: NumericsResult) -> None:
    settings = result.settings
    _show_table(
        convergence_rows(result),
        f"Steps to reach the target held-out loss (MLPerf RCP checker): "
        f"{2 * settings.convergence_seeds} reference runs of "
        f"{settings.convergence_steps} steps, {settings.convergence_seeds} candidate runs "
        f"of up to {2 * settings.convergence_steps}, each its own seed, dropout on; "
        "olympic means (best and worst dropped) and the band an equal-variance t-test "
        "allows; reference: the fp32 reference, or the original batch for notebook 04's",
        when_empty="No convergence study ran.",
    )
