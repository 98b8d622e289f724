"""Layouts and what each one holds per rank.

A layout is tensor parallelism (tp) x pipeline parallelism (pp) x data parallelism (dp) over the
ranks, with the data-parallel copies kept whole (DP), their optimizer state sharded (ZeRO-1) or
everything sharded (FSDP, full shard), and activation checkpointing on or off. Per rank, one
step holds its parameters, gradients and optimizer state throughout; on top of them the forward
and backward hold the activations and their working set (plus, under FSDP, the gathered
parameters of the layers in flight), and the optimizer step holds its temporaries. The peak is
the larger of those two phases. Served (inference), a rank holds its parameters and, for a
decoder, the KV cache of the sequences it serves, and the forward's working set on top.
"""

from __future__ import annotations

from dataclasses import dataclass

from workbench.planning.activations import ActivationModel
from workbench.planning.shapes import REPLICATED, ModelShape

NONE = "none"
ZERO1 = "zero1"
FSDP = "fsdp"
SHARDINGS = (NONE, ZERO1, FSDP)
# FSDP holds the unsharded parameters of the layer being computed and, on a device whose
# collectives overlap compute, of the next one it prefetches; on gloo the all-gather runs in
# line, one layer at a time (the check runs measure that within the aim).
FSDP_LAYERS_IN_FLIGHT = 2
GLOO_LAYERS_IN_FLIGHT = 1


@dataclass(frozen=True)
class Precision:
    """Bytes per parameter element of each kind of state, and per activation float."""

    name: str
    parameter: int
    gradient: int
    master: int  # an fp32 copy the optimizer steps (mixed precision)
    state_scale: float  # optimizer state and temporaries relative to fp32
    activation: int
    description: str


PRECISIONS = {
    p.name: p
    for p in (
        Precision("fp32", 4, 4, 0, 1.0, 4, "fp32 parameters, gradients, state and activations"),
        Precision("bf16", 2, 2, 0, 0.5, 2, "everything in bf16 (no fp32 copy)"),
        Precision(
            "bf16-mixed",
            2,
            2,
            4,
            1.0,
            2,
            "bf16 parameters, gradients and activations; fp32 master weights and optimizer "
            "state (as AWS's Llama scripts with USE_MIX_PRECISION=1)",
        ),
    )
}


@dataclass(frozen=True)
class Layout:
    tp: int
    pp: int
    dp: int
    sharding: str  # NONE, ZERO1 or FSDP: how the data-parallel copies share state
    checkpointing: bool

    @property
    def model_parallel(self) -> int:
        return self.tp * self.pp

    @property
    def ranks(self) -> int:
        return self.tp * self.pp * self.dp

    @property
    def name(self) -> str:
        parts = [f"TP{self.tp}"] if self.tp > 1 else []
        if self.pp > 1:
            parts.append(f"PP{self.pp}")
        if self.sharding == FSDP:
            parts.append(f"FSDP{self.dp}")
        elif self.dp > 1 or not parts:
            parts.append(f"DP{self.dp}")
        text = " x ".join(parts)
        if self.sharding == ZERO1:
            text += " + ZeRO-1"
        return text + (" + act. ckpt" if self.checkpointing else "")


@dataclass(frozen=True)
class RankMemory:
    """Bytes one rank holds, by kind; peak is what must fit."""

    parameters: float
    gradients: float
    optimizer: float
    activations: float  # saved activations plus the backward's working set
    gathered: float  # FSDP: parameters and gradients of the layers in flight, unsharded
    step_temporaries: float
    kv_cache: float = 0.0  # inference: keys and values of every sequence's tokens so far

    @property
    def held(self) -> float:
        return self.parameters + self.gradients + self.optimizer + self.kv_cache

    @property
    def peak(self) -> float:
        return self.held + max(self.activations + self.gathered, self.step_temporaries)


def _tp_local(
    shape: ModelShape, tp: int, layer: bool | None = None, before: bool | None = None
) -> float:
    """Parameter elements one TP rank holds (of the stack only, outside it only, or all)."""
    key = ("tp_local", tp, layer, before)
    if key in shape.cache:
        return float(shape.cache[key])
    total = 0.0
    seen_stack = False
    for p in shape.parameters:
        seen_stack = seen_stack or p.layer is not None
        if layer is not None and (p.layer is not None) != layer:
            continue
        if before is not None and (not seen_stack) != before:
            continue
        total += p.numel if p.tp == REPLICATED else p.numel / tp
    shape.cache[key] = total
    return total


def stage_elements(shape: ModelShape, tp: int, pp: int) -> float:
    """Parameter elements on the heaviest pipeline stage of one TP rank: its share of the stack
    plus the part of the rest at its end (the embedding first, the head and final norm last)."""
    if pp == 1 or shape.layers == 0:
        return _tp_local(shape, tp)
    stack = _tp_local(shape, tp, layer=True) / pp
    first = _tp_local(shape, tp, layer=False, before=True)
    last = _tp_local(shape, tp, layer=False, before=False)
    return stack + max(first, last)


def rank_memory(
    shape: ModelShape,
    activations: ActivationModel | None,
    layout: Layout,
    precision: Precision,
    micro_batch: int,
    seq: int | None,
    training: bool = True,
    layers_in_flight: int = FSDP_LAYERS_IN_FLIGHT,
) -> RankMemory:
    """What one rank of `layout` holds at micro-batch `micro_batch` (the heaviest rank)."""
    elements = stage_elements(shape, layout.tp, layout.pp)
    shards = layout.dp if layout.sharding == FSDP else 1
    state_shards = layout.dp if layout.sharding in (ZERO1, FSDP) else 1
    optimizer_profile = activations.optimizer if activations else None
    state = optimizer_profile.state_per_param_byte if optimizer_profile else 2.0
    temporaries = optimizer_profile.step_temporaries_per_param_byte if optimizer_profile else 1.0
    fp32 = 4 * precision.state_scale
    parameters = elements * precision.parameter / shards
    if not training:
        gradients = optimizer = step = 0.0
    else:
        gradients = elements * precision.gradient / shards
        optimizer = elements * (precision.master + state * fp32) / state_shards
        step = elements * temporaries * fp32 / state_shards
    working = 0.0
    if activations is not None:
        layers = max(shape.layers // layout.pp, 1) if shape.layers else 0
        # 1F1B: the first stage holds a micro-batch in flight per stage.
        estimate = activations.estimate(
            micro_batch,
            seq,
            layers,
            layout.tp,
            precision.activation,
            layout.checkpointing and training,
            layer_share=float(layout.pp),
        )
        working = estimate.working if training else estimate.largest * (1 + activations.kappa)
    gathered = 0.0
    if layout.sharding == FSDP and training:
        gathered = layers_in_flight * shape.layer_numel() / layout.tp * precision.parameter
    kv_cache = 0.0
    if not training:
        kv_cache = micro_batch * kv_bytes_per_sequence(shape, layout, precision, seq)
    return RankMemory(parameters, gradients, optimizer, working, gathered, step, kv_cache)


def kv_bytes_per_sequence(
    shape: ModelShape, layout: Layout, precision: Precision, seq: int | None
) -> float:
    """One sequence's KV cache on one rank at `seq` tokens: per token and layer 2 x kv_heads x
    head_dim elements at the activation precision, the KV heads split by TP, the layers by PP;
    0 where the model keeps none (or its sizes are unknown: the plan says so)."""
    per_token_layer = shape.kv_per_token_layer()
    if per_token_layer is None or not seq or not shape.layers:
        return 0.0
    layers = shape.layers // layout.pp
    return seq * layers * per_token_layer / layout.tp * precision.activation


def divisors(number: int) -> list[int]:
    return [d for d in range(1, number + 1) if number % d == 0]


def enumerate_layouts(
    shape: ModelShape, ranks: int, ranks_per_instance: int, training: bool = True
) -> list[Layout]:
    """Every layout of `ranks`: TP degrees that divide the heads (inside one instance), PP
    degrees that divide the layer stack, the rest data-parallel in each sharding."""
    layouts = []
    pps = [d for d in divisors(shape.layers) if d <= ranks] if shape.layers and training else [1]
    for tp in shape.tp_degrees(min(ranks, ranks_per_instance)):
        for pp in pps:
            if ranks % (tp * pp):
                continue
            dp = ranks // (tp * pp)
            shardings = SHARDINGS if dp > 1 and training else (NONE,)
            for sharding in shardings:
                if sharding == FSDP and pp > 1:
                    continue  # FSDP with pipelines is not a layout the Neuron stacks offer
                for checkpointing in (False, True) if training and shape.layers else (False,):
                    layouts.append(Layout(tp, pp, dp, sharding, checkpointing))
    return layouts
