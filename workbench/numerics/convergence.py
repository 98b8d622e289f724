"""Convergence parity as MLPerf Training's RCP checker tests it (mlcommons/logging,
`mlperf_logging/rcp_checker/rcp_checker.py`): steps to reach a target quality, olympic scored,
against reference runs, with a one-sided equal-variance t-test.

What runs: `2 x runs` reference runs (the RCP checker's references hold twice a submission's run
count) and `runs` candidate runs (a run's device, precision and compiler, or notebook 04's
batch and accumulation), each its own seed: the seed draws the initial weights (where the
workload's factory draws them), the stream of training batches and the dropout masks; the
candidate's runs use the reference's first seeds. Training is the recipe as the user runs it:
train mode, dropout on. After every optimizer step the model is scored in eval mode on one
held-out batch (the first of notebook 03's held-out batches), through the run's own forward.

The target quality: the held-out loss that the reference runs reach, olympic mean, at half the
step budget (MLPerf fixes a target per benchmark; a workload here names none, so it is taken from
the reference, where the curve still falls). A run's steps to target: the first step whose
held-out loss is at most the target. Reference runs train `steps`; candidate runs stop at the
target or at twice `steps` (the bound that keeps the check inside CI); a run that never reaches
it counts as never converging (infinite), as the RCP checker marks one.

The test, as the RCP checker's: steps sorted and olympic scored (the best and the worst run
dropped) on both sides; from the reference's olympic mean and population standard deviation, a
bisection finds the lowest mean a candidate of `runs - 2` scored runs may have before an
equal-variance t-test (reference's spread on both sides) says it converges faster at alpha
(`_find_min_acceptable_mean`); a candidate whose olympic mean is below it converges suspiciously
fast and fails, as the RCP checker fails it. The workbook runs the same test in the other
direction too, since a port that trains slower is what it looks for: above the highest
acceptable mean it fails as too slow. More than one candidate run that never reaches the target
fails as not converged (the RCP checker's "Insufficient convergence").
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypedDict

import torch

from workbench.errors import describe_error
from workbench.numerics.acceptance_records import ConvergenceStudy
from workbench.numerics.batch import earlier_notebook_file
from workbench.numerics.capture import RunSpec, as_fp32_cpu
from workbench.numerics.validation import held_out_batches
from workbench.results import load_result
from workbench.student_t import t_survival
from workbench.workload import Batch, Workload, seeded, state_sha256

RETUNING_RESULT_FILE = "04_retuning.json"
# The RCP checker's olympic scoring drops one run at each end (four for unet3d).
OLYMPIC_REJECTED = 1
MINIMUM_RUNS = 2 * OLYMPIC_REJECTED + 1
# References hold twice a submission's runs in the RCP checker.
REFERENCE_RUN_FACTOR = 2
# A candidate run stops at the target or at this many times the reference's step budget.
CANDIDATE_STEP_FACTOR = 2
BISECTION_TOLERANCE = 1e-4  # the RCP checker's, in its unit (here steps)
SEED_OFFSET = 1000


@dataclass(frozen=True)
class TrainingRecipe:
    """How one trajectory trains: micro-batches per optimizer step, their size, the rate."""

    micro_batch: int
    accumulation: int = 1
    learning_rate: float | None = None  # None keeps the workload optimizer's own

    def describe(self) -> str:
        text = f"batch {self.micro_batch}"
        if self.accumulation > 1:
            text += (
                f" x {self.accumulation} accumulated (= {self.micro_batch * self.accumulation} "
                "samples per step)"
            )
        if self.learning_rate is not None:
            text += f", lr {self.learning_rate:g}"
        return text


def seeds_of(workload: Workload, count: int) -> list[int]:
    """Seeds of the runs: offset from the workload's, so that no run's batch stream is the
    held-out batch's (drawn with the workload's seed + HELD_OUT_SEED_OFFSET)."""
    return [workload.seed + SEED_OFFSET + i for i in range(count)]


def reference_seeds_of(workload: Workload, runs: int) -> list[int]:
    """The reference's seeds: twice the candidate's runs, the candidate's seeds first."""
    return seeds_of(workload, REFERENCE_RUN_FACTOR * runs)


def held_out_batch(workload: Workload) -> Batch:
    """The batch every run is scored on after each step: the first held-out batch of notebook
    03 (the workload's evaluation_batches, or its batch maker with another seed)."""
    return held_out_batches(workload, 1).batches[0]


def _held_out_loss(
    model: torch.nn.Module, forward: Any, spec: RunSpec, workload: Workload, batch: Batch
) -> float:
    inputs, targets = batch
    modes = [(module, module.training) for module in model.modules()]
    model.eval()
    try:
        with torch.no_grad(), spec.autocast():
            outputs = as_fp32_cpu(workload.forward(forward, spec.place(inputs)))
            return float(workload.compute_loss(outputs, targets))
    finally:
        for module, training in modes:
            module.training = training


def trajectories(
    spec: RunSpec,
    workload: Workload,
    seeds: list[int],
    steps: int,
    recipe: TrainingRecipe,
    stop_at: float | None = None,
) -> list[list[float]]:
    """The held-out loss at the initial weights and after every optimizer step (index = step),
    per seed, training the recipe as it is (dropout on); a run stops early once its loss is at
    most `stop_at`. The model is placed (and compiled) once and every run starts from the
    workload's own initial weights, so a compiled run compiles once."""
    with seeded(workload.seed):
        model = workload.model_factory()
    initial = {name: value.clone() for name, value in model.state_dict().items()}
    model.train()
    model = spec.place_model(model)
    forward = spec.forward_of(model)
    device = spec.target.device
    scored_on = held_out_batch(workload)
    curves: list[list[float]] = []
    for seed in seeds:
        model.load_state_dict(initial)
        model.train()
        optimizer = workload.make_optimizer(model)
        scaler = spec.grad_scaler()  # torch.amp's loss scaling where the recipe has it
        if recipe.learning_rate is not None:
            for group in optimizer.param_groups:
                group["lr"] = recipe.learning_rate
        generator = torch.Generator().manual_seed(seed)
        spec.target.manual_seed(seed)
        curve = [_held_out_loss(model, forward, spec, workload, scored_on)]
        for _ in range(steps):
            optimizer.zero_grad(set_to_none=True)
            for _ in range(recipe.accumulation):
                inputs, targets = workload.batch_maker(recipe.micro_batch, generator)
                with spec.autocast():
                    outputs = workload.forward(forward, spec.place(inputs))
                    loss = workload.compute_loss(outputs, targets.to(device)) / recipe.accumulation
                scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
            curve.append(_held_out_loss(model, forward, spec, workload, scored_on))
            if stop_at is not None and curve[-1] <= stop_at:
                break
        curves.append(curve)
    return curves


def olympic(values: list[float]) -> list[float]:
    """Sorted, the best and the worst dropped (the RCP checker's olympic scoring)."""
    ordered = sorted(values)
    return ordered[OLYMPIC_REJECTED : len(ordered) - OLYMPIC_REJECTED]


def _at(curves: list[list[float]], step: int) -> list[float]:
    values = [curve[step] if len(curve) > step else math.inf for curve in curves]
    return [v if math.isfinite(v) else math.inf for v in values]


def target_loss(reference: list[list[float]], steps: int) -> tuple[float | None, str]:
    """The quality to reach (see module docs) and, when there is none, why: the held-out loss
    halfway from the reference's initial loss to its loss after `steps` steps (olympic means).
    None when the reference does not learn more over the budget than its runs differ (the
    standard deviation of their final losses): then steps to a target measure noise."""
    start, end = olympic(_at(reference, 0)), olympic(_at(reference, steps))
    if not end:
        return None, f"{len(reference)} reference runs leave none after olympic scoring"
    if not all(math.isfinite(v) for v in start + end):
        return None, "the reference's held-out loss is NaN/Inf"
    initial, final, spread = statistics.fmean(start), statistics.fmean(end), statistics.pstdev(end)
    if initial - final <= spread:
        return None, (
            f"the reference's held-out loss falls from {initial:.4g} to {final:.4g} over "
            f"{steps} steps, no more than its runs differ (sd {spread:.3g}), so there is no "
            "quality to reach: set convergence_steps higher, or give the workload held-out data "
            "it can learn"
        )
    return initial - (initial - final) / 2, ""


def steps_to_target(curve: list[float], target: float) -> float:
    """The first step whose held-out loss is at most `target`; inf when none is."""
    return next((float(i) for i, loss in enumerate(curve) if loss <= target), math.inf)


def pooled_t(
    mean_a: float, stdev_a: float, n_a: int, mean_b: float, stdev_b: float, n_b: int
) -> tuple[float, float, float]:
    """Student's equal-variance t of mean_a against mean_b from their statistics, as
    scipy.stats.ttest_ind_from_stats(equal_var=True) computes it, and the RCP checker's one-sided
    p: the probability of a t this low or lower, (t, degrees of freedom, p)."""
    df = n_a + n_b - 2
    pooled = ((n_a - 1) * stdev_a**2 + (n_b - 1) * stdev_b**2) / df
    spread = math.sqrt(pooled * (1 / n_a + 1 / n_b))
    if spread == 0:
        t = 0.0 if mean_a == mean_b else math.copysign(math.inf, mean_a - mean_b)
    else:
        t = (mean_a - mean_b) / spread
    return t, float(df), t_survival(-t, df) if math.isfinite(t) else (1.0 if t > 0 else 0.0)


def fastest_allowed(
    mean: float, stdev: float, n_reference: int, n_candidate: int, alpha: float
) -> float:
    """The RCP checker's minimum acceptable mean (`_find_min_acceptable_mean`): a bisection
    between 0 and the reference's mean for the candidate mean whose one-sided p is alpha."""
    if stdev == 0:
        return mean
    low, high = 0.0, mean
    middle = (low + high) / 2
    while high - low > BISECTION_TOLERANCE:
        _, _, p = pooled_t(middle, stdev, n_reference, mean, stdev, n_candidate)
        if p > alpha:
            high = middle
        else:
            low = middle
        middle = (low + high) / 2
    return middle


def slowest_allowed(
    mean: float, stdev: float, n_reference: int, n_candidate: int, alpha: float
) -> float:
    """The same bisection in the other direction: the highest candidate mean whose one-sided p
    of converging slower is still above alpha."""
    if stdev == 0:
        return mean
    low, high = mean, 2 * mean + stdev
    while 1 - pooled_t(high, stdev, n_reference, mean, stdev, n_candidate)[2] > alpha:
        high += high - mean
    middle = (low + high) / 2
    while high - low > BISECTION_TOLERANCE:
        _, _, p = pooled_t(middle, stdev, n_reference, mean, stdev, n_candidate)
        if 1 - p > alpha:
            low = middle
        else:
            high = middle
        middle = (low + high) / 2
    return middle


def _steps_text(values: list[float]) -> str:
    return ", ".join("never" if not math.isfinite(v) else f"{v:g}" for v in values)


class _StudyOutcome(TypedDict, total=False):
    """The ConvergenceStudy fields a study's test (or the reason for none) decides."""

    target_loss: float
    baseline_steps: list[float]
    candidate_steps: list[float]
    baseline_mean: float
    baseline_stdev: float
    candidate_mean: float
    fastest_allowed: float
    slowest_allowed: float
    t_statistic: float
    degrees_of_freedom: float
    p_value: float
    passed: bool
    verdict: str
    note: str


def judge_study(
    label: str,
    seeds: list[int],
    reference_seeds: list[int],
    steps: int,
    baseline: list[list[float]],
    candidate: list[list[float]],
    alpha: float,
    target: float | None,
    no_target: str = "",
) -> ConvergenceStudy:
    """Steps to `target` on both sides and the RCP checker's test (see module docs); with too
    few runs or no target, a study that says why (`no_target`) and is not tested."""
    if len(seeds) < MINIMUM_RUNS:
        outcome = _StudyOutcome(
            verdict="not tested",
            note=(
                f"{len(seeds)} candidate runs: olympic scoring drops the best and the worst, so "
                f"at least {MINIMUM_RUNS} runs are needed to test; set convergence_seeds to "
                f"{MINIMUM_RUNS} or more"
            ),
        )
    elif target is None:
        outcome = _StudyOutcome(verdict="not tested", note=no_target)
    else:
        baseline_steps = [steps_to_target(c, target) for c in baseline]
        candidate_steps = [steps_to_target(c, target) for c in candidate]
        outcome = _StudyOutcome(
            target_loss=target, baseline_steps=baseline_steps, candidate_steps=candidate_steps
        )
        untestable = _untestable(baseline_steps, candidate_steps, len(seeds), steps, target)
        outcome |= untestable or _rcp_test(
            baseline_steps, candidate_steps, len(seeds), len(reference_seeds), target, alpha
        )
    return ConvergenceStudy(
        label, seeds, steps, baseline, candidate, reference_seeds=reference_seeds, **outcome
    )


def _reading(ours: float, fastest: float, slowest: float) -> tuple[bool, str, str]:
    """Whether the candidate's olympic mean steps lie within what the reference allows: the
    test's outcome, its verdict and the sentence that reads it."""
    if ours < fastest:
        reading = (
            f"converges faster than the reference allows (below {fastest:.3g} steps): a recipe "
            "that differs, as the RCP checker fails it"
        )
        return False, "too fast", reading
    if ours > slowest:
        reading = f"converges slower than the reference allows (above {slowest:.3g} steps)"
        return False, "too slow", reading
    return True, "within", f"within the {fastest:.3g} to {slowest:.3g} steps the reference allows"


def _untestable(
    baseline_steps: list[float], candidate_steps: list[float], runs: int, steps: int, target: float
) -> _StudyOutcome | None:
    """Why no test is made, where none can be: the reference's own runs do not reach the
    target reliably (then a candidate that misses it as often says nothing about the
    candidate: an identical run would fail), or more than one candidate run never does."""
    if not all(math.isfinite(v) for v in olympic(baseline_steps)):
        return _StudyOutcome(
            verdict="not tested",
            note=(
                "reference runs that never reached their own target remain after olympic "
                "scoring, so no test is made: set convergence_steps higher"
            ),
        )
    never = sum(1 for v in candidate_steps if not math.isfinite(v))
    if never > 1:
        return _StudyOutcome(
            passed=False,
            verdict="not converged",
            note=(
                f"{never} of {runs} runs never reached the target held-out loss {target:.4g} "
                f"within {CANDIDATE_STEP_FACTOR * steps} steps (more than one: insufficient "
                "convergence, as the RCP checker)"
            ),
        )
    return None


def _rcp_test(
    baseline_steps: list[float],
    candidate_steps: list[float],
    runs: int,
    reference_runs: int,
    target: float,
    alpha: float,
) -> _StudyOutcome:
    """The RCP checker's test of the candidate's olympic mean steps against the reference's
    (every reference run that olympic scoring keeps reached the target)."""
    reference = olympic(baseline_steps)
    mean, stdev = statistics.fmean(reference), statistics.pstdev(reference)
    n_reference, n_candidate = len(reference), runs - 2 * OLYMPIC_REJECTED
    ours = statistics.fmean(olympic(candidate_steps))
    fastest = fastest_allowed(mean, stdev, n_reference, n_candidate, alpha)
    slowest = slowest_allowed(mean, stdev, n_reference, n_candidate, alpha)
    t, df, p = pooled_t(ours, stdev, n_reference, mean, stdev, n_candidate)
    p_value = p if ours <= mean else 1 - p
    passed, verdict, reading = _reading(ours, fastest, slowest)
    note = (
        f"steps to held-out loss {target:.4g}: olympic mean {ours:.3g} over {n_candidate} of "
        f"{runs} runs ({_steps_text(candidate_steps)}) against the reference's "
        f"{mean:.3g} (sd {stdev:.3g}, {n_reference} of {reference_runs} runs: "
        f"{_steps_text(baseline_steps)}); {reading} (equal-variance t {t:.3g}, df {df:g}, "
        f"one-sided p {p_value:.3g}, alpha {alpha:g})"
    )
    return _StudyOutcome(
        baseline_mean=mean,
        baseline_stdev=stdev,
        candidate_mean=ours,
        fastest_allowed=fastest,
        slowest_allowed=slowest,
        t_statistic=t,
        degrees_of_freedom=df,
        p_value=p_value,
        passed=passed,
        verdict=verdict,
        note=note,
    )


@dataclass
class Recommendation:
    """Notebook 04's batch, read from its result file."""

    recipe: TrainingRecipe
    source: str  # the file, in words


def recommended_recipe(
    path: Path, workload: Workload, initial: torch.nn.Module
) -> tuple[Recommendation | None, str | None]:
    """Notebook 04's recommended batch and accumulation (data-parallel ranks become more
    accumulated micro-batches: the same gradient for a mean loss without batch-statistics
    layers) and learning rate, with a sentence when the file is there but cannot be used."""
    if not path.is_file():
        return None, None
    try:
        record = load_result(path)
        data: dict[str, Any] = record["data"]
        described = record.get("workload") or {}
        expected = workload.spec or workload.name
        if described.get("spec") not in (expected, workload.name):
            raise ValueError(f"it is for workload {described.get('spec')!r}, not {expected!r}")
        if described.get("initial_state_sha256") not in (None, state_sha256(initial)):
            raise ValueError("its initial weights differ from this workload's (state hash)")
        recommendation = data.get("recommendation") or {}
        batch = recommendation.get("per_core_batch")
        if not isinstance(batch, int) or batch < 1:
            raise ValueError("it recommends no per-core batch")
        accumulation = recommendation.get("accumulation_steps") or 1
        world = recommendation.get("world_size") or 1
        rate = recommendation.get("learning_rate")
        recipe = TrainingRecipe(
            batch, int(accumulation) * int(world), float(rate) if rate is not None else None
        )
    except Exception as exc:  # one sentence; every other gate is still judged
        return None, (
            f"Notebook 04's result {path} was not used for the batch convergence check: "
            f"{describe_error(exc)}."
        )
    return Recommendation(recipe, f"notebook 04's recommendation ({path.name})"), None


def retuning_result_path(requested: str, out_dir: Path) -> Path:
    """Notebook 04's result file: the named one, or the one in `out_dir` (which may not exist:
    then the batch convergence check is left out, as in a run of 03 before 04)."""
    return earlier_notebook_file(
        requested, out_dir, RETUNING_RESULT_FILE, "retuning_result", "notebook 04"
    )
