"""Notebook 04's records: settings, the recommendation, the whole result, and the shape of
04_retuning.json."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from workbench.baseline.records import EAGER, MODES
from workbench.errors import BadInput
from workbench.scorecard import ATTENTION, BLOCKER, Finding, Verdict, judge
from workbench.tuning.buckets import BucketStudy
from workbench.tuning.cost import CostStudy
from workbench.tuning.dataloader import (
    LoaderStudy,
)
from workbench.tuning.parallel import FAILED as LAUNCH_FAILED
from workbench.tuning.parallel import TIMEOUT as LAUNCH_TIMEOUT
from workbench.tuning.parallel import ScalingRun, ScalingStudy
from workbench.tuning.plan import (
    AccumulationCheck,
    GlobalBatchPlan,
)
from workbench.tuning.trials import COMPILER_HOST_RAM as TRIAL_COMPILER_HOST_RAM
from workbench.tuning.trials import CRASHED as TRIAL_CRASHED
from workbench.tuning.trials import ERROR as TRIAL_ERROR
from workbench.tuning.trials import TIMEOUT as TRIAL_TIMEOUT
from workbench.tuning.trials import (
    BatchChoice,
    MemoryBudget,
    SearchResult,
    Trial,
)


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
        cut = self.search.compiler_host_ram is not None
        if fit is None:
            if cut:
                return f"{lead}: {TRIAL_COMPILER_HOST_RAM}: {self.search.stopped}."
            return f"{lead}: no batch size from {self.search.low} fits: {self.search.stopped}."
        text = (
            f"{lead}: batches up to {fit} fit the "
            f"{self.budget.total_bytes / 2**30:.3g} GiB budget ({len(self.search.trials)} search "
            "trials)"
        )
        if cut:
            text += f"; {TRIAL_COMPILER_HOST_RAM}: {self.search.stopped}"
        if self.choice:
            text += (
                "; the batch-size sweep's throughput-best per-core batch is "
                f"{self.choice.batch_size}, "
                f"{self.choice.throughput:,.0f} {self.throughput_unit} in its steady state (the "
                "search's short fit checks and the launches time batches their own way)"
            )
        if self.plans:
            text += f"; the plan is {self.plans[0].equation()}{self._plan_reason()}"
        if rec.dataloader_workers is not None:
            text += f" with {rec.dataloader_workers} DataLoader worker(s)"
        if rec.buckets:
            text += f" and padding buckets {rec.buckets}"
        return text + "."

    def _plan_reason(self) -> str:
        """Why the plan's per-core batch is not the fastest one, when it is not."""
        plan = self.plans[0]
        if self.choice is None or plan.per_core_batch == self.choice.batch_size:
            return ""
        if plan.global_batch == plan.reference_global_batch:
            return (
                f", not {self.choice.batch_size} per core, because it keeps the recipe's global "
                f"batch of {plan.reference_global_batch}, so the training dynamics stay as they "
                "are (the faster batch is the alternative in the plans, with its learning rate)"
            )
        return (
            f", not {self.choice.batch_size} per core, to reach the global batch of "
            f"{plan.target_global_batch}"
        )


RETUNING_RULE = (
    "blocker: no batch size of the range fits; attention: a trial or a data-parallel launch "
    "broke for a reason other than memory (an error, a crash, a timeout), the compiler ran out "
    "of host RAM in a trial (the search stops there), a trial compiled during its timed steps "
    "(its throughput includes compile time), or accumulated micro-batches do not reproduce one "
    "big batch's gradients; pass otherwise"
)


def steady_recompiles(trials: list[Trial]) -> str | None:
    """The trials that compiled during their timed steps, in one sentence; None if none did."""
    unsteady = [t for t in trials if t.steady_compiles]
    if not unsteady:
        return None
    first = unsteady[0]
    return (
        f"{len(unsteady)} trial(s) recompiled during steady state, first at batch "
        f"{first.batch_size}: {first.steady_compiles[0].sentence()}"
    )


def retuning_verdict(result: RetuneResult) -> Verdict:
    """Notebook 04's verdict, by RETUNING_RULE."""
    findings = []
    compiler = [t for t in result.trials if t.status == TRIAL_COMPILER_HOST_RAM]
    if result.search.largest_fit is None:
        lead = "no batch size was measured to fit" if compiler else "no batch size fits"
        findings.append(Finding(BLOCKER, f"{lead}: {result.search.stopped}"))
    if compiler:
        first = compiler[0]
        findings.append(
            Finding(
                ATTENTION,
                f"{len(compiler)} trial(s) stopped by the compiler running out of host RAM, "
                f"first at batch {first.batch_size}: {first.diagnosis}",
            )
        )
    broken = [t for t in result.trials if t.status in (TRIAL_ERROR, TRIAL_CRASHED, TRIAL_TIMEOUT)]
    if broken:
        first = broken[0]
        findings.append(
            Finding(
                ATTENTION,
                f"{len(broken)} trial(s) broke, first at batch {first.batch_size}: {first.status}",
            )
        )
    recompiled = steady_recompiles(result.trials)
    if recompiled:
        findings.append(Finding(ATTENTION, recompiled))
    launches = result.scaling.runs if result.scaling else []
    failed = [r for r in launches if r.status in (LAUNCH_FAILED, LAUNCH_TIMEOUT)]
    if failed:
        findings.append(
            Finding(
                ATTENTION,
                f"{len(failed)} data-parallel launch(es) failed, first at world size "
                f"{failed[0].world_size}",
            )
        )
    if result.accumulation is not None and not result.accumulation.passed:
        findings.append(
            Finding(ATTENTION, "accumulated micro-batches differ from one big batch's gradients")
        )
    return judge(findings, RETUNING_RULE, "a batch fits and every trial and launch ran")


def _trial_data(trial: Trial) -> dict[str, Any]:
    return {**asdict(trial), "fits": trial.fits, "throughput": trial.throughput}


def result_data(result: RetuneResult) -> dict[str, Any]:
    """Everything the result file keeps: every trial with its raw step times, and the
    recommendation with its evidence."""
    scaling = result.scaling
    loader = result.loader
    return {
        "headline": result.headline(),
        "verdict": retuning_verdict(result),
        "measured_on": result.measured_label,
        "workload": result.workload,
        "target": result.target,
        "settings": asdict(result.settings),
        "throughput_unit": result.throughput_unit,
        "memory_budget": {**asdict(result.budget), "usable_bytes": result.budget.usable},
        "search": {
            "range": [result.search.low, result.search.high],
            "trial_bound": result.search.bound,
            "trials": [_trial_data(t) for t in result.search.trials],
            "largest_fit": result.search.largest_fit,
            "smallest_failure": result.search.smallest_failure,
            "stopped": result.search.stopped,
            "compiler_host_ram_batch": result.search.compiler_host_ram,
        },
        "sweep": {
            "trials": [_trial_data(t) for t in result.sweep],
            "choice": asdict(result.choice) if result.choice else None,
        },
        "scaling": None
        if scaling is None
        else {
            **{k: v for k, v in asdict(scaling).items() if k != "runs"},
            "runs": [
                {**asdict(r), "throughput": r.throughput, "per_worker": r.per_worker}
                for r in scaling.runs
            ],
            "chosen_world_size": result.world.world_size if result.world else None,
        },
        "global_batch_plans": [
            {
                **asdict(p),
                "global_batch": p.global_batch,
                "exact": p.exact,
                "suggested_lr": p.suggested_lr,
                "equation": p.equation(),
            }
            for p in result.plans
        ],
        "accumulation_check": None
        if result.accumulation is None
        else {
            **asdict(result.accumulation),
            "passed": result.accumulation.passed,
            "explanation": result.accumulation.explanation(),
        },
        "dataloader": None
        if loader is None
        else {
            **{k: v for k, v in asdict(loader).items() if k not in ("results", "recommended")},
            "results": [
                {**asdict(r), "wait_share": r.wait_share, "throughput": r.throughput}
                for r in loader.results
            ],
            "recommended": asdict(loader.recommended.setting) if loader.recommended else None,
        },
        "buckets": None
        if result.buckets is None
        else {
            **{k: v for k, v in asdict(result.buckets).items() if k not in ("plans", "chosen")},
            "plans": [{**asdict(p), "waste": p.waste} for p in result.buckets.plans],
            "chosen": result.buckets.chosen.boundaries if result.buckets.chosen else None,
        },
        "cost": None
        if result.cost is None
        else {
            "prices": asdict(result.cost.prices),
            "unit": result.cost.unit,
            "items": result.cost.items,
            "per_worker_rate": result.cost.per_worker_rate,
            "per_worker_basis": result.cost.per_worker_basis,
            "instance": asdict(result.cost.instance),
            "price_note": result.cost.price_note,
            "rows": [
                {
                    **asdict(row),
                    "label": result.measured_label,
                    "items_per_dollar": row.items_per_dollar,
                    "hours_for_items": row.hours_for_items,
                    "dollars_for_items": row.dollars_for_items,
                }
                for row in result.cost.rows
            ],
        },
        "recommendation": asdict(result.recommendation),
        "skipped": result.skipped,
        "wall_seconds": result.wall_seconds,
    }
