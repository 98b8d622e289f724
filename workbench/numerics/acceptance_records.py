"""The records of the acceptance gates a port to Neuron is judged by, and the rule that holds their
thresholds, each with its source (reference: AWS's neuron-agentic-development skills
`neuron-framework-autoport` and `neuron-framework-equivalence`, NxD Inference's accuracy checks,
and MLPerf Training's RCP checker).

Plain dataclasses, so the result file is `dataclasses.asdict` of them; every field added here
has a default, so result files written before a field existed still read.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from statistics import NormalDist
from typing import Final, Literal

from workbench.errors import BadInput

SOURCE_EQUIVALENCE = "AWS neuron-framework-equivalence skill"
SOURCE_AUTOPORT = (
    "AWS neuron-framework-autoport skill (validate_model.py --mode token); exact equality as "
    "NxD Inference utils/accuracy.py check_accuracy"
)
SOURCE_LOGITS = (
    "NxD Inference utils/accuracy.py check_accuracy_logits (torch-neuronx logit_validation, "
    "its default tolerance map)"
)
SOURCE_TOP1 = "workbook rule (AWS's token gate is for generating models)"
SOURCE_MLPERF = (
    "MLPerf Training RCP checker (mlcommons/logging mlperf_logging/rcp_checker/rcp_checker.py)"
)
SOURCE_WORKBOOK = "workbook default (AWS leaves it to calibration from known-good ports)"

GATE_PASS: Final = "pass"
GATE_FAIL: Final = "fail"
GATE_NOT_JUDGED: Final = "not judged"
GateStatus = Literal["pass", "fail", "not judged"]  # one gate on one run
# How a tensor is judged by the R-ratio gate: R, or (too few elements) as a value.
JUDGED_AS_R = "R"
JUDGED_AS_VALUE = "value"

# Gate names, in the order they are judged (AWS's stages, then MLPerf's convergence check).
LIVENESS = "liveness"
R_RATIO = "R-ratio"
COSINE = "teacher-forced cosine"
KL = "teacher-forced KL"
TOKEN_MATCH = "token match"
LOGIT_MATCH = "logit matching"
TOP1 = "top-1 agreement"
DOWNSTREAM = "downstream evaluation"
CONVERGENCE = "convergence parity"
GATE_ORDER = (
    LIVENESS,
    R_RATIO,
    COSINE,
    KL,
    TOKEN_MATCH,
    LOGIT_MATCH,
    TOP1,
    DOWNSTREAM,
    CONVERGENCE,
)
# A failing acceptance gate blocks the port; convergence parity judges the training recipe
# (precision, batch), as the precision cost does, so it needs attention.
ATTENTION_GATES = (CONVERGENCE,)


def min_ratio_elements(threshold: float) -> int:
    """The fewest elements whose R carries a distance at `threshold`: ln R of two RMS errors
    over n equal, independent rounding errors has a standard deviation of about 1/sqrt(n) (half
    the log of an F(n, n) variable), so a sound run's P(R > threshold) <= 1% needs
    n >= (z_0.99 / ln threshold)^2: 163 at AWS's 1.2."""
    return math.ceil((NormalDist().inv_cdf(0.99) / math.log(threshold)) ** 2)


@dataclass(frozen=True)
class AcceptanceRule:
    """The thresholds of the acceptance gates; each overridable by a notebook 03 parameter.

    r_threshold: R = error of the run / error of the CPU run at its precision, per layer and
        output, at most this (AWS tau_R 1.2: "R > 1.2 = bug").
    token_match: free-running greedy token match, exact (top-1 agreement, ties excused, for
        other models), at least this (AWS autoport 0.95).
    liveness: the same rate below this is a catastrophic port (AWS Stage 1: 0.30).
    cosine_p5: the 5th percentile of per-position cosine of the logits at least this (0.95),
        so at most 5% of positions fall below it.
    kl_p95, kl_max: per-position KL(reference || run) in nats: 95th percentile and maximum at
        most these (0.01, 0.1; AWS leaves delta to calibration).
    downstream_tolerance: the workload's evaluation score may drop at most this (0.02, two
        points on a [0, 1] score, AWS --tolerance 0.02).
    alpha: significance of the convergence t-test (0.05, as MLPerf's RCP checker).
    divergence_tolerance: logit matching's divergence difference must stay below this (NxD
        Inference check_accuracy_logits' divergence_difference_tol, 0.001).
    """

    r_threshold: float = 1.2
    token_match: float = 0.95
    liveness: float = 0.30
    cosine_p5: float = 0.95
    kl_p95: float = 0.01
    kl_max: float = 0.1
    downstream_tolerance: float = 0.02
    alpha: float = 0.05
    divergence_tolerance: float = 0.001

    def __post_init__(self) -> None:
        for name in (
            "r_threshold",
            "kl_p95",
            "kl_max",
            "downstream_tolerance",
            "divergence_tolerance",
        ):
            value = getattr(self, name)
            if not math.isfinite(value) or value < 0:
                raise BadInput(f"{name} {value!r}: use a finite number of at least 0.")
        if not self.r_threshold > 1:
            raise BadInput(
                f"r_threshold {self.r_threshold!r}: use a number above 1; a sound run's R sits "
                "near 1 (AWS: R near 1 healthy, above 1.2 a bug)."
            )
        for name in ("token_match", "liveness", "cosine_p5"):
            value = getattr(self, name)
            if not (math.isfinite(value) and 0 <= value <= 1):
                raise BadInput(f"{name} {value!r}: use a share between 0 and 1.")
        if not 0 < self.alpha < 1:
            raise BadInput(f"convergence_alpha {self.alpha!r}: use a level between 0 and 1.")
        if self.liveness > self.token_match:
            raise BadInput(
                f"liveness {self.liveness:g} is above token_match {self.token_match:g}: the "
                "catastrophic floor must sit below the pass gate."
            )

    def statements(self) -> list[tuple[str, str, str]]:
        """(gate, threshold in words, source), in the order the gates are judged."""
        return [
            (
                LIVENESS,
                f"exact greedy token match (top-1 agreement) >= {self.liveness:.0%}",
                SOURCE_EQUIVALENCE,
            ),
            (R_RATIO, self._r_ratio_threshold(), SOURCE_EQUIVALENCE),
            (
                COSINE,
                f"5th percentile of per-position logit cosine >= {self.cosine_p5:g}",
                SOURCE_EQUIVALENCE,
            ),
            (
                KL,
                f"per-position KL(reference || run) p95 <= {self.kl_p95:g} and max <= "
                f"{self.kl_max:g} nats",
                f"{SOURCE_EQUIVALENCE}; thresholds: {SOURCE_WORKBOOK}",
            ),
            (
                TOKEN_MATCH,
                f"free-running greedy tokens equal to the reference's, position by position, "
                f">= {self.token_match:.0%} of them",
                SOURCE_AUTOPORT,
            ),
            (LOGIT_MATCH, self._logit_match_threshold(), SOURCE_LOGITS),
            (
                TOP1,
                f"teacher-forced arg-max equal to the reference's >= {self.token_match:.0%}, "
                "ties the run's precision cannot decide excused",
                SOURCE_TOP1,
            ),
            (
                DOWNSTREAM,
                f"evaluation score drop <= {self.downstream_tolerance:g} "
                f"({self.downstream_tolerance * 100:g} points) on every task",
                SOURCE_EQUIVALENCE,
            ),
            (
                CONVERGENCE,
                "steps to the target held-out loss, olympic mean (best and worst run dropped), "
                "within the band an equal-variance t-test against the reference's runs allows "
                f"at alpha {self.alpha:g}: not suspiciously fast (as the RCP checker) nor slower",
                SOURCE_MLPERF,
            ),
        ]

    def _r_ratio_threshold(self) -> str:
        return (
            f"R <= {self.r_threshold:g} for every component re-run alone on the fp32 "
            "reference's inputs and for every output, R = ||run - exact|| / max(||CPU run "
            "at the run's precision - exact||, 1.3e-6 x ||exact||), exact = the fp64 run "
            "(the fp32 reference where fp64 cannot run); a tensor of fewer than "
            f"{min_ratio_elements(self.r_threshold)} elements (a loss, a metric) is judged "
            "as a value: the floor is then assert_close's rtol of the run's precision x "
            "its scale"
        )

    def _logit_match_threshold(self) -> str:
        return (
            "teacher-forced past each divergence: every generated position within the top-k "
            "logit tolerances (top 5: 0.01, top 50: 0.02, top 1000: 0.03, all: 0.05 of the "
            "largest reference logit, after a constant shift), and at each divergence the "
            "run's logit of its token above its logit of the reference's by less than "
            f"{self.divergence_tolerance:g}, or a tie the run's precision cannot decide "
            "(the reference's margin and the run's own logit error both within twice the "
            "CPU run's error at that precision)"
        )


@dataclass
class GateResult:
    """One gate on one run: what was measured, the threshold, its source and the outcome."""

    gate: str
    status: GateStatus
    measured: str  # the numbers, in words
    threshold: str
    source: str

    @property
    def failed(self) -> bool:
        return self.status == GATE_FAIL


@dataclass
class LayerRatio:
    """R of one layer output (or model output): the run's error against the exact value over
    the error of the CPU run at the run's precision (never below one fp32 rounding, or for a
    value, the precision's tolerance for its size); a layer above the threshold in the model
    also has its R re-run alone."""

    name: str
    kind: str  # layer | output
    module_type: str
    ratio: float
    run_error: float  # RMSE of the run against the exact value
    precision_error: float  # the CPU run's RMSE at the run's precision
    elements: int = 0
    # R for a tensor with enough elements to carry a distance; a value (a loss, a small tensor)
    # is judged against the precision's tolerance for its size as the least denominator.
    judged: str = "R"  # JUDGED_AS_R | JUDGED_AS_VALUE
    denominator: float = 0.0  # what the run's error was divided by: R <= threshold passes
    isolated_ratio: float | None = None  # R of the layer re-run alone on the reference's inputs
    isolated_cause: str = ""  # own | inherited | unknown; "" when not re-run (R within threshold)
    isolated_note: str = ""


@dataclass
class RatioFailure:
    """The first layer, in execution order, whose R exceeds the threshold: own or inherited."""

    layer: str
    module_type: str
    position: int  # 1-based, in the run's execution order
    ratio: float
    cause: str  # own | inherited | unknown
    own_ratio: float | None  # R of the layer re-run alone on the reference's inputs
    note: str


@dataclass
class Agreement:
    """Per-position agreement with the reference on the acceptance set: greedy tokens (or
    classes), KL divergence and cosine of the logits, and NxD's logit matching."""

    kind: str  # token match | top-1 agreement
    compared: int  # positions (generated tokens, or samples)
    exact_matches: int  # token match: free-running tokens equal to the reference's
    near_ties: int  # teacher-forced divergences excused as ties (reference margin and the
    # run's own logit error both within twice the precision's own CPU error)
    rate: float  # the gated rate: token match exact / compared; top-1 (exact + ties) / compared
    first_mismatch: str | None  # where the first token differs (top-1: the first not excused)
    kl_p95: float
    kl_max: float
    cosine_p5: float
    cosine_below_share: float  # share of positions whose cosine is below the gate
    baseline: str | None = None  # the CPU run whose logit error sets the tie tolerance
    free_running: bool = False  # tokens each run generated itself (False: teacher-forced)
    # Logit matching (token match only), as NxD Inference's check_accuracy_logits.
    divergences: int = 0  # teacher-forced positions whose arg-max differs from the reference's
    divergence_tolerance: float | None = None
    divergence_difference_max: float | None = None  # largest over the divergences
    topk_errors: dict[str, float] = field(default_factory=dict)  # largest relative error per k
    positions_outside_tolerance: int = 0  # positions above a top-k tolerance
    logits_matched: bool | None = None  # None: not judged (top-1 agreement)
    first_logit_failure: str | None = None

    @property
    def exact_rate(self) -> float:
        return self.exact_matches / self.compared if self.compared else 0.0


@dataclass
class DownstreamScore:
    """The workload's evaluation function on the reference and on the run, per task."""

    reference: dict[str, float] = field(default_factory=dict)
    run: dict[str, float] = field(default_factory=dict)
    error: str | None = None  # why the run's evaluation could not be taken

    def drops(self) -> dict[str, float]:
        return {task: self.reference[task] - self.run[task] for task in self.run}


@dataclass
class ConvergenceStudy:
    """Steps to reach a target quality: reference runs and candidate runs, each its own seed,
    olympic scored and tested as MLPerf's RCP checker tests a submission (convergence.py)."""

    label: str  # what is compared, in words
    seeds: list[int]  # the candidate's runs (the reference's first runs use the same seeds)
    steps: int  # the reference's step budget; a candidate may train up to twice as long
    # Per run, the held-out loss at the initial weights and after each step (index = step).
    baseline_losses: list[list[float]] = field(default_factory=list)
    candidate_losses: list[list[float]] = field(default_factory=list)
    t_statistic: float | None = None
    degrees_of_freedom: float | None = None
    p_value: float | None = None  # one-sided, in the direction the candidate's mean lies
    passed: bool | None = None  # None: not tested (too few runs, or a failed run)
    note: str = ""
    reference_seeds: list[int] = field(default_factory=list)
    target_loss: float | None = None  # the quality to reach: held-out loss at most this
    baseline_steps: list[float] = field(default_factory=list)  # per run; inf: never reached
    candidate_steps: list[float] = field(default_factory=list)
    baseline_mean: float | None = None  # olympic mean (best and worst run dropped)
    baseline_stdev: float | None = None  # of the olympic-scored runs, population (as numpy)
    candidate_mean: float | None = None
    fastest_allowed: float | None = None  # RCP's minimum acceptable mean steps
    slowest_allowed: float | None = None  # the same test in the other direction
    verdict: str = ""  # within | too fast | too slow | not converged | not tested


@dataclass
class RunAcceptance:
    """Everything the acceptance gates judged about one run, and their outcomes in order."""

    ratio_basis: str = ""  # what R measures the run against, in words
    ratios: list[LayerRatio] = field(default_factory=list)
    first_ratio_failure: RatioFailure | None = None
    agreement: Agreement | None = None
    downstream: DownstreamScore | None = None
    convergence: ConvergenceStudy | None = None
    gates: list[GateResult] = field(default_factory=list)

    def first_failure(self) -> GateResult | None:
        return next((g for g in self.gates if g.failed), None)
