"""Convergence parity as MLPerf's RCP checker tests it: steps to a target held-out loss, olympic
scored, the minimum acceptable mean found by bisection on an equal-variance t-test, and the same
test the other way for a slower port. The planted model learns a fixed teacher (so its held-out
loss falls), with dropout on; a candidate whose learning rate is halved converges slower and
fails, one whose rate is doubled converges suspiciously fast and fails, the same recipe passes.
Real torch training on the CPU throughout."""

import math

import pytest
import torch
from torch import nn
from torch.nn import functional as F

from workbench.errors import BadInput
from workbench.numerics import acceptance, convergence
from workbench.numerics.acceptance_records import (
    CONVERGENCE,
    GATE_FAIL,
    GATE_NOT_JUDGED,
    RunAcceptance,
)
from workbench.numerics.capture import FP32, RunSpec
from workbench.numerics.records import NumericsSettings
from workbench.results import save_result
from workbench.targets.cpu import CpuTarget
from workbench.workload import Workload, load_workload, state_sha256

CPU = CpuTarget()
FP32_CPU = RunSpec(CPU, FP32)
TEACHER = torch.randn(16, 4, generator=torch.Generator().manual_seed(7))
STEPS = 20
RUNS = 5


def _teacher_batch(size, generator):
    inputs = torch.randn(size, 16, generator=generator)
    return (inputs,), (inputs @ TEACHER).argmax(-1)


def _learner(dropout: float = 0.1):
    return nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Dropout(dropout), nn.Linear(32, 4))


def _workload(dropout: float = 0.1) -> Workload:
    return Workload(
        name="teacher",
        model_factory=lambda: _learner(dropout),
        batch_maker=_teacher_batch,
        loss_fn=F.cross_entropy,
        optimizer_factory=lambda params: torch.optim.SGD(params, lr=0.5),
        batch_size=32,
    )


@pytest.fixture(scope="module")
def reference():
    """Ten reference runs of the planted recipe (twice the candidate's five) and its target."""
    workload = _workload()
    seeds = convergence.reference_seeds_of(workload, RUNS)
    curves = convergence.trajectories(
        FP32_CPU, workload, seeds, STEPS, convergence.TrainingRecipe(32)
    )
    target, why = convergence.target_loss(curves, STEPS)
    assert target is not None, why
    return workload, seeds, curves, target


def _candidate(reference, learning_rate):
    workload, reference_seeds, curves, target = reference
    seeds = convergence.seeds_of(workload, RUNS)
    candidate = convergence.trajectories(
        FP32_CPU,
        workload,
        seeds,
        convergence.CANDIDATE_STEP_FACTOR * STEPS,
        convergence.TrainingRecipe(32, learning_rate=learning_rate),
        stop_at=target,
    )
    return convergence.judge_study(
        f"lr {learning_rate}", seeds, reference_seeds, STEPS, curves, candidate, 0.05, target
    )


def test_the_same_recipe_passes(reference):
    study = _candidate(reference, 0.5)
    assert study.passed is True and study.verdict == "within", study.note
    assert len(study.baseline_steps) == 10 and len(study.candidate_steps) == 5
    assert study.fastest_allowed <= study.candidate_mean <= study.slowest_allowed


def test_a_halved_learning_rate_converges_slower_and_fails(reference):
    study = _candidate(reference, 0.25)
    assert study.passed is False and study.verdict == "too slow", study.note
    assert study.candidate_mean > study.slowest_allowed and study.p_value < 0.05
    gates = acceptance.gates(
        RunAcceptance(convergence=study), acceptance.AcceptanceRule(), _prepared(), None
    )
    gate = next(g for g in gates if g.gate == CONVERGENCE)
    assert gate.status == GATE_FAIL and "RCP checker" in gate.source


def test_a_doubled_learning_rate_converges_suspiciously_fast_and_fails(reference):
    study = _candidate(reference, 1.0)
    assert study.passed is False and study.verdict == "too fast", study.note
    assert study.candidate_mean < study.fastest_allowed
    assert "faster than the reference allows" in study.note


def _prepared():
    return acceptance.Prepared(None, None, [1, 2, 3], None)


def test_the_rcp_checkers_minimum_acceptable_mean_and_its_mirror():
    # Reference olympic mean 10.5, sd 0.5 over 8 runs, a candidate of 5 runs (3 scored): df 9,
    # one-sided 5% critical t 1.8331, so the band is 10.5 -+ 1.8331 x 0.5 x sqrt(1/8 + 1/3).
    half_width = 1.8331 * 0.5 * math.sqrt(1 / 8 + 1 / 3)
    fastest = convergence.fastest_allowed(10.5, 0.5, 8, 3, 0.05)
    slowest = convergence.slowest_allowed(10.5, 0.5, 8, 3, 0.05)
    assert fastest == pytest.approx(10.5 - half_width, abs=1e-3)
    assert slowest == pytest.approx(10.5 + half_width, abs=1e-3)
    # No spread: the reference's mean itself (the RCP checker returns it).
    assert convergence.fastest_allowed(7.0, 0.0, 8, 3, 0.05) == 7.0


def test_olympic_scoring_drops_the_best_and_the_worst():
    assert convergence.olympic([5.0, 1.0, math.inf, 3.0, 4.0]) == [3.0, 4.0, 5.0]


def _curves(steps_to_reach: list[int], length: int = 12) -> list[list[float]]:
    """Held-out loss curves from 1.0 to 0.0 that cross 0.5 at the given steps."""
    return [
        [1.0 - 0.5 * min(step / reach, 2.0) for step in range(length + 1)]
        for reach in steps_to_reach
    ]


def test_more_than_one_run_that_never_reaches_the_target_fails_and_too_few_runs_are_not_tested():
    baseline = _curves([4, 5, 5, 6, 4, 5, 5, 6, 5, 5])
    never = [[1.0] * 13, [1.0] * 13] + _curves([5, 5, 5])
    study = convergence.judge_study("never", [1, 2, 3, 4, 5], [], 6, baseline, never, 0.05, 0.5)
    assert study.passed is False and study.verdict == "not converged"
    assert "2 of 5 runs never reached" in study.note
    one_never = [[1.0] * 13] + _curves([5, 5, 4, 6])
    study = convergence.judge_study("one", [1, 2, 3, 4, 5], [], 6, baseline, one_never, 0.05, 0.5)
    assert study.passed is True and study.candidate_steps[0] == math.inf
    few = convergence.judge_study("few", [1, 2], [], 6, baseline, _curves([5, 5]), 0.05, 0.5)
    assert few.passed is None and "at least 3 runs" in few.note


def test_a_reference_that_learns_less_than_its_runs_differ_gives_no_target():
    flat = [[2.3 + 0.01 * (i % 3)] * 5 for i in range(10)]
    target, why = convergence.target_loss(flat, 4)
    assert target is None and "no quality to reach" in why
    study = convergence.judge_study("flat", [1, 2, 3], [], 4, flat, [], 0.05, target, why)
    gates = acceptance.gates(
        RunAcceptance(convergence=study), acceptance.AcceptanceRule(), _prepared(), None
    )
    assert next(g for g in gates if g.gate == CONVERGENCE).status == GATE_NOT_JUDGED
    falling = _curves([2] * 10, length=4)
    assert convergence.target_loss(falling, 4) == (0.5, "")


def test_the_recipe_trains_with_its_dropout_on():
    seeds = [5]
    on = convergence.trajectories(FP32_CPU, _workload(0.5), seeds, 3, convergence.TrainingRecipe(8))
    off = convergence.trajectories(
        FP32_CPU, _workload(0.0), seeds, 3, convergence.TrainingRecipe(8)
    )
    # The same initial weights (step 0) and batches; only the dropout masks differ.
    assert on[0][0] == off[0][0] and on[0][1:] != off[0][1:]


def test_notebook_04s_batch_is_trained_to_the_same_target_as_the_original(tmp_path):
    workload = _workload()
    initial = workload.build_model("cpu")
    recommendation = {"per_core_batch": 16, "accumulation_steps": 2, "world_size": 1}
    save_result(
        tmp_path,
        "04_retuning",
        {"headline": "h", "verdict": None, "recommendation": recommendation},
        workload={"spec": "teacher", "initial_state_sha256": state_sha256(initial)},
    )
    settings = NumericsSettings(precisions=("fp32",), compiled_precisions=(), convergence_steps=12)
    seeds = convergence.seeds_of(workload, 3)
    study, note = acceptance.recommended_study(
        tmp_path / convergence.RETUNING_RESULT_FILE, workload, initial, CPU, seeds, settings
    )
    assert note is None and study.passed is not None, study.note
    assert study.label.startswith("batch 16 x 2 accumulated (= 32 samples per step)")
    assert len(study.baseline_steps) == 6 and len(study.candidate_steps) == 3
    foreign = load_workload("tiny-cnn")
    study, note = acceptance.recommended_study(
        tmp_path / convergence.RETUNING_RESULT_FILE,
        foreign,
        foreign.build_model(),
        CPU,
        [1],
        settings,
    )
    assert study is None and "is for workload 'teacher'" in note
    with pytest.raises(BadInput, match="retuning_result 'missing.json' is not a file"):
        convergence.retuning_result_path("missing.json", tmp_path)
