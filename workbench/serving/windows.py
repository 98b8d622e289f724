"""Measurement windows that repeat until the last three agree: perf_analyzer's stability rule
(max/min of the last three windows' throughput and latency within 10%), in count windows of N
requests, within a time budget."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from time import perf_counter

from workbench.serving.records import MIN_MEASURED_S, STABLE_WINDOWS, Window
from workbench.timing import Measurement


def windows_agree(windows: Sequence[Window], tolerance: float) -> bool:
    """Whether the last STABLE_WINDOWS windows' throughputs, and their median latencies, each
    lie within max/min <= 1 + tolerance."""
    if len(windows) < STABLE_WINDOWS:
        return False
    recent = windows[-STABLE_WINDOWS:]
    for values in ([w.throughput for w in recent], [w.median for w in recent]):
        low, high = min(values), max(values)
        if low <= 0 or high / low > 1 + tolerance:
            return False
    return True


@dataclass
class WindowRun:
    """What the windows of one point measured."""

    windows: list[Window] = field(default_factory=list)
    samples: list[list[float]] = field(default_factory=list)  # call times per window
    stable: bool = False
    timed_seconds: float = 0.0  # the sum of every timed call, windows cut short included

    def latency_samples(self) -> list[float]:
        """The call times of the windows the point reports: the last STABLE_WINDOWS."""
        return [t for window in self.samples[-STABLE_WINDOWS:] for t in window]


def measure_windows(
    call: Callable[[], float],
    *,
    requests: int,
    tolerance: float,
    budget_s: float,
    batch_size: int = 1,
) -> WindowRun:
    """Windows of `requests` calls of `call` (which returns its own latency in seconds) until
    the last three agree and MIN_MEASURED_S has been timed, or `budget_s` has passed; a window
    the budget cuts short is dropped, unless no window completed."""
    run = WindowRun()
    started = perf_counter()
    deadline = started + budget_s
    partial: list[float] = []
    while True:
        times: list[float] = []
        window_start = perf_counter()
        while len(times) < requests and perf_counter() < deadline:
            times.append(call())
        seconds = perf_counter() - window_start
        run.timed_seconds += sum(times)
        if len(times) < requests:  # the budget ended it
            partial = times
            break
        run.samples.append(times)
        run.windows.append(
            Window(requests, seconds, requests * batch_size / seconds, Measurement(times).median)
        )
        measured_enough = perf_counter() - started >= MIN_MEASURED_S
        if measured_enough and windows_agree(run.windows, tolerance):
            run.stable = True
            break
    if not run.windows and partial:
        # Slower calls than one window's worth of budget: the partial window is all there is.
        seconds = sum(partial)
        run.samples.append(partial)
        run.windows.append(
            Window(
                len(partial), seconds, len(partial) * batch_size / seconds,
                Measurement(partial).median,
            )
        )  # fmt: skip
    return run
