"""`make_plan`: a model, an instance type, a global batch -> every layout judged, and one chosen.

The model is read without its weights (shapes.py on the meta device), its activations and
optimizer measured on a probe (probe.py), each layout's per-rank memory computed (layouts.py),
and the choice made by AWS's rule (recommend.py). Nothing here needs a Neuron device: every
number on Trainium is a prediction, and says so.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from time import perf_counter
from typing import Any

import torch

from workbench.errors import BadInput
from workbench.planning.activations import ActivationModel
from workbench.planning.hf_config import HF_PREFIX, load_hf_model
from workbench.planning.instances import (
    INFERENCE,
    TRAINING,
    GiB,
    InstanceSpec,
    get_instance,
    human_bytes,
)
from workbench.planning.kv_cache import KvBudget, vllm_budget
from workbench.planning.layouts import (
    FSDP_LAYERS_IN_FLIGHT,
    GLOO_LAYERS_IN_FLIGHT,
    NONE,
    PRECISIONS,
    Layout,
    Precision,
    RankMemory,
    enumerate_layouts,
    kv_bytes_per_sequence,
    rank_memory,
)
from workbench.planning.probe import measure_hf, measure_workload
from workbench.planning.recommend import (
    HEADROOM,
    BatchPlan,
    Candidate,
    availability,
    batch_plan,
    choose,
    largest_micro_batch,
)
from workbench.planning.shapes import ModelShape, read_shape
from workbench.workload import Workload, WorkloadSpec

# AWS's own scripts use 4096 tokens for 7B-class Llama training (acceptance...md 1.5).
DEFAULT_HF_SEQ = 4096
MAX_INSTANCES = 64
MODES = (TRAINING, INFERENCE)


@dataclass(frozen=True)
class PublishedLayout:
    instance_prefix: str
    min_parameters: float
    max_parameters: float
    layout: str
    tp: int
    sharding: str
    source: str


PUBLISHED = (
    PublishedLayout(
        "trn1",
        6e9,
        9e9,
        "TP 8 + ZeRO-1, micro-batch 1, sequence 4096, bf16 mixed precision",
        8,
        "zero1",
        "AWS NxD Llama2-7B pretraining script (TP_DEGREE=8, USE_ZERO_1=1, MBS=1, SEQ_LEN=4096)",
    ),
    PublishedLayout(
        "trn2.48xlarge",
        6e9,
        9e9,
        "TP 4 x FSDP 16 with selective activation checkpointing",
        4,
        "fsdp",
        "AWS TorchTitan tutorial config qwen3_8b_tp4_fsdp16_sac on one trn2.48xlarge",
    ),
)


@dataclass
class HostNeed:
    """Host memory while the ranks build and load the model before it reaches the device."""

    every_rank_builds_whole: float  # each process materializes the whole model on the CPU
    shards_only: float  # built on the meta device, each rank loads its own shard
    host_memory: int | None

    def sentence(self) -> str:
        whole = f"{self.every_rank_builds_whole / GiB:,.1f} GiB"
        if self.host_memory is None:
            return (
                f"every rank building the whole model on the host needs {whole} "
                "(host memory unknown)"
            )
        host = f"{self.host_memory / GiB:,.0f} GiB"
        if self.every_rank_builds_whole <= self.host_memory:
            return f"every rank building the whole model on the host needs {whole} of its {host}"
        return (
            f"every rank building the whole model on the host needs {whole}, more than its "
            f"{host}: build on the meta device and load shards ({self.shards_only / GiB:,.1f} "
            "GiB), as NxD does"
        )


@dataclass
class Plan:
    model: str
    model_source: str
    parameters: int
    layers: int
    heads: int | None
    kv_heads: int | None
    instance: InstanceSpec
    instances: int
    mode: str
    precision: Precision
    seq: int | None
    global_batch: int | None
    activation_source: str
    activation_fit_error: float | None
    kappa: float | None
    optimizer: str
    candidates: list[Candidate]
    single_rank: Candidate
    chosen: Candidate | None
    batch: BatchPlan | None
    host: HostNeed
    minimum_instances: tuple[int, str] | None
    unsized: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    published: str = ""
    seconds: float = 0.0
    kv_budget: KvBudget | None = None  # inference of a decoder: vLLM Neuron's default budget
    instance_reason: str = ""  # why this instance, where the caller chose it (notebook 04)
    # What the numbers were computed from, for views that compute more (not in the result file).
    shape: ModelShape | None = field(default=None, repr=False)
    activations: ActivationModel | None = field(default=None, repr=False)

    @property
    def fits_one_rank(self) -> bool:
        return self.single_rank.fits

    def headline(self) -> str:
        where = (
            f"{self.instances} x {self.instance.name}" if self.instances > 1 else self.instance.name
        )
        one = "one NeuronCore" if not self.instance.is_here else "one rank"
        serving = self.mode == INFERENCE
        at = f"with one sequence of {self.seq} tokens" if serving else "at micro-batch 1"
        single = (
            f"A single rank ({one}, {self.instance.hbm_per_rank_bytes / GiB:.3g} GiB) "
            f"{'can' if self.fits_one_rank else 'cannot'} hold {self.model} "
            f"({_count(self.parameters)} parameters, {self.precision.name}): it needs "
            f"{human_bytes(self.single_rank.memory.peak)} {at}."
        )
        if self.chosen is None:
            more = ""
            if self.minimum_instances:
                count, layout = self.minimum_instances
                more = f" It needs at least {count} instances ({layout})."
            return f"{single} No layout on {where} leaves {HEADROOM:.0%} headroom.{more}"
        chosen = self.chosen
        if serving:
            return (
                f"{single} Plan for serving on {where}: {chosen.layout.name}, "
                f"{human_bytes(chosen.memory.peak)} per rank with one sequence "
                f"({chosen.headroom:.0%} headroom), up to "
                f"{chosen.largest_micro_batch} sequences at once."
            )
        text = (
            f"{single} Plan for {where}: {chosen.layout.name}, "
            f"{human_bytes(chosen.memory.peak)} per rank at micro-batch 1 "
            f"({chosen.headroom:.0%} headroom), micro-batches up to {chosen.largest_micro_batch}"
        )
        if self.batch:
            text += f"; {self.batch.equation()}"
        return text + "."


def _count(parameters: int) -> str:
    if parameters >= 10**9:
        return f"{parameters / 1e9:.2f} B"
    if parameters >= 10**6:
        return f"{parameters / 1e6:.1f} M"
    return f"{parameters:,}"


def _load_shape(
    spec: str | Workload, seq: int | None
) -> tuple[ModelShape, ActivationModel | None, list[str], int | None, str]:
    """The model's shape, its measured activations, what could not be sized, the sequence
    length and the default precision. A Workload already loaded is planned as it is."""
    if isinstance(spec, str) and spec.startswith(HF_PREFIX):
        model = load_hf_model(spec)
        shape = read_shape(
            model.build_meta(), spec, "config.json, built on the meta device", model.sizes
        )
        shape.keeps_kv_cache = model.keeps_kv_cache
        activations, unsized = measure_hf(model)
        positions = model.sizes.get("positions")
        chosen = seq or min(positions or DEFAULT_HF_SEQ, DEFAULT_HF_SEQ)
        if positions and chosen > positions:
            raise BadInput(
                f"Sequence length {chosen} is longer than the {positions} positions {spec!r} "
                "has; use at most that."
            )
        return shape, activations, unsized, chosen, "bf16-mixed"
    workload = WorkloadSpec(spec=spec).load() if isinstance(spec, str) else spec
    if seq and seq != workload.sequence_length:
        raise BadInput(
            f"--seq-len applies to hf: configs; workload {workload.name!r} has its own sequence "
            "length "
            f"({workload.sequence_length or 'none: it is not a sequence model'})."
        )
    try:
        with torch.device("meta"):
            meta = workload.model_factory()
        source = "the workload's model, built on the meta device"
    except Exception:  # a factory that draws real data at build time: built for real instead
        meta = workload.build_model("cpu")
        source = "the workload's model"
    shape = read_shape(meta, workload.name, source)
    activations, unsized = measure_workload(workload, shape)
    return shape, activations, unsized, workload.sequence_length, "fp32"


def _candidate(
    shape: ModelShape,
    activations: ActivationModel | None,
    layout: Layout,
    precision: Precision,
    seq: int | None,
    instance: InstanceSpec,
    training: bool,
) -> Candidate:
    capacity = instance.hbm_per_rank_bytes

    in_flight = GLOO_LAYERS_IN_FLIGHT if instance.is_here else FSDP_LAYERS_IN_FLIGHT

    def memory_at(micro: int) -> RankMemory:
        return rank_memory(shape, activations, layout, precision, micro, seq, training, in_flight)

    def fits_with_headroom(micro: int) -> bool:
        return memory_at(micro).peak <= capacity * (1 - HEADROOM)

    return Candidate(
        layout,
        memory_at(1),
        capacity,
        largest_micro_batch(fits_with_headroom) if activations else 0,
        *_available(layout, instance),
    )


def _available(layout: Layout, instance: InstanceSpec) -> tuple[bool, str]:
    note = availability(layout, instance)
    return not note, note


def _candidates(
    shape: ModelShape,
    activations: ActivationModel | None,
    precision: Precision,
    seq: int | None,
    instance: InstanceSpec,
    count: int,
    training: bool,
) -> list[Candidate]:
    layouts = enumerate_layouts(shape, instance.ranks * count, instance.ranks, training)
    return [
        _candidate(shape, activations, layout, precision, seq, instance, training)
        for layout in layouts
    ]


def make_plan(
    workload: str | Workload,
    instance: str,
    *,
    instances: int = 1,
    global_batch: int | None = None,
    seq_len: int | None = None,
    precision: str = "",
    micro_batch: int = 0,
    mode: str = "",
) -> Plan:
    """The plan (module docstring). Bad input is one sentence, before any measuring."""
    started = perf_counter()
    spec = get_instance(instance)
    mode = mode or spec.use
    if mode not in MODES:
        raise BadInput(f"Mode {mode!r}: choose {' or '.join(MODES)}.")
    if precision and precision not in PRECISIONS:
        raise BadInput(f"Precision {precision!r}: choose {', '.join(PRECISIONS)}.")
    for name, value in (
        ("instances", instances),
        ("global batch", global_batch),
        ("sequence length", seq_len),
        ("micro-batch", micro_batch),
    ):
        if value is not None and value < (1 if name == "instances" else 0):
            raise BadInput(f"The {name} must be a positive whole number, not {value}.")
    shape, activations, unsized, seq, default_precision = _load_shape(workload, seq_len)
    training = mode == TRAINING
    if not training and default_precision == "bf16-mixed":
        default_precision = "bf16"  # served weights need no fp32 master copy
    chosen_precision = PRECISIONS[precision or default_precision]
    notes = []
    if activations is None:
        notes.append("activations are not counted: every number below is a lower bound")
    if shape.layers == 0:
        unsized.append(
            "a layer stack (no repeated layers found): PP and activation checkpointing are "
            "not planned"
        )
    problem = shape.tp_problem()
    if problem:
        unsized.append(f"tensor parallelism ({problem})")
    if not training and shape.kv_per_token_layer() is None:
        unsized.append(
            "the KV cache (counted for hf: causal-LM configs, which give their KV heads and head "
            "size; this model states none)"
            if not shape.keeps_kv_cache
            else "the KV cache (the config gives no KV head count or head size)"
        )
    single = _candidate(
        shape, activations, Layout(1, 1, 1, NONE, False), chosen_precision, seq, spec, training
    )
    candidates = _candidates(shape, activations, chosen_precision, seq, spec, instances, training)
    chosen = choose(candidates)
    batch = None
    if chosen is not None and training and global_batch:
        batch = batch_plan(chosen, global_batch, micro_batch)
    minimum = None
    if chosen is None:
        count = instances * 2
        while count <= MAX_INSTANCES and minimum is None:
            more = choose(
                _candidates(shape, activations, chosen_precision, seq, spec, count, training)
            )
            if more is not None:
                minimum = (count, more.layout.name)
            count *= 2
    param_bytes = shape.total * chosen_precision.parameter
    host = HostNeed(param_bytes * spec.ranks, param_bytes, spec.host_memory_bytes)
    kv_budget = None
    served = chosen or single
    per_sequence = kv_bytes_per_sequence(shape, served.layout, chosen_precision, seq)
    if not training and per_sequence and seq:
        kv_budget = vllm_budget(served, per_sequence, seq)
    return Plan(
        model=shape.name,
        model_source=shape.source,
        parameters=shape.total,
        layers=shape.layers,
        heads=shape.heads,
        kv_heads=shape.kv_heads,
        instance=spec,
        instances=instances,
        mode=mode,
        precision=chosen_precision,
        seq=seq,
        global_batch=batch.global_batch if batch else global_batch,
        activation_source=activations.source if activations else "not measured",
        activation_fit_error=activations.fit_error if activations else None,
        kappa=activations.kappa if activations else None,
        optimizer=activations.optimizer.name if activations else "unknown",
        candidates=candidates,
        single_rank=single,
        chosen=chosen,
        batch=batch,
        host=host,
        minimum_instances=minimum,
        unsized=unsized,
        notes=notes,
        published=_published(shape, spec, chosen, candidates),
        seconds=perf_counter() - started,
        kv_budget=kv_budget,
        shape=shape,
        activations=activations,
    )


def _published(
    shape: ModelShape,
    instance: InstanceSpec,
    chosen: Candidate | None,
    candidates: list[Candidate],
) -> str:
    """How the choice compares with the layout AWS publishes for a model of this size here."""
    for published in PUBLISHED:
        if not instance.name.startswith(published.instance_prefix):
            continue
        if not published.min_parameters <= shape.total <= published.max_parameters:
            continue
        if chosen is None:
            return f"AWS's published layout here is {published.layout} ({published.source})."
        same = chosen.layout.tp == published.tp and chosen.layout.sharding == published.sharding
        if same:
            return (
                f"Consistent with AWS's published layout: {published.layout} ({published.source})."
            )
        theirs = [
            c
            for c in candidates
            if c.layout.tp == published.tp
            and c.layout.sharding == published.sharding
            and c.layout.pp == 1
        ]
        numbers = "; ".join(
            f"{c.layout.name}: {human_bytes(c.memory.peak)} per rank, {c.headroom:.0%} headroom"
            for c in theirs
        )
        return (
            f"Differs from AWS's published layout, {published.layout} ({published.source}). "
            f"Predicted here: {numbers}. The rule (the least TP x PP leaving {HEADROOM:.0%} "
            f"free) picks {chosen.layout.name}, with less tensor parallelism; where it adds "
            "activation checkpointing, each layer's forward runs again in the backward "
            "(about a third more compute), which the published layout spends on TP "
            "collectives instead. Memory alone does not weigh that trade."
        )
    return ""


def plan_data(plan: Plan) -> dict[str, Any]:
    """The plan as plain data: what `04_retuning.json` keeps under "plan"."""

    def candidate(c: Candidate) -> dict[str, Any]:
        return {
            "layout": asdict(c.layout),
            "name": c.layout.name,
            "memory": {**asdict(c.memory), "held": c.memory.held, "peak": c.memory.peak},
            "capacity": c.capacity,
            "fits": c.fits,
            "headroom": c.headroom,
            "largest_micro_batch": c.largest_micro_batch,
            "available": c.available,
            "note": c.note,
        }

    return {
        "headline": plan.headline(),
        "model": plan.model,
        "model_source": plan.model_source,
        "parameters": plan.parameters,
        "layers": plan.layers,
        "heads": plan.heads,
        "kv_heads": plan.kv_heads,
        "instance": asdict(plan.instance),
        "instances": plan.instances,
        "mode": plan.mode,
        "precision": asdict(plan.precision),
        "seq": plan.seq,
        "global_batch": plan.global_batch,
        "activation_source": plan.activation_source,
        "activation_fit_error": plan.activation_fit_error,
        "kappa": plan.kappa,
        "optimizer": plan.optimizer,
        "fits_one_rank": plan.fits_one_rank,
        "single_rank": candidate(plan.single_rank),
        "chosen": candidate(plan.chosen) if plan.chosen else None,
        "batch": {**asdict(plan.batch), "equation": plan.batch.equation()} if plan.batch else None,
        "candidates": [candidate(c) for c in plan.candidates],
        "host": {**asdict(plan.host), "sentence": plan.host.sentence()},
        "minimum_instances": list(plan.minimum_instances) if plan.minimum_instances else None,
        "unsized": plan.unsized,
        "notes": plan.notes,
        "published": plan.published,
        "kv_budget": {**asdict(plan.kv_budget), "sentence": plan.kv_budget.sentence()}
        if plan.kv_budget
        else None,
        "instance_reason": plan.instance_reason,
        "headroom_rule": f"the least model parallelism (TP x PP) whose peak leaves {HEADROOM:.0%} "
        "of a rank's memory free",
        "predicted": "predicted from shapes and CPU probes, not measured on Trainium",
        "seconds": plan.seconds,
    }
