"""The records of a numerics comparison: settings, per-tensor comparisons, per-run results.

Plain dataclasses, so a result file is `dataclasses.asdict` of them and the views and plots read
them without running anything.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from workbench import scorecard
from workbench.checks import Numerics
from workbench.errors import BadInput
from workbench.numerics.acceptance_records import (
    AcceptanceRule,
    ConvergenceStudy,
    RunAcceptance,
)
from workbench.numerics.metrics import (
    DTYPE_TOLERANCES,
    LossFloor,
    MetricsVerdict,
    OwnError,
    PrecisionCostRule,
    ScalarCheck,
    TensorMetrics,
    VerdictRule,
)
from workbench.numerics.recipes import CAST
from workbench.numerics.run_records import (
    DEFAULT_VALIDATION_BATCHES,
    HeldOutScore,
    NonFinite,
    first_nonfinite_step,
)
from workbench.numerics.statuses import (
    COULD_NOT_RUN,
    JUDGED_PASS,
    ROLE_TARGET,
    TRIVIAL,
    JudgementStatus,
    RunVerdictStatus,
)

# Read from here by the modules that build the records (layers, ratio, run, plots).
from workbench.numerics.statuses import INHERITED as INHERITED
from workbench.numerics.statuses import OWN as OWN
from workbench.numerics.statuses import ROLE_PRECISION_BASELINE as ROLE_PRECISION_BASELINE
from workbench.numerics.statuses import UNKNOWN as UNKNOWN
from workbench.numerics.wording import (
    HELD_OUT_TOLERANCE_MEANS,
    LOSS_SCALING_MEANS,
    convergence_finding,
    first_gate_failure,
    headline,
    reading,
)

# run.py logs a run's line from here, beside the headline.
from workbench.numerics.wording import run_line as run_line
from workbench.results import MeasuredOn
from workbench.scorecard import ATTENTION, BLOCKER, PASS, Finding, judge

if TYPE_CHECKING:  # script_loop reads TensorComparison from here
    from workbench.numerics.script_loop import ScriptLoop

# The migration's own precisions, judged: fp32, and bf16 as Trainium trains in it (autocast
# with fp32 weights, or bf16 weights; neuron.md 2.3). fp16 is no Trainium default.
DEFAULT_PRECISIONS = ("fp32", "bf16-autocast", "bf16-cast")
# Shown beside them and never part of the verdict: fp16 as torch.amp trains it (autocast with a
# GradScaler), the recipe a GPU model often comes from. fp16-cast (fp16 weights and optimizer
# state, as no torch.amp recipe trains) runs where a user names it.
DEFAULT_INFORMATIVE_PRECISIONS = ("fp16-autocast",)
DEFAULT_COMPILED_PRECISIONS = ("fp32", "bf16-autocast")
DEFAULT_STEPS = 20
# The acceptance set and the convergence study (AWS's equivalence skill uses 5 fixed prompts).
DEFAULT_PROMPTS = 5
DEFAULT_PROMPT_TOKENS = 8
DEFAULT_GENERATED_TOKENS = 32
# Runs of the convergence study (the reference trains twice as many): MLPerf's smallest count.
DEFAULT_CONVERGENCE_SEEDS = 5
DEFAULT_CONVERGENCE_STEPS = 20


@dataclass(frozen=True)
class NumericsSettings:
    precisions: tuple[str, ...] = DEFAULT_PRECISIONS  # eager runs on the target
    compiled_precisions: tuple[str, ...] = DEFAULT_COMPILED_PRECISIONS  # compiled runs
    # Eager runs shown for comparison: measured and judged alike, never in the verdict. One
    # also in `precisions` is the user's choice, judged there, and not run twice.
    informative_precisions: tuple[str, ...] = DEFAULT_INFORMATIVE_PRECISIONS
    steps: int = DEFAULT_STEPS  # optimizer steps in each loss trajectory
    rule: VerdictRule = field(default_factory=VerdictRule)
    cost: PrecisionCostRule = field(default_factory=PrecisionCostRule)
    validation_batches: int = (
        DEFAULT_VALIDATION_BATCHES  # held-out batches when the workload has none
    )
    acceptance: AcceptanceRule = field(default_factory=AcceptanceRule)
    prompts: int = DEFAULT_PROMPTS  # held-out prompts for token match
    prompt_tokens: int = DEFAULT_PROMPT_TOKENS  # tokens of each prompt
    generated_tokens: int = DEFAULT_GENERATED_TOKENS  # tokens the reference generates
    convergence_seeds: int = DEFAULT_CONVERGENCE_SEEDS  # seeds of the convergence study
    convergence_steps: int = DEFAULT_CONVERGENCE_STEPS  # optimizer steps per seed

    @property
    def informative_only(self) -> tuple[str, ...]:
        """informative_precisions not also chosen in precisions: the runs that only inform."""
        return tuple(p for p in self.informative_precisions if p not in self.precisions)

    @classmethod
    def from_params(cls, params: Mapping[str, Any]) -> NumericsSettings:
        """The settings from notebook 03's parameters; rtol and atol of 0 mean per-dtype values."""
        default = cls()
        rule, cost, gates = default.rule, default.cost, default.acceptance
        return cls(
            precisions=tuple(params.get("precisions", default.precisions)),
            compiled_precisions=tuple(
                params.get("compiled_precisions", default.compiled_precisions)
            ),
            informative_precisions=tuple(
                params.get("informative_precisions", default.informative_precisions)
            ),
            steps=params.get("steps", default.steps),
            rule=VerdictRule(
                params.get("multiplier", rule.multiplier),
                params.get("low_precision_multiplier", rule.low_precision_multiplier),
                params.get("rmse_atol", rule.rmse_atol),
                params.get("rtol") or rule.rtol,
                params.get("atol") or rule.atol,
            ),
            cost=PrecisionCostRule(
                params.get("band_factor", cost.band_factor),
                params.get("loss_tolerance", cost.loss_tolerance),
                params.get("metric_tolerance", cost.metric_tolerance),
            ),
            validation_batches=params.get("validation_batches", default.validation_batches),
            acceptance=AcceptanceRule(
                params.get("r_threshold", gates.r_threshold),
                params.get("token_match_gate", gates.token_match),
                params.get("liveness_gate", gates.liveness),
                params.get("cosine_p5_gate", gates.cosine_p5),
                params.get("kl_p95_gate", gates.kl_p95),
                params.get("kl_max_gate", gates.kl_max),
                params.get("downstream_tolerance", gates.downstream_tolerance),
                params.get("convergence_alpha", gates.alpha),
            ),
            prompts=params.get("prompts", default.prompts),
            prompt_tokens=params.get("prompt_tokens", default.prompt_tokens),
            generated_tokens=params.get("generated_tokens", default.generated_tokens),
            convergence_seeds=params.get("convergence_seeds", default.convergence_seeds),
            convergence_steps=params.get("convergence_steps", default.convergence_steps),
        )

    def __post_init__(self) -> None:
        # capture builds the precisions with torch's dtypes: imported here, where the settings
        # are checked, so that reading 03_numerics.json back loads no torch.
        from workbench.numerics.capture import FP64, PRECISIONS

        target_precisions = [name for name in PRECISIONS if name != FP64.name]
        for name, values in (
            ("precisions", self.precisions),
            ("compiled_precisions", self.compiled_precisions),
            ("informative_precisions", self.informative_precisions),
        ):
            unknown = [v for v in values if v not in target_precisions]
            if unknown:
                raise BadInput(
                    f"{name}: {unknown[0]!r} is not a precision; choose from "
                    f"{', '.join(target_precisions)}."
                )
            if len(set(values)) != len(values):
                raise BadInput(f"{name} {list(values)!r} names a precision twice.")
        if not self.precisions and not self.compiled_precisions:
            raise BadInput("precisions and compiled_precisions are both empty: nothing to compare.")
        if self.steps < 1:
            raise BadInput(f"steps {self.steps}: use at least 1 optimizer step.")
        if self.validation_batches < 1:
            raise BadInput(
                f"validation_batches {self.validation_batches}: use at least 1 held-out batch."
            )
        for name in ("prompts", "prompt_tokens", "generated_tokens", "convergence_steps"):
            if getattr(self, name) < 1:
                raise BadInput(f"{name} {getattr(self, name)}: use at least 1.")
        if self.convergence_seeds < 1:
            raise BadInput(
                f"convergence_seeds {self.convergence_seeds}: use at least 1 (3 or more to test)."
            )


@dataclass
class TensorComparison:
    """One tensor's metrics and the rule's verdict on them."""

    metrics: TensorMetrics
    verdict: MetricsVerdict
    module_type: str = ""  # a layer's class name ("Linear"); empty for other tensors
    # (run, reference) of a one-element tensor (a loss): judged and re-judged as a value.
    values: tuple[float, float] | None = None

    @property
    def title(self) -> str:
        """The name with the module type, as tables and figures show a layer: "0 (Linear)"."""
        return f"{self.name} ({self.module_type})" if self.module_type else self.name

    @property
    def name(self) -> str:
        return self.metrics.name


@dataclass
class Attribution:
    """Whether a failing layer's error is its own or inherited from upstream."""

    layer: str
    cause: str  # own, inherited, or unknown when the re-run failed
    own: OwnError | None  # the layer re-run on the reference's inputs, against its band
    note: str


@dataclass
class FirstDivergence:
    """The first layer, in execution order, whose own error is far above its band."""

    layer: str
    module_type: str
    position: int  # 1-based, in the target's execution order
    full_run: TensorComparison  # the layer's output in the full target run
    attribution: Attribution

    @property
    def title(self) -> str:
        return f"{self.layer} ({self.module_type})"


@dataclass
class Unmatched:
    """What could not be paired by name and shape: listed, never silently dropped."""

    only_reference: list[str] = field(default_factory=list)
    only_target: list[str] = field(default_factory=list)
    shape_differs: list[str] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.only_reference or self.only_target or self.shape_differs)

    def describe(self, what: str) -> str:
        parts = []
        if self.only_reference:
            parts.append(f"only in the reference: {', '.join(self.only_reference)}")
        if self.only_target:
            parts.append(f"only in the target: {', '.join(self.only_target)}")
        if self.shape_differs:
            parts.append(f"shape differs: {', '.join(self.shape_differs)}")
        return f"{what} not compared ({'; '.join(parts)})"


@dataclass
class TaskComparison:
    name: str
    reference_initial: float | None
    target_initial: float | None
    reference_final: float | None  # after N-1 optimizer updates
    target_final: float | None
    prediction_agreement: float | None  # share of arg-max predictions equal to the reference's
    not_evidence: str | None = None  # why target_final is withheld (it followed a NaN/Inf)


@dataclass
class TensorVerdict:
    """The dynamo rule on the run's final tensors against the fp32 reference."""

    passed: bool
    checked: int  # tensors judged: outputs, loss, gradients, trajectory
    failed: list[str]
    summary: str


@dataclass
class Judgement:
    """The answer to one question about a run, with the rule that decided it."""

    status: JudgementStatus
    reason: str  # one line; for a failure, the rule that failed and its numbers
    failed: list[str] = field(default_factory=list)  # the rules that failed

    @property
    def passed(self) -> bool:
        return self.status in (JUDGED_PASS, TRIVIAL)


@dataclass
class NumericsRunVerdict:
    """Machine-readable: blocker (NaN/Inf, or device fidelity fails), attention (precision
    cost fails, or the run could not run), else pass."""

    status: RunVerdictStatus
    reason: str  # one line

    @property
    def passed(self) -> bool:
        return self.status == PASS


@dataclass
class ValidationComparison:
    """A run's held-out loss and task metric before and after its trajectory, next to the
    reference's; the deviations are what the precision-cost verdict judges."""

    before: HeldOutScore | None
    after: HeldOutScore | None
    reference_before: HeldOutScore | None
    reference_after: HeldOutScore | None
    loss_deviation: float | None  # |run - reference| / |reference|, held-out loss after training
    metric_difference: float | None  # run - reference, task metric after training
    metric_allowance: float | None  # how far the metric may move (tolerance, widened by spread)
    loss_allowance: float | None
    passed: bool | None = None  # None: nothing held out could be scored
    loss_floor: LossFloor | None = None  # absolute floor of the held-out loss tolerance
    loss_check: ScalarCheck | None = None  # the held-out loss under the precision-cost rule
    # Why the scores after training are withheld: they followed a NaN/Inf, so they measure
    # nothing the model computes (a NaN run's accuracy can even "improve").
    not_evidence: str | None = None


@dataclass
class Reproducibility:
    """Whether two identically seeded reference runs computed the same numbers."""

    deterministic: bool
    largest_difference: float  # max |run 1 - run 2| over every compared tensor and loss
    where: str | None  # the tensor holding it
    note: str


@dataclass
class MatchedCheck:
    """The same rule with the CPU eager run of the same precision as the yardstick: does the
    device or compiler add error beyond what the precision itself costs?"""

    baseline: str
    passed: bool
    failed: list[str]
    summary: str


@dataclass
class RunResult:
    run: dict[str, Any]  # RunSpec.describe()
    role: str
    status: Literal["ok", "failed"] = "ok"
    failed_phase: str | None = None  # setup, compile, layers, training
    error: str | None = None
    layers: list[TensorComparison] = field(default_factory=list)  # target execution order
    outputs: list[TensorComparison] = field(default_factory=list)
    loss: TensorComparison | None = None
    gradients: list[TensorComparison] = field(default_factory=list)
    trajectory: TensorComparison | None = None
    losses: list[float] = field(default_factory=list)
    task: TaskComparison | None = None
    first_divergence: FirstDivergence | None = None
    attributions: list[Attribution] = field(default_factory=list)  # every flagged layer
    unmatched_layers: Unmatched = field(default_factory=Unmatched)
    unmatched_outputs: Unmatched = field(default_factory=Unmatched)
    unmatched_gradients: Unmatched = field(default_factory=Unmatched)
    tensors: TensorVerdict | None = None
    matched: MatchedCheck | None = None
    trajectory_deviation: float | None = None  # max over steps |run - reference| / |reference|
    trajectory_worst_step: int | None = None
    reference_losses: list[float] = field(default_factory=list)  # the fp32 reference's
    loss_floor: LossFloor | None = None  # absolute floor of the trajectory's tolerance
    trajectory_check: ScalarCheck | None = None  # the trajectory under the precision-cost rule
    validation: ValidationComparison | None = None
    nonfinite: NonFinite | None = None
    fidelity: Judgement | None = None
    precision_cost: Judgement | None = None
    verdict: NumericsRunVerdict | None = None
    seconds: float = 0.0
    acceptance: RunAcceptance | None = None  # AWS's gates and convergence parity (target runs)
    # A precision the migration uses (precisions, compiled_precisions); False for one of
    # informative_precisions, judged alike but never part of the notebook's verdict.
    chosen: bool = True
    # Steps (1-based) whose update torch.amp's GradScaler skipped: gradients overflowed.
    skipped_steps: list[int] = field(default_factory=list)

    @property
    def label(self) -> str:
        # str(): `run` is a free-form dict, so a hand-edited file can hold any JSON value here.
        return str(self.run.get("label", "unlabelled run"))

    @property
    def first_nonfinite_step(self) -> int | None:
        """The first step whose loss is NaN/Inf: nothing after it is evidence."""
        return first_nonfinite_step(self.losses)

    @property
    def final_comparisons(self) -> list[TensorComparison]:
        """What the run verdict judges: outputs, loss, gradients, trajectory."""
        found = [*self.outputs, *([self.loss] if self.loss else []), *self.gradients]
        return found + ([self.trajectory] if self.trajectory else [])

    def attribution(self, layer: str) -> Attribution | None:
        return next((a for a in self.attributions if a.layer == layer), None)


@dataclass
class BatchSource:
    """Where the fixed batch came from, and what notebook 01's artifact said, if there was one."""

    description: str
    artifact: str | None  # the path looked at
    used_artifact: bool
    note: str
    # Notebook 01's eval-mode fp32 eager outputs (on its own target) against this reference.
    baseline_outputs: TensorComparison | None = None
    baseline_device: str | None = None


@dataclass
class NumericsResult(MeasuredOn):
    """Notebook 03's whole comparison: the reference, every run against it, and what shaped
    them (settings, batch, held-out data); result_data saves it with its sentences."""

    settings: NumericsSettings
    rule_statement: str
    reference_label: str
    yardstick_label: str
    fp64_error: str | None  # why the fp64 run failed: verdicts then use closeness only
    batch: BatchSource
    reproducibility: Reproducibility
    held_out_source: str  # where the held-out batches came from
    held_out_samples: int
    task_metric: str | None  # its name; None when the workload has none
    reference_held_out: tuple[HeldOutScore | None, HeldOutScore | None]  # before, after
    notes: list[str]  # one sentence each: what could not be compared, and why
    reference_losses: list[float]
    fp64_losses: list[float] | None
    dropout_disabled: list[str]  # dropout modules switched off in every run
    numerics_settings: dict[str, Any]
    runs: list[RunResult]
    wall_seconds: float
    acceptance_set: str = ""  # what the agreement gates were measured on, in words
    # Notebook 04's batch and accumulation against the original batch, over seeds.
    recommended_convergence: ConvergenceStudy | None = None
    # A `script:` workload's own loop on the reference and the target (script_loop.py).
    script_loop: ScriptLoop | None = None

    @property
    def target_runs(self) -> list[RunResult]:
        return [r for r in self.runs if r.role == ROLE_TARGET]

    @property
    def chosen_runs(self) -> list[RunResult]:
        """The target runs of the migration's own precisions: what the verdict judges."""
        return [r for r in self.target_runs if r.chosen]

    @property
    def informative_runs(self) -> list[RunResult]:
        """The target runs of informative_precisions: shown, never in the verdict."""
        return [r for r in self.target_runs if not r.chosen]

    def run(self, label: str) -> RunResult | None:
        return next((r for r in self.runs if r.label == label), None)


NUMERICS_RULE = (
    "blocker: a run computes NaN/Inf or fails device fidelity; attention: a run's precision cost "
    "exceeds its tolerance, or a run could not run; pass otherwise; only runs of the precisions "
    "this migration uses count (precisions, compiled_precisions): informative_precisions' runs "
    "are judged alike and reported, never in the verdict"
)


def numerics_rule(settings: NumericsSettings) -> str:
    """NUMERICS_RULE with the acceptance gates, each with its threshold and source."""
    gates = "; ".join(
        f"{name}: {threshold} ({source})"
        for name, threshold, source in settings.acceptance.statements()
    )
    return (
        f"{NUMERICS_RULE}; blocker also: a run fails an acceptance gate ({gates}); the "
        "convergence parity gate, notebook 04's batch trained to the same target, and a "
        "script's own loop on the target against the reference (script_loop.py), need "
        "attention when they fail"
    )


def notebook_verdict(result: NumericsResult) -> scorecard.Verdict:
    """Notebook 03's verdict over the runs of the migration's own precisions, by numerics_rule:
    an informative run is reported (headline, runs table, reading) and judges nothing."""
    findings = []
    recommended = convergence_finding(result)
    if recommended is not None:
        findings.append(recommended)
    loop = result.script_loop
    if loop is not None and not loop.passed:
        findings.append(Finding(ATTENTION, loop.sentence(), Numerics.LOOP))
    for run in result.chosen_runs:
        if run.verdict is None:
            continue
        if run.verdict.status == BLOCKER:
            findings.append(Finding(BLOCKER, run.verdict.reason, Numerics.RUNS))
        elif run.verdict.status in (ATTENTION, COULD_NOT_RUN):
            findings.append(Finding(ATTENTION, run.verdict.reason, Numerics.RUNS))
    judged = sum(run.verdict is not None for run in result.chosen_runs)
    return judge(
        findings,
        numerics_rule(result.settings),
        f"all {judged} runs on {result.target['name']} keep device fidelity, stay within "
        "their precision's cost and pass every acceptance gate judged",
    )


def _score(score: HeldOutScore | None) -> dict[str, Any] | None:
    return asdict(score) if score is not None else None


def validation_data(result: NumericsResult) -> dict[str, Any]:
    """The held-out comparison: before and after the trajectory, reference vs every run."""
    cost = result.settings.cost
    before, after = result.reference_held_out
    return {
        "source": result.held_out_source,
        "samples": result.held_out_samples,
        "task_metric": result.task_metric,
        "loss_tolerance": cost.loss_tolerance,
        "metric_tolerance": cost.metric_tolerance,
        "tolerance_means": HELD_OUT_TOLERANCE_MEANS,
        "reference": {"before": _score(before), "after": _score(after)},
        "runs": [
            {
                "run": run.label,
                **asdict(run.validation),
            }
            for run in result.runs
            if run.validation is not None
        ],
    }


def result_data(result: NumericsResult) -> dict[str, Any]:
    """The 03_numerics.json payload: every metric, verdicts with their rule, the settings."""
    return {
        "headline": headline(result),
        "verdict": notebook_verdict(result),
        "reading": [{"kind": kind, "text": text} for kind, text in reading(result)],
        "rule": rule_data(result),
        "reference": {
            "run": result.reference_label,
            "yardstick": result.yardstick_label,
            "fp64_error": result.fp64_error,
            "losses": result.reference_losses,
            "fp64_losses": result.fp64_losses,
            "reproducibility": asdict(result.reproducibility),
        },
        "validation": validation_data(result),
        "batch": asdict(result.batch),
        "settings": {
            "precisions": list(result.settings.precisions),
            "compiled_precisions": list(result.settings.compiled_precisions),
            "informative_precisions": list(result.settings.informative_precisions),
            "steps": result.settings.steps,
            "validation_batches": result.settings.validation_batches,
        },
        "numerics_settings": result.numerics_settings,
        "dropout_disabled": result.dropout_disabled,
        "notes": result.notes,
        "runs": [asdict(run) for run in result.runs],
        "wall_seconds": result.wall_seconds,
        "acceptance": acceptance_data(result),
        "script_loop": (
            asdict(result.script_loop)
            | {"passed": result.script_loop.passed, "sentence": result.script_loop.sentence()}
            if result.script_loop is not None
            else None
        ),
    }


def rule_data(result: NumericsResult) -> dict[str, Any]:
    """Both rules in words and their numbers: the dynamo rule's and the precision cost's."""
    rule = result.settings.rule
    cost = result.settings.cost
    return {
        "statement": result.rule_statement,
        "fidelity": rule.statement(),
        "precision_cost": cost.statement(),
        "multiplier": rule.multiplier,
        "low_precision_multiplier": rule.low_precision_multiplier,
        "rmse_atol": rule.rmse_atol,
        "rtol": rule.rtol if rule.rtol is not None else "per dtype",
        "atol": rule.atol if rule.atol is not None else "per dtype",
        "dtype_tolerances": {
            name: {"rtol": rtol, "atol": atol} for name, (rtol, atol) in DTYPE_TOLERANCES.items()
        },
        "band_factor": cost.band_factor,
        "loss_tolerance": cost.loss_tolerance,
        "metric_tolerance": cost.metric_tolerance,
        "max_rel_denominator": "max(|reference|, atol)",
        "cast_means": f"{CAST}: weights and float inputs converted with .to(dtype)",
        "loss_scaling": LOSS_SCALING_MEANS,
    }


def acceptance_data(result: NumericsResult) -> dict[str, Any]:
    """The acceptance gates: thresholds with sources, what they were measured on, the first
    failure, and notebook 04's batch over seeds (each run's gates are in its `acceptance`)."""
    settings = result.settings
    first = first_gate_failure(result)
    return {
        "rule": asdict(settings.acceptance),
        "gates": [
            {"gate": name, "threshold": threshold, "source": source}
            for name, threshold, source in settings.acceptance.statements()
        ],
        "measured_on": result.acceptance_set,
        "prompts": settings.prompts,
        "prompt_tokens": settings.prompt_tokens,
        "generated_tokens": settings.generated_tokens,
        "convergence_seeds": settings.convergence_seeds,
        "convergence_steps": settings.convergence_steps,
        "first_failure": None if first is None else {"run": first[0].label, **asdict(first[1])},
        "recommended_convergence": asdict(result.recommended_convergence)
        if result.recommended_convergence
        else None,
    }
