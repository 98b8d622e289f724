"""Timing statistics shared by every measurement: raw samples with derived stats, the adaptive
warm-up rule, and this process's peak resident memory per phase."""

from __future__ import annotations

import functools
import math
import os
import random
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from workbench.errors import BadInput

# Relative IQR above which a sample set is called unstable (torch.utils.benchmark uses the same
# two levels for its warnings).
FLUCTUATION_WARN = 0.10
FLUCTUATION_SEVERE = 0.25


# Tails as MLPerf LoadGen reports them (mlcommons/inference loadgen/early_stopping.cc and
# results.cc, the single-stream early-stopping estimate): at 99% confidence with tolerance 0, n
# samples support the q-th percentile from the least n at which one over-latency sample is still
# allowed (64 for p90, 130 for p95, 662 for p99); past that, LoadGen allows t over-latency
# samples, the largest t with P(Binomial(n, 1 - q) <= t) < 1 - confidence, and reports the t-th
# largest sample, printing that it "would discard t - 1 highest latency queries". That is the
# binomial tail LoadGen's BetaRegularized(q, h, 1 + t) computes, with h = n - t.
PERCENTILE_CONFIDENCE = 0.99
TAIL_SOURCE = (
    "MLPerf LoadGen's early-stopping estimate "
    "(mlcommons/inference loadgen/early_stopping.cc, results.cc)"
)


@functools.lru_cache(maxsize=512)
def early_stopping_overlatency(
    count: int, q: float, confidence: float = PERCENTILE_CONFIDENCE
) -> int | None:
    """LoadGen's t for `count` samples and quantile q: how many samples above the q-th percentile
    the estimate allows (the estimate is the t-th largest); None under LoadGen's minimum count."""
    if count < 1 or not 0 < q < 1:
        return None
    bound = math.log(1 - confidence)
    log_ratio = math.log((1 - q) / q)
    log_term = count * math.log(q)  # P(no sample above the percentile)
    log_cdf = log_term
    allowed = None
    for over in range(1, count):
        log_term += math.log((count - over + 1) / over) + log_ratio
        high, low = max(log_cdf, log_term), min(log_cdf, log_term)
        log_cdf = high + math.log1p(math.exp(low - high))
        if log_cdf >= bound:
            break
        allowed = over
    return allowed


@functools.lru_cache(maxsize=64)
def samples_for_percentile(q: float, confidence: float = PERCENTILE_CONFIDENCE) -> int:
    """The fewest samples from which the q-th quantile (0 < q < 1) is claimed: LoadGen's minimum
    query count for early stopping (662 for p99, 130 for p95, 64 for p90 at 99%)."""
    # With no over-latency sample allowed the bound is q**n <= 1 - confidence; one allowed
    # needs more, so the search starts there.
    count = math.ceil(math.log(1 - confidence) / math.log(q))
    while early_stopping_overlatency(count, q, confidence) is None:
        count += 1
    return count


def early_stopping_discards(count: int, q: float) -> int | None:
    """How many of the largest samples LoadGen's estimate passes over ("would discard"), or None
    where `count` samples do not support the q-th percentile."""
    over = early_stopping_overlatency(count, q)
    return None if over is None else over - 1


def early_stopping_estimate(sorted_values: Sequence[float], q: float) -> float | None:
    """LoadGen's early-stopping estimate of the q-th percentile of ascending `sorted_values`: the
    t-th largest sample (the maximum until t reaches 2); None under the minimum count."""
    over = early_stopping_overlatency(len(sorted_values), q)
    return None if over is None else sorted_values[len(sorted_values) - over]


def tail_rule() -> str:
    """The one tail rule, in words, with its counts."""
    return (
        f"a percentile is {TAIL_SOURCE}: claimed only from {samples_for_percentile(0.90)} samples "
        f"for p90, {samples_for_percentile(0.95)} for p95, {samples_for_percentile(0.99)} for "
        "p99 (99% confidence, one sample above it allowed), and then the order statistic LoadGen "
        "reports above the sample percentile (the maximum until its count allows discarding the "
        "largest; from 5,000 samples the p99 passes over the 32 largest); below that count the "
        "report gives the maximum, named 'max of n'"
    )


def percentile_label(q: float) -> str:
    return f"p{q * 100:g}"


def quantile(sorted_values: Sequence[float], q: float) -> float:
    """Linear interpolation between order statistics (numpy's and torch.quantile's default)."""
    position = q * (len(sorted_values) - 1)
    low = math.floor(position)
    high = min(low + 1, len(sorted_values) - 1)
    return sorted_values[low] + (sorted_values[high] - sorted_values[low]) * (position - low)


BOOTSTRAP_RESAMPLES = 2000
RATIO_INTERVAL_METHOD = (
    f"95% percentile bootstrap of the ratio of steady-state robust medians "
    f"({BOOTSTRAP_RESAMPLES:,} resamples of each configuration's raw step times, fixed seed; "
    "each resample's robust median by the same outlier rule as the estimate)"
)


@functools.lru_cache(maxsize=32)
def ratio_of_medians_interval(
    numerator: tuple[float, ...], denominator: tuple[float, ...], confidence: float = 0.95
) -> tuple[float, float]:
    """Percentile-bootstrap interval of robust_median(numerator) / robust_median(denominator).

    The statistic is the estimate's own: an interval of the plain median's ratio can leave out
    a robust-median estimate when a burst of slow steps moves the two medians apart. Each
    resample redraws both sample sets, so the interval carries the noise of both; the seed is
    fixed (and the answer cached), so every view of one result prints the same interval.
    """
    draw = random.Random(0)
    ratios = []
    for _ in range(BOOTSTRAP_RESAMPLES):
        top = Measurement(draw.choices(numerator, k=len(numerator))).robust_median
        bottom = Measurement(draw.choices(denominator, k=len(denominator))).robust_median
        ratios.append(top / bottom if bottom > 0 else math.inf)
    ratios.sort()
    tail = (1 - confidence) / 2
    return quantile(ratios, tail), quantile(ratios, 1 - tail)


# A steady step cannot run faster than its own cost, but other load can slow a burst of steps:
# samples far above the median are noise, not the step. MAD x 1.4826 estimates the standard
# deviation of normal noise; the floor keeps a near-constant series from discarding jitter.
OUTLIER_MADS = 5.0
OUTLIER_FLOOR = 0.02  # of the median
OUTLIER_RULE = (
    f"samples slower than median + {OUTLIER_MADS:g} x max(1.4826 x MAD, "
    f"{OUTLIER_FLOOR:.0%} of the median) are left out of the robust median (a burst of other "
    "load slows steps; nothing makes a step faster than its cost); the raw samples keep them"
)


# A measurement is "loaded" when something else competed for the CPU while it ran: another
# process's work (a quarter of the machine's cores kept busy is enough to slow a step that uses
# every core), or the hypervisor giving our virtual CPUs' time to other guests.
LOADED_OTHER_SHARE = 0.25  # of the machine's CPU time, used by other processes
LOADED_STEAL_SHARE = 0.05  # of the machine's CPU time, taken by the hypervisor
MIN_LOAD_WINDOW_S = 0.2  # 40 clock ticks of a 2-core machine: a 2.5% resolution
HOST_LOAD_RULE = (
    f"loaded when other processes used more than {LOADED_OTHER_SHARE:.0%} of the machine's CPU "
    f"time, or the hypervisor took more than {LOADED_STEAL_SHARE:.0%} (steal), while it was "
    "measured (/proc/stat for the machine, psutil for this process and its children; a phase "
    f"shorter than {MIN_LOAD_WINDOW_S:g} s is read over {MIN_LOAD_WINDOW_S:g} s, the rest "
    "just after it)"
)


def is_loaded(other_share: float | None, steal_share: float | None) -> bool:
    """HOST_LOAD_RULE on the two shares; an unreadable share marks nothing."""
    return (other_share is not None and other_share > LOADED_OTHER_SHARE) or (
        steal_share is not None and steal_share > LOADED_STEAL_SHARE
    )


@dataclass
class HostLoad:
    """What else the machine was doing while a measurement ran, and how many threads it used.

    `other_share` is the share of the machine's CPU time that went to other processes (busy time
    from /proc/stat less this process tree's own CPU time); `steal_share` the share the
    hypervisor gave to other guests. None where /proc/stat cannot be read.
    """

    threads: int
    cores: int
    wall_seconds: float
    other_share: float | None
    steal_share: float | None
    load_average: float | None  # 1-minute load average at the end, for context only
    loaded: bool
    rule: str = HOST_LOAD_RULE

    def shares(self) -> str:
        """What loaded the machine, in few words, for a headline."""
        other = "unknown" if self.other_share is None else f"{self.other_share:.0%}"
        steal = "unknown" if self.steal_share is None else f"{self.steal_share:.0%}"
        return f"other processes {other} of the CPU, steal {steal}"

    def sentence(self) -> str:
        if self.other_share is None or self.steal_share is None:
            return f"{self.threads} thread(s) on {self.cores} core(s); machine load not readable"
        state = "LOADED" if self.loaded else "quiet"
        return f"{state}: {self.threads} thread(s) on {self.cores} core(s), {self.shares()}"


def _proc_stat_ticks() -> tuple[int, int, int] | None:
    """(total, busy, steal) clock ticks of all CPUs since boot, or None without /proc/stat."""
    try:
        with open("/proc/stat") as fh:
            fields = fh.readline().split()
    except OSError:
        return None
    if not fields or fields[0] != "cpu":
        return None
    # user nice system idle iowait irq softirq steal (guest time is already inside user/nice)
    values = [int(v) for v in fields[1:9]]
    values += [0] * (8 - len(values))
    total = sum(values)
    idle = values[3] + values[4]
    return total, total - idle, values[7]


def _own_cpu_seconds() -> float:
    """CPU time of this process and every process under it: the children it has reaped are in
    its own counters, live ones (compiler workers, DataLoader workers) are read one by one, so
    a measurement's own helpers never count as other load."""
    import psutil  # imported where a process is read: readers of timing records never do

    me = psutil.Process()
    times = me.cpu_times()
    total = times.user + times.system + times.children_user + times.children_system
    for child in me.children(recursive=True):
        try:
            child_times = child.cpu_times()
        except psutil.Error:  # it exited between the listing and the reading
            continue
        total += child_times.user + child_times.system
    return total


def _threads() -> int:
    torch = sys.modules.get("torch")  # only where torch is already in use: never import it here
    if torch is not None:
        return int(torch.get_num_threads())
    return 1


class HostLoadProbe:
    """Reads the machine's CPU accounting around a measured window: `with HostLoadProbe() as
    probe: ...` then `probe.result`. Two reads of /proc/stat and psutil, nothing in between, so
    it costs the measured steps nothing."""

    def __init__(self) -> None:
        self.result: HostLoad | None = None

    def __enter__(self) -> HostLoadProbe:
        self._start = time.perf_counter()
        self._ticks = _proc_stat_ticks()
        self._own = _own_cpu_seconds()
        return self

    def __exit__(self, *_: object) -> None:
        # /proc/stat counts in clock ticks (10 ms each CPU): a window of a few milliseconds reads
        # 0% or 100%. A shorter one is read over MIN_LOAD_WINDOW_S, the rest just after it,
        # when whatever loaded the machine is still there.
        rest = MIN_LOAD_WINDOW_S - (time.perf_counter() - self._start)
        if rest > 0:
            time.sleep(rest)
        self.result = self.read()

    def read(self) -> HostLoad:
        """The load since the window started (callable more than once, e.g. per step window)."""
        wall = time.perf_counter() - self._start
        ticks = _proc_stat_ticks()
        own = _own_cpu_seconds() - self._own
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 1
        try:
            load_average: float | None = os.getloadavg()[0]
        except OSError:
            load_average = None
        other = steal = None
        if ticks is not None and self._ticks is not None:
            total = ticks[0] - self._ticks[0]
            if total > 0:
                hertz = os.sysconf("SC_CLK_TCK")
                busy_seconds = (ticks[1] - self._ticks[1]) / hertz
                other = min(1.0, max(0.0, busy_seconds - own) / (total / hertz))
                steal = (ticks[2] - self._ticks[2]) / total
        loaded = is_loaded(other, steal)
        return HostLoad(_threads(), cores, wall, other, steal, load_average, loaded)


@dataclass
class Measurement:
    """Raw per-step times in seconds and the statistics derived from them.

    Like torch.utils.benchmark's Measurement, the samples travel with the statistics; the
    statistics are recomputed from `times` on construction, never stored independently.
    """

    times: list[float]
    host: HostLoad | None = None  # the machine's state while the samples were taken
    median: float = field(init=False)
    iqr: float = field(init=False)
    mean: float = field(init=False)
    min: float = field(init=False)
    max: float = field(init=False)
    # LoadGen's early-stopping estimates (TAIL_SOURCE); None where the samples are too few.
    p90: float | None = field(init=False)
    p99: float | None = field(init=False)
    relative_iqr: float = field(init=False)
    has_warnings: bool = field(init=False)
    warnings: list[str] = field(init=False)
    robust_median: float = field(init=False)  # median of the samples OUTLIER_RULE keeps
    discarded: list[int] = field(init=False)  # indices into `times` that OUTLIER_RULE left out

    def __post_init__(self) -> None:
        if not self.times:
            raise ValueError("a Measurement needs at least one sample")
        ordered = sorted(self.times)
        self.median = quantile(ordered, 0.5)
        self.iqr = quantile(ordered, 0.75) - quantile(ordered, 0.25)
        self.mean = sum(ordered) / len(ordered)
        self.min = ordered[0]
        self.max = ordered[-1]
        self.p90 = early_stopping_estimate(ordered, 0.90)
        self.p99 = early_stopping_estimate(ordered, 0.99)
        self.relative_iqr = self.iqr / self.median if self.median > 0 else math.inf
        deviations = sorted(abs(t - self.median) for t in ordered)
        spread = max(1.4826 * quantile(deviations, 0.5), OUTLIER_FLOOR * self.median)
        limit = self.median + OUTLIER_MADS * spread
        self.discarded = [i for i, t in enumerate(self.times) if t > limit]
        kept = sorted(t for t in self.times if t <= limit)
        self.robust_median = quantile(kept, 0.5)
        self.warnings = []
        if self.relative_iqr > FLUCTUATION_SEVERE:
            self.warnings.append(
                f"IQR is {self.relative_iqr:.0%} of the median: these timings are noisy (other "
                "load on the machine, or steps too short to time one by one); compare with care"
            )
        elif self.relative_iqr > FLUCTUATION_WARN:
            self.warnings.append(f"IQR is {self.relative_iqr:.0%} of the median: some fluctuation")
        self.has_warnings = bool(self.warnings)

    @property
    def total(self) -> float:
        return sum(self.times)

    @property
    def loaded(self) -> bool:
        return self.host is not None and self.host.loaded

    def supports(self, q: float) -> bool:
        """Whether there are enough samples to claim the q-th percentile (LoadGen's counts)."""
        return len(self.times) >= samples_for_percentile(q)

    def percentile(self, q: float) -> float | None:
        """LoadGen's early-stopping estimate of the q-th percentile, None where unsupported."""
        return early_stopping_estimate(sorted(self.times), q)

    def tail(self, q: float) -> tuple[str, float]:
        """The q-th percentile where the sample count supports it (LoadGen's estimate), else the
        maximum: a label ("p99" or "max of 30") and the value, so no report claims a percentile
        it cannot."""
        value = self.percentile(q)
        if value is not None:
            return percentile_label(q), value
        return f"max of {len(self.times)}", self.max


def theil_sen_drift(values: Sequence[float]) -> float:
    """Change across the series predicted by its Theil-Sen slope (median of pairwise slopes).

    A robust trend: one slow step (a GC pause) cannot fake a trend as it can with least squares.
    """
    slopes = sorted(
        (values[j] - values[i]) / (j - i)
        for i in range(len(values))
        for j in range(i + 1, len(values))
    )
    return quantile(slopes, 0.5) * (len(values) - 1) if slopes else 0.0


@dataclass(frozen=True)
class WarmupRule:
    """Warm-up ends when the last `window` steps have IQR/median under `threshold` and drift
    (Theil-Sen) under `threshold` x median, or after `max_steps` steps, whichever comes first."""

    window: int = 10
    threshold: float = 0.10
    max_steps: int = 100

    def __post_init__(self) -> None:
        if self.window < 4:
            raise BadInput(f"warm-up window {self.window} is too short to judge; use at least 4.")
        if not 0 < self.threshold < 1:
            raise BadInput(f"warm-up threshold {self.threshold} must lie between 0 and 1.")
        if self.max_steps < self.window:
            raise BadInput(
                f"warm-up cap {self.max_steps} is below its window {self.window}: it could "
                "never converge."
            )

    def is_steady(self, times: Sequence[float]) -> bool:
        if len(times) < self.window:
            return False
        recent = list(times[-self.window :])
        stats = Measurement(recent)
        drift = abs(theil_sen_drift(recent)) / stats.median if stats.median > 0 else math.inf
        return stats.relative_iqr < self.threshold and drift < self.threshold


class HostPeakRss:
    """This process's peak resident memory per phase.

    Linux keeps the peak as VmHWM in /proc/self/status, and writing "5" to /proc/self/clear_refs
    resets it to the current RSS, so each phase gets its own peak. Where the reset is refused the
    reading is the process-lifetime peak; without /proc it falls back to psutil's current RSS at
    the end of the phase, which is not a peak. `source` says which one was used.
    """

    _STATUS = Path("/proc/self/status")
    _CLEAR_REFS = Path("/proc/self/clear_refs")

    def __init__(self) -> None:
        self._has_vmhwm = self._vmhwm() is not None
        self._resettable = self._has_vmhwm and self._reset_vmhwm()
        if self._resettable:
            self.source = (
                "VmHWM from /proc/self/status, reset per phase via /proc/self/clear_refs "
                "(this process only: compiler worker processes are not included)"
            )
        elif self._has_vmhwm:
            self.source = "VmHWM from /proc/self/status: process-lifetime peak (reset refused)"
        else:
            self.source = "psutil RSS at the end of the phase (no peak reading on this OS)"

    def _vmhwm(self) -> int | None:
        try:
            text = self._STATUS.read_text()
        except OSError:
            return None
        for line in text.splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024  # the kernel reports kB
        return None

    def _reset_vmhwm(self) -> bool:
        try:
            with open(self._CLEAR_REFS, "w") as fh:
                fh.write("5")
        except OSError:
            return False
        return True

    def reset(self) -> None:
        if self._resettable:
            self._reset_vmhwm()

    def peak(self) -> int | None:
        if self._has_vmhwm:
            return self._vmhwm()
        import psutil

        return int(psutil.Process().memory_info().rss)


class ChildPeakRss:
    """Peak resident memory of this process's child processes (compiler workers: Inductor's
    compile pool and the C++ compiler it calls, neuronx-cc), sampled with psutil from a thread.

    The kernel keeps no peak for a process tree, and a compiler process may live a fraction of a
    second, so this samples every `interval` seconds: a peak between two samples is missed, and
    the reading is a lower bound. `peak` is the largest sum over the children alive at one
    sample; `largest` names the single biggest child seen.
    """

    def __init__(self, interval: float = 0.05) -> None:
        self.interval = interval
        self.peak = 0
        self.largest = ("", 0)  # (process name, RSS in bytes)
        self.samples = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> ChildPeakRss:
        self._thread = threading.Thread(target=self._run, name="child-rss", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self._sample()  # children still alive at the end count too

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self._sample()

    def _sample(self) -> None:
        import psutil

        total = 0
        try:
            children = psutil.Process().children(recursive=True)
        except psutil.Error:
            return
        for child in children:
            try:
                rss = int(child.memory_info().rss)
                name = child.name()
            except psutil.Error:  # it exited between the listing and the reading
                continue
            total += rss
            if rss > self.largest[1]:
                self.largest = (name, rss)
        self.samples += 1
        self.peak = max(self.peak, total)


def format_seconds(seconds: float) -> str:
    if seconds == 0:
        return "0 s"
    if seconds >= 1:
        return f"{seconds:.2f} s"
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.3g} ms"
    return f"{seconds * 1e6:.3g} µs"
