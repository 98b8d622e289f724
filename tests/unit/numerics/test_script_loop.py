"""Notebook 03's comparison of a `script:` workload's own loop: the smoke fixture script run
for real on the CPU reference and on the CPU target; synthetic trajectories for the rule."""

from __future__ import annotations

from tests.fixtures import REPO_ROOT
from workbench.numerics.metrics import VerdictRule
from workbench.numerics.script_loop import ScriptLoop, compare_script_loop, judge_loop
from workbench.targets import get_target
from workbench.workload import load_workload
from workbench.workloads.script import load_script_workload, script_spec

CPU = get_target("cpu")
SMOKE = REPO_ROOT / "tests" / "fixtures" / "scripts" / "smoke_train.py"


def _loop(reference: list[float], run: list[float]) -> ScriptLoop:
    return ScriptLoop("cpu", len(reference), reference, run, "float32", None)


def test_the_same_trajectory_passes_by_closeness():
    loop = _loop([2.3, 2.1, 1.9], [2.3, 2.1, 1.9])
    judge_loop(loop, VerdictRule(), None)
    assert loop.passed and loop.trajectory is not None
    assert loop.trajectory.verdict.rule == "close"


def test_a_diverging_trajectory_fails_even_against_the_references_spread():
    loop = _loop([2.3, 2.1, 1.9], [2.3, 2.4, 2.9])
    judge_loop(loop, VerdictRule(), 1e-6)
    assert not loop.passed
    assert "FAIL" in loop.sentence() and "captured model's trajectory" in loop.sentence()


def test_a_small_difference_within_the_references_spread_passes():
    loop = _loop([2.3, 2.1, 1.9], [2.3, 2.1 + 1e-4, 1.9 - 1e-4])
    judge_loop(loop, VerdictRule(), None)
    assert not loop.passed  # outside fp32 closeness, and no yardstick
    judge_loop(loop, VerdictRule(), 1e-3)
    assert loop.passed


def test_a_loop_shorter_than_asked_is_compared_over_the_steps_it_ran():
    loop = ScriptLoop("cpu", 5, [2.3, 2.1], [2.3, 2.1, 1.9], "float32", None)
    judge_loop(loop, VerdictRule(), None)
    assert loop.compared_steps == 2 and loop.passed
    assert "ran 2 of the 5 steps asked" in loop.sentence()


def test_the_smoke_scripts_loop_on_the_reference_and_the_target_agree():
    workload = load_script_workload(script_spec(str(SMOKE)), CPU)
    loop = compare_script_loop(workload, CPU, 4, VerdictRule(), None)
    assert loop is not None and loop.passed
    assert len(loop.reference_losses) == len(loop.target_losses) == 4
    assert loop.loss_dtype == "float32"


def test_other_workloads_have_no_script_loop():
    assert compare_script_loop(load_workload("seed-mlp"), CPU, 4, VerdictRule(), None) is None
