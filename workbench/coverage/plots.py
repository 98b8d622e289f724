"""Figures for notebook 02: matplotlib Figures built without pyplot (Agg-safe, no global state)."""

from __future__ import annotations

from matplotlib.figure import Figure
from matplotlib.patches import Patch

from workbench.coverage.capture import PHASES
from workbench.coverage.records import CoverageReport
from workbench.coverage.support import FALLS_BACK, SUPPORTED, UNKNOWN

VERDICT_COLORS = {SUPPORTED: "tab:green", UNKNOWN: "tab:gray", FALLS_BACK: "tab:red"}
_ORDER = (SUPPORTED, UNKNOWN, FALLS_BACK)


def coverage_bars(report: CoverageReport) -> Figure:
    """Per Neuron flavour, the share of distinct ops and of calls by verdict: a flavour can look
    well covered by distinct ops while its few gaps carry most of the calls."""
    summaries = list(report.summaries().values())
    figure = Figure(figsize=(11, 1.0 + 0.9 * len(summaries)), layout="constrained")
    axes = figure.subplots(1, 2, sharey=True)
    labels = [s.label for s in summaries]
    for ax, attribute, title in (
        (axes[0], "distinct", "distinct ops"),
        (axes[1], "calls", "calls in one training step"),
    ):
        for row, summary in enumerate(summaries):
            counts = getattr(summary, attribute)
            total = sum(counts.values()) or 1
            left = 0.0
            for verdict in _ORDER:
                share = counts[verdict] / total
                if not share:
                    continue
                ax.barh(row, share, left=left, color=VERDICT_COLORS[verdict])
                if share > 0.07:
                    ax.text(
                        left + share / 2,
                        row,
                        str(counts[verdict]),
                        ha="center",
                        va="center",
                        color="white",
                        fontsize=9,
                    )
                left += share
        ax.set_xlim(0, 1)
        ax.set_title(f"by {title}")
        ax.set_xlabel("share")
    axes[0].set_yticks(range(len(labels)), labels)
    figure.legend(
        [Patch(color=VERDICT_COLORS[v]) for v in _ORDER],
        list(_ORDER),
        loc="outside lower center",
        ncols=3,
    )
    return figure


def phase_calls(report: CoverageReport) -> Figure:
    """Calls per phase, split by distinct op: where a step's dispatch work goes (the optimizer
    of a small model often dispatches more ops than its forward)."""
    totals = report.reference.phase_totals()
    figure = Figure(figsize=(6, 2.6), layout="constrained")
    ax = figure.subplots()
    calls = [totals[p]["calls"] for p in PHASES]
    ops = [totals[p]["ops"] for p in PHASES]
    bars = ax.bar(PHASES, calls, color=["tab:blue", "tab:orange", "tab:purple"])
    for bar, n_ops in zip(bars, ops, strict=True):
        ax.annotate(
            f"{n_ops} distinct ops",
            (bar.get_x() + bar.get_width() / 2, bar.get_height()),
            ha="center",
            va="bottom",
            fontsize=8,
        )
    ax.set_ylabel("op calls")
    ax.set_title("ATen op calls per phase of one training step")
    ax.margins(y=0.15)
    return figure
