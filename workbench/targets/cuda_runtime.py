"""The target's answers to torch.cuda's runtime objects while a script runs redirected: events,
streams and device properties (see redirect.py, which puts them in place and lists each call).

An event on the target records the host clock after the target's synchronize, so
`start.elapsed_time(end)` is the wall time of the work queued between the two records, in
milliseconds as CUDA gives it. A stream on the target is its one queue: work runs in the order
it was issued, and waiting on a stream waits on the target. Device properties name the target's
device and its memory; a compute capability is CUDA's alone, and the one answered is said where
it is given.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

# What torch.cuda.get_device_capability() answers: the first capability with bf16, matching the
# True that torch.cuda.is_bf16_supported() answers, so a script picks its bf16 path.
ANSWERED_CAPABILITY = (8, 0)


class TargetEvent:
    """torch.cuda.Event on the target: `record` synchronizes the target and reads the host clock."""

    def __init__(self, synchronize: Callable[[], None]) -> None:
        self._synchronize = synchronize
        self.recorded_at: float | None = None

    def record(self, stream: Any = None) -> None:
        self._synchronize()
        self.recorded_at = time.perf_counter()

    def elapsed_time(self, end_event: TargetEvent) -> float:
        """Milliseconds from this event's record to `end_event`'s, as CUDA's events give them."""
        if self.recorded_at is None or end_event.recorded_at is None:
            raise RuntimeError("Both events must be recorded before calculating elapsed time.")
        return (end_event.recorded_at - self.recorded_at) * 1000.0

    def synchronize(self) -> None:
        self._synchronize()

    def query(self) -> bool:
        return True  # recorded after a synchronize: the work before it is done

    def wait(self, stream: Any = None) -> None:
        self._synchronize()


class TargetStream:
    """torch.cuda.Stream on the target: its one queue."""

    def __init__(self, synchronize: Callable[[], None]) -> None:
        self._synchronize = synchronize

    def synchronize(self) -> None:
        self._synchronize()

    def wait_stream(self, stream: Any) -> None:
        self._synchronize()

    def wait_event(self, event: Any) -> None:
        self._synchronize()

    def record_event(self, event: TargetEvent | None = None) -> TargetEvent:
        made = event if event is not None else TargetEvent(self._synchronize)
        made.record()
        return made

    def query(self) -> bool:
        self._synchronize()
        return True


@contextlib.contextmanager
def on_stream(stream: Any = None) -> Iterator[None]:
    """`with torch.cuda.stream(s):` on the target: the work runs on its one queue."""
    yield


@dataclass(frozen=True)
class TargetProperties:
    """torch.cuda.get_device_properties() for the target: the fields scripts read."""

    name: str
    total_memory: int
    major: int
    minor: int


def total_memory_source(device_memory_bytes: int | None) -> tuple[int, str]:
    """(bytes, where they come from): the target's own device memory where it has one, else the
    host's physical memory (a CPU target's tensors live there)."""
    if device_memory_bytes is not None:
        return device_memory_bytes, "the target's device memory"
    host = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    return host, "the host's physical memory (the target has no device memory of its own)"
