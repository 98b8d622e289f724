"""Convergence parity over seeds: K seeds x N optimizer steps of a candidate (a run's device,
precision and compiler, or notebook 04's batch and accumulation) against a baseline, and a
one-sided test at alpha 0.05, as MLPerf's reference convergence point check tests a submission
against reference runs (a one-sided two-sample t-test).

Each seed draws the initial weights (where the workload's factory draws them) and a stream of N
training batches from batch_maker; candidate and baseline see the same weights and batches per
seed. Dropout modules are off, as in every run of notebook 03. The test: Welch's t on the mean
loss over the final quarter of the steps, one value per seed; the candidate fails when its loss is
significantly above the baseline's (p < alpha). The test is unpaired, as MLPerf's, so it is
conservative: it flags a recipe that trains worse by more than the seeds' own spread.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from workbench.errors import BadInput, describe_error
from workbench.numerics.acceptance_records import ConvergenceStudy
from workbench.numerics.capture import RunSpec
from workbench.results import load_result
from workbench.workload import Workload, disable_dropout, seeded, state_sha256

RETUNING_RESULT_FILE = "04_retuning.json"


def _betacf(a: float, b: float, x: float) -> float:
    """The continued fraction of the regularized incomplete beta (modified Lentz)."""
    tiny, c, d = 1e-300, 1.0, 1.0 - (a + b) * x / (a + 1.0)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 300):
        for numerator in (
            m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
            -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1)),
        ):
            d = 1.0 + numerator * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + numerator / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1.0) < 1e-15:
            break
    return h


def regularized_beta(a: float, b: float, x: float) -> float:
    """I_x(a, b), the regularized incomplete beta function."""
    if x <= 0:
        return 0.0
    if x >= 1:
        return 1.0
    log_front = (
        math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    )
    front = math.exp(log_front)
    if x < (a + 1) / (a + b + 2):
        return front * _betacf(a, b, x) / a
    return 1.0 - front * _betacf(b, a, 1.0 - x) / b


def t_survival(t: float, df: float) -> float:
    """P(T > t) for Student's t with `df` degrees of freedom."""
    tail = 0.5 * regularized_beta(df / 2, 0.5, df / (df + t * t))
    return tail if t >= 0 else 1.0 - tail


def welch_one_sided(candidate: list[float], baseline: list[float]) -> tuple[float, float, float]:
    """Welch's t of mean(candidate) > mean(baseline): (t, degrees of freedom, one-sided p)."""
    n1, n2 = len(candidate), len(baseline)
    m1, m2 = statistics.fmean(candidate), statistics.fmean(baseline)
    v1, v2 = statistics.variance(candidate) / n1, statistics.variance(baseline) / n2
    difference = m1 - m2
    if v1 + v2 == 0:
        # No spread at all: equal means are no evidence, any excess is certain.
        t = 0.0 if difference == 0 else math.copysign(math.inf, difference)
        return t, float(n1 + n2 - 2), 0.5 if difference == 0 else (0.0 if difference > 0 else 1.0)
    t = difference / math.sqrt(v1 + v2)
    df = (v1 + v2) ** 2 / (v1**2 / (n1 - 1) + v2**2 / (n2 - 1))
    return t, df, t_survival(t, df)


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
    return [workload.seed + i for i in range(count)]


def trajectories(
    spec: RunSpec, workload: Workload, seeds: list[int], steps: int, recipe: TrainingRecipe
) -> list[list[float]]:
    """One loss per optimizer step, per seed; the model is placed (and compiled) once and given
    each seed's initial weights, so a compiled run compiles once."""
    states = []
    for seed in seeds:
        with seeded(seed):
            states.append(workload.model_factory().state_dict())
    with seeded(seeds[0]):
        model = workload.model_factory()
    model.train()
    disable_dropout(model)
    model = spec.place_model(model)
    forward = spec.forward_of(model)
    device = spec.target.device
    losses: list[list[float]] = []
    for seed, state in zip(seeds, states, strict=True):
        model.load_state_dict(state)
        optimizer = workload.make_optimizer(model)
        if recipe.learning_rate is not None:
            for group in optimizer.param_groups:
                group["lr"] = recipe.learning_rate
        generator = torch.Generator().manual_seed(seed)
        spec.target.manual_seed(seed)
        seed_losses = []
        for _ in range(steps):
            optimizer.zero_grad(set_to_none=True)
            total = 0.0
            for _ in range(recipe.accumulation):
                inputs, targets = workload.batch_maker(recipe.micro_batch, generator)
                with spec.autocast():
                    outputs = workload.forward(forward, spec.place(inputs))
                    loss = workload.compute_loss(outputs, targets.to(device)) / recipe.accumulation
                loss.backward()
                total += float(loss.detach())
            optimizer.step()
            seed_losses.append(total)
        losses.append(seed_losses)
    return losses


def _checkpoints(steps: int) -> list[int]:
    return sorted({max(1, math.ceil(steps * q / 4)) for q in (1, 2, 3, 4)})


def final_window(losses: list[float], window: int) -> float:
    tail = losses[-window:]
    return math.nan if not all(math.isfinite(v) for v in tail) else statistics.fmean(tail)


def judge_study(
    label: str,
    seeds: list[int],
    steps: int,
    baseline: list[list[float]],
    candidate: list[list[float]],
    alpha: float,
) -> ConvergenceStudy:
    """The one-sided test on the final-window losses (see module docs)."""
    window = max(1, steps // 4)
    study = ConvergenceStudy(label, seeds, steps, window, baseline, candidate, _checkpoints(steps))
    ours = [final_window(losses, window) for losses in candidate]
    theirs = [final_window(losses, window) for losses in baseline]
    if not all(math.isfinite(v) for v in ours):
        study.passed = False
        study.note = "the candidate's loss is NaN/Inf in its final window"
        return study
    if len(seeds) < 2:
        study.note = (
            "one seed gives no spread, so no test is made: set convergence_seeds to 2 or more"
        )
        return study
    t, df, p = welch_one_sided(ours, theirs)
    study.t_statistic, study.degrees_of_freedom, study.p_value = t, df, p
    study.passed = p >= alpha
    mean_ours, mean_theirs = statistics.fmean(ours), statistics.fmean(theirs)
    verdict = "significantly above" if not study.passed else "not significantly above"
    study.note = (
        f"final-window loss (mean of the last {window} steps, {len(seeds)} seeds) "
        f"{mean_ours:.4g} against {mean_theirs:.4g}: {verdict} the baseline's "
        f"(one-sided Welch t {t:.3g}, df {df:.3g}, p {p:.3g}, alpha {alpha:g})"
    )
    return study


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
    if not requested:
        return Path(out_dir) / RETUNING_RESULT_FILE
    path = Path(requested).expanduser()
    if not path.is_file():
        raise BadInput(
            f"retuning_result {requested!r} is not a file; give the path of a "
            f"{RETUNING_RESULT_FILE} written by notebook 04, or leave it empty."
        )
    return path
