"""Judging candidates and choosing one, by AWS's rule: "start with the least model parallelism
that leaves memory headroom" (Trn2 training best practices, acceptance_inference_parallelism.md
1.3); then the micro-batch and accumulation that reach the global batch asked for.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from workbench.errors import BadInput
from workbench.planning.instances import HERE, InstanceSpec
from workbench.planning.layouts import FSDP, NONE, ZERO1, Layout, RankMemory

# Share of a rank's memory a recommended layout leaves free: the runtime's own use, the
# compiler's scratch, fragmentation (the retuning trials keep the same 10 % free).
HEADROOM = 0.10
MAX_MICRO_BATCH = 4096
# Among layouts with equal model parallelism: ZeRO-1 costs the same communication as DP and
# holds less; FSDP gathers every layer twice a step.
SHARDING_ORDER = {ZERO1: 0, NONE: 1, FSDP: 2}


@dataclass
class Candidate:
    layout: Layout
    memory: RankMemory  # at micro-batch 1
    capacity: int  # bytes per rank
    largest_micro_batch: int  # 0: not even one sample fits
    available: bool  # offered by the instance's software stack and AWS's layout rules
    note: str  # why not available, or ""

    @property
    def fits(self) -> bool:
        return self.memory.peak <= self.capacity

    @property
    def headroom(self) -> float:
        return 1 - self.memory.peak / self.capacity

    @property
    def leaves_headroom(self) -> bool:
        return self.headroom >= HEADROOM


def availability(layout: Layout, instance: InstanceSpec) -> str:
    """Why a layout is not one to run on this instance, or "" when it is."""
    family = instance.name.split(".", 1)[0]
    if layout.sharding == FSDP and family in ("trn1", "trn1n"):
        return (
            "FSDP is not offered on Trn1's stack (legacy torch-neuronx on XLA; NxD offers TP, PP "
            "and ZeRO-1)"
        )
    if instance.name != HERE and layout.tp > instance.ranks_per_chip and family == "trn2":
        return f"TP{layout.tp} crosses chips; AWS keeps TP inside one chip (TP4 on Trn2)"
    return ""


def largest_micro_batch(fits_at: Callable[[int], bool]) -> int:
    """The largest micro-batch that fits (doubling, then bisecting); 0 if 1 does not."""
    if not fits_at(1):
        return 0
    low, high = 1, 2
    while high <= MAX_MICRO_BATCH and fits_at(high):
        low, high = high, high * 2
    high = min(high, MAX_MICRO_BATCH + 1)
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (middle, high) if fits_at(middle) else (low, middle)
    return low


def choose(candidates: list[Candidate]) -> Candidate | None:
    """The least model parallelism that leaves headroom; then no recomputation; then the
    sharding that holds less for the same communication; then the larger micro-batch."""
    usable = [c for c in candidates if c.available and c.leaves_headroom]
    if not usable:
        return None
    return min(
        usable,
        key=lambda c: (
            c.layout.model_parallel,
            c.layout.checkpointing,
            SHARDING_ORDER[c.layout.sharding],
            -c.largest_micro_batch,
            c.layout.pp,
        ),
    )


def ranked(candidates: list[Candidate], chosen: Candidate | None) -> list[Candidate]:
    """Candidates in the order the rule reads them: the chosen one first, then runnable and
    fitting ones, least model parallelism first."""
    return sorted(
        candidates,
        key=lambda c: (
            c != chosen,
            not (c.available and c.leaves_headroom),
            c.layout.model_parallel,
            c.layout.checkpointing,
            c.memory.peak,
        ),
    )


@dataclass(frozen=True)
class BatchPlan:
    micro_batch: int
    data_parallel: int
    accumulation: int
    global_batch: int

    def equation(self) -> str:
        return (
            f"{self.micro_batch} per rank x {self.data_parallel} data-parallel x "
            f"{self.accumulation} accumulation = {self.global_batch}"
        )


def batch_plan(chosen: Candidate, global_batch: int, micro_batch: int = 0) -> BatchPlan:
    """The largest micro-batch that leaves the headroom and divides the global batch over the
    data-parallel copies (or the one asked for); accumulation makes up the rest."""
    dp = chosen.layout.dp
    if micro_batch:
        if global_batch % (dp * micro_batch):
            raise BadInput(
                f"Global batch {global_batch} is not divisible by DP x micro-batch = {dp} x "
                f"{micro_batch} of {chosen.layout.name}; use a multiple of {dp * micro_batch}."
            )
        return BatchPlan(micro_batch, dp, global_batch // (dp * micro_batch), global_batch)
    if global_batch % dp:
        raise BadInput(
            f"Global batch {global_batch} is not divisible by DP x micro-batch = {dp} x 1 of "
            f"{chosen.layout.name}; use a multiple of {dp}."
        )
    per_copy = global_batch // dp
    ceiling = max(1, chosen.largest_micro_batch)
    micro = max(m for m in range(1, min(ceiling, per_copy) + 1) if per_copy % m == 0)
    return BatchPlan(micro, dp, per_copy // micro, global_batch)
