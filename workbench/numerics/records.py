"""The records of a numerics comparison: settings, per-tensor comparisons, per-run results.

Plain dataclasses, so a result file is `dataclasses.asdict` of them and the views and plots read
them without running anything.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from workbench.errors import BadInput
from workbench.numerics.capture import CAST, FP64, PRECISIONS
from workbench.numerics.metrics import (
    DTYPE_TOLERANCES,
    RULE_NONFINITE,
    TensorMetrics,
    Verdict,
    VerdictRule,
    dtype_name,
)

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

    @classmethod
    def from_params(cls, params: Mapping[str, Any]) -> NumericsSettings:
        """The settings from notebook 03's parameters; rtol and atol of 0 mean per-dtype values."""
        default = cls()
        rule = default.rule
        return cls(
            precisions=tuple(params.get("precisions", default.precisions)),
            compiled_precisions=tuple(
                params.get("compiled_precisions", default.compiled_precisions)
            ),
            steps=params.get("steps", default.steps),
            rule=VerdictRule(
                params.get("multiplier", rule.multiplier),
                params.get("low_precision_multiplier", rule.low_precision_multiplier),
                params.get("rmse_atol", rule.rmse_atol),
                params.get("rtol") or rule.rtol,
                params.get("atol") or rule.atol,
            ),
        )

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


# Advice when a layer's error is its own, by precision recipe (reference: neuron.md 2.3 for the
# Trainium bf16 recipes).
_OWN_ADVICE = {
    "fp16": "keep it in fp32 or use bf16 (fp16's range ends at 65504)",
    "bf16-cast": (
        "keep it in fp32, or use bf16 autocast (fp32 weights); pure bf16 training on Trainium "
        "wants stochastic rounding (NEURON_RT_STOCHASTIC_ROUNDING_EN=1) or fp32 master weights"
    ),
    "bf16-autocast": (
        "keep it in fp32 (run it outside autocast) if the loss curve or the task metric suffers"
    ),
    "fp32 compiled": (
        "the compiler changes its result: compare it compiled and eager, and look for "
        "reduced-precision settings (float32 matmul precision, NEURON_CC_FLAGS --auto-cast)"
    ),
    "fp32 eager": (
        "this device's kernel computes it differently: check the float32 matmul precision and "
        "TF32 flags and, on Neuron, NEURON_CC_FLAGS --auto-cast"
    ),
}


def _short(run: RunResult) -> str:
    return f"{run.run['precision']} {'compiled' if run.run['compiled'] else 'eager'}"


def _own_advice(run: RunResult) -> str:
    precision = run.run["precision"]
    if precision.startswith("fp16"):
        return _OWN_ADVICE["fp16"]
    if precision == "fp32":
        return _OWN_ADVICE["fp32 compiled" if run.run["compiled"] else "fp32 eager"]
    return _OWN_ADVICE[precision]


def _first_nonfinite_step(losses: list[float]) -> int | None:
    return next((i for i, v in enumerate(losses, 1) if not math.isfinite(v)), None)


def headline(result: NumericsResult) -> str:
    """One sentence that reads the result."""
    runs = result.target_runs
    ok = [r for r in runs if r.status == "ok" and r.verdict is not None]
    passed = [r for r in ok if r.verdict and r.verdict.passed]
    text = (
        f"On {result.target['name']}, {len(passed)} of {len(runs)} runs match "
        f"{result.reference_label} under the fp64 RMSE rule"
    )
    if passed:
        text += f" ({', '.join(_short(r) for r in passed)})"
    failing = [r for r in ok if r.verdict and not r.verdict.passed]
    if failing:
        first = failing[0]
        divergence = first.first_divergence
        if divergence:
            cause = divergence.attribution.cause
            text += f"; {_short(first)} first diverges at {divergence.layer} ({cause} error)"
        elif first.verdict:
            text += f"; {_short(first)} fails at {first.verdict.failed[0]}"
    broken = [r for r in runs if r.status != "ok"]
    if broken:
        text += f"; {len(broken)} could not run"
    return text + "."


def _task_clause(run: RunResult, steps: int) -> str:
    task = run.task
    if task is None or not task.name or task.reference_final is None:
        return ""
    return (
        f"; {task.name} after {steps} steps {task.target_final:.4g} against the reference's "
        f"{task.reference_final:.4g}"
    )


def _failing_reading(run: RunResult, steps: int) -> tuple[str, str]:
    """(kind, sentence) for a run whose verdict failed."""
    label = run.label
    precision = run.run["precision"]
    divergence = run.first_divergence
    task = _task_clause(run, steps)
    nan_step = _first_nonfinite_step(run.losses)
    if divergence and divergence.full_run.verdict.rule == RULE_NONFINITE:
        return "fail", (
            f"{label}: NaN/Inf first appears in layer {divergence.layer} "
            f"({divergence.attribution.cause} error): {_own_advice(run)}."
        )
    if nan_step is not None:
        return "fail", (
            f"{label}: the loss becomes NaN/Inf at step {nan_step} of {steps} while the "
            "reference's stays finite: pure 16-bit training keeps weights and optimizer state "
            "in 16 bits, where small values (Adam's squared gradients, its eps 1e-8) underflow "
            "and large ones overflow; train with autocast (fp32 weights) or bf16."
        )
    if run.matched is not None and run.matched.passed:
        where = f" (first diverging layer {divergence.layer}, as on the CPU)" if divergence else ""
        return "warn", (
            f"{label} differs from fp32 no more than {precision} does in {run.matched.baseline}"
            f"{where}: the target adds no error beyond the precision's own; accept it if the "
            f"loss curve and the task metric hold{task}."
        )
    extra = ""
    if run.matched is not None:
        extra = f" It also exceeds {precision}'s own error on the CPU ({run.matched.summary})."
    if divergence and divergence.attribution.cause == OWN:
        # A 16-bit run differing from fp32 in its own layers is the precision's trade-off, to
        # weigh against the loss curve; an fp32 run doing so computes something else.
        kind = "warn" if run.run["precision"] != "fp32" else "fail"
        others = [a.layer for a in run.attributions if a.cause == OWN][1:]
        also = ""
        if others:
            shown = ", ".join(others[:5]) + (
                f" and {len(others) - 5} more" if len(others) > 5 else ""
            )
            also = f" (later layers that also diverge on their own: {shown})"
        return kind, (
            f"{label}: layer {divergence.layer} diverges on its own in {precision}{also}: "
            f"{_own_advice(run)}{task}.{extra}"
        )
    if divergence and divergence.attribution.cause == INHERITED:
        return "fail", (
            f"{label}: the first diverging recorded layer, {divergence.layer}, inherits its "
            "error: it arises in code between recorded layers (functional ops in a parent "
            "module's forward, such as attention or a residual add, before "
            f"{divergence.layer}); move that code into a module, or bisect it, to find the "
            f"op{task}.{extra}"
        )
    if divergence:
        return "fail", (
            f"{label}: first diverging layer {divergence.layer}; {divergence.attribution.note}"
            f"{task}.{extra}"
        )
    assert run.verdict is not None
    if run.verdict.failed == ["trajectory"]:
        return "warn", (
            f"{label}: one step matches, but the loss trajectory drifts over {steps} steps: "
            f"the optimizer accumulates the difference{task}.{extra}"
        )
    failed = ", ".join(run.verdict.failed[:3]) or run.verdict.summary
    return "fail", (
        f"{label}: every recorded layer matches but {failed} fail: the difference arises after "
        f"the last leaf module or in the backward pass{task}.{extra}"
    )


def reading(result: NumericsResult) -> list[tuple[str, str]]:
    """What to do, as (kind, sentence) pairs: kind is one of markup.BANNER_KINDS."""
    steps = result.settings.steps
    items: list[tuple[str, str]] = []
    runs = result.target_runs
    ok = [r for r in runs if r.status == "ok" and r.verdict is not None]
    if ok and all(r.verdict and r.verdict.passed for r in ok) and len(ok) == len(runs):
        items.append(
            (
                "ok",
                f"Every run matches the reference under the rule: {result.target['name']} "
                "computes the same thing at these precisions.",
            )
        )
    for run in result.runs:
        if run.status != "ok":
            first_line = (run.error or "").splitlines()[0] if run.error else ""
            items.append(("fail", f"{run.label} could not run ({run.failed_phase}): {first_line}"))
        elif run.role == ROLE_TARGET and run.verdict is not None and not run.verdict.passed:
            items.append(_failing_reading(run, steps))
        if run.status == "ok" and run.unmatched_layers:
            items.append(("warn", f"{run.label}: {run.unmatched_layers.describe('layers')}."))
    if result.fp64_error:
        items.append(
            (
                "warn",
                "The fp64 yardstick could not run, so tensors are judged by closeness alone: "
                f"{result.fp64_error.splitlines()[0]}",
            )
        )
    settings = result.numerics_settings
    if settings["stochastic_rounding"].startswith("on"):
        items.append(
            (
                "info",
                "NEURON_RT_STOCHASTIC_ROUNDING_EN=1: bf16 results on Trainium vary from run to "
                "run, so compare their loss curves rather than single values.",
            )
        )
    auto_cast = settings["neuronx_cc"]["auto_cast"]
    if settings["neuronx_cc"]["in_effect"] and auto_cast in ("matmult", "all"):
        items.append(
            (
                "warn",
                f"NEURON_CC_FLAGS --auto-cast={auto_cast}: neuronx-cc computes fp32 "
                f"{'matmuls' if auto_cast == 'matmult' else 'ops'} in "
                f"{settings['neuronx_cc']['auto_cast_type']}, so the fp32 runs here are not fp32.",
            )
        )
    return items


def result_data(result: NumericsResult) -> dict[str, Any]:
    """The 03_numerics.json payload: every metric, verdicts with their rule, the settings."""
    rule = result.settings.rule
    return {
        "headline": headline(result),
        "reading": [{"kind": kind, "text": text} for kind, text in reading(result)],
        "rule": {
            "statement": result.rule_statement,
            "multiplier": rule.multiplier,
            "low_precision_multiplier": rule.low_precision_multiplier,
            "rmse_atol": rule.rmse_atol,
            "rtol": rule.rtol if rule.rtol is not None else "per dtype",
            "atol": rule.atol if rule.atol is not None else "per dtype",
            "dtype_tolerances": {
                dtype_name(d): {"rtol": rtol, "atol": atol}
                for d, (rtol, atol) in DTYPE_TOLERANCES.items()
            },
            "max_rel_denominator": "max(|reference|, atol)",
            "cast_means": f"{CAST}: weights and float inputs converted with .to(dtype)",
            "loss_scaling": "none: fp16 runs use no GradScaler, so gradient underflow shows",
        },
        "reference": {
            "run": result.reference_label,
            "yardstick": result.yardstick_label,
            "fp64_error": result.fp64_error,
            "losses": result.reference_losses,
            "fp64_losses": result.fp64_losses,
        },
        "batch": asdict(result.batch),
        "settings": {
            "precisions": list(result.settings.precisions),
            "compiled_precisions": list(result.settings.compiled_precisions),
            "steps": result.settings.steps,
        },
        "numerics_settings": result.numerics_settings,
        "dropout_disabled": result.dropout_disabled,
        "runs": [asdict(run) for run in result.runs],
        "wall_seconds": result.wall_seconds,
    }
