"""`make_plan`: a model, an instance type, a global batch -> every layout judged, and one chosen.

The model is read without its weights (shapes.py on the meta device), its activations and
optimizer measured on a probe (probe.py), each layout's per-rank memory computed (layouts.py),
and the choice made by AWS's rule (recommend.py). Nothing here needs a Neuron device: every
number on Trainium is a prediction, and says so.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from time import perf_counter
from typing import TYPE_CHECKING, Any

from workbench.errors import BadInput
from workbench.planning.activations import ActivationModel
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
from workbench.planning.published import (
    RUNNING,
    TABLE,
    Match,
    PublishedLayout,
    match,
    model_named,
)
from workbench.planning.recommend import (
    RUNTIME_RESERVE_SOURCE,
    SERVING_TP_SOURCE,
    TRAINING_TP_SOURCE,
    BatchPlan,
    Candidate,
    availability,
    batch_plan,
    choose,
    largest_micro_batch,
    reserve_for,
)
from workbench.planning.shapes import ModelShape, read_shape
from workbench.workloads import HF_PREFIX

# Imported where they are used: they load torch, which reading result files back (compare,
# collect, export-metrics) never needs.
if TYPE_CHECKING:
    from workbench.workload import Workload


# AWS's own scripts use 4096 tokens for 7B-class Llama training (acceptance...md 1.5).
DEFAULT_HF_SEQ = 4096
MAX_INSTANCES = 64
MODES = (TRAINING, INFERENCE)


# Share of the host's memory the model's copies may take while it is built, compiled and loaded:
# the rest is the OS's, the framework's and neuronx-cc's. Checked against public reports of
# Llama-3.1-8B (2 x 14.96 GiB) killed on trn1.2xlarge's 32 GiB (neuronx-distributed issue 53,
# nki-samples issue 87, aws-neuron-sdk issue 1222).
HOST_USABLE_SHARE = 0.90
HOST_SOURCE = (
    "NxD builds the model on the host and hands each rank its shard: the checkpoint read whole "
    "plus this instance's shards must fit in 90% of host memory (public reports: Llama-3.1-8B "
    "killed compiling on trn1.2xlarge, neuronx-distributed issue 53, nki-samples issue 87)"
)


@dataclass
class HostNeed:
    """Host memory while the ranks build, compile and load the model before it reaches the
    device: the weights read whole from the checkpoint, plus the shards of this instance's
    ranks built from them (HOST_SOURCE)."""

    every_rank_builds_whole: float  # each process materializes the whole model on the CPU
    shards_only: float  # built on the meta device, each rank loads its own shard
    host_memory: int | None
    whole_model: float = 0.0  # the checkpoint's weights, read once on each host
    instance_shards: float = 0.0  # parameter bytes of this instance's ranks, together

    @property
    def needed(self) -> float:
        return self.whole_model + self.instance_shards

    @property
    def usable(self) -> float | None:
        return None if self.host_memory is None else self.host_memory * HOST_USABLE_SHARE

    @property
    def fits(self) -> bool:
        """True where the host memory is unknown: nothing to judge (the sentence says so)."""
        return self.usable is None or self.needed <= self.usable

    def sentence(self) -> str:
        need = (
            f"the checkpoint read whole ({self.whole_model / GiB:,.1f} GiB) and this instance's "
            f"shards ({self.instance_shards / GiB:,.1f} GiB) need {self.needed / GiB:,.1f} GiB"
        )
        if self.host_memory is None:
            return f"{need} of host memory (host memory unknown: not judged)"
        host = f"{self.host_memory / GiB:,.0f} GiB"
        usable = f"{HOST_USABLE_SHARE:.0%} of its {host}"
        if self.fits:
            return f"{need} of {usable}"
        return (
            f"{need}, more than {usable}: the compile and load are OOM-killed on this host "
            "(use an instance with more host memory)"
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
    published_model: str = ""  # the published table's name for this model; "" where none
    rule_choice: str = ""  # the rule's own pick, where a published layout was taken instead
    reserve_source: str = RUNTIME_RESERVE_SOURCE
    # What the numbers were computed from, for views that compute more (not in the result file).
    shape: ModelShape | None = field(default=None, repr=False)
    activations: ActivationModel | None = field(default=None, repr=False)

    @property
    def fits_one_rank(self) -> bool:
        return self.single_rank.fits

    @property
    def complete(self) -> bool:
        """Whether every term of a rank's memory was sized (else each number is a floor)."""
        return self.single_rank.complete

    @property
    def fits(self) -> bool:
        """A layout fits the ranks' memory and the host holds the build and load."""
        return self.chosen is not None and self.host.fits

    def headline(self) -> str:
        where = (
            f"{self.instances} x {self.instance.name}" if self.instances > 1 else self.instance.name
        )
        one = "one NeuronCore" if not self.instance.is_here else "one rank"
        serving = self.mode == INFERENCE
        at = f"with one sequence of {self.seq} tokens" if serving else "at micro-batch 1"
        rank = f"A single rank ({one}, {self.instance.hbm_per_rank_bytes / GiB:.3g} GiB)"
        needs = f"{human_bytes(self.single_rank.memory.peak)} {at}"
        what = f"{self.model} ({_count(self.parameters)} parameters, {self.precision.name})"
        if not self.complete:
            return (
                f"{rank} needs at least {needs} for {what}. Whether it fits on {where} cannot "
                f"be said: the plan could not size {'; '.join(self.unsized) or 'activations'}, "
                "so every number is a lower bound."
            )
        single = (
            f"{rank} {'can' if self.fits_one_rank else 'cannot'} hold {what}: it needs {needs}."
        )
        if not self.host.fits:
            return f"{single} It does not fit on {where}: {self.host.sentence()}."
        if self.chosen is None:
            more = ""
            if self.minimum_instances:
                count, layout = self.minimum_instances
                more = f" It needs at least {count} instances ({layout})."
            return (
                f"{single} No layout on {where} fits a rank's HBM less the runtime's reserve "
                f"({human_bytes(self.single_rank.reserve)}).{more}"
            )
        chosen = self.chosen
        whose = f"AWS's published layout, {chosen.layout.name}" if self.rule_choice else ""
        named = whose or chosen.layout.name
        if serving:
            return (
                f"{single} Plan for serving on {where}: {named}, "
                f"{human_bytes(chosen.memory.peak)} per rank with one sequence "
                f"({chosen.headroom:.0%} of the usable memory free), up to "
                f"{chosen.largest_micro_batch} sequences at once."
            )
        text = (
            f"{single} Plan for {where}: {named}, "
            f"{human_bytes(chosen.memory.peak)} per rank at micro-batch 1 "
            f"({chosen.headroom:.0%} of the usable memory free), micro-batches up to "
            f"{chosen.largest_micro_batch}"
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


@dataclass
class _Loaded:
    shape: ModelShape
    activations: ActivationModel | None
    unsized: list[str]
    seq: int | None
    precision: str
    published_model: str  # the published table's name for the model; "" where none


def _load_shape(spec: str | Workload, seq: int | None, hf_config: str = "") -> _Loaded:
    """The model's shape, its measured activations, what could not be sized, the sequence
    length, the default precision and its name in the published table. A Workload already
    loaded is planned as it is."""
    import torch

    from workbench.planning.hf_config import load_hf_model
    from workbench.planning.probe import measure_hf, measure_workload
    from workbench.workload import WorkloadSpec

    if isinstance(spec, str) and spec.startswith(HF_PREFIX):
        model = load_hf_model(spec, hf_config)
        shape = read_shape(
            model.build_meta(), spec, "config.json, built on the meta device", model.sizes
        )
        shape.keeps_kv_cache = model.keeps_kv_cache
        positions = model.sizes.get("positions")
        chosen = seq or min(positions or DEFAULT_HF_SEQ, DEFAULT_HF_SEQ)
        if positions and chosen > positions:
            raise BadInput(
                f"Sequence length {chosen} is longer than the {positions} positions {spec!r} "
                "has; use at most that."
            )
        activations, unsized = measure_hf(model)
        name = model_named(model.sizes, str(getattr(model.config, "model_type", "")), shape.experts)
        return _Loaded(shape, activations, unsized, chosen, "bf16-mixed", name)
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
    return _Loaded(shape, activations, unsized, workload.sequence_length, "fp32", "")


@dataclass(frozen=True)
class _Sizing:
    """What every layout's memory is computed from: the model as loaded, the precision, the
    sequence, the instance and whether it trains."""

    shape: ModelShape
    activations: ActivationModel | None
    precision: Precision
    seq: int | None
    instance: InstanceSpec
    training: bool

    def candidate(self, layout: Layout) -> Candidate:
        """`layout` judged on one rank of the instance: its memory, what fits within the
        runtime's reserve, and whether the instance offers it."""
        capacity = self.instance.hbm_per_rank_bytes
        reserve = reserve_for(self.instance)
        in_flight = GLOO_LAYERS_IN_FLIGHT if self.instance.is_here else FSDP_LAYERS_IN_FLIGHT

        def memory_at(micro: int) -> RankMemory:
            return rank_memory(
                self.shape,
                self.activations,
                layout,
                self.precision,
                micro,
                self.seq,
                self.training,
                in_flight,
            )

        def fits_within_reserve(micro: int) -> bool:
            return memory_at(micro).peak <= capacity - reserve

        note = availability(layout, self.instance, self.training)
        return Candidate(
            layout,
            memory_at(1),
            capacity,
            largest_micro_batch(fits_within_reserve) if self.activations else 0,
            not note,
            note,
            reserve,
            self.activations is not None,
        )

    def candidates(self, count: int) -> list[Candidate]:
        """Every layout over `count` instances, judged."""
        ranks = self.instance.ranks
        layouts = enumerate_layouts(self.shape, ranks * count, ranks, self.training)
        return [self.candidate(layout) for layout in layouts]


@dataclass(frozen=True)
class _Layouts:
    """The layouts judged and the one chosen, by AWS's rule or from the published table."""

    single: Candidate
    candidates: list[Candidate]
    chosen: Candidate | None
    published: str
    rule_choice: str


def _check_request(mode: str, precision: str, counts: dict[str, int | None]) -> None:
    """Bad input as one sentence, before anything is loaded or measured."""
    if mode not in MODES:
        raise BadInput(f"Mode {mode!r}: choose {' or '.join(MODES)}.")
    if precision and precision not in PRECISIONS:
        raise BadInput(f"Precision {precision!r}: choose {', '.join(PRECISIONS)}.")
    for name, value in counts.items():
        if value is not None and value < (1 if name == "instances" else 0):
            raise BadInput(f"The {name} must be a positive whole number, not {value}.")


def _sizing(loaded: _Loaded, spec: InstanceSpec, mode: str, precision: str) -> _Sizing:
    """What the layouts are sized from: the precision asked for, else the model's default
    (served without an fp32 master copy)."""
    training = mode == TRAINING
    default = loaded.precision
    if not training and default == "bf16-mixed":
        default = "bf16"  # served weights need no fp32 master copy
    chosen = PRECISIONS[precision or default]
    return _Sizing(loaded.shape, loaded.activations, chosen, loaded.seq, spec, training)


def _limits(sizing: _Sizing, measured_unsized: list[str]) -> tuple[list[str], list[str]]:
    """What the plan could not size, and the notes on what it counts: (unsized, notes)."""
    shape, training = sizing.shape, sizing.training
    unsized = list(measured_unsized)
    notes = []
    if sizing.activations is None:
        notes.append("activations are not counted: every number below is a lower bound")
    if shape.layers == 0:
        unsized.append(
            "a layer stack (no repeated layers found): PP and activation checkpointing are "
            "not planned"
        )
    problem = shape.tp_problem()
    if problem:
        unsized.append(f"tensor parallelism ({problem})")
    notes.append(
        f"TP degrees: {TRAINING_TP_SOURCE if training else SERVING_TP_SOURCE}"
        if shape.tp_planned
        else "TP degrees: none (no TP plan)"
    )
    if not training and shape.kv_per_token_layer() is None:
        unsized.append(
            "the KV cache (counted for hf: causal-LM configs, which give their KV heads and head "
            "size; this model states none)"
            if not shape.keeps_kv_cache
            else "the KV cache (the config gives no KV head count or head size)"
        )
    return unsized, notes


def _layouts(sizing: _Sizing, instances: int, mode: str, published_model: str) -> _Layouts:
    """Every layout judged, the rule's choice, and the published table's word on it."""
    single = sizing.candidate(Layout(1, 1, 1, NONE, False))
    candidates = sizing.candidates(instances)
    found = match(published_model, sizing.instance.name, instances, mode, sizing.seq)
    published, rule_choice, chosen = _published(
        found, sizing, instances, choose(candidates), candidates
    )
    return _Layouts(single, candidates, chosen, published, rule_choice)


def _batch_split(
    chosen: Candidate | None,
    training: bool,
    global_batch: int | None,
    micro_batch: int,
    strict: bool,
) -> tuple[BatchPlan | None, list[str]]:
    """The global batch split over the chosen layout, and the note saying why there is none
    where a lenient split does not divide."""
    if chosen is None or not global_batch or (strict and not training):
        return None, []
    try:
        return batch_plan(chosen, global_batch, micro_batch), []
    except BadInput as exc:
        if strict:
            raise
        return None, [f"no batch split: {exc}"]


def _minimum_instances(
    sizing: _Sizing, instances: int, chosen: Candidate | None
) -> tuple[int, str] | None:
    """Where no layout fits: the fewest instances (doubling, up to MAX_INSTANCES) on which
    one does, and that layout."""
    if chosen is not None or sizing.activations is None:
        return None
    count = instances * 2
    while count <= MAX_INSTANCES:
        more = choose(sizing.candidates(count))
        if more is not None:
            return count, more.layout.name
        count *= 2
    return None


def _kv_budget(sizing: _Sizing, served: Candidate) -> KvBudget | None:
    per_sequence = kv_bytes_per_sequence(sizing.shape, served.layout, sizing.precision, sizing.seq)
    if sizing.training or not per_sequence or not sizing.seq:
        return None
    return vllm_budget(served, per_sequence, sizing.seq)


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
    hf_config: str = "",
    instance_reason: str = "",
    notes: Sequence[str] = (),
    strict_batch: bool = True,
) -> Plan:
    """The plan (module docstring). Bad input is one sentence, before any measuring.

    `instance_reason` says why this instance, where the caller chose it; `notes` are the
    caller's, kept after the planner's own. A global batch is split for training, and one the
    chosen layout's data parallelism does not divide is bad input; with `strict_batch=False`
    (notebook 04, whose retuned batch is planned on whatever instance it plans for) it is split
    in either mode, and where it does not divide the plan keeps no split and says why."""
    started = perf_counter()
    spec = get_instance(instance)
    mode = mode or spec.use
    counts = {"instances": instances, "global batch": global_batch, "sequence length": seq_len}
    _check_request(mode, precision, {**counts, "micro-batch": micro_batch})
    loaded = _load_shape(workload, seq_len, hf_config)
    sizing = _sizing(loaded, spec, mode, precision)
    unsized, own_notes = _limits(sizing, loaded.unsized)
    layouts = _layouts(sizing, instances, mode, loaded.published_model)
    batch, batch_notes = _batch_split(
        layouts.chosen, sizing.training, global_batch, micro_batch, strict_batch
    )
    served = layouts.chosen or layouts.single
    return _plan_record(
        sizing,
        layouts,
        mode=mode,
        instances=instances,
        batch=batch,
        global_batch=batch.global_batch if batch else global_batch,
        host=host_need(sizing.shape, sizing.precision, spec, served),
        minimum=_minimum_instances(sizing, instances, layouts.chosen),
        kv_budget=_kv_budget(sizing, served),
        unsized=unsized,
        notes=[*own_notes, *notes, *batch_notes],
        published_model=loaded.published_model,
        instance_reason=instance_reason,
        started=started,
    )


def _plan_record(
    sizing: _Sizing,
    layouts: _Layouts,
    *,
    mode: str,
    instances: int,
    batch: BatchPlan | None,
    global_batch: int | None,
    host: HostNeed,
    minimum: tuple[int, str] | None,
    kv_budget: KvBudget | None,
    unsized: list[str],
    notes: list[str],
    published_model: str,
    instance_reason: str,
    started: float,
) -> Plan:
    """The plan record, made once from what every stage computed."""
    shape, activations = sizing.shape, sizing.activations
    return Plan(
        model=shape.name,
        model_source=shape.source,
        parameters=shape.total,
        layers=shape.layers,
        heads=shape.heads,
        kv_heads=shape.kv_heads,
        instance=sizing.instance,
        instances=instances,
        mode=mode,
        precision=sizing.precision,
        seq=sizing.seq,
        global_batch=global_batch,
        activation_source=activations.source if activations else "not measured",
        activation_fit_error=activations.fit_error if activations else None,
        kappa=activations.kappa if activations else None,
        optimizer=activations.optimizer.name if activations else "unknown",
        candidates=layouts.candidates,
        single_rank=layouts.single,
        chosen=layouts.chosen,
        batch=batch,
        host=host,
        minimum_instances=minimum,
        unsized=unsized,
        notes=notes,
        published=layouts.published,
        seconds=perf_counter() - started,
        kv_budget=kv_budget,
        instance_reason=instance_reason,
        published_model=published_model,
        rule_choice=layouts.rule_choice,
        shape=shape,
        activations=activations,
    )


def host_need(
    shape: ModelShape, precision: Precision, instance: InstanceSpec, candidate: Candidate
) -> HostNeed:
    """What one instance's host holds while `candidate`'s ranks are built and loaded."""
    param_bytes = shape.total * precision.parameter
    return HostNeed(
        param_bytes * instance.ranks,
        param_bytes,
        instance.host_memory_bytes,
        whole_model=float(param_bytes),
        instance_shards=candidate.memory.parameters * min(instance.ranks, candidate.layout.ranks),
    )


def _published(
    found: Match,
    sizing: _Sizing,
    instances: int,
    chosen: Candidate | None,
    candidates: list[Candidate],
) -> tuple[str, str, Candidate | None]:
    """How the plan stands against the published table (published.py): the sentence, the
    rule's own pick where AWS's running layout is taken instead, and the layout chosen. A
    running layout that fits here is the plan's choice: it is what AWS runs."""
    if not found.model:
        return "No published layout for this model (none in " + f"{TABLE}).", "", chosen
    mode = TRAINING if sizing.training else INFERENCE
    if not found.exact and not found.elsewhere:
        return f"No published {mode} layout for {found.model}.", "", chosen
    if not found.exact:
        others = "; ".join(r.describe() for r in found.elsewhere)
        return (
            f"No published layout for {found.model} on this instance and sequence; published "
            f"for its {mode}: {others}.",
            "",
            chosen,
        )
    sentences = []
    taken = chosen
    rule = ""
    for row in found.exact:
        sentence, theirs, runs = _published_row(row, sizing, instances, candidates)
        sentences.append(sentence)
        if row.outcome == RUNNING and runs and theirs.available and taken is chosen:
            if chosen is not None and chosen.layout != theirs.layout:
                rule = chosen.layout.name
            taken = theirs
    if rule:
        sentences.append(
            f"The plan takes AWS's layout; the rule alone (the least TP x PP that fits) would "
            f"pick {rule}, with less TP communication and more memory per rank"
        )
    return ". ".join(sentences) + ".", rule, taken


def _published_row(
    row: PublishedLayout, sizing: _Sizing, instances: int, candidates: list[Candidate]
) -> tuple[str, Candidate, bool]:
    """One published row judged here: whether the plan agrees with its outcome (the
    sentence), the row's layout as a candidate, and whether that layout runs here."""
    layout = row.layout(sizing.instance.ranks * instances)
    theirs = next((c for c in candidates if c.layout == layout), None)
    if theirs is None:
        theirs = sizing.candidate(layout)
    at = theirs.largest_micro_batch
    host = host_need(sizing.shape, sizing.precision, sizing.instance, theirs)
    verdict = (
        f"predicted {human_bytes(theirs.memory.peak)} per rank of "
        f"{human_bytes(theirs.usable)} usable, "
        + (f"fits up to {at} at once" if theirs.fits else "does not fit")
        + ("" if host.fits else f"; host: {host.sentence()}")
    )
    runs = theirs.fits and host.fits and at >= row.micro_batch
    agrees = runs == (row.outcome == RUNNING)
    if not theirs.complete:
        verdict, agrees = "not judged: activations could not be sized", True
    sentence = (
        f"{'Agrees with' if agrees else 'Disagrees with'} {row.outcome} {row.describe()}: {verdict}"
    )
    return sentence, theirs, runs


def _candidate_data(c: Candidate, training: bool) -> dict[str, Any]:
    """One judged layout as plain data (plan_data)."""
    return {
        "layout": asdict(c.layout),
        "name": c.layout.name,
        "memory": {**asdict(c.memory), "held": c.memory.held, "peak": c.memory.peak},
        "capacity": c.capacity,
        "reserve": c.reserve,
        "usable": c.usable,
        "complete": c.complete,
        "fits": c.fits,
        "headroom": c.headroom,
        "largest_micro_batch": c.largest_micro_batch,
        "available": c.available,
        "note": c.note,
        "collectives": c.layout.collectives(training),
    }


def plan_data(plan: Plan) -> dict[str, Any]:
    """The plan as plain data: what `04_retuning.json` keeps under "plan" and `workbench plan
    --json` prints."""
    training = plan.mode == TRAINING
    batch, kv = plan.batch, plan.kv_budget
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
        "fits": plan.fits,
        "complete": plan.complete,
        "fits_one_rank": plan.fits_one_rank,
        "single_rank": _candidate_data(plan.single_rank, training),
        "chosen": _candidate_data(plan.chosen, training) if plan.chosen else None,
        "batch": {**asdict(batch), "equation": batch.equation()} if batch else None,
        "candidates": [_candidate_data(c, training) for c in plan.candidates],
        "host": _host_data(plan.host),
        "minimum_instances": list(plan.minimum_instances) if plan.minimum_instances else None,
        "unsized": plan.unsized,
        "notes": plan.notes,
        "published": plan.published,
        "published_model": plan.published_model,
        "rule_choice": plan.rule_choice,
        "reserve_source": plan.reserve_source,
        "kv_budget": {**asdict(kv), "sentence": kv.sentence()} if kv else None,
        "instance_reason": plan.instance_reason,
        "headroom_rule": "the least model parallelism (TP x PP) whose peak fits a rank's memory "
        "less the runtime's reserve",
        "predicted": "predicted from shapes and CPU probes, not measured on Trainium",
        "seconds": plan.seconds,
    }


def _host_data(host: HostNeed) -> dict[str, Any]:
    return {
        **asdict(host),
        "needed": host.needed,
        "fits": host.fits,
        "sentence": host.sentence(),
        "source": HOST_SOURCE,
    }
