"""Retuning for the target: batch size, gradient accumulation, DataLoader workers, data-parallel
width, padding buckets, and what a sample costs.

`run_retuning` runs the stages in the order their answers depend on one another:

1. the largest batch that fits the memory budget (tuning_trials: subprocess trials, bisection);
2. a batch-size sweep up to it, and the throughput-best per-core batch;
3. data-parallel scaling at that batch under torchrun (tuning_parallel), and the widest world
   size that keeps its efficiency;
4. the global batch plan (tuning_plan): per-core batch x workers x accumulation = the global
   batch, the learning-rate change, and an accumulation-equivalence check on the workload;
5. DataLoader workers at the planned per-core batch (tuning_dataloader);
6. padding buckets for sequence workloads (tuning_buckets);
7. the cost table (tuning_cost);

then a recommendation that carries its evidence. Every number measured here says it was
measured on this machine and target; projections say they are projections.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from time import perf_counter
from typing import Any

from workbench.baseline import EAGER, MODES
from workbench.errors import BadInput
from workbench.targets.base import Target
from workbench.timing import format_seconds
from workbench.tuning_buckets import BucketStudy, plan_buckets, read_lengths
from workbench.tuning_cost import CostStudy, check_instance, cost_study, load_prices
from workbench.tuning_dataloader import (
    LoaderStudy,
    calibrate_sample_work,
    default_worker_counts,
    loader_settings,
    sweep_loader,
)
from workbench.tuning_parallel import (
    ScalingRun,
    ScalingStudy,
    choose_world_size,
    sweep_world_sizes,
)
from workbench.tuning_plan import (
    AccumulationCheck,
    GlobalBatchPlan,
    check_accumulation,
    plan_global_batch,
)
from workbench.tuning_process import WorkloadSource, usable_cores
from workbench.tuning_trials import (
    BatchChoice,
    MemoryBudget,
    SearchResult,
    Trial,
    TrialRunner,
    choose_batch,
    power_of_two_sizes,
    resolve_budget,
    search_largest_batch,
    sweep_batch_sizes,
)
from workbench.workload import Workload

# The first steps of a data-parallel run build DDP's buckets and the optimizer state.
SCALING_WARMUP_STEPS = 5
# The accumulation check runs in float64 on the CPU; more micro-batches add cost, not insight.
MAX_CHECKED_ACCUMULATION_STEPS = 8


@dataclass(frozen=True)
class RetuneSettings:
    mode: str = EAGER  # the baseline mode every trial runs in: eager or compiled
    min_batch: int = 1
    max_batch: int = 1024
    batch_sizes: tuple[int, ...] = ()  # empty: powers of two up to the largest that fits
    memory_budget_gib: float = 0.0  # 0: the target's device memory, else the host's available
    memory_margin: float = 0.1
    trial_timeout_s: float = 120.0
    steady_steps: int = 10
    global_batch: int = 0  # 0: keep the reference global batch
    reference_global_batch: int = 0  # 0: the workload's own batch size
    dataloader_workers: tuple[int, ...] = ()  # empty: 0, 1, 2, 4, ... up to the core count
    prefetch_factors: tuple[int, ...] = (2,)
    per_sample_cost_ms: float = 0.02
    loader_steps: int = 20
    world_sizes: tuple[int, ...] = ()  # empty: 1, 2, 4, ... up to the target's worker count
    scaling_steps: int = 20
    launch_timeout_s: float = 180.0
    min_scaling_efficiency: float = 0.7
    sequence_lengths: tuple[int, ...] = ()
    sequence_lengths_file: str = ""
    max_buckets: int = 4
    max_padding_waste: float = 0.1
    prices_file: str = ""
    instance_type: str = ""
    price_items: int = 1_000_000_000

    @classmethod
    def from_params(cls, params: Mapping[str, Any]) -> RetuneSettings:
        """The settings named like notebook 04's parameters, taken from them (lists as tuples)."""
        return cls(
            **{
                f.name: tuple(params[f.name])
                if isinstance(params[f.name], list)
                else params[f.name]
                for f in fields(cls)
                if f.name in params
            }
        )

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise BadInput(f"mode {self.mode!r}: choose {' or '.join(MODES)}.")
        for name in ("steady_steps", "loader_steps", "scaling_steps"):
            if getattr(self, name) < 3:
                raise BadInput(f"{name} {getattr(self, name)}: use at least 3 steps.")
        for name in ("trial_timeout_s", "launch_timeout_s"):
            if getattr(self, name) <= 0:
                raise BadInput(f"{name} {getattr(self, name)} must be positive.")
        if any(b < 1 for b in self.batch_sizes):
            raise BadInput(f"batch_sizes {list(self.batch_sizes)}: sizes must be 1 or more.")
        if self.global_batch < 0 or self.reference_global_batch < 0:
            raise BadInput("global_batch and reference_global_batch must be 0 (automatic) or more.")
        if not 0 < self.min_scaling_efficiency <= 1:
            raise BadInput(
                f"min_scaling_efficiency {self.min_scaling_efficiency} must lie in (0, 1]."
            )
        if not 1 <= self.min_batch <= self.max_batch:
            raise BadInput(
                f"batch range [{self.min_batch}, {self.max_batch}]: need 1 <= min_batch <= "
                "max_batch."
            )
        for name in ("dataloader_workers", "world_sizes", "prefetch_factors"):
            values = getattr(self, name)
            least = 0 if name == "dataloader_workers" else 1
            if any(not isinstance(v, int) or v < least for v in values):
                raise BadInput(f"{name} {list(values)}: give whole numbers of {least} or more.")
        if not self.prefetch_factors:
            raise BadInput("prefetch_factors is empty: give at least one value (2 is the default).")
        if self.per_sample_cost_ms < 0:
            raise BadInput(f"per_sample_cost_ms {self.per_sample_cost_ms} must be 0 or more.")
        if self.max_buckets < 1 or not 0 <= self.max_padding_waste < 1:
            raise BadInput("max_buckets must be 1 or more and max_padding_waste lie in [0, 1).")
        if self.price_items < 1:
            raise BadInput(f"price_items {self.price_items} must be 1 or more.")


@dataclass
class RecommendationItem:
    knob: str
    value: str
    evidence: str


@dataclass
class Recommendation:
    per_core_batch: int | None = None
    accumulation_steps: int | None = None
    world_size: int | None = None
    global_batch: int | None = None
    learning_rate: float | None = None
    dataloader_workers: int | None = None
    pin_memory: bool | None = None
    prefetch_factor: int | None = None
    buckets: list[int] | None = None
    items: list[RecommendationItem] = field(default_factory=list)


@dataclass
class RetuneResult:
    workload: dict[str, Any]
    target: dict[str, Any]
    measured_label: str  # "measured on this machine (<target>)"
    settings: RetuneSettings
    throughput_unit: str
    budget: MemoryBudget
    search: SearchResult
    sweep: list[Trial]
    choice: BatchChoice | None
    scaling: ScalingStudy | None
    world: ScalingRun | None
    plans: list[GlobalBatchPlan]
    accumulation: AccumulationCheck | None
    loader: LoaderStudy | None
    buckets: BucketStudy | None
    cost: CostStudy | None
    recommendation: Recommendation
    skipped: dict[str, str]  # stage -> why it did not run
    wall_seconds: float

    @property
    def trials(self) -> list[Trial]:
        return self.search.trials + self.sweep

    def headline(self) -> str:
        """One sentence that reads the result."""
        rec = self.recommendation
        fit = self.search.largest_fit
        lead = self.measured_label[0].upper() + self.measured_label[1:]
        if fit is None:
            return f"{lead}: no batch size from {self.search.low} fits: {self.search.stopped}."
        text = (
            f"{lead}: batches up to {fit} fit the "
            f"{self.budget.total_bytes / 2**30:.3g} GiB budget ({len(self.search.trials)} search "
            "trials)"
        )
        if self.choice:
            text += (
                f", per-core batch {self.choice.batch_size} gives "
                f"{self.choice.throughput:,.0f} {self.throughput_unit}"
            )
        if self.plans:
            text += f", and the plan is {self.plans[0].equation()}"
        if rec.dataloader_workers is not None:
            text += f" with {rec.dataloader_workers} DataLoader worker(s)"
        if rec.buckets:
            text += f" and padding buckets {rec.buckets}"
        return text + "."


def _validate_inputs(settings: RetuneSettings) -> tuple[list[int], str]:
    """Read the files that can be wrong before any trial runs, so bad input costs nothing."""
    check_instance(load_prices(settings.prices_file), settings.instance_type)
    return read_lengths(settings.sequence_lengths, settings.sequence_lengths_file)


def run_retuning(
    source: WorkloadSource,
    workload: Workload,
    target: Target,
    settings: RetuneSettings | None = None,
    *,
    log: Callable[[str], None] = print,
    progress_bars: bool = False,
) -> RetuneResult:
    """Every stage (see the module docstring); a stage that cannot run says why and the rest
    go on. `workload` is `source` loaded here (for its metadata, optimizer and the CPU checks);
    trials load their own copy in their child processes."""
    settings = settings or RetuneSettings()
    lengths, lengths_source = _validate_inputs(settings)
    started = perf_counter()
    label = f"measured on this machine ({target.name})"
    skipped: dict[str, str] = {}

    budget = resolve_budget(target, settings.memory_budget_gib, settings.memory_margin)
    log(
        f"memory budget {budget.total_bytes / 2**30:,.2f} GiB ({budget.source}), "
        f"{budget.margin:.0%} kept free"
    )
    runner = TrialRunner(source, target, budget, settings.mode, settings.trial_timeout_s, log)
    search = search_largest_batch(
        runner, settings.min_batch, settings.max_batch, progress_bars=progress_bars
    )
    log(f"search: {search.stopped} ({len(search.trials)} of at most {search.bound} trials)")

    sizes = list(settings.batch_sizes)
    if not sizes and search.largest_fit is not None:
        sizes = power_of_two_sizes(settings.min_batch, search.largest_fit)
    sweep = sweep_batch_sizes(runner, sizes, settings.steady_steps, progress_bars=progress_bars)
    choice = choose_batch(sweep)
    if not sizes:
        skipped["sweep"] = f"no batch size fits ({search.stopped})"

    scaling = world = accumulation = loader = None
    plans: list[GlobalBatchPlan] = []
    if choice is None:
        reason = skipped.get("sweep", "no swept batch size ran within the memory budget")
        for stage in ("scaling", "plan", "accumulation", "dataloader"):
            skipped[stage] = reason
    else:
        scaling = sweep_world_sizes(
            source,
            target,
            choice.batch_size,
            settings.world_sizes,
            items_per_sample=workload.items_per_sample(),
            warmup_steps=SCALING_WARMUP_STEPS,
            steps=settings.scaling_steps,
            timeout_s=settings.launch_timeout_s,
            log=log,
            progress_bars=progress_bars,
        )
        if scaling.skipped_reason:
            skipped["scaling"] = scaling.skipped_reason
        world = choose_world_size(scaling, settings.min_scaling_efficiency)
        plans = _plans(workload, settings, choice, world.world_size if world else 1)
        primary = plans[0]
        accumulation = check_accumulation(
            workload,
            max(2, min(primary.per_core_batch, workload.batch_size)),
            min(max(2, primary.accumulation_steps), MAX_CHECKED_ACCUMULATION_STEPS),
        )
        log(f"accumulation check: {accumulation.explanation()}")
        counts = list(settings.dataloader_workers) or default_worker_counts(usable_cores())
        loader = sweep_loader(
            source,
            target,
            primary.per_core_batch,
            loader_settings(counts, settings.prefetch_factors, target.pin_memory_helps),
            calibrate_sample_work(settings.per_sample_cost_ms),
            items_per_sample=workload.items_per_sample(),
            steps=settings.loader_steps,
            timeout_s=settings.trial_timeout_s,
            log=log,
            progress_bars=progress_bars,
        )

    buckets = _buckets(workload, settings, lengths, lengths_source)
    if buckets is None:
        skipped["buckets"] = "not a sequence workload, and no sequence lengths were given"

    cost = None
    if choice is not None:
        rate, basis = _per_worker_rate(choice, scaling, label)
        cost = cost_study(
            load_prices(settings.prices_file),
            per_worker_rate=rate,
            per_worker_basis=basis,
            scaling=scaling,
            this_instance=settings.instance_type,
            target_name=target.name,
            unit="tokens" if workload.is_sequence else "samples",
            items=settings.price_items,
        )
    else:
        skipped["cost"] = "no throughput was measured"

    result = RetuneResult(
        workload=workload.describe(),
        target=target.describe(),
        measured_label=label,
        settings=settings,
        throughput_unit=workload.throughput_unit,
        budget=budget,
        search=search,
        sweep=sweep,
        choice=choice,
        scaling=scaling,
        world=world,
        plans=plans,
        accumulation=accumulation,
        loader=loader,
        buckets=buckets,
        cost=cost,
        recommendation=Recommendation(),
        skipped=skipped,
        wall_seconds=0.0,
    )
    result.recommendation = recommend(result)
    result.wall_seconds = perf_counter() - started
    log(f"retuning finished in {format_seconds(result.wall_seconds)}")
    return result


def _plans(
    workload: Workload, settings: RetuneSettings, choice: BatchChoice, world_size: int
) -> list[GlobalBatchPlan]:
    """The recipe's global batch first; then, when it differs, the throughput-best per-core
    batch on every worker without accumulation, with its learning-rate change."""
    optimizer = workload.make_optimizer(workload.build_model("cpu"))
    reference = settings.reference_global_batch or workload.batch_size
    wanted = settings.global_batch or reference
    plans = [
        plan_global_batch(
            "the target global batch", wanted, choice.batch_size, world_size, reference, optimizer
        )
    ]
    fastest = choice.batch_size * world_size
    if fastest != plans[0].global_batch:
        plans.append(
            plan_global_batch(
                "the throughput-best per-core batch",
                fastest,
                choice.batch_size,
                world_size,
                reference,
                optimizer,
            )
        )
    return plans


def _per_worker_rate(
    choice: BatchChoice, scaling: ScalingStudy | None, label: str
) -> tuple[float, str]:
    """One data-parallel worker's rate: the world-size-1 launch where it ran (its rank has the
    same share of the host that the scaling efficiencies were measured with), else the sweep."""
    single = next((r for r in scaling.measured() if r.world_size == 1), None) if scaling else None
    if single is not None and single.throughput:
        return single.throughput, (
            f"torchrun world size 1 at per-core batch {choice.batch_size}, {label}"
        )
    return choice.throughput, (
        f"batch-size sweep at per-core batch {choice.batch_size}, one process, {label}"
    )


def _buckets(
    workload: Workload, settings: RetuneSettings, lengths: list[int], lengths_source: str
) -> BucketStudy | None:
    if not lengths and not workload.is_sequence:
        return None
    if not lengths:
        length = workload.sequence_length or 0
        study = plan_buckets(
            [length] * workload.batch_size,
            settings.max_buckets,
            settings.max_padding_waste,
            f"the workload's own batches: every sequence has {length} tokens",
        )
        study.notes.append(
            "pass sequence_lengths (or sequence_lengths_file) with the token counts of your "
            "dataset's samples to plan buckets for the lengths training really sees"
        )
        return study
    return plan_buckets(lengths, settings.max_buckets, settings.max_padding_waste, lengths_source)


def recommend(result: RetuneResult) -> Recommendation:
    """The settings to use, each with the evidence it rests on."""
    rec = Recommendation()
    items = rec.items
    label = result.measured_label
    search = result.search
    if search.largest_fit is None:
        items.append(RecommendationItem("per-core batch", "none fits", search.stopped))
    if result.plans and result.choice:
        plan, choice = result.plans[0], result.choice
        rec.per_core_batch = plan.per_core_batch
        rec.accumulation_steps = plan.accumulation_steps
        rec.world_size = plan.world_size
        rec.global_batch = plan.global_batch
        rec.learning_rate = plan.suggested_lr
        items.append(
            RecommendationItem(
                "per-core batch",
                str(plan.per_core_batch),
                f"{search.stopped}; throughput-best {choice.batch_size} "
                f"({choice.throughput:,.0f} {result.throughput_unit}, {choice.rule}); "
                f"{plan.target_global_batch} split over {plan.world_size} worker(s) ({label})",
            )
        )
        items.append(
            RecommendationItem(
                "accumulation steps", str(plan.accumulation_steps), _accumulation_evidence(result)
            )
        )
        items.append(
            RecommendationItem("world size", str(plan.world_size), _world_evidence(result))
        )
        items.append(
            RecommendationItem(
                "global batch",
                str(plan.global_batch),
                plan.equation() + ("" if plan.exact else f"; {'; '.join(plan.notes[:1])}"),
            )
        )
        items.append(RecommendationItem("learning rate", _lr_text(plan), plan.lr_rule_reason))
        if len(result.plans) > 1:
            other = result.plans[1]
            items.append(
                RecommendationItem(
                    "alternative",
                    f"{other.equation()}, learning rate {_lr_text(other)}",
                    f"{other.name}: the fastest steps measured, at the price of a new global "
                    "batch (re-validate convergence)",
                )
            )
    if result.loader is not None:
        chosen = result.loader.recommended
        if chosen is not None:
            rec.dataloader_workers = chosen.setting.num_workers
            rec.pin_memory = chosen.setting.pin_memory
            rec.prefetch_factor = chosen.setting.prefetch_factor
            items.append(
                RecommendationItem(
                    "DataLoader",
                    chosen.setting.label(),
                    f"waits {chosen.wait_share:.1%} of the step (limit "
                    f"{result.loader.limit:.0%}) at per-core batch {result.loader.batch_size} "
                    f"with {result.loader.work.cost_ms:g} ms of CPU work per sample ({label})",
                )
            )
        else:
            items.append(
                RecommendationItem(
                    "DataLoader",
                    "no setting tried is enough",
                    _loader_shortfall(result.loader),
                )
            )
    if result.buckets is not None and result.buckets.chosen is not None:
        chosen_plan = result.buckets.chosen
        rec.buckets = chosen_plan.boundaries
        items.append(
            RecommendationItem(
                "padding buckets",
                ", ".join(map(str, chosen_plan.boundaries)),
                f"{len(chosen_plan.boundaries)} shape(s), so {len(chosen_plan.boundaries)} "
                f"compile(s) per step kind on Neuron; {chosen_plan.waste:.1%} of padded tokens "
                f"are padding (limit {result.buckets.waste_limit:.0%}); lengths from "
                f"{result.buckets.source}",
            )
        )
    return rec


def _lr_text(plan: GlobalBatchPlan) -> str:
    if plan.reference_lr is None:
        return "as in the recipe"
    if plan.lr_factor is None:
        return f"re-tune (from {plan.reference_lr:g})"
    if plan.lr_factor == 1:
        return f"keep {plan.reference_lr:g}"
    return f"{plan.suggested_lr:.3g} ({plan.reference_lr:g} x {plan.lr_factor:.3g})"


def _accumulation_evidence(result: RetuneResult) -> str:
    plan = result.plans[0]
    check = result.accumulation
    text = plan.equation()
    if check is not None:
        text += f"; check: {check.explanation()}"
    return text


def _world_evidence(result: RetuneResult) -> str:
    scaling = result.scaling
    if scaling is None:
        return "no scaling sweep ran"
    if scaling.skipped_reason:
        return f"data-parallel sweep skipped: {scaling.skipped_reason}"
    floor = result.settings.min_scaling_efficiency
    if result.world is None:
        return (
            f"no measured world size kept {floor:.0%} efficiency ({result.measured_label}, "
            f"{scaling.backend}): one worker"
        )
    measured = ", ".join(
        f"{r.efficiency:.0%} at {r.world_size}"
        for r in scaling.measured()
        if r.efficiency is not None
    )
    return (
        f"weak-scaling efficiency {measured}; {result.world.world_size} is the widest at or "
        f"above {floor:.0%} ({result.measured_label}, {scaling.backend}, per-worker batch "
        f"{scaling.batch_size}); on Trainium a worker is a NeuronCore"
    )


def _loader_shortfall(study: LoaderStudy) -> str:
    measured = [r for r in study.results if r.wait_share is not None]
    if not measured:
        return "no DataLoader setting ran"
    best = min(measured, key=lambda r: r.wait_share or 0.0)
    return (
        f"every setting waits more than {study.limit:.0%} of the step; the least, "
        f"{best.setting.label()}, waits {best.wait_share:.0%}: data loading bounds this step, "
        "so cheapen the per-sample work or give the loader more cores"
    )
