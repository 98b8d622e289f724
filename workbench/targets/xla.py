"""torch-xla lazy tensors: the legacy torch-neuronx path on Trn1/Inf2, and XLA:CPU in CI.

Written against torch-xla 2.9 (the last release the XLA-based torch-neuronx builds on):
`torch_xla.device()`, `torch_xla.sync()`, `torch_xla.core.xla_model`, `torch_xla.debug.metrics`
(reference: neuron.md sections 2.3 and 2.4, xla_cpu.md). torch_xla is imported only inside the
functions of this module and of its groups: its import registers the PJRT runtime, and on a
Trn1 it can claim NeuronCores.

This module is the target's core (availability, device, synchronize, memory, what a run
validates); each group of the interface lives beside it: xla_compile.py (compiling and the
compile ledger), xla_cache.py (compile caches and pre-warming), xla_ops.py (fallback ops and
the inference analyzer), xla_scaling.py (data-parallel ranks), and the Neuron out-of-memory
forms in out_of_memory.py.
"""

from __future__ import annotations

from typing import Any

import torch

from workbench.targets import detect
from workbench.targets.availability import Availability
from workbench.targets.base import DeviceMemory, MemoryReading
from workbench.targets.out_of_memory import NeuronOutOfMemory
from workbench.targets.xla_analysis import AnalysisFile
from workbench.targets.xla_cache import XlaCaching
from workbench.targets.xla_compile import XlaCompiling
from workbench.targets.xla_ops import XlaOpTracking
from workbench.targets.xla_scaling import XlaScaling

# HBM per NeuronCore by torch_xla device kind: a Trn1/Inf2 chip has 32 GiB for its two
# NeuronCore-v2 (neuron.md 4.1). Other kinds are left out rather than guessed.
_CORE_MEMORY_BY_KIND = {"NC_v2": 16 << 30}


def _major_minor(version: str) -> str:
    return ".".join(version.split("+")[0].split(".")[:2])


class XlaTarget(NeuronOutOfMemory, XlaCompiling, XlaCaching, XlaOpTracking, XlaScaling):
    name = "xla"
    # Mixed precision keeps the base autocast_device_type, the device's own "xla":
    # torch.autocast("xla") is the entry point that works everywhere (torch_xla.amp.autocast
    # crashes on XLA:CPU, xla_cpu.md), and Neuron's legacy bf16 recipe (c) is this autocast
    # around the forward with NEURON_CC_FLAGS="--auto-cast=none" (neuron.md 2.3).
    # XLA reports device allocation failures as RESOURCE_EXHAUSTED; on a Trn1 the Neuron runtime
    # and compiler report theirs as on the native path.
    out_of_memory_patterns = (
        *NeuronOutOfMemory.out_of_memory_patterns,
        r"RESOURCE_EXHAUSTED[^\n]*",
    )

    @classmethod
    def availability(cls) -> Availability:
        xla_version = detect.installed_version("torch-xla")
        if xla_version is None:
            return Availability(
                False,
                "torch-xla is not installed; for XLA:CPU or a Trn1, install torch and torch-xla "
                "of the same release together in a virtualenv of their own",
            )
        wanted = _major_minor(xla_version)
        if wanted != _major_minor(torch.__version__):
            # Importing a torch_xla built for another torch fails deep in its C++ extension;
            # the versions alone already say so, without loading that library.
            return Availability(
                False,
                f"torch-xla {xla_version} needs torch {wanted}; installed torch "
                f"{torch.__version__}; install both pinned in a virtualenv of their own "
                f"(pip install 'torch=={wanted}.*' 'torch-xla=={xla_version}')",
            )
        try:
            import torch_xla  # noqa: F401
        except ImportError as exc:
            if "undefined symbol" in str(exc):
                return Availability(
                    False,
                    f"torch-xla {xla_version} was built against a different torch {wanted} "
                    f"build than the installed torch {torch.__version__} ({exc}); install the "
                    "torch release published together with this torch-xla",
                )
            return Availability(
                False, f"torch-xla {xla_version} is installed but fails to import: {exc}"
            )
        return Availability(
            True,
            f"torch-xla {xla_version} importable, PJRT_DEVICE={detect.pjrt_device() or 'unset'}",
        )

    def __init__(self) -> None:
        # Before anything is traced: torch_xla reads its debug level once (xla_analysis).
        self._analysis = AnalysisFile()
        # The Neuron compile cache a Trn1 run counts in (use_compile_cache sets both).
        self._neuron_cache = None
        self._neffs_at_start = set()
        import torch_xla

        self._device = torch_xla.device()

    @property
    def device(self) -> torch.device:
        return self._device

    def synchronize(self) -> None:
        import torch_xla
        import torch_xla.core.xla_model as xm

        # sync() cuts the traced graph and launches it; execution is still asynchronous, so
        # wait for the device before anyone reads a clock.
        torch_xla.sync()
        xm.wait_device_ops()

    def manual_seed(self, seed: int) -> None:
        import torch_xla.core.xla_model as xm

        # The XLA device draws from its own generator, which torch.manual_seed does not reach.
        super().manual_seed(seed)
        xm.set_rng_state(seed, device=str(self.device))

    def device_memory(self) -> DeviceMemory | None:
        if not self.is_trainium:
            return None
        kind = self.device_kind()
        if kind not in _CORE_MEMORY_BY_KIND:
            return None
        return DeviceMemory(
            _CORE_MEMORY_BY_KIND[kind],
            f"{kind}: 16 GiB HBM per NeuronCore-v2 (32 GiB per Trn1/Inf2 chip, AWS Neuron "
            "architecture documentation)",
        )

    def peak_memory(self) -> MemoryReading:
        return MemoryReading(
            peak_allocated=None,
            peak_reserved=None,
            source=(
                "torch-xla has no peak-memory API for this path; on a Trn1 read neuron-monitor's "
                "memory_used (neuron_runtime_used_bytes.neuron_device) while the workload runs"
            ),
        )

    def device_kind(self) -> str:
        """torch_xla's vendor string for the device, e.g. "NC_v2" on a Trn1, "NC_v3d" on a Trn2."""
        import torch_xla.core.xla_model as xm

        return xm.xla_device_kind(self._device)

    @property
    def is_trainium(self) -> bool:
        return detect.pjrt_device() == "NEURON" or self.device_kind().startswith("NC_")

    def validation_statement(self) -> str:
        xla_version = detect.installed_version("torch-xla")
        if self.is_trainium:
            return (
                f"validated on Trainium ({self.device_kind()}) through torch-xla {xla_version}, "
                "the legacy torch-neuronx path: neuronx-cc compile and the Neuron runtime ran."
            )
        return (
            f"validated on XLA:{detect.pjrt_device() or 'CPU'} with torch-xla {xla_version}: this "
            "checks the torch-xla front end that Trn1's torch-neuronx uses (lazy tracing, HLO "
            "lowering, aten fallbacks, recompiles) but not neuronx-cc, the Neuron runtime, "
            "device memory or speed; this is not a Trainium validation."
        )

    def describe(self) -> dict[str, Any]:
        return super().describe() | {
            "torch_xla": detect.installed_version("torch-xla"),
            "torch_neuronx": detect.installed_version("torch-neuronx"),
            "pjrt_device": detect.pjrt_device() or None,
            "device_kind": self.device_kind(),
        }
