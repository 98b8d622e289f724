"""Measuring what a training step's tensors occupy on the CPU, two ways.

- Allocations: torch's profiler with `profile_memory=True` records every allocation and free of
  torch's CPU allocator with its size; their running sum over the step, added to the bytes held
  when the step starts, is the step's memory over time, and its maximum the step's peak. The
  bytes held at the start are counted from the storages of the parameters, gradients and
  optimizer state (each storage once; a DTensor by its local shard). Memory outside torch's
  allocator (gloo's own buffers, Python objects) is not counted.
- Saved tensors: `torch.autograd.graph.saved_tensors_hooks` sees every tensor the forward keeps
  for the backward; each storage is counted once, parameters excluded, and attributed to the
  module that was running when it was saved (forward pre- and post-hooks keep the stack).
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
import tempfile
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn
from torch.profiler import ProfilerActivity, profile, record_function

FORWARD = "forward"
BACKWARD = "backward"
STEP = "optimizer step"
PHASES = (FORWARD, BACKWARD, STEP)


def local(tensor: torch.Tensor) -> torch.Tensor:
    """The rank's own part of a tensor: a DTensor's local shard, else the tensor."""
    to_local = getattr(tensor, "to_local", None)
    return to_local() if callable(to_local) else tensor


def storage_bytes(tensors: Iterable[torch.Tensor | None]) -> int:
    """Bytes of the distinct storages behind `tensors` (views of one storage count once)."""
    seen: set[int] = set()
    total = 0
    for tensor in tensors:
        if tensor is None:
            continue
        storage = local(tensor).untyped_storage()
        if storage.data_ptr() in seen or storage.nbytes() == 0:
            continue
        seen.add(storage.data_ptr())
        total += storage.nbytes()
    return total


def optimizer_tensors(optimizer: torch.optim.Optimizer) -> list[torch.Tensor]:
    """Every tensor of the optimizer's state (a ZeroRedundancyOptimizer's local optimizer's)."""
    inner = getattr(optimizer, "optim", optimizer)
    return [v for state in inner.state.values() for v in state.values() if torch.is_tensor(v)]


@dataclass(frozen=True)
class HeldBytes:
    """What a rank holds between steps."""

    parameters: int
    gradients: int
    optimizer: int

    @property
    def total(self) -> int:
        return self.parameters + self.gradients + self.optimizer


def held_bytes(model: nn.Module, optimizer: torch.optim.Optimizer) -> HeldBytes:
    params = list(model.parameters())
    return HeldBytes(
        storage_bytes(params),
        storage_bytes(p.grad for p in params),
        storage_bytes(optimizer_tensors(optimizer)),
    )


@dataclass
class StepMemory:
    """One measured step: bytes held at its start, and the peak above that in each phase."""

    held: HeldBytes
    phase_peaks: dict[str, int] = field(default_factory=dict)  # bytes above `held`
    end_delta: int = 0  # bytes allocated minus freed over the whole step

    @property
    def peak(self) -> int:
        return self.held.total + max(self.phase_peaks.values(), default=0)


# Kineto, torch's profiler backend, writes "USDT:<time> <pid>:<tid> SyncActivityProfilerHandler
# .cpp:52] profiler_start" (and "STAGE:" lines) to the process's stderr from C++ each time a
# profile starts and stops; no log level silences the USDT ones (KINETO_LOG_LEVEL does not).
_KINETO_LINE = re.compile(rb"^(USDT|STAGE):\S+ \S+ \d+:\d+ \S+\.cpp:\d+\] ")


@contextlib.contextmanager
def without_kineto_lines() -> Iterator[None]:
    """Points fd 2 at a temporary file while kineto starts or stops, then passes on every line
    written there but kineto's own (any other warning still reaches stderr)."""
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as sink:
        os.dup2(sink.fileno(), 2)
        try:
            yield
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            sink.seek(0)
            kept = [line for line in sink.read().splitlines(True) if not _KINETO_LINE.match(line)]
            if kept:
                sys.stderr.write(b"".join(kept).decode(errors="replace"))


@contextlib.contextmanager
def tracked_step(model: nn.Module, optimizer: torch.optim.Optimizer) -> Iterator[StepMemory]:
    """Profile the allocations of the code inside, which marks its phases with `phase(name)`."""
    measured = StepMemory(held_bytes(model, optimizer))
    prof = profile(activities=[ProfilerActivity.CPU], profile_memory=True)
    with without_kineto_lines():
        prof.start()
    try:
        yield measured
    finally:
        with without_kineto_lines():
            prof.stop()
    results = prof.profiler.kineto_results if prof.profiler else None
    events: list[Any] = list(results.events()) if results is not None else []
    marks = {e.name(): (e.start_ns(), e.end_ns()) for e in events if e.name() in PHASES}
    memory = sorted((e for e in events if e.name() == "[memory]"), key=lambda e: e.start_ns())
    live = 0
    peaks = dict.fromkeys(marks, 0)
    for event in memory:
        live += event.nbytes()
        at = event.start_ns()
        for name, (start, end) in marks.items():
            if start <= at <= end:
                peaks[name] = max(peaks[name], live)
    measured.phase_peaks = peaks
    measured.end_delta = live


def phase(name: str) -> contextlib.AbstractContextManager[object]:
    """Marks a phase of a tracked step (FORWARD, BACKWARD, STEP)."""
    return record_function(name)


@dataclass(frozen=True)
class SavedTensor:
    module: str  # qualified name of the innermost module running when it was saved
    numel: int  # elements of its whole storage
    element_size: int
    floating: bool

    @property
    def nbytes(self) -> int:
        return self.numel * self.element_size


class SavedTensorRecorder:
    """Records, during the forward inside `recording()`, each storage saved for backward."""

    def __init__(self, model: nn.Module) -> None:
        self.model = model
        self.saved: list[SavedTensor] = []
        self._stack: list[str] = [""]
        self._seen: set[int] = set()
        self._skip = {p.untyped_storage().data_ptr() for p in model.parameters()}
        self._skip |= {b.untyped_storage().data_ptr() for b in model.buffers()}

    def _pack(self, tensor: torch.Tensor) -> torch.Tensor:
        storage = local(tensor).untyped_storage()
        key = storage.data_ptr()
        if key not in self._seen and key not in self._skip and storage.nbytes() > 0:
            self._seen.add(key)
            size = local(tensor).element_size()
            self.saved.append(
                SavedTensor(
                    self._stack[-1],
                    storage.nbytes() // size,
                    size,
                    tensor.is_floating_point(),
                )
            )
        return tensor

    @contextlib.contextmanager
    def recording(self) -> Iterator[SavedTensorRecorder]:
        handles = []
        for name, module in self.model.named_modules():
            handles.append(module.register_forward_pre_hook(self._enter(name)))
            handles.append(module.register_forward_hook(self._leave()))
        try:
            with torch.autograd.graph.saved_tensors_hooks(self._pack, _unpack):
                yield self
        finally:
            for handle in handles:
                handle.remove()

    def _enter(self, name: str) -> Callable[..., None]:
        def hook(module: nn.Module, args: object) -> None:
            self._stack.append(name)

        return hook

    def _leave(self) -> Callable[..., None]:
        def hook(module: nn.Module, args: object, output: object) -> None:
            self._stack.pop()

        return hook


def _unpack(tensor: torch.Tensor) -> torch.Tensor:
    return tensor
