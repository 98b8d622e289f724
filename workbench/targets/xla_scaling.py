"""How the XLA target scales: trial processes start fresh, and data-parallel ranks join the
"xla" process group and all-reduce through xm.optimizer_step instead of DDP, on a Trn1 only:
XLA:CPU cannot run multi-process collectives (reference: neuron.md 2.3 and 3).
"""

from __future__ import annotations

from datetime import timedelta

import torch

from workbench.targets import detect
from workbench.targets.availability import Availability
from workbench.targets.base import Target


class XlaScaling(Target):
    """One rank per PJRT device; gradients all-reduced by xm.optimizer_step."""

    # Importing torch_xla starts the PJRT runtime (and on a Trn1 may claim NeuronCores), so each
    # trial process starts as a fresh interpreter.
    trial_start_method = "spawn"
    distributed_backend = "xla"

    def max_data_parallel_workers(self) -> int:
        import torch_xla.runtime as xr

        return xr.global_runtime_device_count()

    def collectives(self) -> Availability:
        if not self.is_trainium:
            return Availability(
                False,
                f"XLA:{detect.pjrt_device() or 'CPU'} cannot run multi-process collectives: "
                "torch-xla's all_reduce there aborts on a rendezvous timeout, and upstream does "
                "not support collectives on XLA:CPU (pytorch/xla#5005); data-parallel scaling "
                "needs a Trn1 (PJRT_DEVICE=NEURON)",
            )
        return super().collectives()

    def init_process_group(self, timeout: timedelta) -> None:
        # Importing the module registers the "xla" backend with torch.distributed (neuron.md 2.3).
        import torch_xla.distributed.xla_backend  # noqa: F401

        super().init_process_group(timeout)

    def data_parallel(self, model: torch.nn.Module) -> torch.nn.Module:
        # The XLA torch-neuronx path has no DDP: xm.optimizer_step all-reduces the gradients
        # instead (neuron.md 2.3 and 3).
        return model

    def data_parallel_optimizer_step(self, optimizer: torch.optim.Optimizer) -> None:
        import torch_xla.core.xla_model as xm

        xm.optimizer_step(optimizer)
