"""The one small interface every execution target implements.

Nothing outside `workbench/targets/` branches on a device name: it asks the target.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

import torch


@dataclass(frozen=True)
class Availability:
    available: bool
    reason: str  # why not available, or what was found when it is


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

    def reset_peak_memory(self) -> None:  # noqa: B027 - a no-op is right without a reading
        """Start a new device-memory peak window (no-op where the target has no reading)."""

    def peak_memory(self) -> MemoryReading:
        return MemoryReading(None, None, f"{self.name}: no device memory reading")

    @abstractmethod
    def compile(self, fn: Callable) -> Callable:
        """Return the compiled form of `fn` (a module or function) as this target defines it."""

    def compile_counters(self) -> CompileCounters:
        return CompileCounters(None, None, f"{self.name}: no compile counters")

    def start_fallback_tracking(self) -> None:  # noqa: B027 - no-op without fallback tracking
        """Reset the target's record of ops that ran on the host instead of the device."""

    def fallback_ops(self) -> Counter[str] | None:
        """Ops that fell back to the host since `start_fallback_tracking`; None: no such reading."""
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
        return {
            "name": self.name,
            "device": str(self.device),
            "is_trainium": self.is_trainium,
            "compiled_means": self.compile_description,
            "validation": self.validation_statement(),
            "torch": torch.__version__,
        }
