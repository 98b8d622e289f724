"""torch.compile with Inductor: the compiling and compile-cache groups of the CPU and CUDA
targets. Dynamo's counters and compile records say what was compiled; Inductor's on-disk
caches hold the result.
"""

from __future__ import annotations

from collections.abc import Callable

from workbench.targets.base import Target
from workbench.targets.caching import CacheCounters
from workbench.targets.compiling import CompileCounters, CompileEvent
from workbench.targets.dynamo_counters import (
    dynamo_compile_counters,
    dynamo_compile_events,
    inductor_cache_counters,
    use_inductor_cache,
)


class InductorCompiling(Target):
    """compile() is torch.compile(backend="inductor"); Dynamo keeps the counters and ledger."""

    def compile(self, fn: Callable) -> Callable:
        import torch

        return torch.compile(fn, backend="inductor")

    def compile_counters(self) -> CompileCounters:
        return dynamo_compile_counters()

    def compile_events(self, since: float) -> list[CompileEvent]:
        return dynamo_compile_events(since)


class InductorCaching(Target):
    """Inductor's FX graph and AOT Autograd caches, under the run's cache folder."""

    def use_compile_cache(self, folder: str | None) -> str:
        return use_inductor_cache(folder)

    def cache_counters(self) -> CacheCounters | None:
        return inductor_cache_counters()
