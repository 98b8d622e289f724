"""The plan in notebook 04: which instance it is made for, when it leads 04's headline and
verdict, its round trip through 04_retuning.json, its figure and its rows beside the trials.
The plan is a real one (seed-mlp's model, probed on this CPU); 04's result is the hand-built
one of tests/fixtures/retune_results.py."""

from __future__ import annotations

import copy
import dataclasses
import io
from pathlib import Path

import matplotlib
import pytest

from tests.fixtures.retune_results import make_result
from workbench.errors import BadInput
from workbench.planning import make_plan
from workbench.planning.instances import DEFAULT_INSTANCE, GiB
from workbench.planning.layouts import RankMemory
from workbench.planning.planner import Plan
from workbench.planning.plots import memory_by_layout
from workbench.planning.recommend import RUNTIME_RESERVE
from workbench.planning.retuning import TrialBeside, beside_trials, instance_for_run, per_sample
from workbench.results import save_result
from workbench.scorecard import ATTENTION, BLOCKER
from workbench.tuning import question
from workbench.tuning.records import RetuneResult, RetuneSettings, result_data, retuning_verdict


@pytest.fixture(scope="module")
def plan() -> Plan:
    return make_plan("seed-mlp", "trn1.32xlarge", global_batch=64)


def _too_big(plan: Plan) -> Plan:
    """The same plan, with a single rank that cannot hold the model."""
    whole = RankMemory(40 * GiB, 40 * GiB, 80 * GiB, 1 * GiB, 0, 0)
    single = dataclasses.replace(plan.single_rank, memory=whole)
    return dataclasses.replace(plan, single_rank=single)


@pytest.fixture(scope="module")
def measured() -> RetuneResult:
    return make_result()


def _with(base: RetuneResult, plan: Plan | None, fits: bool = True) -> RetuneResult:
    result = copy.deepcopy(base)
    result.plan = plan
    if not fits:
        result.search.largest_fit = None
        result.search.stopped = "batch 1 ran out of memory"
    return result


def test_the_instance_is_the_parameter_else_this_runs_on_else_the_default() -> None:
    assert instance_for_run("trn2.48xlarge", "") == ("trn2.48xlarge", "the plan_instance parameter")
    name, why = instance_for_run("", "trn1.2xlarge")
    assert name == "trn1.2xlarge" and "instance this notebook runs on" in why
    name, why = instance_for_run("", "c5.xlarge")
    assert name == DEFAULT_INSTANCE and "c5.xlarge" in why and "not an instance type" in why


def test_an_unknown_plan_instance_is_one_sentence_before_any_trial() -> None:
    with pytest.raises(BadInput, match=r"did you mean trn1\.32xlarge\?"):
        RetuneSettings(plan_instance="trn1.32xlarg")


def test_the_plan_leads_the_headline_only_when_one_core_cannot_hold_the_model(
    plan: Plan, measured: RetuneResult
) -> None:
    fits = _with(measured, plan)
    assert not fits.plan_leads
    assert fits.headline() == _with(measured, None).headline()
    big = _with(measured, _too_big(plan))
    assert big.plan_leads
    assert big.headline().startswith("A single rank (one NeuronCore, 16 GiB) cannot hold")
    assert _with(measured, plan, fits=False).plan_leads  # no batch fit here: the plan leads too


def test_no_fit_is_attention_with_a_layout_and_a_blocker_without_one(
    plan: Plan, measured: RetuneResult
) -> None:
    planned = retuning_verdict(_with(measured, _too_big(plan), fits=False))
    assert planned.status == ATTENTION
    assert "lays it out as DP32 + ZeRO-1 on trn1.32xlarge" in planned.reason
    assert retuning_verdict(_with(measured, None, fits=False)).status == BLOCKER
    # One core holds it: the plan has nothing to lay out, so no batch fitting stays a blocker.
    assert retuning_verdict(_with(measured, plan, fits=False)).status == BLOCKER


def test_the_plan_reads_back_from_the_result_file_as_the_writers_record(
    plan: Plan, measured: RetuneResult, tmp_path: Path
) -> None:
    path = save_result(tmp_path, question.RESULT_FILE.notebook, result_data(_with(measured, plan)))
    read = question.RESULT_FILE.load(path)
    assert isinstance(read.plan, Plan)
    assert read.plan.headline() == plan.headline()
    assert read.plan.chosen == plan.chosen and read.plan.batch == plan.batch
    older = save_result(tmp_path / "older", question.RESULT_FILE.notebook, result_data(measured))
    assert question.RESULT_FILE.load(older).plan is None


def test_figure_stacks_each_layout_to_its_peak_against_the_memory_per_rank(plan: Plan) -> None:
    matplotlib.use("Agg")
    figure = memory_by_layout(_too_big(plan))
    (ax,) = figure.axes
    labels = [tick.get_text() for tick in ax.get_yticklabels()]
    assert labels[0] == "DP32 + ZeRO-1 (chosen)" and labels[-1] == "one rank alone"
    lines = sorted(line.get_xdata()[0] for line in ax.lines)
    # The rule's limit (a rank's HBM less the runtime's reserve), then a rank's HBM.
    assert lines == pytest.approx([16 - RUNTIME_RESERVE / GiB, 16])
    chosen = [bar for bar in ax.patches if bar.get_y() < 0.5 and bar.get_y() > -0.5]
    assert sum(bar.get_width() for bar in chosen) == pytest.approx(plan.chosen.memory.peak / GiB)
    alone = [bar for bar in ax.patches if bar.get_y() + bar.get_height() / 2 == len(labels) - 1]
    assert sum(bar.get_width() for bar in alone) < 161  # 161 GiB drawn only up to the axis' cut
    assert any("(cut)" in text.get_text() for text in ax.texts)
    figure.savefig(io.BytesIO(), format="png")


def test_rows_beside_the_trials_keep_one_per_batch_and_the_per_sample_slope(plan: Plan) -> None:
    # At these batches seed-mlp's activations, not its optimizer step, set the peak.
    trials = [(64, 300 * 2**20), (512, 310 * 2**20), (64, 320 * 2**20), (128, None)]
    rows = beside_trials(plan, trials)
    assert [(r.batch, r.measured_bytes) for r in rows] == [(64, 320 * 2**20), (512, 310 * 2**20)]
    assert rows[1].predicted_bytes > rows[0].predicted_bytes > 0
    rows = [TrialBeside(1, 100, 10.0), TrialBeside(5, 500, 50.0)]
    assert per_sample(rows) == (10.0, 100.0)
    assert per_sample(rows[:1]) is None
