"""What notebook 03 shows and saves: the headline, verdict tables, the reading of what to do,
and the 03_numerics.json payload. Every shown string goes through workbench.display."""

from __future__ import annotations

import math
from dataclasses import asdict
from typing import Any

from IPython.display import display

from workbench import display as show
from workbench.numerics_capture import CAST
from workbench.numerics_metrics import DTYPE_TOLERANCES, RULE_NONFINITE, budget_of, dtype_name
from workbench.numerics_records import INHERITED, OWN, ROLE_TARGET, NumericsResult, RunResult

# Advice when a layer's error is its own, by precision recipe (reference: neuron.md 2.3 for the
# Trainium bf16 recipes).
_OWN_ADVICE = {
    "fp16": "keep it in fp32 or use bf16 (fp16's range ends at 65504)",
    "bf16-cast": (
        "keep it in fp32, or use bf16 autocast (fp32 weights); pure bf16 training on Trainium "
        "wants stochastic rounding (NEURON_RT_STOCHASTIC_ROUNDING_EN=1) or fp32 master weights"
    ),
    "bf16-autocast": (
        "keep it in fp32 (run it outside autocast) if the loss curve or the task metric suffers"
    ),
    "fp32 compiled": (
        "the compiler changes its result: compare it compiled and eager, and look for "
        "reduced-precision settings (float32 matmul precision, NEURON_CC_FLAGS --auto-cast)"
    ),
    "fp32 eager": (
        "this device's kernel computes it differently: check the float32 matmul precision and "
        "TF32 flags and, on Neuron, NEURON_CC_FLAGS --auto-cast"
    ),
}


def _short(run: RunResult) -> str:
    return f"{run.run['precision']} {'compiled' if run.run['compiled'] else 'eager'}"


def _own_advice(run: RunResult) -> str:
    precision = run.run["precision"]
    if precision.startswith("fp16"):
        return _OWN_ADVICE["fp16"]
    if precision == "fp32":
        return _OWN_ADVICE["fp32 compiled" if run.run["compiled"] else "fp32 eager"]
    return _OWN_ADVICE[precision]


def _first_nonfinite_step(losses: list[float]) -> int | None:
    return next((i for i, v in enumerate(losses, 1) if not math.isfinite(v)), None)


def headline(result: NumericsResult) -> str:
    """One sentence that reads the result."""
    runs = result.target_runs
    ok = [r for r in runs if r.status == "ok" and r.verdict is not None]
    passed = [r for r in ok if r.verdict.passed]
    text = (
        f"On {result.target['name']}, {len(passed)} of {len(runs)} runs match "
        f"{result.reference_label} under the fp64 RMSE rule"
    )
    if passed:
        text += f" ({', '.join(_short(r) for r in passed)})"
    failing = [r for r in ok if not r.verdict.passed]
    if failing:
        first = failing[0]
        divergence = first.first_divergence
        if divergence:
            cause = divergence.attribution.cause
            text += f"; {_short(first)} first diverges at {divergence.layer} ({cause} error)"
        else:
            text += f"; {_short(first)} fails at {first.verdict.failed[0]}"
    broken = [r for r in runs if r.status != "ok"]
    if broken:
        text += f"; {len(broken)} could not run"
    return text + "."


def _task_clause(run: RunResult, steps: int) -> str:
    task = run.task
    if task is None or not task.name or task.reference_final is None:
        return ""
    return (
        f"; {task.name} after {steps} steps {task.target_final:.4g} against the reference's "
        f"{task.reference_final:.4g}"
    )


def _failing_reading(run: RunResult, steps: int) -> tuple[str, str]:
    """(kind, sentence) for a run whose verdict failed."""
    label = run.label
    precision = run.run["precision"]
    divergence = run.first_divergence
    task = _task_clause(run, steps)
    nan_step = _first_nonfinite_step(run.losses)
    if divergence and divergence.full_run.verdict.rule == RULE_NONFINITE:
        return "fail", (
            f"{label}: NaN/Inf first appears in layer {divergence.layer} "
            f"({divergence.attribution.cause} error): {_own_advice(run)}."
        )
    if nan_step is not None:
        return "fail", (
            f"{label}: the loss becomes NaN/Inf at step {nan_step} of {steps} while the "
            "reference's stays finite: pure 16-bit training keeps weights and optimizer state "
            "in 16 bits, where small values (Adam's squared gradients, its eps 1e-8) underflow "
            "and large ones overflow; train with autocast (fp32 weights) or bf16."
        )
    if run.matched is not None and run.matched.passed:
        where = f" (first diverging layer {divergence.layer}, as on the CPU)" if divergence else ""
        return "warn", (
            f"{label} differs from fp32 no more than {precision} does in {run.matched.baseline}"
            f"{where}: the target adds no error beyond the precision's own; accept it if the "
            f"loss curve and the task metric hold{task}."
        )
    extra = ""
    if run.matched is not None:
        extra = f" It also exceeds {precision}'s own error on the CPU ({run.matched.summary})."
    if divergence and divergence.attribution.cause == OWN:
        # A 16-bit run differing from fp32 in its own layers is the precision's trade-off, to
        # weigh against the loss curve; an fp32 run doing so computes something else.
        kind = "warn" if run.run["precision"] != "fp32" else "fail"
        others = [a.layer for a in run.attributions if a.cause == OWN][1:]
        also = ""
        if others:
            shown = ", ".join(others[:5]) + (
                f" and {len(others) - 5} more" if len(others) > 5 else ""
            )
            also = f" (later layers that also diverge on their own: {shown})"
        return kind, (
            f"{label}: layer {divergence.layer} diverges on its own in {precision}{also}: "
            f"{_own_advice(run)}{task}.{extra}"
        )
    if divergence and divergence.attribution.cause == INHERITED:
        return "fail", (
            f"{label}: the first diverging recorded layer, {divergence.layer}, inherits its "
            "error: it arises in code between recorded layers (functional ops in a parent "
            "module's forward, such as attention or a residual add, before "
            f"{divergence.layer}); move that code into a module, or bisect it, to find the "
            f"op{task}.{extra}"
        )
    if divergence:
        return "fail", (
            f"{label}: first diverging layer {divergence.layer}; {divergence.attribution.note}"
            f"{task}.{extra}"
        )
    assert run.verdict is not None
    if run.verdict.failed == ["trajectory"]:
        return "warn", (
            f"{label}: one step matches, but the loss trajectory drifts over {steps} steps: "
            f"the optimizer accumulates the difference{task}.{extra}"
        )
    failed = ", ".join(run.verdict.failed[:3]) or run.verdict.summary
    return "fail", (
        f"{label}: every recorded layer matches but {failed} fail: the difference arises after "
        f"the last leaf module or in the backward pass{task}.{extra}"
    )


def reading(result: NumericsResult) -> list[tuple[str, str]]:
    """What to do, as (kind, sentence) pairs: kind is one of display.BANNER_KINDS."""
    steps = result.settings.steps
    items: list[tuple[str, str]] = []
    runs = result.target_runs
    ok = [r for r in runs if r.status == "ok" and r.verdict is not None]
    if ok and all(r.verdict.passed for r in ok) and len(ok) == len(runs):
        items.append(
            (
                "ok",
                f"Every run matches the reference under the rule: {result.target['name']} "
                "computes the same thing at these precisions.",
            )
        )
    for run in result.runs:
        if run.status != "ok":
            first_line = (run.error or "").splitlines()[0] if run.error else ""
            items.append(("fail", f"{run.label} could not run ({run.failed_phase}): {first_line}"))
        elif run.role == ROLE_TARGET and run.verdict is not None and not run.verdict.passed:
            items.append(_failing_reading(run, steps))
        if run.status == "ok" and run.unmatched_layers:
            items.append(("warn", f"{run.label}: {run.unmatched_layers.describe('layers')}."))
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
            cell = comparison.metrics.relative_l2 if comparison else None
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


def result_data(result: NumericsResult) -> dict[str, Any]:
    """The 03_numerics.json payload: every metric, verdicts with their rule, the settings."""
    rule = result.settings.rule
    return {
        "headline": headline(result),
        "reading": [{"kind": kind, "text": text} for kind, text in reading(result)],
        "rule": {
            "statement": result.rule_statement,
            "multiplier": rule.multiplier,
            "low_precision_multiplier": rule.low_precision_multiplier,
            "rmse_atol": rule.rmse_atol,
            "rtol": rule.rtol if rule.rtol is not None else "per dtype",
            "atol": rule.atol if rule.atol is not None else "per dtype",
            "dtype_tolerances": {
                dtype_name(d): {"rtol": rtol, "atol": atol}
                for d, (rtol, atol) in DTYPE_TOLERANCES.items()
            },
            "max_rel_denominator": "max(|reference|, atol)",
            "cast_means": f"{CAST}: weights and float inputs converted with .to(dtype)",
            "loss_scaling": "none: fp16 runs use no GradScaler, so gradient underflow shows",
        },
        "reference": {
            "run": result.reference_label,
            "yardstick": result.yardstick_label,
            "fp64_error": result.fp64_error,
            "losses": result.reference_losses,
            "fp64_losses": result.fp64_losses,
        },
        "batch": asdict(result.batch),
        "settings": {
            "precisions": list(result.settings.precisions),
            "compiled_precisions": list(result.settings.compiled_precisions),
            "steps": result.settings.steps,
        },
        "numerics_settings": result.numerics_settings,
        "dropout_disabled": result.dropout_disabled,
        "runs": [asdict(run) for run in result.runs],
        "wall_seconds": result.wall_seconds,
    }
