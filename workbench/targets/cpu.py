"""Plain CPU: the reference target, and the one CI and laptops run.

Its compiling and compile-cache groups are Inductor's (inductor.py); the rest are the defaults.
torch is imported where it is used, as in base.py: naming this target costs no `import torch`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from workbench.targets.availability import Availability
from workbench.targets.inductor import InductorCaching, InductorCompiling

if TYPE_CHECKING:
    import torch


class CpuTarget(InductorCompiling, InductorCaching):
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

    @property
    def is_trainium(self) -> bool:
        return False
