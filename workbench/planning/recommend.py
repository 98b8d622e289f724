"""Judging candidates and choosing one, by AWS's rule: "start with the least model parallelism
that leaves memory headroom" (Trn2 training best practices, acceptance_inference_parallelism.md
1.3); then the micro-batch and accumulation that reach the global batch asked for.

What a rank may fill is its HBM less what the Neuron runtime keeps on each core besides the
model's tensors: in one public report of a 70B load (transformers-neuronx issue 92) model code
482 MB, scratchpad 512 MB, DMA rings 1.47 GB and collectives 367 MB, about 2.8 GB of a 16 GB
core. On "here" (the gloo check runs) a tenth is kept free instead, as the retuning trials do.

Which layouts a stack runs differs by mode, and each rule names its source (`availability`):
training follows NxD / NxD Training and TorchTitan's guidance, serving NxD Inference's.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from workbench.errors import BadInput
from workbench.planning.instances import InstanceSpec
from workbench.planning.layouts import FSDP, NONE, ZERO1, Layout, RankMemory

# Share of a rank's memory kept free on "here" (the retuning trials keep the same 10 % free).
HEADROOM = 0.10
# The Neuron runtime's own use of each core, from transformers-neuronx issue 92 (bytes).
RUNTIME_RESERVE_PARTS = {
    "model code": 482 * 10**6,
    "scratchpad": 512 * 10**6,
    "DMA rings": 1_470 * 10**6,
    "collectives": 367 * 10**6,
}
RUNTIME_RESERVE = sum(RUNTIME_RESERVE_PARTS.values())
RUNTIME_RESERVE_SOURCE = (
    "the Neuron runtime's own use per core in one public 70B load (transformers-neuronx issue "
    "92): " + ", ".join(f"{k} {v / 1e9:.3g} GB" for k, v in RUNTIME_RESERVE_PARTS.items())
)
TRN2_TP_IN_CHIP_SOURCE = (
    "AWS Trn2 training best practices: keep TP inside one chip, FSDP between chips "
    "(acceptance_inference_parallelism.md 1.3; TorchTitan's qwen3_8b_tp4_fsdp16_sac)"
)
NXD_TRAINING_TP_SOURCE = (
    "NxD Training runs TP beyond one chip with TP, PP and ZeRO-1 (hf_llama3_70B_trn2_config.yaml: "
    "TP32 x PP4 on trn2.48xlarge at LNC=2)"
)
TRN1_FSDP_SOURCE = (
    "FSDP is not offered on Trn1's stack (legacy torch-neuronx on XLA; NxD offers TP, PP and "
    "ZeRO-1)"
)
TRAINING_TP_SOURCE = (
    "NxD and NxD Training: TP inside one instance, heads divisible by it, KV heads replicated "
    "past their count (kv_replicator; tp_zero1_llama3_8B_hf_pretrain.sh runs TP32 on "
    "trn1.32xlarge)"
)
SERVING_TP_SOURCE = (
    "NxD Inference: TP up to the instance's logical cores (64 on trn2.48xlarge at LNC=2, "
    "trn2-llama3.1-405b tutorial; 24 on inf2.48xlarge, optimum-neuron's published 70B configs)"
)
MAX_MICRO_BATCH = 4096
# Among layouts with equal model parallelism: ZeRO-1 costs the same communication as DP and
# holds less; FSDP gathers every layer twice a step.
SHARDING_ORDER = {ZERO1: 0, NONE: 1, FSDP: 2}


def reserve_for(instance: InstanceSpec) -> int:
    """Bytes of a rank's memory the model's tensors may not use (module docstring)."""
    if instance.is_here:
        return int(instance.hbm_per_rank_bytes * HEADROOM)
    return RUNTIME_RESERVE


@dataclass
class Candidate:
    layout: Layout
    memory: RankMemory  # at micro-batch 1
    capacity: int  # bytes per rank
    largest_micro_batch: int  # 0: not even one sample fits
    available: bool  # offered by the instance's software stack and AWS's layout rules
    note: str  # why not available, or ""
    reserve: int = 0  # bytes of `capacity` kept for the runtime (reserve_for)
    complete: bool = True  # False: a term (activations) could not be sized, peak is a floor

    @property
    def usable(self) -> int:
        return self.capacity - self.reserve

    @property
    def fits(self) -> bool:
        """The peak within the rank's memory less the runtime's reserve; never on a floor."""
        return self.complete and self.memory.peak <= self.usable

    @property
    def headroom(self) -> float:
        """Share of the usable memory left free at micro-batch 1."""
        return 1 - self.memory.peak / self.usable

    @property
    def leaves_headroom(self) -> bool:
        return self.fits


def availability(layout: Layout, instance: InstanceSpec, training: bool = True) -> str:
    """Why a layout is not one to run on this instance in this mode, or "" when it is. Training
    and serving rules are separate, each from its source."""
    family = instance.name.split(".", 1)[0]
    if instance.is_here:
        return ""
    if not training:
        return ""  # NxD Inference runs TP up to the instance's cores (SERVING_TP_SOURCE)
    if layout.sharding == FSDP and family in ("trn1", "trn1n"):
        return TRN1_FSDP_SOURCE
    if family == "trn2" and layout.sharding == FSDP and layout.tp > instance.ranks_per_chip:
        return (
            f"TP{layout.tp} with FSDP crosses chips; {TRN2_TP_IN_CHIP_SOURCE} (TP beyond a chip "
            f"runs with TP, PP and ZeRO-1: {NXD_TRAINING_TP_SOURCE})"
        )
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
    """The least model parallelism that fits; then the least recomputation (none, selective,
    full); then the sharding that holds less for the same communication; then the larger
    micro-batch; then sequence parallelism (it replaces each all-reduce by a reduce-scatter
    and an all-gather of the same bytes and splits the rest of the activations), then the
    fewest experts per all-to-all group."""
    usable = [c for c in candidates if c.available and c.leaves_headroom]
    if not usable:
        return None
    return min(
        usable,
        key=lambda c: (
            c.layout.model_parallel,
            c.layout.checkpointing,
            c.layout.selective,
            SHARDING_ORDER[c.layout.sharding],
            -c.largest_micro_batch,
            not c.layout.sequence_parallel,
            c.layout.ep,
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
            c.layout.selective,
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
