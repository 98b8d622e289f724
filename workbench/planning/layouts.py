"""Layouts and what each one holds per rank.

A layout is tensor parallelism (tp) x pipeline parallelism (pp) x data parallelism (dp) over the
ranks, with the data-parallel copies kept whole (DP), their optimizer state sharded (ZeRO-1) or
everything sharded (FSDP, full shard); sequence parallelism on or off (with TP: the norms and
residual stream split along the sequence, Korthikanti et al. 2022); recomputation none,
selective (the attention core only) or full (activation checkpointing of every layer); and, for
a mixture of experts, expert parallelism (ep) spreading whole experts over data-parallel ranks.
Each adds its collectives (`Layout.collectives`). Per rank, one
step holds its parameters, gradients and optimizer state throughout; on top of them the forward
and backward hold the activations and their working set (plus, under FSDP, the gathered
parameters of the layers in flight), and the optimizer step holds its temporaries. The peak is
the larger of those two phases. Served (inference), a rank holds its parameters and, for a
decoder, the KV cache of the sequences it serves, and the forward's working set on top.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import product

from workbench.planning.activations import ActivationModel
from workbench.planning.shapes import EXPERT, REPLICATED, ModelShape

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
    checkpointing: bool  # full recomputation: every layer keeps only its input
    selective: bool = False  # selective recomputation: the attention core only
    sequence_parallel: bool = False  # with TP: norms and residual split along the sequence
    ep: int = 1  # expert parallelism: experts spread over this many data-parallel ranks

    @property
    def model_parallel(self) -> int:
        return self.tp * self.pp

    @property
    def ranks(self) -> int:
        return self.tp * self.pp * self.dp

    @property
    def recompute(self) -> str:
        return "full" if self.checkpointing else "selective" if self.selective else "none"

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
        if self.ep > 1:
            text += f" (EP{self.ep})"
        if self.sharding == ZERO1:
            text += " + ZeRO-1"
        if self.sequence_parallel:
            text += " + SP"
        if self.selective:
            text += " + sel. recompute"
        return text + (" + act. ckpt" if self.checkpointing else "")

    def collectives(self, training: bool = True) -> list[str]:
        """The collectives the layout adds to a step (Megatron's and NxD's implementations)."""
        added = []
        if self.tp > 1:
            added.append(
                "TP: all-gather and reduce-scatter along the sequence around each attention and "
                "MLP block (SP in place of the all-reduce), forward and backward"
                if self.sequence_parallel
                else "TP: an all-reduce after each attention and MLP block, forward and backward"
            )
        if self.pp > 1:
            added.append("PP: point-to-point activations and gradients between stages")
        if self.ep > 1:
            added.append("EP: all-to-all of the routed tokens before and after each expert layer")
        if training and self.dp > 1:
            added.append(
                {
                    NONE: "DP: an all-reduce of the gradients each step",
                    ZERO1: "ZeRO-1: reduce-scatter of the gradients and all-gather of the "
                    "updated parameters each step",
                    FSDP: "FSDP: an all-gather of each layer's parameters in the forward and "
                    "again in the backward, reduce-scatter of its gradients",
                }[self.sharding]
            )
        if training and self.checkpointing:
            added.append("full recomputation: each layer's forward runs again in the backward")
        elif training and self.selective:
            added.append("selective recomputation: the attention core runs again in the backward")
        return added


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
    shape: ModelShape,
    tp: int,
    layer: bool | None = None,
    before: bool | None = None,
    ep: int = 1,
) -> float:
    """Parameter elements one TP rank holds (of the stack only, outside it only, or all): the
    attention's q/o and k/v by heads (padded, replicated: ModelShape.head_share), experts by TP
    and EP, the rest split by TP or whole."""
    key = ("tp_local", tp, layer, before, ep)
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
        if p.tp == REPLICATED:
            total += p.numel
        elif p.tp == EXPERT:
            total += p.numel / (tp * ep)
        else:
            total += p.numel * shape.head_share(p.part, tp)
    shape.cache[key] = total
    return total


def stage_elements(shape: ModelShape, tp: int, pp: int, ep: int = 1) -> float:
    """Parameter elements on the heaviest pipeline stage of one TP rank: its share of the stack
    plus the part of the rest at its end (the embedding first, the head and final norm last)."""
    if pp == 1 or shape.layers == 0:
        return _tp_local(shape, tp, ep=ep)
    stack = _tp_local(shape, tp, layer=True, ep=ep) / pp
    first = _tp_local(shape, tp, layer=False, before=True, ep=ep)
    last = _tp_local(shape, tp, layer=False, before=False, ep=ep)
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
    elements = stage_elements(shape, layout.tp, layout.pp, layout.ep)
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
            sequence_parallel=layout.sequence_parallel,
            selective=layout.selective and training,
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
    head_dim elements at the activation precision, the KV heads split by TP (each rank keeping
    at least one whole head: past the KV-head count a head is replicated), the layers by PP;
    0 where the model keeps none (or its sizes are unknown: the plan says so)."""
    per_token_layer = shape.kv_per_token_layer(layout.tp)
    if per_token_layer is None or not seq or not shape.layers:
        return 0.0
    layers = shape.layers // layout.pp
    return seq * layers * per_token_layer * precision.activation


def divisors(number: int) -> list[int]:
    return [d for d in range(1, number + 1) if number % d == 0]


# Recomputation choices of a training layout: (full, selective).
RECOMPUTE = ((False, False), (False, True), (True, False))


def enumerate_layouts(
    shape: ModelShape, ranks: int, ranks_per_instance: int, training: bool = True
) -> list[Layout]:
    """Every layout of `ranks`: TP degrees inside one instance (ModelShape.tp_degrees), PP
    degrees that divide the layer stack, the rest data-parallel in each sharding; with TP,
    sequence parallelism off and on; recomputation none, selective or full; for a mixture of
    experts, EP degrees that divide both the experts and the data-parallel ranks."""
    layouts = []
    pps = [d for d in divisors(shape.layers) if d <= ranks] if shape.layers and training else [1]
    recompute = RECOMPUTE if training and shape.layers else RECOMPUTE[:1]
    for tp in shape.tp_degrees(min(ranks, ranks_per_instance), training):
        for pp in pps:
            if ranks % (tp * pp):
                continue
            dp = ranks // (tp * pp)
            shardings = SHARDINGS if dp > 1 and training else (NONE,)
            eps = [e for e in divisors(shape.experts) if dp % e == 0] if shape.experts else [1]
            for sharding, ep, sp, (full, selective) in product(
                shardings, eps, (False, True) if tp > 1 and training else (False,), recompute
            ):
                if sharding == FSDP and pp > 1:
                    continue  # FSDP with pipelines is not a layout the Neuron stacks offer
                layouts.append(Layout(tp, pp, dp, sharding, full, selective, sp, ep))
    return layouts
