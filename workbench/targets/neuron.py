"""Native TorchNeuron (torch-neuronx 2.13+/2.14+): device "neuron" on Trn2/Trn3.

Written against the documented API (reference: neuron.md sections 2.6 and 2.7). Every group of
the interface is implemented here (compiling, caches, op tracking, data-parallel ranks) except
the out-of-memory forms, shared with the XLA path (out_of_memory.NeuronOutOfMemory). torch
loads torch_neuronx through its `torch.backends` entry point and that registers `torch.neuron`,
so only the op-tracking calls need `import torch_neuronx`, and they import it inside the method.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Callable
from typing import Any

import torch

from workbench.targets import detect
from workbench.targets.availability import Availability
from workbench.targets.base import DeviceMemory, MemoryReading, Target
from workbench.targets.caching import CacheCounters
from workbench.targets.compiling import CompileCounters, CompileEvent
from workbench.targets.dynamo_counters import dynamo_compile_counters, dynamo_compile_events
from workbench.targets.out_of_memory import NeuronOutOfMemory
from workbench.targets.scaling import nth_visible

_US_PER_SECOND = 1e6
# TorchNeuron's per-graph compile record splits the time into these three phases.
_COMPILE_PHASES_US = (
    "torch_neuronx_fx_passes_us",
    "torch_neuronx_lower_us",
    "torch_neuronx_compile_us",
)


def _torch_neuron() -> Any:
    """The `torch.neuron` module, which exists only once TorchNeuron has registered it (torch
    imports it through its backend entry point), so no type stub can describe it."""
    return torch.neuron  # type: ignore[attr-defined]


def _neff_count(folder: str) -> int:
    """Compiled NEFFs under `folder` (the documented layout: .../MODULE_<hash>/model.neff)."""
    from pathlib import Path

    return sum(1 for _ in Path(folder).rglob("*.neff"))


def _graph_compile_seconds(record: Any) -> float:
    return sum(getattr(record, phase) for phase in _COMPILE_PHASES_US) / _US_PER_SECOND


class NeuronTarget(NeuronOutOfMemory, Target):
    name = "neuron"
    neuron_flavour = detect.FLAVOUR_NATIVE
    # `import torch` loads TorchNeuron through its backend entry point, so no trial process may
    # fork from one that has imported torch: each starts as a fresh interpreter.
    trial_start_method = "spawn"
    distributed_backend = "neuron"
    # Mixed precision keeps the base autocast_device_type, the device's own "neuron": TorchNeuron
    # registers it as an autocast backend, torch.autocast(device_type="neuron", dtype=...),
    # with float16 and bfloat16 supported (neuron.md 2.6).
    compile_description = (
        "torch.compile(backend='neuron'): Dynamo -> AOT Autograd -> StableHLO -> neuronx-cc -> "
        "one NEFF per graph and shape signature (no Inductor)"
    )

    @classmethod
    def availability(cls) -> Availability:
        stack = detect.detect_neuron_stack()
        if stack.flavour == detect.FLAVOUR_LITE:
            # libtorch-neuronx-lite registers a "neuron" device too, but it is a serving runtime
            # without TorchNeuron's training, compile and op-tracking APIs.
            return Availability(False, f"{stack.summary()} provides the neuron device here")
        if not hasattr(torch, "neuron"):
            return Availability(
                False,
                "torch.neuron does not exist: native TorchNeuron (torch-neuronx 2.13+) is not "
                f"installed ({stack.summary()}) or TORCH_DEVICE_BACKEND_AUTOLOAD=0 kept torch "
                "from loading it",
            )
        if not _torch_neuron().is_available():
            return Availability(
                False,
                "torch.neuron.is_available() is False: no NeuronCore is visible to this process "
                "(see neuron-ls for cores held by other processes, and NEURON_RT_VISIBLE_CORES)",
            )
        return Availability(
            True,
            f"{_torch_neuron().device_count()} Neuron device(s), "
            f"{_torch_neuron().get_device_name()}, torch-neuronx {stack.torch_neuronx}",
        )

    @property
    def device(self) -> torch.device:
        return torch.device("neuron")

    def synchronize(self) -> None:
        _torch_neuron().synchronize()

    def reset_peak_memory(self) -> None:
        # Ops queued before the window would otherwise allocate inside it.
        _torch_neuron().synchronize()
        _torch_neuron().reset_peak_memory_stats()

    def device_memory(self) -> DeviceMemory | None:
        total = _torch_neuron().get_device_properties().total_memory
        return DeviceMemory(
            int(total),
            "torch.neuron.get_device_properties().total_memory of the current device "
            "(one logical NeuronCore)",
        )

    def max_data_parallel_workers(self) -> int:
        # One rank per logical NeuronCore (neuron.md 2.6: one process per device).
        return _torch_neuron().device_count()

    @classmethod
    def rank_environment(cls, local_rank: int) -> dict[str, str]:
        # A process claims every NeuronCore it can see, so each rank must see only its own
        # (neuron.md 2.8), within whatever the user made visible.
        return {
            "NEURON_RT_VISIBLE_CORES": nth_visible(
                os.environ.get("NEURON_RT_VISIBLE_CORES"), local_rank
            )
        }

    def peak_memory(self) -> MemoryReading:
        # The allocator is asynchronous: its statistics are only complete after a synchronize.
        _torch_neuron().synchronize()
        return MemoryReading(
            peak_allocated=_torch_neuron().max_memory_allocated(),
            peak_reserved=_torch_neuron().max_memory_reserved(),
            source="torch.neuron.max_memory_allocated / max_memory_reserved after synchronize",
        )

    def compile(self, fn: Callable) -> Callable:
        # No mode (ignored with a warning) and no dynamic=True (rejected): shapes are static.
        return torch.compile(fn, backend="neuron")

    def compile_counters(self) -> CompileCounters:
        dynamo = dynamo_compile_counters()
        if not hasattr(_torch_neuron(), "get_dynamo_metrics"):
            return dynamo
        records = list(_torch_neuron().get_dynamo_metrics())
        return CompileCounters(
            graphs=len(records),
            compile_seconds=sum(_graph_compile_seconds(record) for record in records),
            source=(
                "torch.neuron.get_dynamo_metrics() (FX passes + lowering + neuronx-cc, per graph); "
                "graph breaks and recompiles from torch._dynamo counters"
            ),
            extra=dynamo.extra
            | {
                "per_graph": [
                    {
                        "graph_name": record.graph_name,
                        "graph_node_count": record.graph_node_count,
                        "compile_seconds": _graph_compile_seconds(record),
                    }
                    for record in records
                ]
            },
        )

    def compile_events(self, since: float) -> list[CompileEvent]:
        # torch.compile(backend="neuron") is Dynamo-based: its recompile reasons and graph
        # breaks are Dynamo's (neuron.md 2.6: TORCH_LOGS="graph_breaks,recompiles").
        return dynamo_compile_events(since)

    @classmethod
    def compiler_versions(cls) -> dict[str, str]:
        versions = super().compiler_versions()
        for package in ("torch-neuronx", "neuronx-cc"):
            version = detect.installed_version(package)
            if version:
                versions[package] = version
        return versions

    def use_compile_cache(self, folder: str | None) -> str:
        if folder is None:
            os.environ["TORCH_NEURONX_NEFF_DISABLE_CACHE"] = "1"
            return "TorchNeuron's NEFF cache is off (TORCH_NEURONX_NEFF_DISABLE_CACHE=1)"
        # Both caches are read from the environment when the first graph compiles (neuron.md
        # 2.8); NEURON_COMPILE_CACHE_URL is also what neuron_parallel_compile fills.
        os.environ["NEURON_COMPILE_CACHE_URL"] = os.path.join(folder, "neuron")
        os.environ["TORCH_NEURONX_NEFF_CACHE_DIR"] = os.path.join(folder, "neff")
        self._cache_folder = folder
        self._neffs_at_start = _neff_count(folder)
        return (
            f"the Neuron compile cache in {os.environ['NEURON_COMPILE_CACHE_URL']} and "
            f"TorchNeuron's NEFF cache in {os.environ['TORCH_NEURONX_NEFF_CACHE_DIR']}"
        )

    def cache_counters(self) -> CacheCounters | None:
        folder = getattr(self, "_cache_folder", None)
        if folder is None:
            return None
        # TorchNeuron documents no hit counter: what a run stored is what it missed.
        return CacheCounters(
            hits=None,
            misses=_neff_count(folder) - self._neffs_at_start,
            saved_seconds=None,
            source="NEFF files added to the cache folder during this run (each one a miss)",
        )

    def start_fallback_tracking(self) -> None:
        import torch_neuronx

        # Queued ops from before the window would otherwise be recorded inside it.
        _torch_neuron().synchronize()
        torch_neuronx.clear_op_tracking()

    def fallback_ops(self) -> Counter[str] | None:
        import torch_neuronx

        # Ops run asynchronously; a fallback is only recorded once its op has executed.
        _torch_neuron().synchronize()
        # One entry per invocation, so the Counter gives calls per op.
        return Counter(torch_neuronx.get_fallback_ops())

    def executed_ops(self) -> Counter[str] | None:
        import torch_neuronx

        # The same window and the same asynchrony as fallback_ops (neuron.md 2.7).
        _torch_neuron().synchronize()
        return Counter(torch_neuronx.get_executed_ops())

    @property
    def is_trainium(self) -> bool:
        return True

    def describe(self) -> dict[str, Any]:
        properties = _torch_neuron().get_device_properties()
        return super().describe() | {
            # TorchNeuron reports the instance type (e.g. trn2.48xlarge) as the device name.
            "device_name": properties.name,
            "total_memory_bytes": int(properties.total_memory),
            "device_count": _torch_neuron().device_count(),
            "torch_neuronx": detect.installed_version("torch-neuronx"),
        }
