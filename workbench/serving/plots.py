"""Figures for notebook 05: matplotlib Figures built without pyplot (nothing global, nothing
displayed until the notebook shows them)."""

from __future__ import annotations

from matplotlib import colormaps
from matplotlib.figure import Figure

from workbench.serving.records import COMPILED, EAGER, ServingResult
from workbench.timing import percentile_label

MS = 1e3
MODE_STYLE = {COMPILED: ("tab:orange", "-"), EAGER: ("tab:blue", "--")}
CAUSE_COLORS = ("tab:red", "tab:purple", "tab:green", "tab:brown", "tab:gray")


def latency_throughput(result: ServingResult) -> Figure:
    """Tail latency against throughput, one point per batch size and a line per mode, with the
    SLO as a horizontal line: the batch to serve is the rightmost point under it."""
    q = result.settings.quantile
    figure = Figure(figsize=(7.5, 4.2), layout="constrained")
    ax = figure.subplots()
    for mode in result.settings.modes:
        points = [p for p in result.points if p.mode == mode and p.throughput and p.latency]
        if not points:
            continue
        colour, style = MODE_STYLE[mode]
        xs = [p.throughput or 0 for p in points]
        ys = [(p.tail(q) or ("", 0.0, False))[1] * MS for p in points]
        ax.plot(xs, ys, marker="o", color=colour, linestyle=style, label=mode)
        for point, x, y in zip(points, xs, ys, strict=True):
            ax.annotate(f"b{point.batch_size}", (x, y), textcoords="offset points",
                        xytext=(4, 4), fontsize=8)  # fmt: skip
    if result.slo is not None:
        ax.axhline(result.slo.slo_ms, color="tab:red", linestyle=":", label="SLO")
    ax.set_xlabel(f"throughput ({result.throughput_unit})")
    ax.set_ylabel(f"{percentile_label(q)} latency, or max where too few samples (ms)")
    ax.set_title("Latency against throughput, one point per batch size")
    ax.set_ylim(bottom=0)
    if ax.lines:
        ax.legend(loc="upper left")
    return figure


def latency_cdfs(result: ServingResult) -> Figure:
    """The empirical CDF of each batch size's call latency (log time axis)."""
    figure = Figure(figsize=(7.5, 4.2), layout="constrained")
    ax = figure.subplots()
    order = sorted({p.batch_size for p in result.points})
    for point in result.points:
        if point.latency is None:
            continue
        ordered = sorted(point.latency.times)
        n = len(ordered)
        # One colour per batch size (dark: small), the mode's line style.
        colour = colormaps["viridis"](order.index(point.batch_size) / max(len(order) - 1, 1))
        style = MODE_STYLE[point.mode][1]
        label = f"batch {point.batch_size} {point.mode} (n={n})"
        xs, ys = [t * MS for t in ordered], [(i + 1) / n for i in range(n)]
        ax.step(xs, ys, where="post", color=colour, linestyle=style, label=label)
    if result.slo is not None:
        ax.axvline(result.slo.slo_ms, color="tab:red", linestyle=":", label="SLO")
        ax.axhline(result.slo.percentile / 100, color="gray", linestyle=":", linewidth=0.8)
    ax.set_xscale("log")
    ax.set_xlabel("latency per call (ms, log scale)")
    ax.set_ylabel("share of calls at or below")
    ax.set_title("Latency CDF per batch size")
    if ax.lines:
        ax.legend(loc="lower right", fontsize=7)
    return figure


def load_curve(result: ServingResult) -> Figure | None:
    """Open loop: latency tail and queueing delay against the offered rate; None without one."""
    points = [p for p in result.open_loop if p.latency and p.queue and p.rate]
    if not points:
        return None
    figure = Figure(figsize=(7.5, 3.8), layout="constrained")
    ax = figure.subplots()
    rates = [p.rate or 0 for p in points]
    ax.plot(rates, [p.latency.tail(0.99)[1] * MS for p in points if p.latency], marker="o",
            label="latency tail (p99 or max)")  # fmt: skip
    ax.plot(rates, [p.queue.median * MS for p in points if p.queue], marker="s",
            label="queueing delay, median")  # fmt: skip
    ax.plot(rates, [p.compute.median * MS for p in points if p.compute], marker="^",
            label="compute, median")  # fmt: skip
    if result.slo is not None:
        ax.axhline(result.slo.slo_ms, color="tab:red", linestyle=":", label="SLO")
    ax.set_yscale("log")
    ax.set_xlabel("offered rate (requests/s, Poisson)")
    ax.set_ylabel("ms (log scale)")
    ax.set_title("Open loop at batch 1: queueing grows as the rate nears capacity")
    ax.legend(loc="upper left", fontsize=8)
    return figure


def gap_series(result: ServingResult) -> Figure | None:
    """Each gap between consecutive device executions, in order, coloured by its cause."""
    series = result.gaps
    if series is None or not series.gaps:
        return None
    figure = Figure(figsize=(7.5, 3.6), layout="constrained")
    ax = figure.subplots()
    causes = list(dict.fromkeys(series.causes))
    for colour, cause in zip(CAUSE_COLORS, causes, strict=False):
        pairs = enumerate(zip(series.gaps, series.causes, strict=True))
        chosen = [(i, gap * MS) for i, (gap, which) in pairs if which == cause]
        ax.plot([i for i, _ in chosen], [g for _, g in chosen], ".", color=colour, label=cause)
    ax.plot(range(len(series.calls)), [c * MS for c in series.calls], color="lightgray",
            linewidth=1, label="model call")  # fmt: skip
    ax.set_yscale("log")
    ax.set_xlabel("gap number (between request n and n+1)")
    ax.set_ylabel("ms (log scale)")
    ax.set_title(f"Host gaps between device executions: {series.where}")
    ax.legend(loc="upper right", fontsize=7)
    return figure
