"""Notebook 01's timings, run against run: per step kind and mode, the steady-state step time
(its best-of-repetitions estimate and its median), the throughput, the tail, the first call and
peak memory, each judged against the noise level measured for it (compare/noise.py).

The steady best (the 10th percentile of steady steps) is the estimate other load moves least:
a busy machine adds time to some steps and spares others, so on a shared runner where medians of
identical runs moved 74-1,900x, the fastest steps moved 1.2-1.5x. The median and the throughput
are judged too, by the same rule; beside load, all of them are inconclusive until
`compare --remeasure` times both workloads again, interleaved (remeasure.py). The slowest step
(the tail where too few steps for a p99 were taken) is shown, never gated; first call is one value
per run and is judged only from a history. Peak memory is judged by its gate alone.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from workbench.baseline.reader import RESULT_FILE as BASELINE_FILE
from workbench.baseline.records import ConfigResult, MemoryUse
from workbench.compare.noise import Reading, Rule, judge, low_quantile
from workbench.compare.records import Change, Gates
from workbench.compare.runs import Run
from workbench.compare.stats import median
from workbench.timing import HostLoad, Measurement, early_stopping_estimate, samples_for_percentile

STEADY, FIRST_CALL = "steady", "first_call"
TAIL_QUANTILE = 0.99


@dataclass(frozen=True)
class Metric:
    """One of 01's metrics: how it is judged, and how it is read from a configuration."""

    rule: Callable[[Gates, ConfigResult], Rule]
    value: Callable[[ConfigResult], float | None]
    phase: str | None  # the phase whose samples and machine state it reads (None: memory)

    @property
    def name(self) -> str:
        return self.rule(Gates(), ConfigResult("", "", 1, 1)).name


def _measurement(config: ConfigResult, phase: str) -> Measurement | None:
    found = config.phase(phase)
    return found.measurement if found else None


def steady_samples(config: ConfigResult) -> list[float]:
    measurement = _measurement(config, STEADY)
    return list(measurement.times) if measurement else []


def host_load(config: ConfigResult, phase: str) -> HostLoad | None:
    """The HostLoad a phase's measurement recorded (None for a run that predates it)."""
    measurement = _measurement(config, phase)
    return measurement.host if measurement else None


def _of_steady(
    estimate: Callable[[list[float]], float | None],
) -> Callable[[ConfigResult], float | None]:
    def value(config: ConfigResult) -> float | None:
        samples = steady_samples(config)
        return estimate(samples) if samples else None

    return value


def _p99(samples: list[float]) -> float | None:
    return early_stopping_estimate(sorted(samples), TAIL_QUANTILE)


def _throughput_of(items: int) -> Callable[[list[float]], float]:
    def throughput(samples: list[float]) -> float:
        step = median(samples)
        return items / step if step > 0 else 0.0

    return throughput


def _throughput(config: ConfigResult) -> float | None:
    samples = steady_samples(config)
    return (
        _throughput_of(config.items_per_step)(samples)
        if samples and config.items_per_step
        else None
    )


def _first_call(config: ConfigResult) -> float | None:
    measurement = _measurement(config, FIRST_CALL)
    return measurement.median if measurement else None


def _peak(read: Callable[[MemoryUse], int | None]) -> Callable[[ConfigResult], float | None]:
    def peak(config: ConfigResult) -> float | None:
        peaks = [float(value) for p in config.phases if (value := read(p.memory)) is not None]
        return max(peaks) / 2**20 if peaks else None

    return peak


def _steady_rule(
    name: str, estimate: Callable[[list[float]], float], **kw: bool
) -> Callable[[Gates, ConfigResult], Rule]:
    return lambda gates, _: Rule(name, "s", True, gates.step_time, estimate, **kw)


STEADY_BEST = Metric(
    _steady_rule("steady best", low_quantile, quartiles=False), _of_steady(low_quantile), STEADY
)
STEADY_MEDIAN = Metric(_steady_rule("steady median", median), _of_steady(median), STEADY)
# The tail is a p99 only where every run compared has the samples to support one, and then
# LoadGen's early-stopping estimate (timing.TAIL_SOURCE); otherwise the slowest step, shown.
STEADY_P99 = Metric(_steady_rule("steady p99", _p99), _of_steady(_p99), STEADY)  # type: ignore[arg-type]
STEADY_MAX = Metric(
    lambda gates, _: Rule("steady max", "s", True, gates.step_time, max, gated=False),
    _of_steady(max),
    STEADY,
)
THROUGHPUT = Metric(
    lambda gates, config: Rule(
        "throughput", "items/s", False, gates.step_time, _throughput_of(config.items_per_step)
    ),
    _throughput,
    STEADY,
)
FIRST_CALL_METRIC = Metric(
    lambda gates, _: Rule("first call", "s", True, gates.compile_time, repeated_only=True),
    _first_call,
    FIRST_CALL,
)
METRICS = (
    STEADY_BEST,
    STEADY_MEDIAN,
    STEADY_P99,
    THROUGHPUT,
    FIRST_CALL_METRIC,
    Metric(
        lambda gates, _: Rule("peak host memory", "MiB", True, gates.memory, timing=False),
        _peak(lambda memory: memory.host_peak_rss),
        None,
    ),
    Metric(
        lambda gates, _: Rule("peak device memory", "MiB", True, gates.memory, timing=False),
        _peak(lambda memory: memory.device_peak_allocated),
        None,
    ),
)
# The metrics `compare --remeasure` times again: its verdict replaces theirs.
REMEASURED_METRICS = ("steady best", "steady median", "throughput")


def configs_of(run: Run) -> dict[tuple[str, str], ConfigResult]:
    """The newest run's configurations that ran to the end, by (kind, mode)."""
    data = run.result(BASELINE_FILE)
    configs = data.configs if data else []
    return {(c.kind, c.mode): c for c in configs if c.failure is None}


def _metrics_for(configs: list[ConfigResult]) -> list[Metric]:
    needed = samples_for_percentile(TAIL_QUANTILE)
    tail = STEADY_P99 if all(len(steady_samples(c)) >= needed for c in configs) else STEADY_MAX
    return [tail if m is STEADY_P99 else m for m in METRICS]


def _reading(label: str, metric: Metric, config: ConfigResult) -> Reading:
    samples = steady_samples(config) if metric.phase == STEADY else []
    host = host_load(config, metric.phase) if metric.phase else None
    return Reading(label, metric.value(config), samples, host)


def timing_changes(runs: list[Run], gates: Gates, environment_note: str) -> list[Change]:
    """Every timing metric of the newest run against the run before it (two runs) or against
    the history before it, by compare/noise.py's rule."""
    newest_run, previous = runs[-1], runs[:-1]
    previous_configs = [configs_of(run) for run in previous]
    changes = []
    for key, config in configs_of(newest_run).items():
        label = f"{key[0]}/{key[1]}"
        earlier = [
            (run.label, c[key])
            for run, c in zip(previous, previous_configs, strict=True)
            if key in c
        ]
        for metric in _metrics_for([config, *(c for _, c in earlier)]):
            readings = [_reading(name, metric, c) for name, c in earlier]
            newest = _reading(newest_run.label, metric, config)
            if newest.value is None and all(r.value is None for r in readings):
                continue
            change = judge(metric.rule(gates, config), "timing", newest, readings, gates)
            change.name = f"{label} {change.name}"
            if change.status in ("regression", "improvement") and environment_note:
                change.note = (
                    f"{change.note}; {environment_note}" if change.note else environment_note
                )
            changes.append(change)
    return changes
