"""Timing statistics shared by every measurement: raw samples with derived stats, the adaptive
warm-up rule, and this process's peak resident memory per phase."""

from __future__ import annotations

import math
import random
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from workbench.errors import BadInput

# Relative IQR above which a sample set is called unstable (torch.utils.benchmark uses the same
# two levels for its warnings).
FLUCTUATION_WARN = 0.10
FLUCTUATION_SEVERE = 0.25


def quantile(sorted_values: Sequence[float], q: float) -> float:
    """Linear interpolation between order statistics (numpy's and torch.quantile's default)."""
    position = q * (len(sorted_values) - 1)
    low = math.floor(position)
    high = min(low + 1, len(sorted_values) - 1)
    return sorted_values[low] + (sorted_values[high] - sorted_values[low]) * (position - low)


BOOTSTRAP_RESAMPLES = 2000
RATIO_INTERVAL_METHOD = (
    f"95% percentile bootstrap of the ratio of steady-state medians ({BOOTSTRAP_RESAMPLES:,} "
    "resamples of each configuration's raw step times, fixed seed)"
)


def ratio_of_medians_interval(
    numerator: Sequence[float], denominator: Sequence[float], confidence: float = 0.95
) -> tuple[float, float]:
    """Percentile-bootstrap interval of median(numerator) / median(denominator).

    Each resample redraws both sample sets with replacement, so the interval carries the noise
    of both; the seed is fixed so the same samples always give the same interval.
    """
    draw = random.Random(0)
    ratios = []
    for _ in range(BOOTSTRAP_RESAMPLES):
        top = quantile(sorted(draw.choices(numerator, k=len(numerator))), 0.5)
        bottom = quantile(sorted(draw.choices(denominator, k=len(denominator))), 0.5)
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


@dataclass
class Measurement:
    """Raw per-step times in seconds and the statistics derived from them.

    Like torch.utils.benchmark's Measurement, the samples travel with the statistics; the
    statistics are recomputed from `times` on construction, never stored independently.
    """

    times: list[float]
    median: float = field(init=False)
    iqr: float = field(init=False)
    mean: float = field(init=False)
    min: float = field(init=False)
    max: float = field(init=False)
    p90: float = field(init=False)
    p99: float = field(init=False)
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
        self.p90 = quantile(ordered, 0.90)
        self.p99 = quantile(ordered, 0.99)
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
