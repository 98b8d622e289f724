"""The one small interface every execution target implements.

Nothing outside `workbench/targets/` branches on a device name: it asks the target.

torch is imported inside the methods that use it: the command line checks a request, picks a
target by name and states what a run validates without paying the two seconds of `import torch`.
"""

from __future__ import annotations

import os
import re
from abc import ABC, abstractmethod
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:
    import torch


class CompileFailed(RuntimeError):
    """A target's compile() raised; the original exception is the cause."""


@dataclass(frozen=True)
class Availability:
    available: bool
    reason: str  # why not available, or what was found when it is


@dataclass(frozen=True)
class DeviceMemory:
    """Memory one worker process can use on its device, and where that figure comes from."""

    total_bytes: int
    source: str


# Host memory can run out on every target: Python's MemoryError, torch's CPU allocator, C++
# allocations, and ENOMEM from the OS (strerror text).
HOST_OUT_OF_MEMORY_PATTERNS: tuple[str, ...] = (
    r"\bMemoryError\b",
    r"DefaultCPUAllocator: can't allocate memory",
    r"std::bad_alloc",
    r"Cannot allocate memory",
)


def nth_visible(listing: str | None, index: int) -> str:
    """The `index`-th entry of a visible-devices list such as "2,3" or "0-3"; `index` itself
    when no list is set, so rank i takes device i."""
    if not listing:
        return str(index)
    entries: list[str] = []
    for part in listing.split(","):
        low, dash, high = part.strip().partition("-")
        entries += [str(i) for i in range(int(low), int(high) + 1)] if dash else [low]
    if index >= len(entries):
        raise ValueError(f"rank {index} has no device: only {listing!r} is visible")
    return entries[index]


@dataclass
class MemoryReading:
    """Device memory peaks since the last reset, in bytes; None where the target has no reading."""

    peak_allocated: int | None
    peak_reserved: int | None
    source: str  # where the numbers come from, e.g. "torch.cuda.max_memory_allocated"


@dataclass
class CompileCounters:
    """What the target's compiler reports: graphs compiled and time spent compiling."""

    graphs: int | None
    compile_seconds: float | None
    source: str
    extra: dict[str, Any] = field(default_factory=dict)


# Why a graph was compiled: the ledger's cause vocabulary, shared by every target.
CAUSE_FIRST = "first compile"
CAUSE_NEW_SHAPE = "new input shape"
CAUSE_GUARD = "guard failure"
CAUSE_GRAPH_BREAK = "graph break"
CAUSE_NEW_XLA_GRAPH = "new XLA graph hash"
CAUSE_BACKWARD = "backward graph (first backward of a compiled forward)"


@dataclass
class CompileEvent:
    """One compile the target's compiler reported, as its own records describe it."""

    started_at: float  # seconds since the epoch, to place the compile at a step
    seconds: float | None  # wall time of the compile, where the compiler reports it
    graph_id: str  # the compiler's own name for the graph (Dynamo compile id, XLA graph hash)
    cause: str  # one of the CAUSE_* values
    detail: str = ""  # the failing guard, the graph break's reason, the changed shape
    location: str = ""  # user code: file:line in function, where the compiler names it
    cache: str | None = None  # "hit" or "miss" in the on-disk compile cache; None: unknown
    # Compile time a cache hit saved: the cache's record of the stored compile less this one.
    saved_seconds: float | None = None


@dataclass
class CacheCounters:
    """The compile cache's own hit and miss counters since process start."""

    hits: int | None  # None where the cache counts only what it stored
    misses: int
    saved_seconds: float | None  # compile time the hits saved, where the cache records it
    source: str
    extra: dict[str, int] = field(default_factory=dict)  # e.g. failures to read an entry


@dataclass(frozen=True)
class PrewarmCommand:
    """A pre-compile command and the environment it needs on top of the current one."""

    argv: list[str]
    env: dict[str, str]
    description: str


@dataclass(frozen=True)
class UnsupportedOp:
    """An op a target's analyzer rejects, where it failed, and the Python call that made it."""

    op: str
    failure_at: str
    call: str


@dataclass
class InferenceAnalysis:
    """A target's own verdict on every op of an inference call (torch_neuronx.analyze)."""

    supported: dict[str, int]  # op -> occurrences
    unsupported: list[UnsupportedOp]
    source: str


class Target(ABC):
    """An execution target: where tensors live, how to wait for them, what it can measure."""

    name: ClassVar[str]
    # The Neuron software path whose op support this target's fallback readings measure
    # (detect.FLAVOUR_NATIVE or detect.FLAVOUR_XLA); None where its readings say nothing of it.
    neuron_flavour: ClassVar[str | None] = None
    # Plain-words description of what "compiled" means on this target (shown in reports).
    compile_description: ClassVar[str]
    # And what "eager" means: on a lazy-tensor target eager steps are traced and compiled too,
    # which is why reports show compile counts for eager phases as well.
    eager_description: ClassVar[str] = "ops run one at a time as Python calls them; no compiler"
    # How tuning trials start their child processes. "spawn" (a fresh interpreter) is safe
    # everywhere; where importing torch claims no device, "forkserver" children fork from a
    # server that has already imported torch, and start in tens of milliseconds instead of seconds.
    trial_start_method: ClassVar[str] = "spawn"
    # The torch.distributed backend that data-parallel training uses on this target.
    distributed_backend: ClassVar[str] = "gloo"
    # Whether DataLoader(pin_memory=True) can speed up this target's host-to-device copies.
    pin_memory_helps: ClassVar[bool] = False
    # Regular expressions that, found in a failed run's error or output, mean it ran out of
    # memory; targets add their device's own forms to the host ones.
    out_of_memory_patterns: ClassVar[tuple[str, ...]] = HOST_OUT_OF_MEMORY_PATTERNS

    @classmethod
    @abstractmethod
    def availability(cls) -> Availability:
        """Whether this target can run in this process, without side effects on other targets."""

    @property
    @abstractmethod
    def device(self) -> torch.device: ...

    @abstractmethod
    def synchronize(self) -> None:
        """Block until all queued work on the device has finished (call before reading a clock)."""

    def manual_seed(self, seed: int) -> None:
        """Seed every random stream a run on this target draws from (dropout, random init).

        torch.manual_seed covers the CPU, CUDA and a PrivateUse1 device such as native
        TorchNeuron (neuron.md: torch.neuron.manual_seed); a target with its own generator adds it.
        """
        import torch

        torch.manual_seed(seed)

    def reset_peak_memory(self) -> None:  # noqa: B027 - a no-op is right without a reading
        """Start a new device-memory peak window (no-op where the target has no reading)."""

    def peak_memory(self) -> MemoryReading:
        return MemoryReading(None, None, f"{self.name}: no device memory reading")

    @abstractmethod
    def compile(self, fn: Callable) -> Callable:
        """Return the compiled form of `fn` (a module or function) as this target defines it."""

    def compile_counters(self) -> CompileCounters:
        return CompileCounters(None, None, f"{self.name}: no compile counters")

    def compile_events(self, since: float) -> list[CompileEvent]:
        """Compiles that started at or after `since` (epoch seconds), oldest first; empty where
        the target's compiler keeps no per-compile record."""
        return []

    @classmethod
    def compiler_versions(cls) -> dict[str, str]:
        """The versions a compiled artifact depends on: a cache written under other versions is
        not reused (its folder is stamped with them)."""
        import torch

        return {"torch": torch.__version__}

    @classmethod
    def prewarm_command(cls, step: list[str], cache_folder: str) -> PrewarmCommand | str:
        """How to fill `cache_folder` (this run's stamped folder) ahead of a scheduled run by
        running `step` (a command that runs the workload's graphs) through the target's
        ahead-of-time compile tool; or the sentence that says why that cannot be done here."""
        return (
            f"target {cls.name} has no ahead-of-time compile tool: its compile cache fills on "
            "the first run and serves the runs after it"
        )

    def use_compile_cache(self, folder: str | None) -> str:
        """Point the target's on-disk compile caches at `folder` (None: turn them off) before
        anything compiles; returns one sentence naming what was pointed where."""
        return f"{self.name}: no on-disk compile cache"

    def cache_counters(self) -> CacheCounters | None:
        """The on-disk compile cache's own hit/miss counters; None where it keeps none."""
        return None

    def start_fallback_tracking(self) -> None:  # noqa: B027 - no-op without fallback tracking
        """Reset the target's record of ops that ran on the host instead of the device."""

    def fallback_ops(self) -> Counter[str] | None:
        """Ops that fell back to the host since `start_fallback_tracking`; None: no such reading."""
        return None

    def executed_ops(self) -> Counter[str] | None:
        """Ops the target's own tracking saw execute since `start_fallback_tracking` (calls per
        op); None where it keeps no such record."""
        return None

    @property
    def autocast_device_type(self) -> str:
        """The `device_type` that `torch.autocast` takes for this target's tensors.

        The default, the device's own type, fits targets whose device type is also an autocast
        backend; a target whose mixed precision goes through another entry point says so here.
        """
        return self.device.type

    def analyze_inference(
        self, model: torch.nn.Module, example_inputs: tuple[torch.Tensor, ...]
    ) -> InferenceAnalysis | None:
        """The target's own per-op verdict on `model(*example_inputs)` (CPU model and inputs);
        None where the target has no such analyzer."""
        return None

    @classmethod
    def out_of_memory_evidence(cls, text: str) -> str | None:
        """The text that marks `text` (an error message, a process's output) as an
        out-of-memory failure on this target; None when nothing does."""
        for pattern in cls.out_of_memory_patterns:
            match = re.search(pattern, text)
            if match:
                return match.group(0)
        return None

    @classmethod
    def compiler_host_oom(cls, text: str) -> str | None:
        """One sentence naming `text` (a compile's error or output) as the compiler killed for
        lack of host memory, with the remedy; None when it is not that."""
        return None

    def device_memory(self) -> DeviceMemory | None:
        """Memory one worker can use on its device; None where the target has no device memory
        of its own (host RAM, shared with everything else on the machine)."""
        return None

    def max_data_parallel_workers(self) -> int:
        """How many data-parallel workers this machine runs side by side on this target; by
        default one per usable host core (os.sched_getaffinity honours CPU pinning)."""
        if hasattr(os, "sched_getaffinity"):
            return len(os.sched_getaffinity(0))
        return os.cpu_count() or 1

    def collectives(self) -> Availability:
        """Whether several processes can all-reduce over `distributed_backend` here."""
        import torch
        import torch.distributed as dist

        if not dist.is_available():
            return Availability(False, f"torch {torch.__version__} is built without distributed")
        # is_backend_available arrived in torch 2.3; older builds answer through init instead.
        check = getattr(dist, "is_backend_available", None)
        if check is not None and not check(self.distributed_backend):
            return Availability(
                False, f"torch.distributed has no {self.distributed_backend!r} backend here"
            )
        return Availability(
            True, f"torch.distributed with the {self.distributed_backend!r} backend"
        )

    @classmethod
    def rank_environment(cls, local_rank: int) -> dict[str, str]:
        """Variables a data-parallel rank sets before it builds its target, so that it claims
        only its own device; empty where ranks share one device (the host CPU)."""
        return {}

    def init_process_group(self, timeout: timedelta) -> None:
        """Join the process group torchrun's environment describes; a collective that waits
        longer than `timeout` raises instead of hanging."""
        import torch.distributed as dist

        dist.init_process_group(backend=self.distributed_backend, timeout=timeout)

    def data_parallel(self, model: torch.nn.Module) -> torch.nn.Module:
        """`model` set up so that its backward all-reduces gradients across the ranks."""
        import torch

        return torch.nn.parallel.DistributedDataParallel(model)

    def data_parallel_optimizer_step(self, optimizer: torch.optim.Optimizer) -> None:
        """One optimizer step of a data-parallel rank, after its backward."""
        optimizer.step()

    @property
    @abstractmethod
    def is_trainium(self) -> bool:
        """True only when the work really ran on a NeuronCore."""

    def validation_statement(self) -> str:
        """One sentence every report shows: what this run does and does not validate."""
        if self.is_trainium:
            return f"validated on {self.name} (Trainium hardware)."
        return f"validated on {self.name}: this is not a Trainium validation."

    def describe(self) -> dict[str, Any]:
        """Facts for reports and result files."""
        import torch

        return {
            "name": self.name,
            "device": str(self.device),
            "is_trainium": self.is_trainium,
            "compiled_means": self.compile_description,
            "validation": self.validation_statement(),
            "torch": torch.__version__,
        }
