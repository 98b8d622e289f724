"""Figures for the reports: matplotlib Figures built without pyplot, so they work under the Agg
backend, never accumulate in pyplot's global state, and display inline in a notebook."""

from __future__ import annotations

from matplotlib.axes import Axes
from matplotlib.figure import Figure

from workbench.baseline import records as phases
from workbench.baseline.records import COMPILED, EAGER, KIND_LABELS, BaselineResult, ConfigResult
from workbench.timing import format_seconds

MODE_COLORS = {EAGER: "tab:blue", COMPILED: "tab:orange"}
MS = 1e3  # seconds to milliseconds


def _kinds(result: BaselineResult) -> list[str]:
    return list(result.settings.kinds)


def _axes_row(count: int, height: float = 3.6) -> tuple[Figure, list[Axes]]:
    figure = Figure(figsize=(min(6.0, 13.0 / count) * count, height), layout="constrained")
    axes = figure.subplots(1, count, squeeze=False)[0]
    return figure, list(axes)


def step_times(result: BaselineResult) -> Figure:
    """Every step's time, first call included, on a log scale: the compile spike at step 1 sits
    far above the steady state. A dotted line marks where each mode's steady state starts."""
    figure, axes = _axes_row(len(_kinds(result)))
    for ax, kind in zip(axes, _kinds(result), strict=True):
        for config in (c for c in result.configs if c.kind == kind):
            times = [t for p in config.phases if p.measurement for t in p.measurement.times]
            if not times:
                continue
            color = MODE_COLORS[config.mode]
            steps = range(1, len(times) + 1)
            ax.plot(
                steps, [t * MS for t in times], marker=".", lw=1, color=color, label=config.mode
            )
            ax.annotate(
                f"first call {format_seconds(times[0])}",
                (1, times[0] * MS),
                textcoords="offset points",
                xytext=(10, -10 if config.mode == EAGER else 0),
                fontsize=8,
                color=color,
            )
            steady = config.phase(phases.PHASE_STEADY)
            if steady is not None:
                ax.axvline(steady.first_step, color=color, ls=":", lw=1)
        ax.set_yscale("log")
        ax.set_xlabel("step (1 is the first call; dotted line: steady state starts)")
        ax.set_ylabel("time per step (ms, log scale)")
        ax.set_title(KIND_LABELS[kind])
        if ax.lines:
            ax.legend(loc="upper right")
    return figure


def _shared_bins(samples: list[float], count: int = 24) -> tuple[list[float], bool]:
    """Bins shared by both modes, so their bars compare; log-spaced when the spread is wide
    (one slow step would otherwise squeeze every other sample into a single bin)."""
    low, high = min(samples), max(samples)
    if high <= low:
        return [low * 0.95, high * 1.05], False
    if high / low > 3:
        ratio = (high / low) ** (1 / count)
        return [low * ratio**i for i in range(count + 1)], True
    return [low + (high - low) * i / count for i in range(count + 1)], False


def steady_histogram(result: BaselineResult) -> Figure:
    """Distribution of steady-state step times; the dashed line is each mode's robust median
    (the median every table gives)."""
    figure, axes = _axes_row(len(_kinds(result)))
    for ax, kind in zip(axes, _kinds(result), strict=True):
        measured = [(c, c.steady) for c in result.configs if c.kind == kind and c.steady]
        ax.set_title(f"{KIND_LABELS[kind]}: {phases.PHASE_LABELS[phases.PHASE_STEADY]}")
        ax.set_xlabel("steady-state time per step (ms)")
        ax.set_ylabel("steps")
        if not measured:
            ax.text(0.5, 0.5, "no steady state", ha="center", transform=ax.transAxes)
            continue
        bins, log_scale = _shared_bins([t * MS for _, m in measured for t in m.times])
        for config, steady in measured:
            color = MODE_COLORS[config.mode]
            samples = [t * MS for t in steady.times]
            ax.hist(samples, bins=bins, alpha=0.55, color=color, label=config.mode)
            ax.axvline(steady.robust_median * MS, color=color, ls="--", lw=1.2)
        if log_scale:
            ax.set_xscale("log")
        ax.legend()
    return figure


def _bar_group(ax: Axes, kinds: list[str], values: dict[tuple[str, str], float | None]) -> None:
    width = 0.38
    for offset, mode in ((-width / 2, EAGER), (width / 2, COMPILED)):
        heights = [values.get((kind, mode)) for kind in kinds]
        positions = [i + offset for i in range(len(kinds))]
        drawn = [(x, h) for x, h in zip(positions, heights, strict=True) if h is not None]
        if drawn:
            xs, hs = zip(*drawn, strict=True)
            ax.bar(xs, hs, width, color=MODE_COLORS[mode], label=mode)
        for x, h in zip(positions, heights, strict=True):
            if h is None:
                ax.text(x, 0, "n/a", ha="center", va="bottom", fontsize=8)
    ax.set_xticks(range(len(kinds)), [KIND_LABELS[k] for k in kinds])
    if ax.patches:
        ax.legend()


def _memory(config: ConfigResult, phase: str, device: bool) -> float | None:
    found = config.phase(phase)
    if found is None or found.measurement is None:
        return None
    value = found.memory.device_peak_allocated if device else found.memory.host_peak_rss
    return None if value is None else value / 2**20


def eager_vs_compiled(result: BaselineResult) -> Figure:
    """Throughput, and peak memory in the first call (compile) and in steady state, per mode."""
    kinds = _kinds(result)
    has_device = any(
        p.memory.device_peak_allocated is not None for c in result.configs for p in c.phases
    )
    panels = [("throughput", None)] + [
        (f"{scope} peak, {phases.PHASE_LABELS[phase]} (MiB)", (phase, scope == "device"))
        for phase in (phases.PHASE_FIRST_CALL, phases.PHASE_STEADY)
        for scope in (("host RSS", "device") if has_device else ("host RSS",))
    ]
    figure, axes = _axes_row(len(panels), height=3.4)
    for ax, (title, memory) in zip(axes, panels, strict=True):
        values = {}
        for config in result.configs:
            key = (config.kind, config.mode)
            values[key] = config.throughput if memory is None else _memory(config, *memory)
        _bar_group(ax, kinds, values)
        ax.set_title(f"throughput ({result.throughput_unit})" if memory is None else title)
    return figure
