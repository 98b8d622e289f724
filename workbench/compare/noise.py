"""One timing of the newest run against the runs before it, judged against the noise level
measured for it: the rule notebook 01's step times and notebook 05's serving latencies share.

A change has three possible answers, as Pinpoint's A/B compare has ("different", "same",
"unknown: add repeats"):
- REGRESSION or IMPROVEMENT: beyond the metric's gate AND beyond its noise level (and, where raw
  samples exist, a Mann-Whitney U test below the p-value, as asv asks);
- WITHIN_GATE: it moved less than the gate, and no load on the baseline could hide a slowdown;
  WITHIN_NOISE: beyond the gate but inside a noise level the runs measured (a history);
- INCONCLUSIVE: beyond the gate, and nothing measured says whether that is noise. The exit code
  says so (errors.EXIT_INCONCLUSIVE) and the note names what would settle it.

The noise level is measured where it can be:
- a history (HISTORY_RUNS or more comparable earlier runs): a prediction interval for one more
  run from the earlier runs' values, on the log scale, Student's t at the p-value with n - 1
  degrees of freedom (Bencher's t_test limit; a band that narrows as the history grows, where
  Conbench's fixed 5 sigma assumes a hundred runs). Its spread is at least the newest value's own
  sampling noise (a bootstrap of its samples), so three runs that agree by chance do not make a
  band of zero width. Both directions are judged.
- a pair (fewer earlier runs): nothing measures the variation between runs, so the band is
  1 + PAIR_ALLOWANCE (beyond the largest difference measured between identical runs) or the two
  values' sampling noise where wider; what lies inside it is inconclusive.
A change inside a measured band is "within noise" only where that band is narrow (at most
PASS_BAND_GATES gates): a wider one could hide a slowdown of its width, so it is inconclusive.
- a metric measured once per run (first call) or too short to time alone (serving calls under
  SHORT_CALL_S) is judged only from repeated measurements: a history, or `--remeasure`.
- load: other processes taking a share s of the CPU slow a run by at most 1 / (1 - s); a change
  in the direction a side's load pushes is judged only beyond that factor times the band.
  A baseline measured loaded can hide a slowdown of up to that factor, so a change within the
  gate against it is inconclusive too.
Timings taken with different thread counts are not comparable; earlier runs measured loaded are
left out of a history where quiet ones exist.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

from workbench.compare.records import (
    IMPROVEMENT,
    INCONCLUSIVE,
    NOT_COMPARABLE,
    REGRESSION,
    REPORTED,
    WITHIN_GATE,
    WITHIN_NOISE,
    Change,
    ChangeStatus,
    Gates,
)
from workbench.compare.stats import (
    bootstrap_log_sd,
    mann_whitney_u,
    median,
    stdev,
)
from workbench.student_t import t_quantile
from workbench.timing import HostLoad, quantile

HISTORY_RUNS = 3
# A pair's allowance for the run-to-run variation it cannot measure: beyond the largest difference
# measured between identical runs of one workload, in their fastest steps, on a quiet 2-core VM
# (3.7 to 5.6 ms, 1.5x) and beside busy loops (1.2-1.5x): a factor of 2.
PAIR_ALLOWANCE = 1.0
# A measured band this much wider than the gate (as a factor less one) is too wide to clear a
# change beyond the gate: what it calls noise could hide a slowdown of its width.
PASS_BAND_GATES = 3.0
SAMPLING_Z = 3.0  # a pair's sampling band: this many bootstrap standard deviations of the ratio
SHORT_CALL_S = 100e-6  # serving calls shorter than this are judged from repeated measurements
MAX_LOAD_SHARE = 0.95  # above this share of the CPU taken by others, the bound is not worth it
SETTLE = (
    "`workbench compare --remeasure` (both workloads timed again here, interleaved), a quieter "
    f"runner, or a history of {HISTORY_RUNS} or more runs"
)


@dataclass(frozen=True)
class Reading:
    """One run's value of one metric, the raw samples it was estimated from, and the machine's
    state while they were taken."""

    label: str
    value: float | None
    samples: list[float] = field(default_factory=list)
    host: HostLoad | None = None

    @property
    def share(self) -> float:
        """Other processes' and the hypervisor's share of the CPU while it was measured."""
        host = self.host
        if host is None or not host.loaded:
            return 0.0
        return min((host.other_share or 0.0) + (host.steal_share or 0.0), MAX_LOAD_SHARE)


@dataclass(frozen=True)
class Rule:
    """How one metric is read and judged."""

    name: str
    unit: str
    lower_is_better: bool
    gate: float
    # From raw samples to the value: what a bootstrap re-estimates (None: one value per run).
    estimate: Callable[[list[float]], float] | None = None
    repeated_only: bool = False  # judged only from repeated measurements (a history)
    quartiles: bool = True  # a shift must also move the interquartile ranges apart
    gated: bool = True  # False: shown, never judged (the slowest single step)
    timing: bool = True  # False (memory): no load or run-to-run rule, the gate alone


def low_quantile(samples: list[float]) -> float:
    """The best-of-repetitions estimate: the 10th percentile of the steady steps. Other load only
    ever adds time to a step, so the fastest steps are the ones it spared; one lucky step alone
    does not set it, as the minimum would."""
    return quantile(sorted(samples), 0.10)


def quartiles_apart(new: list[float], base: list[float]) -> bool:
    """Whether one sample's interquartile range lies wholly above or below the other's."""
    new, base = sorted(new), sorted(base)
    return quantile(new, 0.25) > quantile(base, 0.75) or quantile(new, 0.75) < quantile(base, 0.25)


def slowdown_factor(ratio: float, lower_is_better: bool) -> float:
    """How many times worse or better, whichever way it moved (2.0 for half the throughput)."""
    worse_ratio = ratio if lower_is_better else 1 / ratio
    return max(worse_ratio, 1 / worse_ratio)


def load_explains(share: float) -> float:
    """The largest slowdown a share of the CPU taken by others can explain."""
    return 1 / (1 - share)


@dataclass(frozen=True)
class Band:
    """How far (a factor, 1 or more) noise alone can move the metric, and whether the runs
    measured that (a history) or it is an allowance (a pair, a load bound)."""

    factor: float
    measured: bool
    words: str


def _sampling_sd(rule: Rule, reading: Reading) -> float:
    if rule.estimate is None or len(reading.samples) < 2:
        return 0.0
    return bootstrap_log_sd(reading.samples, rule.estimate)


def _history_band(rule: Rule, newest: Reading, values: list[float], p_value: float) -> Band:
    logs = [math.log(v) for v in values]
    n = len(logs)
    spread = max(stdev(logs), _sampling_sd(rule, newest))
    t = t_quantile(1 - p_value / 2, n - 1)
    factor = math.exp(t * spread * math.sqrt(1 + 1 / n))
    words = (
        f"the {n} earlier runs' prediction interval for one more run: x/{factor:.3g} (Student's "
        f"t at p {p_value:g}, {n - 1} degrees of freedom, on log values)"
    )
    return Band(factor, True, words)


def _pair_band(rule: Rule, newest: Reading, base: Reading) -> Band:
    if rule.repeated_only:
        return Band(math.inf, False, _why_repeated(rule, newest))
    sampling = math.exp(
        SAMPLING_Z * math.hypot(_sampling_sd(rule, newest), _sampling_sd(rule, base))
    )
    factor = max(1 + PAIR_ALLOWANCE, sampling)
    words = (
        f"two runs cannot measure run-to-run variation: allowed {factor:.2g}x (identical runs "
        "differed by up to 1.5x in their fastest steps)"
    )
    return Band(factor, False, words)


def _why_repeated(rule: Rule, newest: Reading) -> str:
    if rule.estimate is None:
        return "one value per run: judged only from a history of runs or a remeasure"
    return (
        f"calls under {SHORT_CALL_S * 1e6:g} us vary more than any gate from run to run: "
        "judged only from a history of runs"
    )


def _load_words(reading: Reading) -> str:
    host = reading.host
    return f"{reading.label} ({host.shares()})" if host is not None else reading.label


def _comparable(
    rule: Rule, newest: Reading, earlier: list[Reading]
) -> tuple[list[Reading], list[str]]:
    """Earlier readings with a value and the newest's thread count; loaded ones left out where
    quiet ones exist. Returns them and why others were left out."""
    threads = newest.host.threads if newest.host else None
    kept, left_out = [], []
    for reading in earlier:
        other = reading.host.threads if reading.host else None
        if reading.value is None or reading.value <= 0:
            continue
        if rule.timing and threads is not None and other is not None and other != threads:
            left_out.append(f"{reading.label} ran {other} thread(s), the newest {threads}")
        else:
            kept.append(reading)
    quiet = [r for r in kept if r.share == 0.0]
    if rule.timing and quiet and len(quiet) < len(kept):
        left_out += [f"{_load_words(r)} was measured loaded" for r in kept if r.share > 0]
        kept = quiet
    return kept, left_out


@dataclass
class _Case:
    """What one judgement rests on."""

    rule: Rule
    newest: Reading
    earlier: list[Reading]
    base: float
    ratio: float
    notes: list[str]

    @property
    def worse(self) -> bool:
        return self.ratio > 1 if self.rule.lower_is_better else self.ratio < 1

    @property
    def factor(self) -> float:
        return slowdown_factor(self.ratio, self.rule.lower_is_better)


def judge(rule: Rule, area: str, newest: Reading, earlier: list[Reading], gates: Gates) -> Change:
    """The newest reading against the earlier ones (oldest first), by the module's rule."""
    series = [r.value for r in earlier] + [newest.value]
    last = next((r.value for r in reversed(earlier) if r.value is not None), None)
    if not rule.gated:
        note = "one slowest step is one sample, not a measurement: shown, never gated"
        return Change(area, rule.name, last, newest.value, REPORTED, rule.unit, note=note,
                      series=series)  # fmt: skip
    kept, left_out = _comparable(rule, newest, earlier)
    if newest.value is None or not kept:
        return Change(area, rule.name, last, newest.value, NOT_COMPARABLE, rule.unit,
                      note="; ".join(left_out), series=series)  # fmt: skip
    values = [r.value for r in kept if r.value is not None]
    base = median(values) if len(values) >= HISTORY_RUNS else values[-1]
    case = _Case(rule, newest, kept, base, newest.value / base, [])
    p_value = _rank_test(case)
    status = _decide(case, gates, p_value)
    case.notes += left_out
    return Change(area, rule.name, base, newest.value, status, rule.unit, case.ratio, p_value,
                  rule.gate, "; ".join(case.notes), series)  # fmt: skip


def _rank_test(case: _Case) -> float | None:
    if case.rule.estimate is None or not case.newest.samples:
        return None
    pooled = [t for r in case.earlier for t in r.samples]
    if not pooled:
        return None
    case.notes.append("rank test on raw samples")
    return mann_whitney_u(case.newest.samples, pooled)[1]


def _decide(case: _Case, gates: Gates, p_value: float | None) -> ChangeStatus:
    rule, notes = case.rule, case.notes
    if not rule.timing:
        if abs(case.ratio - 1) < rule.gate:
            return WITHIN_GATE
        notes.append("one value per run: its gate alone")
        return REGRESSION if case.worse else IMPROVEMENT
    hiding = max((r.share for r in case.earlier), default=0.0)
    if abs(case.ratio - 1) < rule.gate:
        if hiding == 0.0:
            return WITHIN_GATE
        notes.append(
            f"within the gate, but the baseline was measured loaded "
            f"({_loaded_earlier(case)}): a slowdown of up "
            f"to {load_explains(hiding):.2f}x could hide in it; settle with {SETTLE}"
        )
        return INCONCLUSIVE
    band = _band(case, gates.p_value)
    pushing = case.newest.share if case.worse else hiding
    explained = load_explains(pushing)
    allowed = band.factor * explained
    if pushing:
        notes.append(
            f"measured loaded ({_load_words(case.newest) if case.worse else 'the baseline'}): "
            f"load explains up to {explained:.2f}x on top of the noise band"
        )
    elif hiding:
        notes.append(
            f"the baseline was measured loaded ({_loaded_earlier(case)}): it may read faster or "
            "slower than its code"
        )
    if case.factor > allowed:
        if p_value is not None and p_value >= gates.p_value:
            notes.append(f"beyond the noise band, but the rank test is not significant; {SETTLE}")
            return INCONCLUSIVE
        if rule.quartiles and case.rule.estimate is not None and not _quartiles(case):
            notes.append(
                "the runs' interquartile ranges overlap (a burst of load, not a shift); "
                f"settle with {SETTLE}"
            )
            return INCONCLUSIVE
        notes.append(f"beyond the noise: {band.words}")
        return REGRESSION if case.worse else IMPROVEMENT
    if band.measured and not pushing and band.factor - 1 <= PASS_BAND_GATES * rule.gate:
        notes.append(f"a {case.factor:.2f}x change is inside {band.words}")
        return WITHIN_NOISE
    notes.append(f"a {case.factor:.2f}x change is inside what noise allows here ({band.words}); "
                 f"settle with {SETTLE}")  # fmt: skip
    return INCONCLUSIVE


def _loaded_earlier(case: _Case) -> str:
    return "; ".join(_load_words(r) for r in case.earlier if r.share)


def _band(case: _Case, p_value: float) -> Band:
    values = [r.value for r in case.earlier if r.value is not None]
    if len(values) >= HISTORY_RUNS:
        return _history_band(case.rule, case.newest, values, p_value)
    return _pair_band(case.rule, case.newest, case.earlier[-1])


def _quartiles(case: _Case) -> bool:
    pooled = [t for r in case.earlier for t in r.samples]
    return not pooled or quartiles_apart(case.newest.samples, pooled)


NOISE_RULE = (
    "a timing is judged against the noise level measured for it: against a history of "
    f"{HISTORY_RUNS} or more earlier runs, the prediction interval their values give one more "
    "run (Student's t at the p-value, log scale, at least the newest value's own sampling "
    "noise); against one earlier run, which cannot measure run-to-run variation, an allowance "
    f"of {1 + PAIR_ALLOWANCE:g}x; first calls and serving calls under {SHORT_CALL_S * 1e6:g} us "
    "only from a history. Other processes taking a share s of the CPU explain a slowdown of up "
    "to 1 / (1 - s) on top. Beyond the gate and the noise: a regression or an improvement; "
    "within the gate: no change; beyond the gate inside a measured band no wider than "
    f"{PASS_BAND_GATES:g} gates: within noise; beyond the gate where nothing measured the noise, "
    "or inside a wider band: inconclusive (exit 6), settled by "
    f"{SETTLE}"
)
