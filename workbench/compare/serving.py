"""Notebook 05's serving numbers, run against run: per batch size and mode, the latency tail and
the throughput, and the host-gap median between device executions.

Judged by the rules compare/timing.py applies to step time, with its own functions: beyond the
step-time gate, a Mann-Whitney U test on the raw samples below the p-value, the two runs'
interquartile ranges apart, and then beyond the machine's run-to-run variation: outside the
history band from HISTORY_SPREAD_RUNS earlier runs on, beyond the pair allowance below that. The
tail is a p99 only where every run compared has the samples to support one, else the slowest
call ("max latency"), as notebook 05 itself reports it. Both come from the raw samples the
result file stores (serving.records.STORED_SAMPLES per series at most, evenly spaced in time). A
point measured on a loaded machine is not judged; earlier ones measured loaded are left out, and
said so.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from workbench.compare.records import (
    IMPROVEMENT,
    LOADED,
    NOISE,
    NOT_COMPARABLE,
    REGRESSION,
    WITHIN_GATE,
    Change,
    ChangeStatus,
    Gates,
)
from workbench.compare.runs import Run
from workbench.compare.stats import mann_whitney_u, median
from workbench.compare.timing import Shift, quartiles_apart, run_to_run
from workbench.serving.reader import RESULT_FILE as SERVING_FILE
from workbench.serving.records import BatchPoint, GapSeries
from workbench.timing import HostLoad, early_stopping_estimate, samples_for_percentile

AREA = "serving"
TAIL_QUANTILE = 0.99


@dataclass(frozen=True)
class Sample:
    """One run's side of one metric: its value, the raw samples it comes from, its machine."""

    label: str
    value: float | None
    samples: list[float]
    host: HostLoad | None = None


@dataclass(frozen=True)
class ServingMetric:
    name: str
    unit: str
    lower_is_better: bool
    value: Callable[[BatchPoint], float | None]


def _times(point: BatchPoint) -> list[float]:
    return list(point.latency.times) if point.latency else []


def _p99(point: BatchPoint) -> float | None:
    return early_stopping_estimate(sorted(_times(point)), TAIL_QUANTILE)


def _max(point: BatchPoint) -> float | None:
    times = _times(point)
    return max(times) if times else None


P99 = ServingMetric("p99 latency", "s", True, _p99)
MAX = ServingMetric("max latency", "s", True, _max)
THROUGHPUT = ServingMetric("throughput", "requests/s", False, lambda p: p.throughput)
GAP_NAME = "host gap median"


def points_of(run: Run) -> dict[tuple[int, str], BatchPoint]:
    """The run's batch points that measured, by (batch size, mode)."""
    data = run.result(SERVING_FILE)
    points = data.points if data else []
    return {(p.batch_size, p.mode): p for p in points if p.status == "ok" and p.latency}


def gaps_of(run: Run) -> GapSeries | None:
    data = run.result(SERVING_FILE)
    return data.gaps if data and data.gaps and data.gaps.gaps else None


def judge_samples(
    name: str,
    unit: str,
    lower_is_better: bool,
    newest: Sample,
    earlier: list[Sample],
    gates: Gates,
) -> Change:
    """One metric of the newest run against the earlier ones, by step time's rules."""
    series = [s.value for s in earlier] + [newest.value]
    base_value = next((s.value for s in reversed(earlier) if s.value is not None), None)
    if newest.host is not None and newest.host.loaded:
        note = f"measured while the machine was loaded: {newest.host.shares()}"
        return Change(AREA, name, base_value, newest.value, LOADED, unit, note=note,
                      series=series)  # fmt: skip
    kept = [s for s in earlier if s.value is not None and not (s.host and s.host.loaded)]
    left_out = [f"{s.label} was measured loaded" for s in earlier if s.host and s.host.loaded]
    values = [s.value for s in kept if s.value is not None]
    if newest.value is None or not values or min(values) <= 0:
        status: ChangeStatus = LOADED if left_out and not values else NOT_COMPARABLE
        return Change(AREA, name, base_value, newest.value, status, unit,
                      note="; ".join(left_out), series=series)  # fmt: skip
    base = values[-1] if len(values) == 1 else median(values)
    ratio = newest.value / base
    base_samples = [t for s in kept for t in s.samples]
    p_value = mann_whitney_u(newest.samples, base_samples)[1]
    notes = ["rank test on raw samples", *left_out]
    worse = ratio > 1 if lower_is_better else ratio < 1
    if abs(ratio - 1) < gates.step_time:
        status = WITHIN_GATE
    elif p_value >= gates.p_value:
        status = NOISE
    else:
        status = REGRESSION if worse else IMPROVEMENT
    if status in (REGRESSION, IMPROVEMENT) and not quartiles_apart(newest.samples, base_samples):
        status = NOISE
        notes.append("the runs' interquartile ranges overlap (a burst of load, not a shift)")
    shift = Shift(newest.value, ratio, lower_is_better, newest.samples, base_samples)
    status = run_to_run(status, shift, values, notes)
    return Change(AREA, name, base, newest.value, status, unit, ratio, p_value,
                  gates.step_time, "; ".join(notes), series)  # fmt: skip


def _tail_metric(points: list[BatchPoint]) -> ServingMetric:
    needed = samples_for_percentile(TAIL_QUANTILE)
    return P99 if all(len(_times(p)) >= needed for p in points) else MAX


def serving_changes(runs: list[Run], gates: Gates) -> list[Change]:
    """Every batch point of the newest run (tail latency and throughput) and its host-gap
    median, against the run before it or the history before it."""
    newest_run, previous = runs[-1], runs[:-1]
    earlier_points = [points_of(run) for run in previous]
    changes = []
    for key, point in points_of(newest_run).items():
        pairs = zip(previous, earlier_points, strict=True)
        present = [(run, found[key]) for run, found in pairs if key in found]
        if not present:
            continue
        tail = _tail_metric([point, *(p for _, p in present)])
        for metric in (tail, THROUGHPUT):

            def side(label: str, p: BatchPoint, metric: ServingMetric = metric) -> Sample:
                host = p.latency.host if p.latency else None
                return Sample(label, metric.value(p), _times(p), host)

            changes.append(
                judge_samples(
                    f"batch {key[0]} {key[1]} {metric.name}",
                    metric.unit,
                    metric.lower_is_better,
                    side(newest_run.label, point),
                    [side(run.label, p) for run, p in present],
                    gates,
                )
            )
    newest_gaps = gaps_of(newest_run)
    earlier_gaps = [(run.label, gaps) for run in previous if (gaps := gaps_of(run)) is not None]
    if newest_gaps is not None and earlier_gaps:
        change = judge_samples(
            GAP_NAME,
            "s",
            True,
            Sample(newest_run.label, median(newest_gaps.gaps), newest_gaps.gaps),
            [Sample(label, median(g.gaps), g.gaps) for label, g in earlier_gaps],
            gates,
        )
        # A gap that grew is read with what fills it in the newest run.
        cause = f"the newest run's gaps are mostly {newest_gaps.lead_cause()}"
        change.note = f"{change.note}; {cause}" if change.note else cause
        changes.append(change)
    return changes
