"""Retuning for the target: batch size, gradient accumulation, DataLoader workers, data-parallel
width, padding buckets, and what a sample costs.

`run_retuning` runs the stages in the order their answers depend on one another:

1. the largest batch that fits the memory budget (trials.py: subprocess trials, bisection);
2. a batch-size sweep up to it, and the throughput-best per-core batch;
3. data-parallel scaling at that batch under torchrun (parallel.py), and the widest world
   size that keeps its efficiency;
4. the global batch plan (plan.py): per-core batch x workers x accumulation = the global
   batch, the learning-rate change, and an accumulation-equivalence check on the workload;
5. DataLoader workers at the planned per-core batch (dataloader.py);
6. padding buckets for sequence workloads (buckets.py);
7. what a sample costs on this machine's own instance (cost.py);

then a recommendation that carries its evidence. Every number measured here says it was
measured on this machine and target, and every measurement a decision rests on is taken again
while it is noisy or the machine is loaded (noise.RemeasurePolicy), within a time budget.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from time import perf_counter

from workbench.environment.instance import resolve_instance_type
from workbench.planning.planner import Plan
from workbench.processes import usable_cores
from workbench.targets.base import Target
from workbench.timing import format_seconds
from workbench.tuning.buckets import BucketStudy, plan_buckets, read_lengths
from workbench.tuning.cost import CostStudy, cost_study, load_prices
from workbench.tuning.dataloader import (
    LoaderStudy,
    calibrate_sample_work,
    default_worker_counts,
    loader_settings,
    sweep_loader,
)
from workbench.tuning.noise import RemeasurePolicy, SweepRun
from workbench.tuning.parallel import (
    ScalingRun,
    ScalingStudy,
    choose_world_size,
    sweep_world_sizes,
)
from workbench.tuning.plan import (
    AccumulationCheck,
    GlobalBatchPlan,
    check_accumulation,
    plan_global_batch,
)
from workbench.tuning.recommend import recommend
from workbench.tuning.records import RetuneMeasurements, RetuneResult, RetuneSettings
from workbench.tuning.trials import (
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
from workbench.workload import Workload, WorkloadSpec

# The first steps of a data-parallel run build DDP's buckets and the optimizer state.
SCALING_WARMUP_STEPS = 5


# The accumulation check runs in float64 on the CPU; more micro-batches add cost, not insight.
MAX_CHECKED_ACCUMULATION_STEPS = 8


@dataclass(frozen=True)
class _Retuning:
    """What every stage of one retuning reads: the workload, the target, the settings, and how
    its sweeps measure and report."""

    spec: WorkloadSpec
    workload: Workload
    target: Target
    settings: RetuneSettings
    sweep: SweepRun  # the re-measure policy the whole run shares, the log, progress bars

    @property
    def label(self) -> str:
        return f"measured on this machine ({self.target.name})"


def _validate_inputs(settings: RetuneSettings) -> tuple[list[int], str]:
    """Read the files that can be wrong before any trial runs, so bad input costs nothing."""
    load_prices(settings.prices_file)
    return read_lengths(settings.sequence_lengths, settings.sequence_lengths_file)


def run_retuning(
    spec: WorkloadSpec,
    workload: Workload,
    target: Target,
    settings: RetuneSettings | None = None,
    *,
    log: Callable[[str], None] = print,
    progress_bars: bool = False,
    plan: Plan | None = None,
) -> RetuneResult:
    """Every stage (see the module docstring); a stage that cannot run says why and the rest
    go on. `workload` is `spec` loaded here (for its metadata, optimizer and the CPU checks);
    trials load their own copy in their child processes. `plan`, the memory-fit plan made
    before (workbench.planning), travels with the result, which reads it beside the trials."""
    settings = settings or RetuneSettings()
    lengths, lengths_source = _validate_inputs(settings)
    started = perf_counter()
    policy = RemeasurePolicy(settings.max_remeasures, settings.remeasure_budget_s)
    run = _Retuning(spec, workload, target, settings, SweepRun(policy, log, progress_bars))
    budget = resolve_budget(target, settings.memory_budget_gib, settings.memory_margin)
    search, sweep = _batch_stages(run, budget)
    choice = choose_batch(sweep)
    scaling = world = accumulation = loader = cost = None
    plans: list[GlobalBatchPlan] = []
    if choice is not None:
        scaling = _scaling_stage(run, choice)
        world = choose_world_size(scaling, settings.min_scaling_efficiency)
        plans = _plans(workload, settings, choice, world.world_size if world else 1)
        accumulation = _accumulation_stage(run, plans[0])
        loader = _loader_stage(run, plans[0])
        cost = _cost_stage(run, choice, scaling, world)
    buckets = _buckets(workload, settings, lengths, lengths_source)
    measured = RetuneMeasurements(
        workload=workload.describe(),
        target=target.describe(),
        measured_label=run.label,
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
        skipped=_skipped(search, sweep, scaling, buckets),
        remeasure=policy,
        plan=plan,
    )
    recommendation = recommend(measured)
    wall_seconds = perf_counter() - started
    log(f"retuning finished in {format_seconds(wall_seconds)}")
    return RetuneResult.of(measured, recommendation, wall_seconds)


def _batch_stages(run: _Retuning, budget: MemoryBudget) -> tuple[SearchResult, list[Trial]]:
    """Stages 1 and 2: the largest batch that fits the budget, then the sweep up to it (or
    over the sizes given)."""
    settings, log = run.settings, run.sweep.log
    log(
        f"memory budget {budget.total_bytes / 2**30:,.2f} GiB ({budget.source}), "
        f"{budget.margin:.0%} kept free"
    )
    runner = TrialRunner(run.spec, run.target, budget, settings.mode, settings.trial_timeout_s, log)
    search = search_largest_batch(
        runner, settings.min_batch, settings.max_batch, progress_bars=run.sweep.progress_bars
    )
    log(f"search: {search.stopped} ({len(search.trials)} of at most {search.bound} trials)")
    sizes = list(settings.batch_sizes)
    if not sizes and search.largest_fit is not None:
        sizes = power_of_two_sizes(settings.min_batch, search.largest_fit)
    sweep = sweep_batch_sizes(runner, sizes, settings.steady_steps, run.sweep)
    return search, sweep


def _scaling_stage(run: _Retuning, choice: BatchChoice) -> ScalingStudy:
    """Stage 3: data-parallel launches at the sweep's per-core batch."""
    return sweep_world_sizes(
        run.spec,
        run.target,
        choice.batch_size,
        run.settings.world_sizes,
        items_per_sample=run.workload.items_per_sample(),
        warmup_steps=SCALING_WARMUP_STEPS,
        steps=run.settings.scaling_steps,
        timeout_s=run.settings.launch_timeout_s,
        sweep=run.sweep,
    )


def _accumulation_stage(run: _Retuning, primary: GlobalBatchPlan) -> AccumulationCheck:
    """Stage 4's check: the plan's accumulation reproduces one big batch's gradients."""
    accumulation = check_accumulation(
        run.workload,
        max(2, min(primary.per_core_batch, run.workload.batch_size)),
        min(max(2, primary.accumulation_steps), MAX_CHECKED_ACCUMULATION_STEPS),
    )
    run.sweep.log(f"accumulation check: {accumulation.explanation()}")
    return accumulation


def _loader_stage(run: _Retuning, primary: GlobalBatchPlan) -> LoaderStudy:
    """Stage 5: DataLoader settings at the plan's per-core batch."""
    settings = run.settings
    counts = list(settings.dataloader_workers) or default_worker_counts(usable_cores())
    return sweep_loader(
        run.spec,
        run.target,
        primary.per_core_batch,
        loader_settings(counts, settings.prefetch_factors, run.target.pin_memory_helps),
        calibrate_sample_work(settings.per_sample_cost_ms),
        items_per_sample=run.workload.items_per_sample(),
        steps=settings.loader_steps,
        timeout_s=settings.trial_timeout_s,
        sweep=run.sweep,
    )


def _cost_stage(
    run: _Retuning, choice: BatchChoice, scaling: ScalingStudy, world: ScalingRun | None
) -> CostStudy:
    """Stage 7: what a sample costs on this machine's own instance."""
    rate, basis = _per_worker_rate(choice, scaling, run.label)
    return cost_study(
        load_prices(run.settings.prices_file),
        per_worker_rate=rate,
        per_worker_basis=basis,
        world=world,
        instance=resolve_instance_type(run.settings.instance_type),
        target_name=run.target.name,
        unit="tokens" if run.workload.is_sequence else "samples",
        items=run.settings.price_items,
    )


def _skipped(
    search: SearchResult,
    sweep: list[Trial],
    scaling: ScalingStudy | None,
    buckets: BucketStudy | None,
) -> dict[str, str]:
    """Stage -> why it did not run, in the order the stages run."""
    skipped: dict[str, str] = {}
    if not sweep:
        skipped["sweep"] = f"no batch size fits ({search.stopped})"
    if scaling is None:
        reason = skipped.get("sweep", "no swept batch size ran within the memory budget")
        skipped.update(dict.fromkeys(("scaling", "plan", "accumulation", "dataloader"), reason))
    elif scaling.skipped_reason:
        skipped["scaling"] = scaling.skipped_reason
    if buckets is None:
        skipped["buckets"] = "not a sequence workload, and no sequence lengths were given"
    if scaling is None:
        skipped["cost"] = "no throughput was measured"
    return skipped


def _plans(
    workload: Workload, settings: RetuneSettings, choice: BatchChoice, world_size: int
) -> list[GlobalBatchPlan]:
    """The recipe's global batch first, with per-core batches up to the largest that is
    indistinguishable from the fastest (fewer accumulation steps at no measured cost); then,
    when it differs, the throughput-best per-core batch on every worker without accumulation,
    with its learning-rate change."""
    optimizer = workload.make_optimizer(workload.build_model("cpu"))
    reference = settings.reference_global_batch or workload.batch_size
    wanted = settings.global_batch or reference
    plans = [
        plan_global_batch(
            "the target global batch",
            wanted,
            choice.largest_within_noise,
            world_size,
            reference,
            optimizer,
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
