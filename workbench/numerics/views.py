"""What notebook 03 shows and saves: the headline, verdict tables, the reading of what to do,
and the 03_numerics.json payload. Every shown string goes through workbench.markup."""

from __future__ import annotations

from typing import Any

from IPython.display import display

from workbench import markup as show
from workbench.numerics.metrics import budget_of
from workbench.numerics.records import NumericsResult, RunResult, headline, reading


def _verdict_cell(run: RunResult) -> str:
    if run.status != "ok" or run.verdict is None:
        return f"could not run ({run.failed_phase})"
    return "pass" if run.verdict.passed else "FAIL"


def _divergence_cell(run: RunResult) -> str:
    if run.first_divergence is None:
        return "" if run.status == "ok" else "-"
    return f"{run.first_divergence.layer} ({run.first_divergence.attribution.cause})"


def _nonfinite_cell(run: RunResult) -> str:
    counts = [c.metrics.new_nonfinite for c in (*run.layers, *run.final_comparisons)]
    total = sum(counts)
    return f"{total} new" if total else "none new"


def _loss_delta(run: RunResult) -> float | None:
    if run.loss is None:
        return None
    return run.loss.metrics.max_abs


def verdict_rows(result: NumericsResult) -> list[dict[str, Any]]:
    rows = []
    for run in result.runs:
        task = run.task
        rows.append(
            {
                "run": run.label,
                "role": run.role,
                "verdict": _verdict_cell(run),
                "what fails": (
                    run.verdict.summary if run.verdict else (run.error or "").splitlines()[0][:160]
                ),
                "first diverging layer": _divergence_cell(run),
                "vs same precision on CPU": run.matched.summary if run.matched else "",
                "outputs max abs": run.outputs[0].metrics.max_abs if run.outputs else None,
                "loss |diff|": _loss_delta(run),
                "final loss": run.losses[-1] if run.losses else None,
                "task metric (ref -> run)": (
                    f"{task.name} {task.reference_final:.4g} -> {task.target_final:.4g}"
                    if task and task.name and task.reference_final is not None
                    else ""
                ),
                "NaN/Inf": _nonfinite_cell(run) if run.status == "ok" else "",
                "seconds": run.seconds,
            }
        )
    return rows


def verdicts(result: NumericsResult) -> None:
    """The headline, the rule in words, and one verdict row per run."""
    runs = result.target_runs
    all_pass = all(r.status == "ok" and r.verdict and r.verdict.passed for r in runs)
    display(show.banner(headline(result), "ok" if all_pass else "fail"))
    display(show.banner(f"Rule: {result.rule_statement}", "info"))
    display(
        show.table(
            verdict_rows(result),
            caption=(
                f"Each run against {result.reference_label} (yardstick {result.yardstick_label}); "
                f"batch: {result.batch.description}"
            ),
        )
    )


def divergence_rows(result: NumericsResult) -> list[dict[str, Any]]:
    rows = []
    for run in result.runs:
        divergence = run.first_divergence
        if divergence is None:
            continue
        isolated = divergence.attribution.isolated
        rows.append(
            {
                "run": run.label,
                "layer": divergence.layer,
                "position": f"{divergence.position} of {len(run.layers)}",
                "cause": divergence.attribution.cause,
                "RMSE vs fp64, full run": divergence.full_run.metrics.target_rmse_vs_fp64,
                "RMSE vs fp64, on reference inputs": (
                    isolated.metrics.target_rmse_vs_fp64 if isolated else None
                ),
                "budget": budget_of(divergence.full_run.metrics, result.settings.rule),
                "max abs, full run": divergence.full_run.metrics.max_abs,
                "max abs, on reference inputs": isolated.metrics.max_abs if isolated else None,
                "why": divergence.full_run.verdict.reason,
            }
        )
    return rows


def first_divergences(result: NumericsResult) -> None:
    rows = divergence_rows(result)
    if not rows:
        display(show.banner("No run has a diverging layer.", "ok"))
        return
    display(
        show.table(
            rows,
            caption=(
                "First diverging layer per run: its error in the full run, and re-run alone on "
                "the reference's inputs (own: still fails there; inherited: passes there)"
            ),
        )
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
        row: dict[str, Any] = {"layer": name}
        if reference is not None:
            row["fp32 reference vs fp64"] = reference.metrics.reference_relative_l2_vs_fp64
        for run, layers in zip(runs, by_run, strict=True):
            comparison = layers.get(name)
            cell: float | str | None = comparison.metrics.relative_l2 if comparison else None
            if comparison and not comparison.verdict.passed:
                cell = f"{cell:.3g} (fails)"
            row[run.run["precision"]] = cell
        rows.append(row)
    return rows


def precision_sweep_table(result: NumericsResult) -> None:
    rows = sweep_rows(result)
    if not rows:
        display(show.banner("No eager run on the target completed: no precision sweep.", "warn"))
        return
    display(
        show.table(
            rows,
            caption=(
                "Relative error ||run - reference|| / ||reference|| of each layer output, eager on "
                f"{result.target['name']}; the first column is the fp32 reference's own error "
                "against fp64"
            ),
        )
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
    display(show.table(gradient_rows(result), caption="Gradients after one backward, by run"))


def training_rows(result: NumericsResult) -> list[dict[str, Any]]:
    rows = []
    for run in result.runs:
        if run.status != "ok" or run.trajectory is None:
            continue
        task = run.task
        rows.append(
            {
                "run": run.label,
                "trajectory": "pass" if run.trajectory.verdict.passed else "FAIL",
                "max |loss diff| over steps": run.trajectory.metrics.max_abs,
                "final loss (reference)": result.reference_losses[-1],
                "final loss (run)": run.losses[-1] if run.losses else None,
                "task metric": task.name if task else "",
                "initial (ref / run)": (
                    f"{task.reference_initial:.4g} / {task.target_initial:.4g}"
                    if task and task.name and task.reference_initial is not None
                    else ""
                ),
                "final (ref / run)": (
                    f"{task.reference_final:.4g} / {task.target_final:.4g}"
                    if task and task.name and task.reference_final is not None
                    else ""
                ),
                "same arg-max as reference": task.prediction_agreement if task else None,
            }
        )
    return rows


def training_table(result: NumericsResult) -> None:
    display(
        show.table(
            training_rows(result),
            caption=(
                f"Loss trajectory over {result.settings.steps} optimizer steps on the fixed "
                "batch, and the task metric on the first and the last step's outputs"
            ),
        )
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
    for kind, text in reading(result):
        display(show.banner(text, kind))
