"""Notebook 05's serving numbers, run against run: per batch size and mode, the latency tail and
the throughput, and the host-gap median between device executions.

Judged by compare/noise.py's rule, as step time is: beyond the step-time gate and beyond the noise
level measured for the metric (a history's prediction interval; a pair's allowance, inside which a
change is inconclusive), a Mann-Whitney U test on the raw samples below the p-value, the two
runs' interquartile ranges apart. Calls and gaps under noise.SHORT_CALL_S are judged only from a
history: identical runs differed by +76% and +97% in p99 there. The tail is a p99 only where every
run compared has the samples to support one; otherwise the slowest call ("max latency") is shown,
never gated. Both come from the raw samples the result file stores
(serving.records.STORED_SAMPLES per series at most, evenly spaced in time).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from workbench.compare.noise import SHORT_CALL_S, Reading, Rule, judge
from workbench.compare.records import Change, Gates
from workbench.compare.runs import Run
from workbench.compare.stats import median
from workbench.serving.reader import RESULT_FILE as SERVING_FILE
from workbench.serving.records import BatchPoint, GapSeries
from workbench.timing import early_stopping_estimate, samples_for_percentile

AREA = "serving"
TAIL_QUANTILE = 0.99


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


def _rule(
    metric: ServingMetric,
    gates: Gates,
    short: bool,
    estimate: Callable[[list[float]], float | None],
) -> Rule:
    return Rule(
        metric.name,
        metric.unit,
        metric.lower_is_better,
        gates.step_time,
        estimate,  # type: ignore[arg-type]
        repeated_only=short,
        gated=metric is not MAX,
    )


def _tail_metric(points: list[BatchPoint]) -> ServingMetric:
    needed = samples_for_percentile(TAIL_QUANTILE)
    return P99 if all(len(_times(p)) >= needed for p in points) else MAX


def _short(points: list[BatchPoint]) -> bool:
    """Whether the calls are too short to judge from one run against another."""
    medians = [median(_times(p)) for p in points if _times(p)]
    return bool(medians) and min(medians) < SHORT_CALL_S


def _reading(label: str, metric: ServingMetric, point: BatchPoint) -> Reading:
    host = point.latency.host if point.latency else None
    return Reading(label, metric.value(point), _times(point), host)


def _estimate(metric: ServingMetric, point: BatchPoint) -> Callable[[list[float]], float | None]:
    if metric is THROUGHPUT:
        # Calls per second over the stored calls: a bootstrap of the latencies moves it as the
        # calls' own spread does.
        ratio = (point.throughput or 0.0) * median(_times(point)) if _times(point) else 0.0
        return lambda times: ratio / median(times) if times else None
    if metric is P99:
        return lambda times: early_stopping_estimate(sorted(times), TAIL_QUANTILE)
    return lambda times: max(times) if times else None


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
        every = [point, *(p for _, p in present)]
        short = _short(every)
        for metric in (_tail_metric(every), THROUGHPUT):
            rule = _rule(metric, gates, short, _estimate(metric, point))
            change = judge(
                rule,
                AREA,
                _reading(newest_run.label, metric, point),
                [_reading(run.label, metric, p) for run, p in present],
                gates,
            )
            change.name = f"batch {key[0]} {key[1]} {metric.name}"
            changes.append(change)
    newest_gaps = gaps_of(newest_run)
    earlier_gaps = [(run.label, gaps) for run in previous if (gaps := gaps_of(run)) is not None]
    if newest_gaps is not None and earlier_gaps:
        short = (
            min(median(g.gaps) for g in [newest_gaps, *(g for _, g in earlier_gaps)]) < SHORT_CALL_S
        )
        gap_rule = Rule(GAP_NAME, "s", True, gates.step_time, median, repeated_only=short)
        change = judge(
            gap_rule,
            AREA,
            Reading(newest_run.label, median(newest_gaps.gaps), newest_gaps.gaps),
            [Reading(label, median(g.gaps), g.gaps) for label, g in earlier_gaps],
            gates,
        )
        # A gap that grew is read with what fills it in the newest run.
        cause = f"the newest run's gaps are mostly {newest_gaps.lead_cause()}"
        change.note = f"{change.note}; {cause}" if change.note else cause
        changes.append(change)
    return changes
