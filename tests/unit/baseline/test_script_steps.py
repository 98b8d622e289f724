"""Notebook 01's split of a `script:` workload's own steps into first step, warm-up and steady
state (small scripts run for real on the CPU target; synthetic step times for the rule
itself)."""

from __future__ import annotations

import pytest
import torch

from tests.fixtures.user_scripts import trains, write_script
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
from workbench.workloads.script import load_script_workload

CPU = get_target("cpu")
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
    steps = ScriptSteps([3.0, 2.0, 1.0, 1.0, 1.2], 2, True, 3, True)
    assert steps.warmup == [2.0, 1.0] and steps.steady == [1.0, 1.2]
    assert steps.first_step_excess == pytest.approx(3.0 - 1.1)
    assert ScriptSteps([3.0, 2.0], 1, None, 3, False).first_step_excess is None


def test_a_compile_is_said_timed_only_where_it_ran_on_the_target():
    timed = ScriptSteps(
        [3.0, 1.0], 1, None, 3, True, ["train.py:9"], compiler="inductor", compiles=2,
        compile_seconds=1.5, compile_options={"train.py:9": {"mode": "'max-autotune'"}},
    )  # fmt: skip
    said = " ".join(timed.sentences())
    assert "train.py:9; it ran with the target's compiler (inductor)" in said
    assert "2 compile(s), 1.50 s in all" in said and "mode='max-autotune') were not passed" in said
    untimed = ScriptSteps([3.0, 1.0], 1, None, 3, True, ["train.py:9"], compile_not_timed="boom")
    said = " ".join(untimed.sentences())
    assert "its compile was not timed" in said and "(boom)" in said and "holds" not in said
    assert "compile" not in " ".join(ScriptSteps([3.0, 1.0], 1, None, 3, True).sentences())


def _workload(folder, body):
    return load_script_workload(write_script(folder, body), CPU)


SHORT_LOOP = trains(6)
COMPILED_LOOP = trains(20).replace("opt = torch", "model = torch.compile(model)\nopt = torch")


class _DynamoOnly(type(CPU)):  # type: ignore[misc]
    """The CPU target compiling with torch.compile's "eager" backend: Dynamo traces and records
    each compile for real, without Inductor's C++ build (tens of seconds on two cores). Inductor
    itself runs on the smoke script in tests/e2e/test_script_e2e.py."""

    def compile(self, fn):
        return torch.compile(fn, backend="eager")


@pytest.fixture(scope="module")
def compiled_steps(tmp_path_factory):
    """A compiling script's own loop timed once: its torch.compile runs the target's compiler."""
    workload = _workload(tmp_path_factory.mktemp("compiled"), COMPILED_LOOP)
    return time_script(workload, _DynamoOnly(), SMALL)


def test_a_scripts_own_loop_is_timed_and_stopped_after_the_steps_asked(compiled_steps):
    steps = compiled_steps
    assert steps is not None and steps.stopped_by_workbook
    assert len(steps.steady) == SMALL.steady_steps
    assert len(steps.step_seconds) == 1 + steps.warmup_steps + SMALL.steady_steps
    assert all(s > 0 for s in steps.step_seconds)


def test_a_scripts_compile_runs_on_the_target_and_is_timed(compiled_steps):
    assert compiled_steps.compile_called_at == ["train.py:4"]
    assert not compiled_steps.compile_not_timed and compiled_steps.compiles >= 1
    # The compiler's own records fall inside the steps the watch timed.
    assert 0 < compiled_steps.compile_seconds <= sum(compiled_steps.step_seconds)
    assert "so its first step holds the compile" in " ".join(compiled_steps.sentences())


class _Uncompilable(torch.nn.Module):
    """What a compiler that cannot lower a graph gives back: the module, wrapped (as
    torch.compile's OptimizedModule wraps it), failing when first run."""

    def __init__(self, module):
        super().__init__()
        self.module = module

    def forward(self, *args):
        raise RuntimeError("the compiler cannot lower this graph")


class _FailingCompiler(type(CPU)):  # type: ignore[misc]
    """The CPU target with a compiler that fails (Target.compile's contract: the compiled
    form of a module, run lazily)."""

    def compile(self, fn):
        return _Uncompilable(fn)


def test_a_compile_that_fails_on_the_target_is_said_not_timed(tmp_path):
    steps = time_script(_workload(tmp_path, COMPILED_LOOP), _FailingCompiler(), SMALL)
    assert steps is not None and steps.compiles == 0
    assert "the compiler cannot lower this graph" in steps.compile_not_timed
    assert steps.stopped_by_workbook  # the loop, timed eager instead
    assert "its compile was not timed" in " ".join(steps.sentences())


def test_a_script_whose_loop_ends_first_says_so(tmp_path):
    # The script runs 6 steps; the default steady state asks for 30 after the warm-up.
    steps = time_script(_workload(tmp_path, SHORT_LOOP), CPU, BaselineSettings())
    assert steps is not None and not steps.stopped_by_workbook
    assert len(steps.step_seconds) == 6
    assert "ended before the workbook stopped it" in " ".join(steps.sentences())


def test_other_workloads_have_no_script_loop():
    assert time_script(load_workload("seed-mlp"), CPU, SMALL) is None


@pytest.mark.parametrize(("other_share", "loaded"), [(0.6, True), (0.0, False)])
def test_a_loop_timed_on_a_loaded_machine_says_so(other_share, loaded):
    host = HostLoad(2, 2, 1.0, other_share, 0.0, None, loaded)
    said = " ".join(ScriptSteps([3.0, 1.0], 1, None, 3, True, host=host).sentences())
    assert ("loaded machine" in said) is loaded
