"""Notebook 01's timings, run against run: steady-state time, tail, throughput, first call and
peak memory per step kind and mode.

Steady-state metrics keep their raw per-step samples in every result file, so a change counts
only when it is beyond its magnitude gate, a Mann-Whitney U test on the samples says it is not
noise, and the two runs' interquartile ranges do not overlap. The last rule is for a burst of
other load that slows most of one run's steps: the rank test then calls the shift significant,
but the run's own spread covers it.

Steps of one run are not independent of the machine's state during that run: two identical runs
one after the other differed by up to 24% in median on a quiet machine, each run tight. So the
run-to-run variation is measured where it can be and allowed for where it cannot:
- against a history of HISTORY_SPREAD_RUNS or more earlier runs, a change must also leave the
  band the earlier runs' values spread over (history_band): their spread is the measurement;
- with fewer earlier runs (a pair), nothing measures it, so a timing must also move by more than
  the run-to-run allowance (pair_allowance): PAIR_ALLOWANCE, or twice the wider relative IQR of
  the two runs where that is larger.
A timing measured while the machine was loaded (its HostLoad says so) is judged only beyond what
that load can explain (LOAD_RULE): other processes taking a share s of the CPU leave the run at
least 1 - s of it, so they slow it by at most 1 / (1 - s); what is within that is "loaded, not
judged", for `compare --remeasure` (remeasure.py) to settle by timing both workloads again,
interleaved, on this machine now. Timings taken with different thread counts are not
comparable. First-call time and peak memory are one
value per run: they are judged by their gate alone (as PyTorch's dashboard judges compile
latency), and first call by the run-to-run allowance too where no history measures it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from workbench.baseline.reader import RESULT_FILE as BASELINE_FILE
from workbench.baseline.records import ConfigResult, MemoryUse
from workbench.compare.records import (
    IMPROVEMENT,
    LOADED,
    NOISE,
    NOT_COMPARABLE,
    REGRESSION,
    RUN_TO_RUN,
    WITHIN_GATE,
    Change,
    ChangeStatus,
    Gates,
)
from workbench.compare.runs import Run
from workbench.compare.stats import mann_whitney_u, median
from workbench.timing import (
    HostLoad,
    Measurement,
    early_stopping_estimate,
    quantile,
    samples_for_percentile,
)

STEADY, FIRST_CALL = "steady", "first_call"
# From this many earlier runs on, a change must also leave the band their values spread over.
HISTORY_SPREAD_RUNS = 3
HISTORY_SPREADS = 2.0
# Without a history, a timing must move by more than this factor less one (1.5x slower, or a
# third less throughput): twice the largest difference measured between identical runs one
# after the other on a quiet machine (+24%, tiny steps).
PAIR_ALLOWANCE = 0.5
PAIR_IQR_MULTIPLE = 2.0
PAIR_RULE = (
    f"fewer than {HISTORY_SPREAD_RUNS} earlier runs cannot measure run-to-run variation, so a "
    f"timing must also move by more than {PAIR_ALLOWANCE:.0%} (a factor of "
    f"{1 + PAIR_ALLOWANCE:g}), or by {PAIR_IQR_MULTIPLE:g} x the wider relative IQR of the runs "
    "where that is more (identical runs one after the other differed by up to 24% in median)"
)
TAIL_QUANTILE = 0.99
# Above this share of the CPU taken by others, the bound is not worth stating (20x).
MAX_LOAD_SHARE = 0.95
LOAD_RULE = (
    "other processes and steal taking a share s of the machine's CPU while a run was timed "
    "leave it at least 1 - s, so they explain a slowdown of at most 1 / (1 - s) (2x at 50%): "
    "a change beyond that, after the run-to-run allowance, is judged; one within it is "
    "loaded, not judged, until `workbench compare --remeasure` times both workloads again, "
    "interleaved in pairs, on this machine now"
)


@dataclass(frozen=True)
class Metric:
    name: str
    unit: str
    lower_is_better: bool
    gate: Callable[[Gates], float]
    value: Callable[[ConfigResult], float | None]  # from one configuration's record
    sampled: bool  # raw samples exist for a rank test
    phase: str | None  # the phase whose timing it reads (None: memory, not a timing)


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


def _steady_median(config: ConfigResult) -> float | None:
    samples = steady_samples(config)
    return median(samples) if samples else None


def _steady_p99(config: ConfigResult) -> float | None:
    return early_stopping_estimate(sorted(steady_samples(config)), TAIL_QUANTILE)


def _steady_max(config: ConfigResult) -> float | None:
    samples = steady_samples(config)
    return max(samples) if samples else None


def _throughput(config: ConfigResult) -> float | None:
    step = _steady_median(config)
    items = config.items_per_step
    return items / step if step and items else None


def _first_call(config: ConfigResult) -> float | None:
    measurement = _measurement(config, FIRST_CALL)
    return measurement.median if measurement else None


def _peak(read: Callable[[MemoryUse], int | None]) -> Callable[[ConfigResult], float | None]:
    def peak(config: ConfigResult) -> float | None:
        peaks = [float(value) for p in config.phases if (value := read(p.memory)) is not None]
        return max(peaks) / 2**20 if peaks else None

    return peak


def _step_gate(gates: Gates) -> float:
    return gates.step_time


STEADY_MEDIAN = Metric("steady median", "s", True, _step_gate, _steady_median, True, STEADY)
# The tail is a p99 only where every run compared has the samples to support one, and then
# LoadGen's early-stopping estimate (timing.TAIL_SOURCE); otherwise the slowest step, named so.
STEADY_P99 = Metric("steady p99", "s", True, _step_gate, _steady_p99, True, STEADY)
STEADY_MAX = Metric("steady max", "s", True, _step_gate, _steady_max, True, STEADY)
METRICS = (
    STEADY_MEDIAN,
    STEADY_P99,
    Metric("throughput", "items/s", False, _step_gate, _throughput, True, STEADY),
    Metric("first call", "s", True, lambda g: g.compile_time, _first_call, False, FIRST_CALL),
    Metric(
        "peak host memory",
        "MiB",
        True,
        lambda g: g.memory,
        _peak(lambda memory: memory.host_peak_rss),
        False,
        None,
    ),
    Metric(
        "peak device memory",
        "MiB",
        True,
        lambda g: g.memory,
        _peak(lambda memory: memory.device_peak_allocated),
        False,
        None,
    ),
)


def configs_of(run: Run) -> dict[tuple[str, str], ConfigResult]:
    """The newest run's configurations that ran to the end, by (kind, mode)."""
    data = run.result(BASELINE_FILE)
    configs = data.configs if data else []
    return {(c.kind, c.mode): c for c in configs if c.failure is None}


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


def relative_iqr(samples: list[float]) -> float:
    ordered = sorted(samples)
    middle = quantile(ordered, 0.5)
    spread = quantile(ordered, 0.75) - quantile(ordered, 0.25)
    return spread / middle if middle > 0 else 0.0


def pair_allowance(new: list[float], base: list[float]) -> float:
    """How far (as a factor less one) a timing may move between two runs by run-to-run variation
    alone, when no history measures it: PAIR_ALLOWANCE, or PAIR_IQR_MULTIPLE x the wider relative
    IQR of the two runs' steady samples (noisier steps vary more from run to run)."""
    spreads = [relative_iqr(s) for s in (new, base) if s]
    return max([PAIR_ALLOWANCE] + [PAIR_IQR_MULTIPLE * s for s in spreads])


def slowdown_factor(ratio: float, lower_is_better: bool) -> float:
    """How many times worse or better, whichever way it moved (2.0 for half the throughput)."""
    worse_ratio = ratio if lower_is_better else 1 / ratio
    return max(worse_ratio, 1 / worse_ratio)


@dataclass
class _Side:
    """One run's configuration as a comparison sees it."""

    label: str
    config: ConfigResult

    def host(self, phase: str | None) -> HostLoad | None:
        return host_load(self.config, phase) if phase else None

    def loaded(self, phase: str | None) -> bool:
        host = self.host(phase)
        return host is not None and host.loaded

    def threads(self, phase: str | None) -> int | None:
        host = self.host(phase)
        return host.threads if host else None


def load_share(host: HostLoad | None) -> float:
    """Other processes' and the hypervisor's share of the CPU while a phase was timed."""
    if host is None or not host.loaded:
        return 0.0
    return min((host.other_share or 0.0) + (host.steal_share or 0.0), MAX_LOAD_SHARE)


def load_explains(share: float) -> float:
    """The largest slowdown a share of the CPU taken by others can explain (LOAD_RULE)."""
    return 1 / (1 - share)


def _load_words(side: _Side, phase: str | None) -> str:
    host = side.host(phase)
    shares = []
    if host is not None and host.other_share is not None:
        shares.append(f"other processes {host.other_share:.0%} of the CPU")
    if host is not None and host.steal_share is not None:
        shares.append(f"steal {host.steal_share:.0%}")
    return f"{side.label} ({', '.join(shares)})" if shares else side.label


@dataclass
class _Judged:
    """What one metric's comparison rests on once loaded and mismatched runs are left out."""

    earlier: list[_Side]
    left_out: list[str]  # why earlier runs were left out, one phrase each
    blocked: Change | None  # set when nothing can be judged


def _usable_earlier(
    name: str, metric: Metric, newest: _Side, earlier: list[_Side], series: list[float | None]
) -> _Judged:
    """Earlier runs a timing can be judged against: same thread count as the newest, and not
    loaded where runs measured on a quiet machine exist (loaded ones are then left out, and said
    so); where every one was loaded, those are kept and judged by LOAD_RULE. No earlier run with
    the newest's thread count: not comparable."""
    base_value = next((v for v in reversed(series[:-1]) if v is not None), None)
    quiet, loaded, left_out = [], [], []
    threads = newest.threads(metric.phase)
    for side in earlier:
        other_threads = side.threads(metric.phase)
        if threads is not None and other_threads is not None and other_threads != threads:
            left_out.append(f"{side.label} ran {other_threads} thread(s), the newest {threads}")
        elif side.loaded(metric.phase):
            loaded.append(side)
        else:
            quiet.append(side)
    if quiet:
        left_out += [f"{_load_words(s, metric.phase)} was measured loaded" for s in loaded]
        return _Judged(quiet, left_out, None)
    if loaded or not left_out:
        return _Judged(loaded, left_out, None)
    status: ChangeStatus = NOT_COMPARABLE
    note = "; ".join(left_out)
    blocked = Change("timing", name, base_value, series[-1], status, metric.unit, note=note,
                     series=series)  # fmt: skip
    return _Judged([], left_out, blocked)


def _tail_metric(sides: list[_Side]) -> Metric:
    needed = samples_for_percentile(TAIL_QUANTILE)
    if all(len(steady_samples(s.config)) >= needed for s in sides):
        return STEADY_P99
    return STEADY_MAX


def _metrics_for(sides: list[_Side]) -> list[Metric]:
    tail = _tail_metric(sides)
    return [tail if m is STEADY_P99 else m for m in METRICS]


@dataclass(frozen=True)
class Shift:
    """A metric's newest value against its base: the ratio, which way is better, the samples."""

    new: float
    ratio: float
    lower_is_better: bool
    new_samples: list[float]
    base_samples: list[float]


def run_to_run(
    status: ChangeStatus, shift: Shift, earlier: list[float], notes: list[str]
) -> ChangeStatus:
    """A regression or an improvement within the machine's run-to-run variation is RUN_TO_RUN:
    inside the band of the earlier runs' values (history_band), or, with too few runs for a
    band, within the pair allowance (pair_allowance); the note says which."""
    if status not in (REGRESSION, IMPROVEMENT):
        return status
    band = history_band(earlier)
    if band is not None:
        if not band[0] <= shift.new <= band[1]:
            return status
        notes.append(
            f"within the band of the {len(earlier)} earlier runs ({band[0]:.4g} to "
            f"{band[1]:.4g}: median +- {HISTORY_SPREADS:g} x 1.4826 x MAD): the machine's "
            "run-to-run variation, not a shift"
        )
        return RUN_TO_RUN
    allowance = pair_allowance(shift.new_samples, shift.base_samples)
    factor = slowdown_factor(shift.ratio, shift.lower_is_better)
    if factor - 1 > allowance:
        return status
    notes.append(
        f"a {factor:.2f}x change is within the {allowance:.0%} allowed for run-to-run "
        f"variation, which {len(earlier) + 1} runs cannot measure: compare against a history "
        f"of {HISTORY_SPREAD_RUNS} or more runs to judge smaller changes"
    )
    return RUN_TO_RUN


def _judge_metric(
    metric: Metric,
    name: str,
    newest: _Side,
    usable: _Judged,
    series: list[float | None],
    gates: Gates,
    environment_note: str,
) -> Change:
    new = series[-1]
    earlier_values = [metric.value(s.config) for s in usable.earlier]
    earlier = [v for v in earlier_values if v is not None]
    if new is None or not earlier or min(earlier) <= 0:
        base_value = earlier[-1] if earlier else None
        return Change("timing", name, base_value, new, NOT_COMPARABLE, metric.unit, series=series)
    base = earlier[-1] if len(earlier) == 1 else median(earlier)
    ratio = new / base
    gate = metric.gate(gates)
    notes = []
    if metric.sampled:
        new_samples = steady_samples(newest.config)
        base_samples = [t for s in usable.earlier for t in steady_samples(s.config)]
        p_value = mann_whitney_u(new_samples, base_samples)[1]
        apart = quartiles_apart(new_samples, base_samples)
        notes.append("rank test on raw steady-state samples")
    else:
        new_samples, base_samples, p_value, apart = [], [], None, True
        notes.append("one value per run: magnitude gate only")
    status = _status(metric, ratio, gate, p_value, gates.p_value)
    if status in (REGRESSION, IMPROVEMENT) and not apart:
        status = NOISE
        notes.append("the runs' interquartile ranges overlap (a burst of load, not a shift)")
    if metric.phase is not None:
        shift = Shift(new, ratio, metric.lower_is_better, new_samples, base_samples)
        status = run_to_run(status, shift, earlier, notes)
    status = _judge_load(status, metric, ratio, newest, usable.earlier, notes)
    notes += usable.left_out
    if status in (REGRESSION, IMPROVEMENT) and environment_note:
        notes.append(environment_note)
    return Change("timing", name, base, new, status, metric.unit, ratio, p_value, gate,
                  "; ".join(notes), series)  # fmt: skip


def _judge_load(
    status: ChangeStatus,
    metric: Metric,
    ratio: float,
    newest: _Side,
    earlier: list[_Side],
    notes: list[str],
) -> ChangeStatus:
    """LOAD_RULE on a status judged as if the machine had been quiet: a change in the direction
    a side's recorded load pushes (the newest slower when it was loaded, faster when the
    baseline was) stands only beyond what that load explains; anything else measured loaded is
    not judged."""
    loaded = [s for s in (*earlier, newest) if s.loaded(metric.phase)]
    if not loaded:
        return status
    words = "; ".join(_load_words(s, metric.phase) for s in loaded)
    worse = ratio > 1 if metric.lower_is_better else ratio < 1
    pushing = [newest] if worse else earlier
    share = max((load_share(s.host(metric.phase)) for s in pushing), default=0.0)
    explained = load_explains(share)
    factor = slowdown_factor(ratio, metric.lower_is_better)
    if status in (REGRESSION, IMPROVEMENT) and factor > explained * (1 + PAIR_ALLOWANCE):
        notes.append(
            f"measured loaded ({words}), but a {factor:.2f}x change is beyond the at most "
            f"{explained:.2f}x that load explains, and the {PAIR_ALLOWANCE:.0%} run-to-run "
            "allowance on top of it"
        )
        return status
    notes.append(
        f"measured while the machine was loaded ({words}): a {factor:.2f}x change is within "
        f"the {explained:.2f}x that load can explain and the run-to-run allowance; run "
        "`workbench compare --remeasure` to time both workloads again, interleaved, on this "
        "machine now"
    )
    return LOADED


def _status(
    metric: Metric, ratio: float, gate: float, p_value: float | None, significance: float
) -> ChangeStatus:
    """The magnitude gate, then (for sampled metrics) the rank test."""
    worse = ratio > 1 if metric.lower_is_better else ratio < 1
    if abs(ratio - 1) < gate:
        return WITHIN_GATE
    if metric.sampled and (p_value is None or p_value >= significance):
        return NOISE
    return REGRESSION if worse else IMPROVEMENT


def timing_changes(runs: list[Run], gates: Gates, environment_note: str) -> list[Change]:
    """Every timing metric of the newest run against the run before it (two runs) or against
    the median of all runs before it (a history), with the rank test on pooled raw samples.
    Earlier runs measured loaded or with another thread count are left out, and said so."""
    newest_run, previous = runs[-1], runs[:-1]
    previous_configs = [configs_of(run) for run in previous]
    changes = []
    for key, config in configs_of(newest_run).items():
        label = f"{key[0]}/{key[1]}"
        newest = _Side(newest_run.label, config)
        earlier = [
            _Side(run.label, configs[key])
            for run, configs in zip(previous, previous_configs, strict=True)
            if key in configs
        ]
        for metric in _metrics_for([*earlier, newest]):
            series = [metric.value(c[key]) if key in c else None for c in previous_configs]
            series.append(metric.value(config))
            if all(v is None for v in series):
                continue
            name = f"{label} {metric.name}"
            usable = _usable_earlier(name, metric, newest, earlier, series)
            if usable.blocked is not None:
                changes.append(usable.blocked)
                continue
            changes.append(
                _judge_metric(metric, name, newest, usable, series, gates, environment_note)
            )
    return changes
