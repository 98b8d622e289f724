"""Notebook 01's timings, run against run: steady-state time, tail, throughput, first call and
peak memory per step kind and mode.

Steady-state metrics keep their raw per-step samples in every result file, so a change counts
only when it is beyond its magnitude gate, a Mann-Whitney U test on the samples says it is not
noise, and the two runs' interquartile ranges do not overlap. The last rule is for a burst of
other load that slows most of one run's steps: the rank test then calls the shift significant,
but the run's own spread covers it (measured on a shared 2-core VM, it flagged 2 of 5 pairs of
identical runs without it). Steps of one run are not independent of the machine's state during
that run: two identical runs one after the other differed by up to 19% in median there, each
run tight. One run against one cannot measure that; against a history of 3 or more runs, a
change must also leave the band the earlier runs' values spread over (history_band).
First-call time and peak memory are one value per run: they are judged by their gate alone (as
PyTorch's dashboard judges compile latency), and say so.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from workbench.compare.records import (
    IMPROVEMENT,
    NOISE,
    NOT_COMPARABLE,
    REGRESSION,
    WITHIN_GATE,
    Change,
    Gates,
)
from workbench.compare.runs import Run
from workbench.compare.stats import mann_whitney_u, median
from workbench.timing import quantile

BASELINE_NOTEBOOK = "01_baseline"
# From this many earlier runs on, a change must also leave the band their values spread over.
HISTORY_SPREAD_RUNS = 3
HISTORY_SPREADS = 2.0


@dataclass(frozen=True)
class Metric:
    name: str
    unit: str
    lower_is_better: bool
    gate: Callable[[Gates], float]
    value: Callable[[dict[str, Any]], float | None]  # from one configuration's record
    sampled: bool  # raw samples exist for a rank test


def _phase(config: dict[str, Any], name: str) -> dict[str, Any] | None:
    return next((p for p in config.get("phases", []) if p.get("phase") == name), None)


def steady_samples(config: dict[str, Any]) -> list[float]:
    phase = _phase(config, "steady")
    measurement = (phase or {}).get("measurement") or {}
    return [t for t in measurement.get("times", []) if isinstance(t, (int, float))]


def _steady_median(config: dict[str, Any]) -> float | None:
    samples = steady_samples(config)
    return median(samples) if samples else None


def _steady_p99(config: dict[str, Any]) -> float | None:
    samples = sorted(steady_samples(config))
    return quantile(samples, 0.99) if samples else None


def _throughput(config: dict[str, Any]) -> float | None:
    step = _steady_median(config)
    items = config.get("items_per_step")
    return items / step if step and items else None


def _first_call(config: dict[str, Any]) -> float | None:
    phase = _phase(config, "first_call")
    measurement = (phase or {}).get("measurement") or {}
    return measurement.get("median")


def _peak(field: str) -> Callable[[dict[str, Any]], float | None]:
    def read(config: dict[str, Any]) -> float | None:
        peaks = [
            float(value)
            for p in config.get("phases", [])
            if (value := (p.get("memory") or {}).get(field)) is not None
        ]
        return max(peaks) / 2**20 if peaks else None

    return read


METRICS = (
    Metric("steady median", "s", True, lambda g: g.step_time, _steady_median, True),
    Metric("steady p99", "s", True, lambda g: g.step_time, _steady_p99, True),
    Metric("throughput", "items/s", False, lambda g: g.step_time, _throughput, True),
    Metric("first call", "s", True, lambda g: g.compile_time, _first_call, False),
    Metric("peak host memory", "MiB", True, lambda g: g.memory, _peak("host_peak_rss"), False),
    Metric(
        "peak device memory",
        "MiB",
        True,
        lambda g: g.memory,
        _peak("device_peak_allocated"),
        False,
    ),
)


def configs_of(run: Run) -> dict[tuple[str, str], dict[str, Any]]:
    data = run.data(BASELINE_NOTEBOOK) or {}
    return {
        (c["kind"], c["mode"]): c
        for c in data.get("configs", [])
        if c.get("status", "ok") == "ok" and c.get("failure") is None
    }


def quartiles_apart(new: list[float], base: list[float]) -> bool:
    """Whether one sample's interquartile range lies wholly above or below the other's."""
    new, base = sorted(new), sorted(base)
    return quantile(new, 0.25) > quantile(base, 0.75) or quantile(new, 0.75) < quantile(base, 0.25)


def history_band(earlier: list[float]) -> tuple[float, float] | None:
    """The range the earlier runs' values put a run in by the machine's run-to-run variation:
    their median +- HISTORY_SPREADS robust standard deviations (1.4826 x MAD, so one odd night
    does not widen it). None with fewer than HISTORY_SPREAD_RUNS runs: too few to tell."""
    if len(earlier) < HISTORY_SPREAD_RUNS:
        return None
    center = median(earlier)
    spread = HISTORY_SPREADS * 1.4826 * median([abs(v - center) for v in earlier])
    return center - spread, center + spread


def _judge(
    metric: Metric,
    base: float,
    new: float,
    p_value: float | None,
    gates: Gates,
    separated: bool = True,
) -> tuple[str, float]:
    ratio = new / base
    worse = ratio > 1 if metric.lower_is_better else ratio < 1
    if abs(ratio - 1) < metric.gate(gates):
        return WITHIN_GATE, ratio
    if metric.sampled and (p_value is None or p_value >= gates.p_value or not separated):
        return NOISE, ratio
    return (REGRESSION if worse else IMPROVEMENT), ratio


def timing_changes(runs: list[Run], gates: Gates, environment_note: str) -> list[Change]:
    """Every timing metric of the newest run against the run before it (two runs) or against
    the median of all runs before it (a history), with the rank test on pooled raw samples."""
    newest, previous = runs[-1], runs[:-1]
    new_configs = configs_of(newest)
    previous_configs = [configs_of(run) for run in previous]
    changes = []
    for key, config in new_configs.items():
        label = f"{key[0]}/{key[1]}"
        # Every sampled metric rests on the same steady-state samples: test them once.
        base_samples = [t for c in previous_configs if key in c for t in steady_samples(c[key])]
        new_samples = steady_samples(config)
        tested = bool(base_samples and new_samples)
        samples_p = mann_whitney_u(new_samples, base_samples)[1] if tested else None
        samples_apart = quartiles_apart(new_samples, base_samples) if tested else True
        for metric in METRICS:
            series = [metric.value(c[key]) if key in c else None for c in previous_configs] + [
                metric.value(config)
            ]
            new = series[-1]
            earlier = [v for v in series[:-1] if v is not None]
            if new is None and not earlier:
                continue
            name = f"{label} {metric.name}"
            if new is None or not earlier or min(earlier) <= 0:
                changes.append(
                    Change(
                        "timing",
                        name,
                        earlier[-1] if earlier else None,
                        new,
                        NOT_COMPARABLE,
                        metric.unit,
                        series=series,
                    )
                )
                continue
            base = earlier[-1] if len(previous) == 1 else median(earlier)
            p_value = samples_p if metric.sampled else None
            band = history_band(earlier)
            outside = band is None or not band[0] <= new <= band[1]
            separated = samples_apart and outside if metric.sampled else True
            if metric.sampled:
                note = "rank test on raw steady-state samples"
                if not samples_apart:
                    note += (
                        "; the runs' interquartile ranges overlap (a burst of load, not a shift)"
                    )
                elif band is not None and not outside:
                    note += (
                        f"; within the band of the {len(earlier)} earlier runs ({band[0]:.4g} "
                        f"to {band[1]:.4g}: median +- {HISTORY_SPREADS:g} x 1.4826 x MAD): the "
                        "machine's run-to-run variation, not a shift"
                    )
                elif len(previous) == 1:
                    note += (
                        "; one run each, so run-to-run variation is not measured: compare "
                        f"against a history of {HISTORY_SPREAD_RUNS} or more runs to rule it out"
                    )
            else:
                note = "one value per run: magnitude gate only"
            status, ratio = _judge(metric, base, new, p_value, gates, separated)
            if status in (REGRESSION, IMPROVEMENT) and environment_note:
                note += f"; {environment_note}"
            changes.append(
                Change(
                    "timing",
                    name,
                    base,
                    new,
                    status,
                    metric.unit,
                    ratio,
                    p_value,
                    metric.gate(gates),
                    note,
                    series,
                )
            )
    return changes
