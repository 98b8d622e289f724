"""The scaling group of the target interface: how notebook 04's trials start their processes,
whether pinned host memory helps the DataLoader, and how data-parallel ranks claim devices,
join a process group and all-reduce their gradients.

The defaults fit a host-CPU target: one worker per usable core, gloo, DistributedDataParallel.
"""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING, ClassVar

from workbench.processes import usable_cores
from workbench.targets.availability import Availability

if TYPE_CHECKING:
    import torch


def nth_visible(listing: str | None, index: int) -> str:
    """The `index`-th entry of a visible-devices list such as "2,3" or "0-3"; `index` itself
    when no list is set, so rank i takes device i."""
    if not listing:
        return str(index)
    entries: list[str] = []
    for part in listing.split(","):
        low, dash, high = part.strip().partition("-")
        entries += [str(i) for i in range(int(low), int(high) + 1)] if dash else [low]
    if index >= len(entries):
        raise ValueError(f"rank {index} has no device: only {listing!r} is visible")
    return entries[index]


class Scaling:
    """Trial processes, DataLoader pinning and data-parallel ranks on this target."""

    # How tuning trials start their child processes. "spawn" (a fresh interpreter) is safe
    # everywhere; where importing torch claims no device, "forkserver" children fork from a
    # server that has already imported torch, and start in tens of milliseconds instead of seconds.
    trial_start_method: ClassVar[str] = "spawn"
    # The torch.distributed backend that data-parallel training uses on this target.
    distributed_backend: ClassVar[str] = "gloo"
    # Whether DataLoader(pin_memory=True) can speed up this target's host-to-device copies.
    pin_memory_helps: ClassVar[bool] = False

    def max_data_parallel_workers(self) -> int:
        """How many data-parallel workers this machine runs side by side on this target; by
        default one per usable host core (os.sched_getaffinity honours CPU pinning)."""
        return usable_cores()

    def collectives(self) -> Availability:
        """Whether several processes can all-reduce over `distributed_backend` here."""
        import torch
        import torch.distributed as dist

        if not dist.is_available():
            return Availability(False, f"torch {torch.__version__} is built without distributed")
        # is_backend_available arrived in torch 2.3; older builds answer through init instead.
        check = getattr(dist, "is_backend_available", None)
        if check is not None and not check(self.distributed_backend):
            return Availability(
                False, f"torch.distributed has no {self.distributed_backend!r} backend here"
            )
        return Availability(
            True, f"torch.distributed with the {self.distributed_backend!r} backend"
        )

    @classmethod
    def rank_environment(cls, local_rank: int) -> dict[str, str]:
        """Variables a data-parallel rank sets before it builds its target, so that it claims
        only its own device; empty where ranks share one device (the host CPU)."""
        return {}

    def init_process_group(self, timeout: timedelta) -> None:
        """Join the process group torchrun's environment describes; a collective that waits
        longer than `timeout` raises instead of hanging."""
        import torch.distributed as dist

        dist.init_process_group(backend=self.distributed_backend, timeout=timeout)

    def data_parallel(self, model: torch.nn.Module) -> torch.nn.Module:
        """`model` set up so that its backward all-reduces gradients across the ranks."""
        import torch

        return torch.nn.parallel.DistributedDataParallel(model)

    def data_parallel_optimizer_step(self, optimizer: torch.optim.Optimizer) -> None:
        """One optimizer step of a data-parallel rank, after its backward."""
        optimizer.step()
