"""NVIDIA GPUs through torch.cuda: the usual starting point of a migration.

Its compiling and compile-cache groups are Inductor's (inductor.py), with Triton's kernel cache
beside Inductor's; it has its own memory readings and data-parallel ranks (one GPU each).
"""

from __future__ import annotations

import os
from typing import Any

import torch

from workbench.targets.availability import Availability
from workbench.targets.base import DeviceMemory, MemoryReading
from workbench.targets.dynamo_counters import use_inductor_cache
from workbench.targets.inductor import InductorCaching, InductorCompiling
from workbench.targets.out_of_memory import OutOfMemory
from workbench.targets.scaling import nth_visible


class CudaTarget(InductorCompiling, InductorCaching):
    name = "cuda"
    compile_description = "torch.compile(backend='inductor') on the GPU (Triton kernels)"
    # CUDA initializes lazily, on first use, so a server that has only imported torch forks
    # children that can still start CUDA themselves.
    trial_start_method = "forkserver"
    distributed_backend = "nccl"
    # Pinned host pages let the copy engine DMA batches to the GPU asynchronously.
    pin_memory_helps = True
    out_of_memory_patterns = (
        *OutOfMemory.out_of_memory_patterns,
        r"CUDA out of memory",
        r"CUDA error: out of memory",
        r"\bOutOfMemoryError\b",
        r"CUBLAS_STATUS_ALLOC_FAILED",
        # Lightning and accelerate treat this cuDNN error as an OOM: cuDNN reports a workspace
        # it cannot allocate this way.
        r"cuDNN error: CUDNN_STATUS_NOT_SUPPORTED",
    )

    @classmethod
    def availability(cls) -> Availability:
        if not torch.cuda.is_available():
            if torch.version.cuda is None:
                return Availability(
                    False, f"torch {torch.__version__} is built without CUDA support"
                )
            return Availability(
                False,
                f"torch {torch.__version__} has CUDA {torch.version.cuda} but "
                "torch.cuda.is_available() is False (no visible GPU or no working driver)",
            )
        index = torch.cuda.current_device()
        return Availability(
            True,
            f"CUDA device {index}: {torch.cuda.get_device_name(index)} "
            f"({torch.cuda.device_count()} visible)",
        )

    def __init__(self) -> None:
        # Pin the device chosen at construction, so a later torch.cuda.set_device elsewhere
        # cannot move the measurements of one run onto another GPU halfway through.
        self._device = torch.device("cuda", torch.cuda.current_device())

    @property
    def device(self) -> torch.device:
        return self._device

    def synchronize(self) -> None:
        # Kernel launches are asynchronous: without this a clock reads launch time, not run time.
        torch.cuda.synchronize(self._device)

    def reset_peak_memory(self) -> None:
        torch.cuda.reset_peak_memory_stats(self._device)

    def device_memory(self) -> DeviceMemory | None:
        total = torch.cuda.get_device_properties(self._device).total_memory
        return DeviceMemory(int(total), "torch.cuda.get_device_properties().total_memory")

    def max_data_parallel_workers(self) -> int:
        return torch.cuda.device_count()

    @classmethod
    def rank_environment(cls, local_rank: int) -> dict[str, str]:
        # Each rank sees only its own GPU, as device 0, within whatever the user made visible.
        return {
            "CUDA_VISIBLE_DEVICES": nth_visible(os.environ.get("CUDA_VISIBLE_DEVICES"), local_rank)
        }

    def peak_memory(self) -> MemoryReading:
        # The caching allocator books allocations on the host when they are made, so its
        # counters are current without a synchronize.
        return MemoryReading(
            peak_allocated=torch.cuda.max_memory_allocated(self._device),
            peak_reserved=torch.cuda.max_memory_reserved(self._device),
            source="torch.cuda.max_memory_allocated / max_memory_reserved",
        )

    def use_compile_cache(self, folder: str | None) -> str:
        # Triton keeps its compiled GPU kernels apart from Inductor's graphs.
        return use_inductor_cache(folder, {"TRITON_CACHE_DIR": "triton"})

    @classmethod
    def compiler_versions(cls) -> dict[str, str]:
        import importlib.metadata

        versions = super().compiler_versions() | {"cuda": str(torch.version.cuda)}
        try:
            versions["triton"] = importlib.metadata.version("triton")
        except importlib.metadata.PackageNotFoundError:
            pass
        return versions

    @property
    def is_trainium(self) -> bool:
        return False

    def describe(self) -> dict[str, Any]:
        properties = torch.cuda.get_device_properties(self._device)
        major, minor = torch.cuda.get_device_capability(self._device)
        return super().describe() | {
            "device_name": properties.name,
            "compute_capability": f"{major}.{minor}",
            "total_memory_bytes": int(properties.total_memory),
            "cuda_runtime": torch.version.cuda,
        }
