"""The KV cache a served decoder may keep, by vLLM Neuron's default budget
(acceptance_inference_parallelism.md 2.4, from vLLM Neuron's "determine available memory"
design, Neuron 2.33):

    total  = a logical core's HBM x gpu_memory_utilization (vLLM's default 0.9)
    user   = total - the weights
    cap    = total x VLLM_NEURON_KV_GMU_BUDGET_CAP_FRACTION (default 0.30)
    KV     = max(min(user, cap), 0)

The budget is fixed when the program compiles (its shape is baked into the graph), so the
sequences it holds at the planned length are how many a server can batch at once.
"""

from __future__ import annotations

from dataclasses import dataclass

from workbench.planning.instances import human_bytes
from workbench.planning.recommend import Candidate

GPU_MEMORY_UTILIZATION = 0.9  # vLLM's --gpu-memory-utilization default
KV_CAP_FRACTION = 0.30  # VLLM_NEURON_KV_GMU_BUDGET_CAP_FRACTION's default
SOURCE = (
    "vLLM Neuron's KV-cache budget (vLLM's Neuron worker, determine available memory): "
    f"min(HBM x {GPU_MEMORY_UTILIZATION} - weights, HBM x {GPU_MEMORY_UTILIZATION} x "
    f"{KV_CAP_FRACTION}), at least 0"
)


@dataclass(frozen=True)
class KvBudget:
    """What vLLM Neuron's default budget leaves one rank of a layout for the KV cache."""

    layout: str
    budget_bytes: float
    per_sequence_bytes: float  # one sequence of `seq` tokens on one rank
    seq: int
    sequences: int  # whole sequences of `seq` tokens the budget holds
    source: str = SOURCE

    def sentence(self) -> str:
        text = (
            f"KV cache on {self.layout}: {human_bytes(self.per_sequence_bytes)} per rank for each "
            f"sequence of {self.seq} tokens; vLLM Neuron's default budget leaves "
            f"{human_bytes(self.budget_bytes)} per rank, {self.sequences} sequence(s) at once"
        )
        if self.sequences == 0:
            text += (
                " (none: raise VLLM_NEURON_KV_GMU_BUDGET_CAP_FRACTION, shorten the sequence or "
                "use more tensor parallelism)"
            )
        return text


def vllm_budget(candidate: Candidate, per_sequence_bytes: float, seq: int) -> KvBudget:
    """The budget on one rank of `candidate` (weights: its parameters per rank)."""
    total = candidate.capacity * GPU_MEMORY_UTILIZATION
    budget = max(min(total - candidate.memory.parameters, total * KV_CAP_FRACTION), 0.0)
    sequences = int(budget // per_sequence_bytes) if per_sequence_bytes > 0 else 0
    return KvBudget(candidate.layout.name, budget, per_sequence_bytes, seq, sequences)
