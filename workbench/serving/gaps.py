"""Host gaps: the time between consecutive device executions, as its own series.

Each request runs through the workload's own forward (its serving glue) with the model call
inside it timed apart and synchronized, so the time between the end of one model call and the
start of the next is the host's: the workload's code after and before the model call, and the
serving loop between requests. Compiles land inside a call (Dynamo traces and the target
compiles when the call runs), never in a gap. Where the target's counters report device
executions (torch_xla's ExecuteTime on the XLA target), each call's device time comes from the
runtime, and a host read of a device value in the workload's glue is named as such; the time
spent reading those counters is left out of the gaps. Every gap gets its cause: a host read
where the counters saw one, else the largest of its host segments.
"""

from __future__ import annotations

from dataclasses import dataclass
from time import perf_counter
from typing import Any

import torch

from workbench.serving.calls import ServedCall
from workbench.serving.records import GapSeries
from workbench.targets.compiling import CompileCounters

BEFORE = "workload code before the model call (Workload.forward)"
AFTER = "workload code after the model call (Workload.forward)"
LOOP = "the serving loop between requests (its synchronize included)"
HOST_READ = "a host read of a device value (.item(), printing, a Python branch on a tensor)"


@dataclass
class _Call:
    request_start: float
    call_start: float = 0.0
    call_end: float = 0.0
    forward_end: float = 0.0  # Workload.forward returned (the loop then synchronizes)
    request_end: float = 0.0
    read_before: float = 0.0  # seconds spent reading counters before the call (not a gap)
    read_after: float = 0.0
    host_reads: float = 0.0
    device_seconds: float | None = None


class _TimedModel:
    """The model call, timed and synchronized, recording into the current request."""

    def __init__(self, served: ServedCall, per_call_counters: bool) -> None:
        self.served = served
        self.per_call_counters = per_call_counters
        self.current: _Call | None = None

    def _read(self) -> tuple[CompileCounters | None, float]:
        if not self.per_call_counters:
            return None, 0.0
        start = perf_counter()
        counters = self.served.target.compile_counters()
        return counters, perf_counter() - start

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        record = self.current
        assert record is not None
        before, record.read_before = self._read()
        record.call_start = perf_counter()
        output = self.served.model_call(*args, **kwargs)
        self.served.target.synchronize()
        record.call_end = perf_counter()
        after, record.read_after = self._read()
        if before is not None and after is not None:
            record.device_seconds = float(after.extra["execute_seconds"]) - float(
                before.extra["execute_seconds"]
            )
            record.host_reads = after.extra.get("host_value_reads", 0) - before.extra.get(
                "host_value_reads", 0
            )
        return output


def _segments(previous: _Call, current: _Call) -> dict[str, float]:
    return {
        AFTER: previous.forward_end - previous.call_end - previous.read_after,
        LOOP: current.request_start - previous.forward_end,
        BEFORE: current.call_start - current.request_start - current.read_before,
    }


def gap_series(served: ServedCall, requests: int) -> tuple[GapSeries, float]:
    """`requests` + 1 back-to-back requests of `served` (so `requests` gaps), and the seconds
    they took."""
    reported = "execute_seconds" in served.target.compile_counters().extra
    timed = _TimedModel(served, reported)
    calls: list[_Call] = []
    started = perf_counter()
    for _ in range(requests + 1):
        record = _Call(perf_counter())
        timed.current = record
        with torch.no_grad():
            output = served.workload.forward(timed, served.inputs)
        record.forward_end = perf_counter()
        served.target.synchronize()
        record.request_end = perf_counter()
        del output
        calls.append(record)
    seconds = perf_counter() - started
    gaps, causes = [], []
    for previous, current in zip(calls, calls[1:], strict=False):
        segments = _segments(previous, current)
        gaps.append(sum(segments.values()))
        # A read of a device value in the glue syncs the device from the host: named first.
        if current.host_reads or previous.host_reads:
            causes.append(HOST_READ)
        else:
            causes.append(max(segments, key=segments.__getitem__))
    series = GapSeries(
        where=f"batch {served.batch_size} requests ({served.mode})",
        gaps=gaps,
        calls=[c.call_end - c.call_start for c in calls[1:]],
        causes=causes,
        device_seconds=[float(c.device_seconds or 0.0) for c in calls[1:]] if reported else None,
        source=(
            "perf_counter at the model call's start and, after synchronizing the target, at its "
            "end; a gap runs from one call's end to the next one's start"
            + (
                "; device time per call from the target's execution counters (ExecuteTime)"
                if reported
                else "; this target reports no per-execution device time"
            )
        ),
    )
    return series, seconds
