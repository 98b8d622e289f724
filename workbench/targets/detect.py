"""Which Neuron stack is installed, read from package metadata alone.

Importing torch_xla starts PJRT and importing torch_neuronx may claim NeuronCores, so detection
never imports either (../reference: neuron.md section 1.4).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from importlib.util import find_spec
from pathlib import Path
from typing import Any

from workbench.errors import BadInput

# torch-neuronx on the legacy XLA path: "<torch x.y.z>.<neuron major.minor>.<build>", e.g.
# 2.9.0.2.15.32035 (six or more numeric parts). Native TorchNeuron: four parts, e.g. 2.14.3.0.
_XLA_FLAVOUR = re.compile(r"^\d+\.\d+\.\d+\.\d+\.\d+\.\d+")
_NATIVE_FLAVOUR = re.compile(r"^\d+\.\d+\.\d+\.\d+(?:[+.].*)?$")

FLAVOUR_NATIVE = "native"  # TorchNeuron: device "neuron", Trn2/Trn3
FLAVOUR_XLA = "xla"  # legacy torch-neuronx on torch-xla: device "xla", Trn1/Inf2
FLAVOUR_LITE = "lite"  # libtorch-neuronx-lite (vLLM runtime); also claims device "neuron"
# The two training paths, each with its own op support: the ones a coverage report judges.
FLAVOURS = (FLAVOUR_NATIVE, FLAVOUR_XLA)


def installed_version(distribution: str) -> str | None:
    """Version of an installed distribution, or None; never imports the package."""
    # importlib.metadata (with email and zipfile) loads here: the readers of this module's
    # constants never look a version up.
    from importlib.metadata import PackageNotFoundError, version

    for name in (distribution, distribution.replace("-", "_")):
        try:
            return version(name)
        except PackageNotFoundError:
            continue
    return None


def pjrt_device() -> str:
    """The PJRT device torch_xla runs on; torch_xla itself fills the variable in when unset."""
    return os.environ.get("PJRT_DEVICE", "").upper()


def neuron_flavour(torch_neuronx_version: str | None) -> str | None:
    """Classify a torch-neuronx version string as the XLA or the native flavour."""
    if not torch_neuronx_version:
        return None
    if _XLA_FLAVOUR.match(torch_neuronx_version):
        return FLAVOUR_XLA
    if _NATIVE_FLAVOUR.match(torch_neuronx_version):
        return FLAVOUR_NATIVE
    return None


def check_flavours(flavours: list[str] | tuple[str, ...]) -> None:
    """The Neuron paths to judge: at least one, each native or xla (BadInput otherwise)."""
    unknown = [f for f in flavours if f not in FLAVOURS]
    if unknown or not flavours:
        raise BadInput(
            f"Neuron flavours {list(flavours)!r}: choose from {', '.join(FLAVOURS)} "
            "(native: TorchNeuron on Trn2/Trn3; xla: legacy torch-neuronx on Trn1/Inf2)."
        )


def flavours_from_params(params: Mapping[str, Any]) -> tuple[str, ...]:
    """Notebook 02's one setting, from its parameters: the Neuron flavours it judges."""
    flavours = tuple(params.get("neuron_flavours", FLAVOURS))
    check_flavours(flavours)
    return flavours


@dataclass(frozen=True)
class NeuronStack:
    """The Neuron-related distributions in this environment and what they add up to."""

    flavour: str | None  # FLAVOUR_* or None when no Neuron PyTorch stack is installed
    torch_neuronx: str | None
    torch_xla: str | None
    libneuronxla: str | None
    neuronx_cc: str | None
    nki: str | None
    libtorch_neuronx_lite: str | None

    @property
    def has_neuron_pjrt_plugin(self) -> bool:
        """torch_xla turns libneuronxla into its Neuron PJRT plugin when both are present."""
        return bool(self.torch_xla and self.libneuronxla)

    def summary(self) -> str:
        if self.flavour == FLAVOUR_NATIVE:
            return f"native TorchNeuron (torch-neuronx {self.torch_neuronx})"
        if self.flavour == FLAVOUR_XLA:
            return f"legacy XLA torch-neuronx {self.torch_neuronx} on torch-xla {self.torch_xla}"
        if self.flavour == FLAVOUR_LITE:
            return f"libtorch-neuronx-lite {self.libtorch_neuronx_lite} (not a training backend)"
        if self.torch_xla:
            return f"torch-xla {self.torch_xla} without a Neuron plugin (no Neuron stack)"
        return "no Neuron stack installed"


# A CUDA or ROCm build of torch ships its GPU runtime beside libtorch (torch/lib); a CPU build
# does not, and then torch.cuda.is_available() is False without asking.
_GPU_LIBRARIES = ("libtorch_cuda.so", "libtorch_hip.so", "torch_cuda.dll")


def torch_has_gpu_build() -> bool:
    """Whether the installed torch was built for CUDA or ROCm, read from its files alone:
    `auto` skips the CUDA probe on a CPU build, so choosing a target costs no `import torch`."""
    spec = find_spec("torch")
    if spec is None or not spec.submodule_search_locations:
        return False
    libraries = Path(next(iter(spec.submodule_search_locations))) / "lib"
    return any((libraries / name).exists() for name in _GPU_LIBRARIES)


def detect_neuron_stack() -> NeuronStack:
    tnx = installed_version("torch-neuronx")
    lite = installed_version("libtorch-neuronx-lite")
    flavour = neuron_flavour(tnx) or (FLAVOUR_LITE if lite else None)
    return NeuronStack(
        flavour=flavour,
        torch_neuronx=tnx,
        torch_xla=installed_version("torch-xla"),
        libneuronxla=installed_version("libneuronxla"),
        neuronx_cc=installed_version("neuronx-cc"),
        nki=installed_version("nki"),
        libtorch_neuronx_lite=lite,
    )
