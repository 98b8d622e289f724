"""Figures for notebook 03, built without pyplot (as workbench.baseline.plots does), so they
work under the Agg backend and never pile up in pyplot's global state."""

from __future__ import annotations

import math
from typing import Any

from matplotlib.axes import Axes
from matplotlib.figure import Figure

from workbench.numerics.metrics import budget_of
from workbench.numerics.records import OWN, FirstDivergence, NumericsResult, RunResult
from workbench.numerics.views import sweep_runs

# Log axes cannot show zero: an exact match is drawn at this floor (the axis label says so).
FLOOR = 1e-12
FAIL_COLOR = "tab:red"
CAUSE_MARKERS = {OWN: "*", "inherited": "v", "unknown": "X"}
# One hollow marker shape per series, largest first: a series drawn over an identical one
# leaves the earlier one's outline visible around it.
SERIES_MARKERS = ("o", "s", "D", "^", "v", "P", "X", "h")


def _outside_legend(ax: Axes, fontsize: int = 7) -> None:
    """The legend right of the axes, where it never covers data."""
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0, fontsize=fontsize)


def _same_as(series: list[tuple[str, list[float]]]) -> list[str]:
    """Each label, with a note naming an earlier series it is identical to (which would
    otherwise hide under it)."""
    labels = []
    for i, (label, values) in enumerate(series):
        twin = next(
            (
                other
                for other, earlier in series[:i]
                if len(earlier) == len(values)
                and all(
                    a == b or (math.isnan(a) and math.isnan(b))
                    for a, b in zip(earlier, values, strict=True)
                )
            ),
            None,
        )
        labels.append(f"{label} (identical to {twin})" if twin else label)
    return labels


def _marker_style(index: int) -> dict[str, Any]:
    return {
        "marker": SERIES_MARKERS[index % len(SERIES_MARKERS)],
        "ms": max(3.0, 9.0 - 1.0 * index),
        "mfc": "none",
    }


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
        names = [c.title for c in run.layers]
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
        ax.scatter(
            failing,
            [errors[i] for i in failing],
            color=FAIL_COLOR,
            zorder=3,
            label="flagged (dynamo rule)",
        )
        if run.first_divergence is not None:
            _mark_divergence(ax, run.first_divergence, errors)
        ax.set_yscale("log")
        _layer_axis(ax, names)
        ax.set_title(run.label, fontsize=10)
        _outside_legend(ax)
    for ax in axes[len(runs) :]:
        ax.set_visible(False)
    figure.supxlabel(f"leaf modules in execution order (exact matches drawn at {FLOOR:g})")
    return figure


def _mark_divergence(ax: Axes, divergence: FirstDivergence, errors: list[float]) -> None:
    """The first diverging layer: a line, its cause's marker and its name."""
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
    own = divergence.attribution.own
    factor = f", {own.factor:.3g}x its band" if own and math.isfinite(own.factor) else ""
    ax.annotate(
        f"first divergence: {divergence.title}{factor}",
        (index, errors[index]),
        textcoords="offset points",
        xytext=(8, -14),
        fontsize=8,
        color=FAIL_COLOR,
    )


def precision_sweep(result: NumericsResult) -> Figure:
    """Relative error of every layer output for each precision, eager on the target, with the
    fp32 reference's own error against fp64 as the floor any run can reach."""
    runs = sweep_runs(result)
    if not runs:
        return _message("No eager run on the target completed: no precision sweep.")
    titles = {c.name: c.title for r in runs for c in r.layers}
    names = list(titles)
    figure = Figure(figsize=(max(8.5, 0.35 * len(names) + 2.5), 4.2), layout="constrained")
    ax = figure.subplots()
    reference = {c.name: c.metrics.reference_relative_l2_vs_fp64 for r in runs for c in r.layers}
    ax.plot(
        range(len(names)),
        [_positive(reference.get(n)) for n in names],
        ls="--",
        color="0.4",
        label="fp32 reference vs fp64",
    )
    series = []
    for run in runs:
        by_name = {c.name: c.metrics.relative_l2 for c in run.layers}
        series.append((run.run["precision"], [_positive(by_name.get(n)) for n in names]))
    for index, ((_, values), label) in enumerate(zip(series, _same_as(series), strict=True)):
        ax.plot(range(len(names)), values, lw=1, label=label, **_marker_style(index))
    ax.set_yscale("log")
    ax.set_ylabel("||run - reference|| / ||reference|| (log)")
    _layer_axis(ax, [titles[n] for n in names])
    ax.set_title(f"Precision sweep, eager on {result.target['name']}", fontsize=10)
    _outside_legend(ax, 8)
    return figure


def gradient_errors(result: NumericsResult) -> Figure:
    """Relative error of every parameter's gradient after one backward, per run (log scale);
    a hollow marker is a gradient that fails the rule."""
    runs = [r for r in result.runs if r.status == "ok" and r.gradients]
    if not runs:
        return _message("No run produced gradients to compare.")
    names = list(dict.fromkeys(c.name for r in runs for c in r.gradients))
    figure = Figure(figsize=(max(8.5, 0.35 * len(names) + 2.5), 4.2), layout="constrained")
    ax = figure.subplots()
    series = []
    for run in runs:
        by_name = {c.name: c for c in run.gradients}
        series.append(
            (
                run.label,
                [
                    _positive(by_name[n].metrics.relative_l2) if n in by_name else math.nan
                    for n in names
                ],
            )
        )
    labels = _same_as(series)
    for index, run in enumerate(runs):
        by_name = {c.name: c for c in run.gradients}
        xs = [i for i, n in enumerate(names) if n in by_name]
        values = [_positive(by_name[names[i]].metrics.relative_l2) for i in xs]
        (line,) = ax.plot(xs, values, lw=0.8, label=labels[index], **_marker_style(index))
        failing = [i for i, x in enumerate(xs) if not by_name[names[x]].verdict.passed]
        ax.scatter(
            [xs[i] for i in failing],
            [values[i] for i in failing],
            s=110,
            facecolors="none",
            edgecolors=line.get_color(),
        )
    ax.set_yscale("log")
    ax.set_ylabel("gradient ||run - reference|| / ||reference|| (log)")
    _layer_axis(ax, names)
    ax.set_title("Gradient error by parameter (ringed: flagged by the dynamo rule)", fontsize=10)
    _outside_legend(ax)
    return figure


def loss_curves(result: NumericsResult) -> Figure:
    """Reference and run losses over the optimizer steps, and their gap on a log scale."""
    runs = [r for r in result.runs if r.status == "ok" and r.losses]
    figure = Figure(figsize=(14, 4.2), layout="constrained")
    curves, gaps = figure.subplots(1, 2)
    steps = range(1, len(result.reference_losses) + 1)
    curves.plot(steps, result.reference_losses, color="black", lw=2, label="fp32 reference")
    if result.fp64_losses:
        curves.plot(steps, result.fp64_losses, color="0.5", ls=":", label="fp64")
    series = [("fp32 reference", result.reference_losses)] + [(r.label, r.losses) for r in runs]
    labels = _same_as(series)[1:]
    for index, run in enumerate(runs):
        style = _marker_style(index)
        (line,) = curves.plot(
            range(1, len(run.losses) + 1), run.losses, lw=1, label=labels[index], **style
        )
        gap = [
            _positive(abs(a - b)) for a, b in zip(run.losses, result.reference_losses, strict=False)
        ]
        gaps.plot(range(1, len(gap) + 1), gap, lw=1, color=line.get_color(), **style)
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
    # One legend for both panels, right of the gaps, where it covers neither.
    handles, names = curves.get_legend_handles_labels()
    gaps.legend(
        handles,
        names,
        loc="upper left",
        bbox_to_anchor=(1.01, 1.0),
        borderaxespad=0.0,
        fontsize=7,
    )
    gaps.set_yscale("log")
    gaps.set_xlabel("optimizer step")
    gaps.set_ylabel(f"|run - reference| loss (log; equal drawn at {FLOOR:g})")
    gaps.set_title("Gap to the reference (NaN steps are not drawn)", fontsize=10)
    return figure
