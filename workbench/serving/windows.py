"""Measurement windows that repeat until the last three agree: perf_analyzer's stability rule
(max/min of the last three windows' throughput and latency within 10%, the latency being the
percentile asked for with --percentile), in count windows of at least N requests and at least
a minimum duration (perf_analyzer's count windows last at least 1 s), within a time budget."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from time import perf_counter

from workbench.serving.records import (
    MIN_MEASURED_S,
    STABLE_WINDOWS,
    RequestTime,
    Window,
    window_percentile,
)
from workbench.timing import Measurement


def windows_agree(windows: Sequence[Window], tolerance: float) -> bool:
    """Whether the last STABLE_WINDOWS windows' throughputs, and their latencies at the
    stabilising percentile (Window.tail), each lie within max/min <= 1 + tolerance."""
    if len(windows) < STABLE_WINDOWS:
        return False
    recent = windows[-STABLE_WINDOWS:]
    for values in ([w.throughput for w in recent], [w.tail for w in recent]):
        low, high = min(values), max(values)
        if low <= 0 or high / low > 1 + tolerance:
            return False
    return True


@dataclass
class WindowRun:
    """What the windows of one point measured."""

    windows: list[Window] = field(default_factory=list)
    samples: list[list[RequestTime]] = field(default_factory=list)  # requests per window
    stable: bool = False
    timed_seconds: float = 0.0  # the sum of every timed request, windows cut short included

    def reported(self) -> list[RequestTime]:
        """The requests of the windows the point reports: the last STABLE_WINDOWS."""
        return [t for window in self.samples[-STABLE_WINDOWS:] for t in window]

    def latency_samples(self) -> list[float]:
        """Each reported request's whole time."""
        return [t.total for t in self.reported()]


def _window(times: list[RequestTime], seconds: float, batch_size: int, q: float) -> Window:
    totals = [t.total for t in times]
    return Window(
        len(times), seconds, len(times) * batch_size / seconds, Measurement(totals).median,
        window_percentile(totals, q),
    )  # fmt: skip


def measure_windows(
    call: Callable[[], RequestTime],
    *,
    requests: int,
    tolerance: float,
    budget_s: float,
    quantile: float,
    min_window_s: float,
    batch_size: int = 1,
) -> WindowRun:
    """Windows of `call` (one timed request) until the last three agree on throughput and on
    their `quantile` latency, and MIN_MEASURED_S has been timed, or `budget_s` has passed. A
    window closes once it holds `requests` requests and has lasted `min_window_s`; a window the
    budget cuts short is dropped, unless no window completed."""
    run = WindowRun()
    started = perf_counter()
    deadline = started + budget_s
    partial: list[RequestTime] = []
    while True:
        times: list[RequestTime] = []
        window_start = perf_counter()
        close_at = window_start + min_window_s
        cut = False
        while len(times) < requests or perf_counter() < close_at:
            if perf_counter() >= deadline:
                cut = True
                break
            times.append(call())
        seconds = perf_counter() - window_start
        run.timed_seconds += sum(t.total for t in times)
        if cut:
            partial = times
            break
        run.samples.append(times)
        run.windows.append(_window(times, seconds, batch_size, quantile))
        measured_enough = perf_counter() - started >= MIN_MEASURED_S
        if measured_enough and windows_agree(run.windows, tolerance):
            run.stable = True
            break
    if not run.windows and partial:
        # Slower calls than one window's worth of budget: the partial window is all there is.
        run.samples.append(partial)
        run.windows.append(_window(partial, sum(t.total for t in partial), batch_size, quantile))
    return run
