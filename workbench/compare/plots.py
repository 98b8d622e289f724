"""Figures for compare.html: each timing metric over the runs compared, regressions marked."""

from __future__ import annotations

from matplotlib.figure import Figure

from workbench.compare.records import IMPROVEMENT, REGRESSION, Comparison

# Seconds read better as milliseconds at step scale; other units are shown as recorded.
_SCALE = {"s": (1e3, "ms")}


def timing_series(comparison: Comparison) -> Figure | None:
    """One small panel per timing metric (steady median and p99, throughput, first call, peak
    host and device memory) of each step, runs left to right; a panel needs two runs with it."""
    shown = [
        c
        for c in comparison.changes
        if c.area == "timing" and sum(v is not None for v in c.series) >= 2
    ]
    if not shown:
        return None
    columns = min(3, len(shown))
    rows = (len(shown) + columns - 1) // columns
    figure = Figure(figsize=(4.6 * columns, 2.6 * rows), layout="constrained")
    axes = figure.subplots(rows, columns, squeeze=False).ravel()
    labels = [str(i + 1) for i in range(len(comparison.runs))]
    for ax, change in zip(axes, shown, strict=False):
        factor, unit = _SCALE.get(change.unit, (1.0, change.unit))
        points = [(i, v * factor) for i, v in enumerate(change.series) if v is not None]
        ax.plot([i for i, _ in points], [v for _, v in points], marker="o", color="#4a6fa5")
        colour = {REGRESSION: "#c62828", IMPROVEMENT: "#2e8b3a"}.get(change.status)
        if colour and change.series[-1] is not None:
            ax.plot(
                [len(change.series) - 1],
                [change.series[-1] * factor],
                marker="o",
                markersize=11,
                color=colour,
                linestyle="none",
                label=change.status,
            )
            ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8)
        ax.set_title(f"{change.name} ({change.status})", fontsize=8)
        ax.set_xticks(range(len(labels)), labels)
        ax.set_xlabel("run (oldest first)", fontsize=8)
        ax.set_ylabel(unit, fontsize=8)
        ax.set_ylim(bottom=0)
    for ax in axes[len(shown) :]:
        ax.set_visible(False)
    return figure
