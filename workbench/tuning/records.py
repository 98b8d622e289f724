"""Notebook 04's records: settings, the recommendation, the whole result, and the shape of
04_retuning.json."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from workbench.baseline.records import EAGER, MODES
from workbench.errors import BadInput
from workbench.markup import named_list
from workbench.planning.instances import get_instance
from workbench.planning.planner import Plan, plan_data
from workbench.scorecard import ATTENTION, BLOCKER, Finding, Verdict, judge
from workbench.timing import FLUCTUATION_SEVERE, HOST_LOAD_RULE, Measurement
from workbench.tuning.buckets import BucketStudy
from workbench.tuning.cost import CostStudy
from workbench.tuning.dataloader import (
    LoaderStudy,
)
from workbench.tuning.noise import COMPARISON_RULE, RemeasurePolicy
from workbench.tuning.parallel import FAILED as LAUNCH_FAILED
from workbench.tuning.parallel import TIMEOUT as LAUNCH_TIMEOUT
from workbench.tuning.parallel import ScalingRun, ScalingStudy, world_size_rule
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

    def headline(self) -> str:
        """The measured result in a sentence, after the plan's where the plan leads."""
        measured = self._measured_headline()
        if self.plan is not None and self.plan_leads:
            return f"{self.plan.headline()} {measured}"
        return measured

    def _measured_headline(self) -> str:
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
            text += "; " + self._choice_clause()
        if self.plans:
            text += f"; the plan is {self.plans[0].equation()}{self.plan_reason()}"
        if rec.dataloader_workers is not None:
            text += f" with {rec.dataloader_workers} DataLoader worker(s)"
        if rec.buckets:
            text += f" and padding buckets {rec.buckets}"
        return text + "." + self._unsettled_sentence()

    def _unsettled_sentence(self) -> str:
        """What the choices above cannot be read as clean for, naming the measurements."""
        parts = []
        noisy, loaded = self.noisy(), self.loaded()
        if noisy:
            parts.append(
                f"{_count(noisy)} stayed noisy after re-measuring, IQR above "
                f"{self.remeasure.limit:.0%} ({named_list(noisy, 3)})"
            )
        if loaded:
            parts.append(f"{_count(loaded)} ran on a loaded machine ({named_list(loaded, 3)})")
        if not parts:
            return ""
        return (
            f" Attention: {'; '.join(parts)}; the choices read from them are provisional: "
            "re-run on a quiet machine."
        )

    def _choice_clause(self) -> str:
        """The sweep's chosen batch, and the fastest one where its noise made them a tie."""
        choice = self.choice
        assert choice is not None
        unit = self.throughput_unit
        chosen = f"{choice.batch_size}, {choice.throughput:,.0f} {unit} in its steady state"
        timing = "the search's short fit checks and the launches time batches their own way"
        if choice.batch_size == choice.best_batch_size:
            return f"the batch-size sweep's throughput-best per-core batch is {chosen} ({timing})"
        return (
            f"the batch-size sweep's chosen per-core batch is {chosen}, the smallest that its "
            f"noise cannot tell from the fastest, {choice.best_batch_size} at "
            f"{choice.best_throughput:,.0f} {unit} ({timing})"
        )

    @property
    def chosen_batch(self) -> int | None:
        """The per-core batch the plan uses: the one batch the sweep's figure and banner, the
        plans and the recommendation name as chosen (the sweep's own pick only feeds it)."""
        return self.plans[0].per_core_batch if self.plans else None

    def sweep_caveat(self, batch: int) -> str:
        """Why the sweep's figure at `batch` may be noise or load rather than the batch: its IQR
        above the re-measuring limit, the machine loaded while timed; empty when neither."""
        trial = next((t for t in self.sweep if t.batch_size == batch and t.steady), None)
        if trial is None or trial.steady is None:
            return ""
        measurement, parts = trial.steady, []
        if measurement.relative_iqr > self.remeasure.limit:
            parts.append(f"IQR {measurement.relative_iqr:.0%}")
        if measurement.loaded and measurement.host is not None:
            parts.append(f"timed on a loaded machine: {measurement.host.shares()}")
        return "; ".join(parts)

    def plan_reason(self) -> str:
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


def _count(names: list[str]) -> str:
    return f"{len(names)} measurement{'s' if len(names) > 1 else ''}"


RETUNING_RULE = (
    "blocker: no batch size of the range fits, unless the memory-fit plan predicts that one core "
    "cannot hold the model and lays it out over several (then attention, naming the layout); "
    "attention: a trial or a data-parallel launch "
    "broke for a reason other than memory (an error, a crash, a timeout), the compiler ran out "
    "of host RAM in a trial (the search stops there), a trial compiled during its timed steps "
    "(its throughput includes compile time), accumulated micro-batches do not reproduce one "
    "big batch's gradients, a measurement a choice is read from (a sweep trial, a DataLoader "
    "setting, a launch) stayed noisy after its re-measures (relative IQR above "
    f"{FLUCTUATION_SEVERE:.0%}), or one ran while the machine was loaded ({HOST_LOAD_RULE}); "
    "pass otherwise"
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
        plan = result.plan
        if plan is not None and not plan.fits_one_rank and plan.chosen is not None:
            findings.append(
                Finding(
                    ATTENTION,
                    f"{lead}: {result.search.stopped}; the plan predicts one core cannot hold "
                    f"the model and lays it out as {plan.chosen.layout.name} on "
                    f"{plan.instance.name}: retune per rank of that layout",
                )
            )
        else:
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
    noisy, loaded = result.noisy(), result.loaded()
    if noisy:
        findings.append(
            Finding(
                ATTENTION,
                f"{_count(noisy)} stayed noisy after re-measuring, so the choices read from "
                f"them are provisional: {named_list(noisy, 3)}",
            )
        )
    if loaded:
        findings.append(
            Finding(
                ATTENTION,
                f"{_count(loaded)} ran while the machine was loaded, so no choice or speed-up "
                f"read from them is claimed as clean: {named_list(loaded, 3)}",
            )
        )
    return judge(
        findings,
        RETUNING_RULE,
        "a batch fits, every trial and launch ran, and every measurement a choice is read from "
        "was quiet",
    )


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
        "comparison_rule": COMPARISON_RULE,
        "remeasure": {
            **asdict(result.remeasure),
            "rule": result.remeasure.rule(),
        },
        "noisy": result.noisy(),
        "loaded": result.loaded(),
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
            "rule": world_size_rule(result.settings.min_scaling_efficiency),
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
            **{
                k: v
                for k, v in asdict(loader).items()
                if k not in ("results", "recommended", "fastest")
            },
            "results": [
                {**asdict(r), "wait_share": r.wait_share, "throughput": r.throughput}
                for r in loader.results
            ],
            "recommended": asdict(loader.recommended.setting) if loader.recommended else None,
            "fastest": asdict(loader.fastest.setting) if loader.fastest else None,
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
        "plan": plan_data(result.plan) if result.plan else None,
    }
