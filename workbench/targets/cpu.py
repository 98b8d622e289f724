"""Plain CPU: the reference target, and the one CI and laptops run."""

from __future__ import annotations

from collections.abc import Callable

import torch

from workbench.targets.base import Availability, CompileCounters, Target
from workbench.targets.dynamo_counters import dynamo_compile_counters


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
        return torch.device("cpu")

    def synchronize(self) -> None:
        # CPU kernels run synchronously in the calling thread: nothing is queued.
        pass

    def compile(self, fn: Callable) -> Callable:
        return torch.compile(fn, backend="inductor")

    def compile_counters(self) -> CompileCounters:
        return dynamo_compile_counters()

    @property
    def is_trainium(self) -> bool:
        return False
