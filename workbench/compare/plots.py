"""Figures for compare.html: each timing metric over the runs compared, regressions marked."""

from __future__ import annotations

from matplotlib.figure import Figure

from workbench.compare.records import IMPROVEMENT, REGRESSION, Comparison


def timing_series(comparison: Comparison) -> Figure | None:
    """One small panel per steady-state median and first-call metric, runs left to right."""
    shown = [
        c
        for c in comparison.changes
        if c.area == "timing"
        and (c.name.endswith("steady median") or c.name.endswith("first call"))
        and sum(v is not None for v in c.series) >= 2
    ]
    if not shown:
        return None
    columns = min(2, len(shown))
    rows = (len(shown) + columns - 1) // columns
    figure = Figure(figsize=(6.2 * columns, 2.8 * rows), layout="constrained")
    axes = figure.subplots(rows, columns, squeeze=False).ravel()
    labels = [str(i + 1) for i in range(len(comparison.runs))]
    for ax, change in zip(axes, shown, strict=False):
        points = [(i, v) for i, v in enumerate(change.series) if v is not None]
        ax.plot([i for i, _ in points], [v * 1e3 for _, v in points], marker="o", color="#4a6fa5")
        colour = {REGRESSION: "#c62828", IMPROVEMENT: "#2e8b3a"}.get(change.status)
        if colour and change.series[-1] is not None:
            ax.plot(
                [len(change.series) - 1],
                [change.series[-1] * 1e3],
                marker="o",
                markersize=11,
                color=colour,
                linestyle="none",
                label=change.status,
            )
            ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8)
        ax.set_title(f"{change.name} ({change.status})", fontsize=9)
        ax.set_xticks(range(len(labels)), labels)
        ax.set_xlabel("run (oldest first)", fontsize=8)
        ax.set_ylabel("ms", fontsize=8)
        ax.set_ylim(bottom=0)
    for ax in axes[len(shown) :]:
        ax.set_visible(False)
    return figure
