"""The records of a numerics comparison: settings, per-tensor comparisons, per-run results.

Plain dataclasses, so a result file is `dataclasses.asdict` of them and the views and plots read
them without running anything.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from workbench.errors import BadInput
from workbench.numerics_capture import FP64, PRECISIONS
from workbench.numerics_metrics import TensorMetrics, Verdict, VerdictRule

DEFAULT_PRECISIONS = ("fp32", "bf16-autocast", "bf16-cast", "fp16-autocast", "fp16-cast")
DEFAULT_COMPILED_PRECISIONS = ("fp32", "bf16-autocast")
DEFAULT_STEPS = 20
TARGET_PRECISIONS = tuple(name for name in PRECISIONS if name != FP64.name)

ROLE_TARGET = "target"
# A CPU eager run at a precision a target run uses: it measures that precision's own error, so
# a target run can be judged against it as well as against fp32.
ROLE_PRECISION_BASELINE = "precision baseline"

OWN = "own"
INHERITED = "inherited"
UNKNOWN = "unknown"


@dataclass(frozen=True)
class NumericsSettings:
    precisions: tuple[str, ...] = DEFAULT_PRECISIONS  # eager runs on the target
    compiled_precisions: tuple[str, ...] = DEFAULT_COMPILED_PRECISIONS  # compiled runs
    steps: int = DEFAULT_STEPS  # optimizer steps in each loss trajectory
    rule: VerdictRule = field(default_factory=VerdictRule)

    def __post_init__(self) -> None:
        for name, values in (
            ("precisions", self.precisions),
            ("compiled_precisions", self.compiled_precisions),
        ):
            unknown = [v for v in values if v not in TARGET_PRECISIONS]
            if unknown:
                raise BadInput(
                    f"{name}: {unknown[0]!r} is not a precision; choose from "
                    f"{', '.join(TARGET_PRECISIONS)}."
                )
            if len(set(values)) != len(values):
                raise BadInput(f"{name} {list(values)!r} names a precision twice.")
        if not self.precisions and not self.compiled_precisions:
            raise BadInput("precisions and compiled_precisions are both empty: nothing to compare.")
        if self.steps < 1:
            raise BadInput(f"steps {self.steps}: use at least 1 optimizer step.")


@dataclass
class Comparison:
    """One tensor's metrics and the rule's verdict on them."""

    metrics: TensorMetrics
    verdict: Verdict

    @property
    def name(self) -> str:
        return self.metrics.name


@dataclass
class Attribution:
    """Whether a failing layer's error is its own or inherited from upstream."""

    layer: str
    cause: str  # own, inherited, or unknown when the re-run failed
    isolated: Comparison | None  # the layer re-run on the reference's inputs
    note: str


@dataclass
class FirstDivergence:
    layer: str
    position: int  # 1-based, in the target's execution order
    full_run: Comparison  # the layer's output in the full target run
    attribution: Attribution


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


@dataclass
class RunVerdict:
    passed: bool
    checked: int  # tensors judged: outputs, loss, gradients, trajectory
    failed: list[str]
    summary: str


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
    status: str = "ok"  # ok | failed
    failed_phase: str | None = None  # setup, compile, layers, training
    error: str | None = None
    layers: list[Comparison] = field(default_factory=list)  # target execution order
    outputs: list[Comparison] = field(default_factory=list)
    loss: Comparison | None = None
    gradients: list[Comparison] = field(default_factory=list)
    trajectory: Comparison | None = None
    losses: list[float] = field(default_factory=list)
    task: TaskComparison | None = None
    first_divergence: FirstDivergence | None = None
    attributions: list[Attribution] = field(default_factory=list)
    unmatched_layers: Unmatched = field(default_factory=Unmatched)
    unmatched_outputs: Unmatched = field(default_factory=Unmatched)
    unmatched_gradients: Unmatched = field(default_factory=Unmatched)
    verdict: RunVerdict | None = None
    matched: MatchedCheck | None = None
    seconds: float = 0.0

    @property
    def label(self) -> str:
        return self.run["label"]

    @property
    def final_comparisons(self) -> list[Comparison]:
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
    baseline_outputs: Comparison | None = None
    baseline_device: str | None = None


@dataclass
class NumericsResult:
    workload: dict[str, Any]
    target: dict[str, Any]
    settings: NumericsSettings
    rule_statement: str
    reference_label: str
    yardstick_label: str
    fp64_error: str | None  # why the fp64 run failed: verdicts then use closeness only
    batch: BatchSource
    reference_losses: list[float]
    fp64_losses: list[float] | None
    dropout_disabled: list[str]  # dropout modules switched off in every run
    numerics_settings: dict[str, Any]
    runs: list[RunResult]
    wall_seconds: float

    @property
    def target_runs(self) -> list[RunResult]:
        return [r for r in self.runs if r.role == ROLE_TARGET]

    def run(self, label: str) -> RunResult | None:
        return next((r for r in self.runs if r.label == label), None)
