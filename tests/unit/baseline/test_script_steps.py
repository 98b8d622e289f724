"""Notebook 01's split of a `script:` workload's own steps into first step, warm-up and steady
state (the smoke fixture script run for real on the CPU target; synthetic step times for the
rule itself)."""

from __future__ import annotations

import pytest

from tests.fixtures import REPO_ROOT
from workbench.baseline.records import BaselineSettings
from workbench.baseline.script_steps import (
    ScriptSteps,
    enough_steps,
    split_steps,
    time_script,
)
from workbench.targets import get_target
from workbench.timing import HostLoad, WarmupRule
from workbench.workload import load_workload
from workbench.workloads.script import load_script_workload, script_spec

CPU = get_target("cpu")
SMOKE = REPO_ROOT / "tests" / "fixtures" / "scripts" / "smoke_train.py"
SMALL = BaselineSettings(steady_steps=3, warmup=WarmupRule(window=4, max_steps=6))


def test_a_warmup_that_settles_ends_where_the_rule_first_holds():
    # A slow first step, two slow warm-up steps, then flat: steady from the 6th step after it.
    seconds = [5.0, 2.0, 1.5, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0]
    assert split_steps(seconds, SMALL) == (6, True)


def test_a_warmup_that_never_settles_stops_at_its_cap():
    seconds = [5.0, 1.0, 3.0, 1.0, 3.0, 1.0, 3.0, 1.0, 3.0]
    assert split_steps(seconds, SMALL) == (6, False)


def test_too_few_steps_leave_the_warmup_undecided():
    assert split_steps([5.0, 1.0, 3.0], SMALL) == (2, None)


def test_the_stop_rule_waits_for_the_warmup_and_the_steady_steps():
    flat = [5.0, *[1.0] * 20]
    done = enough_steps(SMALL)
    # Fed one step at a time, as the watch does: warm-up settles at 4 steps after the first,
    # then 3 steady steps are asked for.
    stops = [n for n in range(1, len(flat) + 1) if done(flat[:n])]
    assert stops[0] == 1 + 4 + 3


def test_first_step_excess_is_the_first_step_minus_the_steady_median():
    steps = ScriptSteps([3.0, 2.0, 1.0, 1.0, 1.2], 2, True, 3, True, ["train.py:9"])
    assert steps.warmup == [2.0, 1.0] and steps.steady == [1.0, 1.2]
    assert steps.first_step_excess == pytest.approx(3.0 - 1.1)
    text = " ".join(steps.sentences())
    assert "train.py:9" in text and "holds no compile" in text
    assert ScriptSteps([3.0, 2.0], 1, None, 3, False).first_step_excess is None


@pytest.fixture(scope="module")
def smoke_workload():
    return load_script_workload(script_spec(str(SMOKE)), CPU)


def test_the_smoke_scripts_own_loop_is_timed_and_stopped_after_the_steps_asked(smoke_workload):
    steps = time_script(smoke_workload, CPU, SMALL)
    assert steps is not None and steps.stopped_by_workbook
    assert len(steps.steady) == SMALL.steady_steps
    assert len(steps.step_seconds) == 1 + steps.warmup_steps + SMALL.steady_steps
    assert steps.compile_called_at == ["smoke_train.py:16"]
    assert all(s > 0 for s in steps.step_seconds)


def test_a_script_whose_loop_ends_first_says_so(smoke_workload):
    # The smoke script runs 20 steps; the default steady state asks for 30 after the warm-up.
    steps = time_script(smoke_workload, CPU, BaselineSettings())
    assert steps is not None and not steps.stopped_by_workbook
    assert len(steps.step_seconds) == 20
    assert "ended before the workbook stopped it" in " ".join(steps.sentences())


def test_other_workloads_have_no_script_loop():
    assert time_script(load_workload("seed-mlp"), CPU, SMALL) is None


def test_a_loop_timed_on_a_loaded_machine_says_so():
    loaded = HostLoad(
        threads=2,
        cores=2,
        wall_seconds=1.0,
        other_share=0.6,
        steal_share=0.0,
        load_average=None,
        loaded=True,
    )
    quiet = HostLoad(
        threads=2,
        cores=2,
        wall_seconds=1.0,
        other_share=0.0,
        steal_share=0.0,
        load_average=None,
        loaded=False,
    )
    said = " ".join(ScriptSteps([3.0, 1.0], 1, None, 3, True, host=loaded).sentences())
    assert "loaded machine" in said
    said = " ".join(ScriptSteps([3.0, 1.0], 1, None, 3, True, host=quiet).sentences())
    assert "loaded machine" not in said
