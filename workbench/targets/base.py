"""The interface every execution target implements: its core here, its capability groups beside.

Nothing outside `workbench/targets/` branches on a device name: it asks the target.

A target is its core (below: where tensors live, how to wait for them, its memory readings and
what a run on it validates) plus five groups, each with its own module, record types and
defaults (what a target without that capability answers):

    compiling.py      compile(), compile counters, the per-compile ledger
    caching.py        compiler versions, on-disk compile caches, their counters, pre-warming
    op_coverage.py    executed and fallback op tracking, the inference analyzer
    out_of_memory.py  reading out-of-memory failures, the compiler killed for host memory
    scaling.py        trial processes, DataLoader pinning, data-parallel ranks

A target declares the groups it implements by the classes it derives from (inductor.py for CPU
and CUDA, xla_*.py for XLA, NeuronOutOfMemory for both Neuron paths); `Target` itself carries
every group's defaults, so a caller can ask any target anything.

torch is imported inside the methods that use it: the command line checks a request, picks a
target by name and states what a run validates without paying the two seconds of `import torch`.
"""

from __future__ import annotations

from abc import abstractmethod
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from workbench.targets.availability import Availability
from workbench.targets.caching import CompileCaching
from workbench.targets.compiling import Compiling
from workbench.targets.op_coverage import OpCoverage
from workbench.targets.out_of_memory import OutOfMemory
from workbench.targets.scaling import Scaling

if TYPE_CHECKING:
    import torch


@dataclass(frozen=True)
class DeviceMemory:
    """Memory one worker process can use on its device, and where that figure comes from."""

    total_bytes: int
    source: str


@dataclass
class MemoryReading:
    """Device memory peaks since the last reset, in bytes; None where the target has no reading."""

    peak_allocated: int | None
    peak_reserved: int | None
    source: str  # where the numbers come from, e.g. "torch.cuda.max_memory_allocated"


class Target(Compiling, CompileCaching, OpCoverage, OutOfMemory, Scaling):
    """An execution target: where tensors live, how to wait for them, what it can measure."""

    name: ClassVar[str]

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

    def to_device(self, tree: Any) -> Any:
        """Every tensor of `tree` (a request's host inputs) copied in to the device, the copy
        finished: what a served request pays before the model runs. On the CPU the tensors are
        already where the model reads them, so `.to` returns them as they are."""
        import torch
        from torch.utils._pytree import tree_map

        device = self.device
        moved = tree_map(lambda t: t.to(device) if isinstance(t, torch.Tensor) else t, tree)
        self.synchronize()
        return moved

    def to_host(self, tree: Any) -> Any:
        """Every tensor of `tree` (a request's outputs) read back to host memory: what a served
        request pays after the model ran (`.to("cpu")` waits for the device's copy)."""
        import torch
        from torch.utils._pytree import tree_map

        return tree_map(lambda t: t.to("cpu") if isinstance(t, torch.Tensor) else t, tree)

    def manual_seed(self, seed: int) -> None:
        """Seed every random stream a run on this target draws from (dropout, random init).

        torch.manual_seed covers the CPU, CUDA and a PrivateUse1 device such as native
        TorchNeuron (neuron.md: torch.neuron.manual_seed); a target with its own generator adds it.
        """
        import torch

        torch.manual_seed(seed)

    @property
    def autocast_device_type(self) -> str:
        """The `device_type` that `torch.autocast` takes for this target's tensors.

        The default, the device's own type, fits targets whose device type is also an autocast
        backend; a target whose mixed precision goes through another entry point says so here.
        """
        return self.device.type

    def reset_peak_memory(self) -> None:  # noqa: B027 - a no-op is right without a reading
        """Start a new device-memory peak window (no-op where the target has no reading)."""

    def peak_memory(self) -> MemoryReading:
        return MemoryReading(None, None, f"{self.name}: no device memory reading")

    def device_memory(self) -> DeviceMemory | None:
        """Memory one worker can use on its device; None where the target has no device memory
        of its own (host RAM, shared with everything else on the machine)."""
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
        import torch

        return {
            "name": self.name,
            "device": str(self.device),
            "is_trainium": self.is_trainium,
            "compiled_means": self.compile_description,
            "validation": self.validation_statement(),
            "torch": torch.__version__,
        }
