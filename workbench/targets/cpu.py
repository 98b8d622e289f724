"""Plain CPU: the reference target, and the one CI and laptops run.

torch is imported where it is used, as in base.py: naming this target costs no `import torch`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from workbench.targets.base import (
    Availability,
    CacheCounters,
    CompileCounters,
    CompileEvent,
    Target,
)
from workbench.targets.dynamo_counters import (
    dynamo_compile_counters,
    dynamo_compile_events,
    inductor_cache_counters,
    use_inductor_cache,
)

if TYPE_CHECKING:
    import torch


class CpuTarget(Target):
    name = "cpu"
    compile_description = "torch.compile(backend='inductor') on CPU"
    # Importing torch claims nothing, so trial processes can fork from a warm server.
    trial_start_method = "forkserver"

    @classmethod
    def availability(cls) -> Availability:
        return Availability(True, "the host CPU is always available")

    @property
    def device(self) -> torch.device:
        import torch

        return torch.device("cpu")

    def synchronize(self) -> None:
        # CPU kernels run synchronously in the calling thread: nothing is queued.
        pass

    def compile(self, fn: Callable) -> Callable:
        import torch

        return torch.compile(fn, backend="inductor")

    def compile_counters(self) -> CompileCounters:
        return dynamo_compile_counters()

    def compile_events(self, since: float) -> list[CompileEvent]:
        return dynamo_compile_events(since)

    def use_compile_cache(self, folder: str | None) -> str:
        return use_inductor_cache(folder)

    def cache_counters(self) -> CacheCounters | None:
        return inductor_cache_counters()

    @property
    def is_trainium(self) -> bool:
        return False
