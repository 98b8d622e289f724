"""Notebook 04's records: settings, the recommendation, what the stages measured, the whole
result, its verdict, and the shape of 04_retuning.json. The report's sentences are wording.py's."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields
from typing import TYPE_CHECKING, Any

from workbench.baseline.records import EAGER, MODES
from workbench.checks import Retuning
from workbench.errors import BadInput
from workbench.planning.instances import get_instance
from workbench.planning.planner import Plan, plan_data
from workbench.scorecard import ATTENTION, BLOCKER, Finding, Verdict, judge
from workbench.timing import Measurement
from workbench.tuning import wording
from workbench.tuning.buckets import BucketStudy
from workbench.tuning.cost import CostStudy
from workbench.tuning.noise import COMPARISON_RULE, RemeasurePolicy
from workbench.tuning.parallel import FAILED as LAUNCH_FAILED
from workbench.tuning.parallel import TIMEOUT as LAUNCH_TIMEOUT
from workbench.tuning.parallel import ScalingRun, ScalingStudy, world_size_rule
from workbench.tuning.trials import COMPILER_HOST_RAM as TRIAL_COMPILER_HOST_RAM
from workbench.tuning.trials import CRASHED as TRIAL_CRASHED
from workbench.tuning.trials import ERROR as TRIAL_ERROR
from workbench.tuning.trials import TIMEOUT as TRIAL_TIMEOUT
from workbench.tuning.trials import BatchChoice, MemoryBudget, SearchResult, Trial

# Named in annotations only: they load torch, which reading 04_retuning.json back (compare,
# collect, export-metrics) never needs.
if TYPE_CHECKING:
    from workbench.tuning.dataloader import LoaderStudy
    from workbench.tuning.plan import AccumulationCheck, GlobalBatchPlan


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
    max_remeasures: int = 2  # more attempts for a noisy or loaded measurement
    remeasure_budget_s: float = 120.0  # the seconds all those attempts may take together
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
    plan_instance: str = ""  # "": the instance this runs on, else planning's DEFAULT_INSTANCE

    @classmethod
    def from_params(cls, params: Mapping[str, Any]) -> RetuneSettings:
        """The settings named like notebook 04's parameters, taken from them (lists as tuples)."""
        values: dict[str, Any] = {
            f.name: tuple(params[f.name]) if isinstance(params[f.name], list) else params[f.name]
            for f in fields(cls)
            if f.name in params
        }
        return cls(**values)

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
        if self.plan_instance:
            get_instance(self.plan_instance)  # an unknown name is one sentence, before any trial
        if self.max_remeasures < 0 or self.remeasure_budget_s < 0:
            raise BadInput(
                f"max_remeasures {self.max_remeasures} and remeasure_budget_s "
                f"{self.remeasure_budget_s} must be 0 (never measure again) or more."
            )


@dataclass
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


@dataclass(kw_only=True)
class RetuneMeasurements:
    """What the stages measured and planned (retune.py), before anything is recommended."""

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
    skipped: dict[str, str]  # stage -> why it did not run
    remeasure: RemeasurePolicy = field(default_factory=RemeasurePolicy)
    plan: Plan | None = None  # the memory-fit plan on a Trainium instance (workbench.planning)

    @property
    def trials(self) -> list[Trial]:
        return self.search.trials + self.sweep

    def decision_measurements(self) -> list[tuple[str, Measurement, str]]:
        """(name, measurement, re-measure note) of every measurement a choice is read from:
        the sweep's trials, the DataLoader settings and the data-parallel launches (the
        search's 3-step trials only check that a batch fits)."""
        found = [
            (f"sweep trial at batch {t.batch_size}", t.steady, t.remeasure_note)
            for t in self.sweep
            if t.fits and t.steady is not None
        ]
        for item in self.loader.results if self.loader else []:
            if item.steps is not None:
                name = f"DataLoader {item.setting.label()}"
                found.append((name, item.steps, item.remeasure_note))
        for run in self.scaling.runs if self.scaling else []:
            if run.step is not None:
                name = f"launch at world size {run.world_size}"
                found.append((name, run.step, run.remeasure_note))
        return found

    def noisy(self) -> list[str]:
        """The decision measurements still above the noise limit, each named with its IQR."""
        limit = self.remeasure.limit
        return [
            f"{name} (IQR {m.relative_iqr:.0%})"
            for name, m, _ in self.decision_measurements()
            if m.relative_iqr > limit
        ]

    def loaded(self) -> list[str]:
        """The decision measurements taken while the machine was loaded, each named."""
        return [
            f"{name} ({m.host.shares()})"
            for name, m, _ in self.decision_measurements()
            if m.loaded and m.host is not None
        ]

    @property
    def plan_leads(self) -> bool:
        """Whether the plan is 04's first answer: one core cannot hold the model (predicted), or
        no batch of the range fit here (measured)."""
        return self.plan is not None and (
            not self.plan.fits_one_rank or self.search.largest_fit is None
        )

    @property
    def chosen_batch(self) -> int | None:
        """The per-core batch the plan uses: the one batch the sweep's figure and banner, the
        plans and the recommendation name as chosen (the sweep's own pick only feeds it)."""
        return self.plans[0].per_core_batch if self.plans else None


@dataclass(kw_only=True)
class RetuneResult(RetuneMeasurements):
    """The measurements, the recommendation read from them (recommend.py), and the run's time."""

    recommendation: Recommendation
    wall_seconds: float

    @classmethod
    def of(
        cls, measured: RetuneMeasurements, recommendation: Recommendation, wall_seconds: float
    ) -> RetuneResult:
        """The result of `measured`, with what is recommended from it and the run's wall time."""
        found = {f.name: getattr(measured, f.name) for f in fields(RetuneMeasurements)}
        return cls(**found, recommendation=recommendation, wall_seconds=wall_seconds)

    def headline(self) -> str:
        """The measured result in a sentence, after the plan's where the plan leads."""
        return wording.headline(self)


def retuning_verdict(result: RetuneResult) -> Verdict:
    """Notebook 04's verdict, by wording.RETUNING_RULE."""
    return judge(
        [*_fit_findings(result), *_broken_findings(result), *_unsettled_findings(result)],
        wording.RETUNING_RULE,
        "a batch fits, every trial and launch ran, and every measurement a choice is read from "
        "was quiet",
    )


def _fit_findings(result: RetuneResult) -> list[Finding]:
    """No batch fits: a blocker, unless the plan lays the model out over several cores."""
    if result.search.largest_fit is not None:
        return []
    compiler = any(t.status == TRIAL_COMPILER_HOST_RAM for t in result.trials)
    lead = "no batch size was measured to fit" if compiler else "no batch size fits"
    plan = result.plan
    if plan is None or plan.fits_one_rank or plan.chosen is None:
        return [Finding(BLOCKER, f"{lead}: {result.search.stopped}", Retuning.FIT)]
    return [
        Finding(
            ATTENTION,
            f"{lead}: {result.search.stopped}; the plan predicts one core cannot hold "
            f"the model and lays it out as {plan.chosen.layout.name} on "
            f"{plan.instance.name}: retune per rank of that layout",
            Retuning.FIT,
        )
    ]


def _broken_findings(result: RetuneResult) -> list[Finding]:
    """What broke for a reason other than memory, and a check that did not hold."""
    found = []
    compiler = [t for t in result.trials if t.status == TRIAL_COMPILER_HOST_RAM]
    if compiler:
        found.append(
            f"{len(compiler)} trial(s) stopped by the compiler running out of host RAM, "
            f"first at batch {compiler[0].batch_size}: {compiler[0].diagnosis}"
        )
    broken = [t for t in result.trials if t.status in (TRIAL_ERROR, TRIAL_CRASHED, TRIAL_TIMEOUT)]
    if broken:
        found.append(
            f"{len(broken)} trial(s) broke, first at batch {broken[0].batch_size}: "
            f"{broken[0].status}"
        )
    recompiled = wording.steady_recompiles(result.trials)
    if recompiled:
        found.append(recompiled)
    launches = result.scaling.runs if result.scaling else []
    failed = [r for r in launches if r.status in (LAUNCH_FAILED, LAUNCH_TIMEOUT)]
    if failed:
        found.append(
            f"{len(failed)} data-parallel launch(es) failed, first at world size "
            f"{failed[0].world_size}"
        )
    if result.accumulation is not None and not result.accumulation.passed:
        found.append("accumulated micro-batches differ from one big batch's gradients")
    return [Finding(ATTENTION, reason, Retuning.RAN) for reason in found]


def _unsettled_findings(result: RetuneResult) -> list[Finding]:
    """The measurements a choice is read from that stayed noisy, or ran on a loaded machine."""
    reasons = wording.unsettled_clauses(
        result,
        "{count} stayed noisy after re-measuring, so the choices read from them are "
        "provisional: {names}",
        "{count} ran while the machine was loaded, so no choice or speed-up read from them is "
        "claimed as clean: {names}",
    )
    return [Finding(ATTENTION, reason, Retuning.SETTLED) for reason in reasons]


def result_data(result: RetuneResult) -> dict[str, Any]:
    """Everything the result file keeps: every trial with its raw step times, and the
    recommendation with its evidence."""
    return {
        "headline": result.headline(),
        "verdict": retuning_verdict(result),
        "measured_on": result.measured_label,
        "workload": result.workload,
        "target": result.target,
        "settings": asdict(result.settings),
        "comparison_rule": COMPARISON_RULE,
        "remeasure": {**asdict(result.remeasure), "rule": result.remeasure.rule()},
        "noisy": result.noisy(),
        "loaded": result.loaded(),
        "throughput_unit": result.throughput_unit,
        "memory_budget": {**asdict(result.budget), "usable_bytes": result.budget.usable},
        "search": _search_data(result.search),
        "sweep": {
            "trials": [_trial_data(t) for t in result.sweep],
            "choice": asdict(result.choice) if result.choice else None,
        },
        "scaling": _scaling_data(result),
        "global_batch_plans": [_plan_data(p) for p in result.plans],
        "accumulation_check": _accumulation_data(result.accumulation),
        "dataloader": _loader_data(result.loader),
        "buckets": _buckets_data(result.buckets),
        "cost": _cost_data(result.cost, result.measured_label),
        "recommendation": asdict(result.recommendation),
        "skipped": result.skipped,
        "wall_seconds": result.wall_seconds,
        "plan": plan_data(result.plan) if result.plan else None,
    }


def _trial_data(trial: Trial) -> dict[str, Any]:
    return {**asdict(trial), "fits": trial.fits, "throughput": trial.throughput}


def _without(record: Any, *names: str) -> dict[str, Any]:
    """A record's fields as data, less those written in their own form beside them."""
    return {k: v for k, v in asdict(record).items() if k not in names}


def _search_data(search: SearchResult) -> dict[str, Any]:
    return {
        "range": [search.low, search.high],
        "trial_bound": search.bound,
        "trials": [_trial_data(t) for t in search.trials],
        "largest_fit": search.largest_fit,
        "smallest_failure": search.smallest_failure,
        "stopped": search.stopped,
        "compiler_host_ram_batch": search.compiler_host_ram,
    }


def _scaling_data(result: RetuneResult) -> dict[str, Any] | None:
    if result.scaling is None:
        return None
    return {
        **_without(result.scaling, "runs"),
        "runs": [
            {**asdict(r), "throughput": r.throughput, "per_worker": r.per_worker}
            for r in result.scaling.runs
        ],
        "chosen_world_size": result.world.world_size if result.world else None,
        "rule": world_size_rule(result.settings.min_scaling_efficiency),
    }


def _plan_data(plan: GlobalBatchPlan) -> dict[str, Any]:
    return {
        **asdict(plan),
        "global_batch": plan.global_batch,
        "exact": plan.exact,
        "suggested_lr": plan.suggested_lr,
        "equation": plan.equation(),
    }


def _accumulation_data(check: AccumulationCheck | None) -> dict[str, Any] | None:
    if check is None:
        return None
    return {**asdict(check), "passed": check.passed, "explanation": check.explanation()}


def _loader_data(loader: LoaderStudy | None) -> dict[str, Any] | None:
    if loader is None:
        return None
    return {
        **_without(loader, "results", "recommended", "fastest"),
        "results": [
            {**asdict(r), "wait_share": r.wait_share, "throughput": r.throughput}
            for r in loader.results
        ],
        "recommended": asdict(loader.recommended.setting) if loader.recommended else None,
        "fastest": asdict(loader.fastest.setting) if loader.fastest else None,
    }


def _buckets_data(buckets: BucketStudy | None) -> dict[str, Any] | None:
    if buckets is None:
        return None
    return {
        **_without(buckets, "plans", "chosen"),
        "plans": [{**asdict(p), "waste": p.waste} for p in buckets.plans],
        "chosen": buckets.chosen.boundaries if buckets.chosen else None,
    }


def _cost_data(cost: CostStudy | None, label: str) -> dict[str, Any] | None:
    if cost is None:
        return None
    return {
        "prices": asdict(cost.prices),
        "unit": cost.unit,
        "items": cost.items,
        "per_worker_rate": cost.per_worker_rate,
        "per_worker_basis": cost.per_worker_basis,
        "instance": asdict(cost.instance),
        "price_note": cost.price_note,
        "rows": [
            {
                **asdict(row),
                "label": label,
                "items_per_dollar": row.items_per_dollar,
                "hours_for_items": row.hours_for_items,
                "dollars_for_items": row.dollars_for_items,
            }
            for row in cost.rows
        ],
    }
