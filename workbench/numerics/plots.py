"""Figures for notebook 03, built without pyplot (as workbench.baseline.plots does), so they work
under the Agg backend and never pile up in pyplot's global state."""

from __future__ import annotations

import math

from matplotlib.axes import Axes
from matplotlib.figure import Figure

from workbench.numerics.metrics import budget_of
from workbench.numerics.records import OWN, NumericsResult, RunResult
from workbench.numerics.views import sweep_runs

# Log axes cannot show zero: an exact match is drawn at this floor (the axis label says so).
FLOOR = 1e-12
FAIL_COLOR = "tab:red"
CAUSE_MARKERS = {OWN: "*", "inherited": "v", "unknown": "X"}


def _positive(value: float | None) -> float:
    if value is None or not math.isfinite(value):
        return math.nan
    return max(value, FLOOR)


def _message(text: str) -> Figure:
    figure = Figure(figsize=(6, 1.2))
    figure.text(0.5, 0.5, text, ha="center", va="center")
    return figure


def _layer_axis(ax: Axes, names: list[str]) -> None:
    ax.set_xticks(range(len(names)))
    # Long models get every n-th name, so the labels stay readable.
    step = max(1, len(names) // 30)
    ax.set_xticklabels([n if i % step == 0 else "" for i, n in enumerate(names)], rotation=90)
    ax.tick_params(axis="x", labelsize=7)


def _ok_runs(result: NumericsResult) -> list[RunResult]:
    return [r for r in result.runs if r.status == "ok" and r.layers]


def layer_errors(result: NumericsResult) -> Figure:
    """Per run: each layer's RMSE against fp64 (the rule's measure, log scale) and the budget
    the rule allows; failing layers in red, the first diverging layer marked and named."""
    runs = _ok_runs(result)
    if not runs:
        return _message("No run recorded any layer output.")
    columns = 2 if len(runs) > 1 else 1
    rows = math.ceil(len(runs) / columns)
    figure = Figure(figsize=(6.5 * columns, 3.4 * rows), layout="constrained")
    axes = figure.subplots(rows, columns, squeeze=False).ravel()
    rule = result.settings.rule
    for ax, run in zip(axes, runs, strict=False):
        names = [c.name for c in run.layers]
        has_fp64 = all(c.metrics.target_rmse_vs_fp64 is not None for c in run.layers)
        if has_fp64:
            errors = [_positive(c.metrics.target_rmse_vs_fp64) for c in run.layers]
            budgets = [_positive(budget_of(c.metrics, rule)) for c in run.layers]
            ax.plot(range(len(names)), budgets, ls="--", color="0.5", label="budget (rule)")
            ax.set_ylabel("RMSE vs fp64 (log)")
        else:
            errors = [_positive(c.metrics.rmse) for c in run.layers]
            ax.set_ylabel("RMSE vs reference (log)")
        ax.plot(range(len(names)), errors, marker=".", color="tab:blue", label="run")
        failing = [i for i, c in enumerate(run.layers) if not c.verdict.passed]
        ax.scatter(failing, [errors[i] for i in failing], color=FAIL_COLOR, zorder=3, label="fails")
        divergence = run.first_divergence
        if divergence is not None:
            index = divergence.position - 1
            ax.axvline(index, color=FAIL_COLOR, lw=1, ls=":")
            ax.scatter(
                [index],
                [errors[index]],
                marker=CAUSE_MARKERS[divergence.attribution.cause],
                s=160,
                color=FAIL_COLOR,
                zorder=4,
            )
            ax.annotate(
                f"first divergence: {divergence.layer} ({divergence.attribution.cause})",
                (index, errors[index]),
                textcoords="offset points",
                xytext=(8, -14),
                fontsize=8,
                color=FAIL_COLOR,
            )
        ax.set_yscale("log")
        _layer_axis(ax, names)
        ax.set_title(run.label, fontsize=10)
        ax.legend(loc="lower right", fontsize=7)
    for ax in axes[len(runs) :]:
        ax.set_visible(False)
    figure.supxlabel(f"leaf modules in execution order (exact matches drawn at {FLOOR:g})")
    return figure


def precision_sweep(result: NumericsResult) -> Figure:
    """Relative error of every layer output for each precision, eager on the target, with the
    fp32 reference's own error against fp64 as the floor any run can reach."""
    runs = sweep_runs(result)
    if not runs:
        return _message("No eager run on the target completed: no precision sweep.")
    names = list(dict.fromkeys(c.name for r in runs for c in r.layers))
    figure = Figure(figsize=(max(7.0, 0.35 * len(names)), 4.2), layout="constrained")
    ax = figure.subplots()
    reference = {c.name: c.metrics.reference_relative_l2_vs_fp64 for r in runs for c in r.layers}
    ax.plot(
        range(len(names)),
        [_positive(reference.get(n)) for n in names],
        ls="--",
        color="0.4",
        label="fp32 reference vs fp64",
    )
    for run in runs:
        by_name = {c.name: c.metrics.relative_l2 for c in run.layers}
        ax.plot(
            range(len(names)),
            [_positive(by_name.get(n)) for n in names],
            marker=".",
            label=run.run["precision"],
        )
    ax.set_yscale("log")
    ax.set_ylabel("||run - reference|| / ||reference|| (log)")
    _layer_axis(ax, names)
    ax.set_title(f"Precision sweep, eager on {result.target['name']}", fontsize=10)
    ax.legend(fontsize=8)
    return figure


def gradient_errors(result: NumericsResult) -> Figure:
    """Relative error of every parameter's gradient after one backward, per run (log scale);
    a hollow marker is a gradient that fails the rule."""
    runs = [r for r in result.runs if r.status == "ok" and r.gradients]
    if not runs:
        return _message("No run produced gradients to compare.")
    names = list(dict.fromkeys(c.name for r in runs for c in r.gradients))
    figure = Figure(figsize=(max(7.0, 0.35 * len(names)), 4.2), layout="constrained")
    ax = figure.subplots()
    for run in runs:
        by_name = {c.name: c for c in run.gradients}
        xs = [i for i, n in enumerate(names) if n in by_name]
        values = [_positive(by_name[names[i]].metrics.relative_l2) for i in xs]
        (line,) = ax.plot(xs, values, marker="o", ms=4, lw=0.8, label=run.label)
        failing = [i for i, x in enumerate(xs) if not by_name[names[x]].verdict.passed]
        ax.scatter(
            [xs[i] for i in failing],
            [values[i] for i in failing],
            s=60,
            facecolors="none",
            edgecolors=line.get_color(),
        )
    ax.set_yscale("log")
    ax.set_ylabel("gradient ||run - reference|| / ||reference|| (log)")
    _layer_axis(ax, names)
    ax.set_title("Gradient error by parameter (hollow: fails the rule)", fontsize=10)
    ax.legend(fontsize=7)
    return figure


def loss_curves(result: NumericsResult) -> Figure:
    """Reference and run losses over the optimizer steps, and their gap on a log scale."""
    runs = [r for r in result.runs if r.status == "ok" and r.losses]
    figure = Figure(figsize=(12, 4), layout="constrained")
    curves, gaps = figure.subplots(1, 2)
    steps = range(1, len(result.reference_losses) + 1)
    curves.plot(steps, result.reference_losses, color="black", lw=2, label="fp32 reference")
    if result.fp64_losses:
        curves.plot(steps, result.fp64_losses, color="0.5", ls=":", label="fp64")
    for run in runs:
        (line,) = curves.plot(range(1, len(run.losses) + 1), run.losses, lw=1, label=run.label)
        gap = [
            _positive(abs(a - b)) for a, b in zip(run.losses, result.reference_losses, strict=False)
        ]
        gaps.plot(range(1, len(gap) + 1), gap, lw=1, color=line.get_color(), label=run.label)
        bad = next((i for i, v in enumerate(run.losses, 1) if not math.isfinite(v)), None)
        if bad is not None:
            # A NaN loss draws nothing: mark where it starts instead.
            for ax in (curves, gaps):
                ax.axvline(bad, color=line.get_color(), ls="--", lw=1)
            curves.annotate(
                f"{run.label}: NaN/Inf from step {bad}",
                (bad, 0.95),
                xycoords=("data", "axes fraction"),
                fontsize=8,
                color=line.get_color(),
            )
    curves.set_xlabel("optimizer step")
    curves.set_ylabel("loss on the fixed batch")
    curves.set_title("Reference vs run loss curves", fontsize=10)
    curves.legend(fontsize=7)
    gaps.set_yscale("log")
    gaps.set_xlabel("optimizer step")
    gaps.set_ylabel(f"|run - reference| loss (log; equal drawn at {FLOOR:g})")
    gaps.set_title("Gap to the reference (NaN steps are not drawn)", fontsize=10)
    return figure
