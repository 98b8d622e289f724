"""Figures for notebook 04: matplotlib Figures built without pyplot (Agg-safe, no global state),
like workbench.baseline.plots."""

from __future__ import annotations

from matplotlib.axes import Axes
from matplotlib.figure import Figure

from workbench.tuning.records import RetuneResult
from workbench.tuning.trials import COMPILER_HOST_RAM, OK, OOM, OVER_BUDGET, TIMEOUT, Trial
from workbench.tuning.wording import sweep_caveat

STATUS_STYLE = {
    OK: ("tab:green", "o"),
    OVER_BUDGET: ("tab:orange", "s"),
    OOM: ("tab:red", "X"),
    TIMEOUT: ("tab:purple", "v"),
    COMPILER_HOST_RAM: ("tab:brown", "P"),
}
FAILED_STYLE = ("tab:gray", "D")  # any other failure: an error or a crash
MiB = 2**20


def _style(trial: Trial) -> tuple[str, str]:
    return STATUS_STYLE.get(trial.status, FAILED_STYLE)


def _row(count: int, height: float = 3.8) -> tuple[Figure, list[Axes]]:
    figure = Figure(figsize=(6.2 * count, height), layout="constrained")
    return figure, list(figure.subplots(1, count, squeeze=False)[0])


def _empty(ax: Axes, text: str) -> None:
    ax.text(0.5, 0.5, text, ha="center", va="center", wrap=True, transform=ax.transAxes)
    ax.set_axis_off()


def _status_point(
    ax: Axes, x: float, y: float, trial: Trial, seen: set[str], size: float | None = None
) -> None:
    """One trial's point, styled by its status; a status is named in the legend once."""
    color, marker = _style(trial)
    label = None if trial.status in seen else trial.status
    ax.scatter([x], [y], color=color, marker=marker, s=size, label=label, zorder=3)
    seen.add(trial.status)


def _open_marker(
    ax: Axes, batch: int, rate: float, label: str, color: str, size: float, marker: str = "o"
) -> None:
    """An open marker around one point of the throughput line."""
    ax.scatter(
        [batch],
        [rate],
        s=size,
        marker=marker,
        facecolors="none",
        edgecolors=color,
        label=label,
        zorder=3,
    )


def throughput_and_memory(result: RetuneResult) -> Figure:
    """Left: steady-state throughput per batch size, the batch the plan uses ringed (the one
    the plans and the recommendation name) and, where the sweep's fastest is another batch, that
    one marked apart with what may explain it (noise, load). Right: every trial's peak memory
    with the budget and the margin-reduced limit drawn; failed trials sit on the limit line,
    marked by why they failed."""
    figure, (left, right) = _row(2)
    _throughput_panel(left, result)
    _memory_panel(right, result)
    return figure


def _throughput_panel(ax: Axes, result: RetuneResult) -> None:
    ok = [(t.batch_size, t.throughput) for t in result.sweep if t.throughput]
    if not ok:
        _empty(ax, "no batch size ran")
        return
    ax.plot([size for size, _ in ok], [rate for _, rate in ok], marker="o")
    rates = dict(ok)
    chosen = result.chosen_batch
    if chosen is not None:
        label = f"the plan's per-core batch: {chosen}"
        if chosen in rates:
            _open_marker(ax, chosen, rates[chosen], label, "tab:red", 180)
        else:  # a per-core batch the sweep did not time (the global batch set it)
            ax.axvline(chosen, color="tab:red", lw=1, label=label)
    fastest = result.choice.best_batch_size if result.choice else None
    if fastest is not None and fastest != chosen and fastest in rates:
        caveat = sweep_caveat(result, fastest)
        label = f"fastest measured: {fastest}, not chosen" + (f"\n({caveat})" if caveat else "")
        _open_marker(ax, fastest, rates[fastest], label, "tab:gray", 120, marker="^")
    if chosen is not None or fastest is not None:
        # Where the fewest points are: a spike may sit in any corner.
        ax.legend(loc="best", fontsize=8)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("batch size per step (log2)")
    ax.set_ylabel(result.throughput_unit)
    ax.set_title(f"Throughput ({result.measured_label})", fontsize=10)


def _memory_panel(ax: Axes, result: RetuneResult) -> None:
    budget = result.budget
    seen: set[str] = set()
    for trial in result.trials:
        value = trial.peak_memory_bytes if trial.peak_memory_bytes else budget.usable
        _status_point(ax, trial.batch_size, value / MiB, trial, seen)
    ax.axhline(budget.total_bytes / MiB, color="black", lw=1, label="memory budget")
    ax.axhline(
        budget.usable / MiB, color="black", lw=1, ls="--", label=f"limit ({budget.margin:.0%} kept)"
    )
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("batch size per step (log2)")
    ax.set_ylabel("peak memory (MiB, log)")
    ax.set_title("Peak memory per trial, search and sweep", fontsize=10)
    ax.legend(loc="lower right", fontsize=8)


def search_trials(result: RetuneResult) -> Figure:
    """The search in order: which batch each trial tried and what came of it, with the trial
    bound drawn."""
    figure, (ax,) = _row(1, height=3.4)
    search = result.search
    seen: set[str] = set()
    for index, trial in enumerate(search.trials, 1):
        _status_point(ax, index, trial.batch_size, trial, seen, size=60)
        ax.annotate(
            str(trial.batch_size),
            (index, trial.batch_size),
            xytext=(6, 0),
            textcoords="offset points",
            fontsize=8,
            va="center",
        )
    if search.trials:
        ax.plot(
            range(1, len(search.trials) + 1),
            [t.batch_size for t in search.trials],
            color="lightgray",
            zorder=1,
        )
    ax.axvline(search.bound + 0.5, color="black", ls=":", lw=1, label=f"bound: {search.bound}")
    ax.set_xlim(0.5, search.bound + 1)
    ax.set_yscale("log", base=2)
    ax.set_xlabel("trial")
    ax.set_ylabel("batch size (log2)")
    ax.set_title(f"Largest-batch search: {search.stopped}", fontsize=10)
    ax.legend(loc="best", fontsize=8)
    return figure


def scaling(result: RetuneResult) -> Figure:
    """Left: throughput per world size against the ideal line. Right: weak-scaling efficiency
    with the floor the recommendation uses."""
    figure, (left, right) = _row(2)
    study = result.scaling
    runs = study.measured() if study else []
    if study is None or not runs:
        reason = (study.skipped_reason if study else None) or result.skipped.get("scaling", "")
        _empty(left, f"no data-parallel run: {reason}" if reason else "no run finished")
        _empty(right, "")
        return figure
    # measured() holds only runs with a throughput.
    sizes = [r.world_size for r in runs]
    left.plot(sizes, [r.throughput or 0.0 for r in runs], marker="o", label="measured")
    base = next((r for r in runs if r.world_size == 1), None)
    if base and base.throughput:
        left.plot(
            sizes,
            [base.throughput * n for n in sizes],
            ls="--",
            color="gray",
            label="ideal (N x world size 1)",
        )
    left.set_xlabel("world size (workers)")
    left.set_ylabel(result.throughput_unit)
    left.set_title(f"Throughput, {study.backend} ({result.measured_label})", fontsize=10)
    left.legend(loc="upper left", fontsize=8)
    effective = [(r.world_size, r.efficiency) for r in runs if r.efficiency is not None]
    right.plot([size for size, _ in effective], [e for _, e in effective], marker="o")
    floor = result.settings.min_scaling_efficiency
    right.axhline(floor, color="tab:red", ls=":", label=f"floor {floor:.0%}")
    right.axhline(1.0, color="gray", lw=0.8)
    right.set_ylim(0, 1.1)
    right.set_xlabel("world size (workers)")
    right.set_ylabel("efficiency: thr(N) / (N x thr(1))")
    right.set_title("Weak-scaling efficiency", fontsize=10)
    right.legend(loc="lower left", fontsize=8)
    for ax in (left, right):
        ax.set_xticks(sizes)
    return figure


def dataloader_wait(result: RetuneResult) -> Figure:
    """Share of each step spent waiting for data, per setting, with the 5% limit: a diagnosis
    of the setting throughput chose (data loading still bounds the step), not the choice."""
    figure, (ax,) = _row(1, height=3.4)
    study = result.loader
    measured = (
        [(r, r.wait_share) for r in study.results if r.wait_share is not None] if study else []
    )
    if study is None or not measured:
        _empty(ax, "no DataLoader setting ran")
        return figure
    labels = [r.setting.label() for r, _ in measured]
    colors = ["tab:green" if r is study.recommended else "tab:blue" for r, _ in measured]
    ax.bar(range(len(measured)), [share * 100 for _, share in measured], color=colors)
    ax.axhline(study.limit * 100, color="tab:red", ls=":", label=f"limit {study.limit:.0%}")
    ax.set_xticks(range(len(measured)), labels, rotation=20, ha="right", fontsize=8)
    ax.set_ylabel("waiting for data (% of step)")
    ax.set_title(
        f"DataLoader wait share at batch {study.batch_size}, {study.work.cost_ms:g} ms/sample "
        f"(green: recommended, by throughput; {result.measured_label})",
        fontsize=10,
    )
    ax.legend(loc="upper right", fontsize=8)
    return figure
