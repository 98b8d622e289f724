"""Notebook 04's figures and result file, from a retuning result assembled by hand (the stages
themselves are tested, with real processes, in test_tuning.py)."""

from __future__ import annotations

import io
import json
from pathlib import Path

import matplotlib
import pytest
import torch
from matplotlib.figure import Figure

from tests.fixtures.retune_results import make_result, trial
from workbench.results import write_json_atomic
from workbench.timing import HostLoad, Measurement
from workbench.tuning import plots as tuning_plots
from workbench.tuning import records as tuning_records
from workbench.tuning import views as tuning_views
from workbench.tuning.plan import plan_global_batch
from workbench.tuning.recommend import recommend
from workbench.tuning.records import RetuneSettings
from workbench.tuning.trials import OK, OOM, choose_batch


@pytest.fixture(autouse=True)
def agg_backend() -> None:
    matplotlib.use("Agg")


def test_throughput_and_memory_draws_the_budget_and_every_trial() -> None:
    result = make_result()
    figure = tuning_plots.throughput_and_memory(result)
    assert isinstance(figure, Figure)
    left, right = figure.axes
    assert left.lines[0].get_xdata().tolist() == [64, 128, 256, 512]
    levels = sorted(line.get_ydata()[0] for line in right.lines)
    assert levels == pytest.approx([1024 * 0.9, 1024])  # margin-reduced limit, then the budget
    assert sum(len(c.get_offsets()) for c in right.collections) == len(result.trials)
    figure.savefig(io.BytesIO(), format="png")


def test_search_trials_plot_marks_the_bound_and_orders_trials() -> None:
    result = make_result()
    (ax,) = tuning_plots.search_trials(result).axes
    points = [tuple(c.get_offsets()[0]) for c in ax.collections]
    assert [p[0] for p in points] == [1, 2, 3]
    assert [p[1] for p in points] == [1, 1024, 512]
    assert any("bound: 12" in text.get_text() for text in ax.get_legend().get_texts())


def test_scaling_plot_shows_efficiency_against_the_floor_or_the_skip_reason() -> None:
    left, right = tuning_plots.scaling(make_result()).axes
    assert right.lines[0].get_ydata().tolist() == pytest.approx([1.0, 0.8])
    assert right.lines[1].get_ydata()[0] == pytest.approx(RetuneSettings().min_scaling_efficiency)
    skipped = tuning_plots.scaling(make_result(scaling_skipped=True))
    assert "collectives unavailable" in skipped.axes[0].texts[0].get_text()


def test_dataloader_plot_highlights_the_recommendation_under_the_limit() -> None:
    (ax,) = tuning_plots.dataloader_wait(make_result()).axes
    heights = [bar.get_height() for bar in ax.patches]
    assert heights == pytest.approx([30.0, 100 * 0.01 / 0.7])
    colors = [matplotlib.colors.to_hex(bar.get_facecolor()) for bar in ax.patches]
    assert colors == [matplotlib.colors.to_hex("tab:blue"), matplotlib.colors.to_hex("tab:green")]
    assert ax.lines[0].get_ydata()[0] == pytest.approx(5.0)


def test_result_data_is_plain_json_with_every_trial_and_the_recommendation(
    tmp_path: Path,
) -> None:
    result = make_result()
    path = write_json_atomic(tmp_path / "04_retuning.json", tuning_records.result_data(result))
    data = json.loads(path.read_text())
    assert data["headline"] == result.headline()
    assert len(data["search"]["trials"]) == 3 and len(data["sweep"]["trials"]) == 4
    assert data["search"]["trials"][1]["status"] == OOM
    assert data["sweep"]["trials"][0]["steady"]["times"]
    assert data["recommendation"]["per_core_batch"] == 32
    assert data["recommendation"]["world_size"] == 2
    assert data["recommendation"]["dataloader_workers"] == 1
    assert [r["label"] for r in data["cost"]["rows"]] == ["measured on this machine (cpu)"]
    knobs = [item["knob"] for item in data["recommendation"]["items"]]
    assert {"per-core batch", "accumulation steps", "world size", "DataLoader"} <= set(knobs)
    assert data["buckets"]["chosen"] == result.buckets.chosen.boundaries


def test_views_render_without_a_kernel(capsys: pytest.CaptureFixture[str]) -> None:
    result = make_result(scaling_skipped=True, with_buckets=False)
    for view in (
        tuning_views.headline,
        tuning_views.search,
        tuning_views.sweep,
        tuning_views.scaling,
        tuning_views.plans,
        tuning_views.accumulation,
        tuning_views.dataloader,
        tuning_views.buckets,
        tuning_views.cost,
        tuning_views.recommendation,
        tuning_views.problems,
    ):
        view(result)
    shown = capsys.readouterr().out
    assert "Data-parallel sweep skipped: collectives unavailable" in shown
    assert "projection" not in shown and "measured on this machine (cpu)" in shown
    assert "says nothing about what a sample costs on Trainium" in shown


def test_the_chart_rings_the_plans_batch_and_not_a_spike_that_load_explains() -> None:
    """Notebook 04 under load: batch 128 timed at a spike (a step 50x shorter than batch 64's,
    with a wide spread, other processes on the CPU) while the plan keeps the recipe's global
    batch of 64. The figure rings the plan's batch, the one the plans table and the
    recommendation name, and marks the spike apart as not chosen, saying what explains it."""
    result = make_result()
    spike = trial("sweep", 128, OK, 0.00002)
    spike.steady = Measurement(
        [0.00002, 0.0004, 0.00001], host=HostLoad(2, 2, 1.0, 0.83, 0.0, None, True)
    )
    result.sweep[1] = spike
    result.choice = choose_batch(result.sweep)
    assert result.choice is not None and result.choice.best_batch_size == 128
    optimizer = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=0.1)
    result.plans = [
        plan_global_batch("the target global batch", 64, result.choice.largest_within_noise, 1, 64,
                          optimizer)
    ]  # fmt: skip
    result.recommendation = recommend(result)
    assert result.recommendation.per_core_batch == result.chosen_batch == 64
    left, _ = tuning_plots.throughput_and_memory(result).axes
    ringed, fastest = left.collections
    assert ringed.get_offsets()[0][0] == result.recommendation.per_core_batch
    assert fastest.get_offsets()[0][0] == 128
    labels = [text.get_text() for text in left.get_legend().get_texts()]
    assert labels[0] == "the plan's per-core batch: 64"
    assert labels[1].startswith("fastest measured: 128, not chosen\n(IQR")
    assert "timed on a loaded machine: other processes 83% of the CPU" in labels[1]
    banner = tuning_views.sweep_choice(result)
    assert banner.startswith("The plan's per-core batch: 64, not 128 per core")
    assert "(IQR" in banner and "provisional" in banner
    # A plan that takes the fastest batch: one ring, nothing marked apart.
    result.plans = [plan_global_batch("the target global batch", 128, 128, 1, 64, optimizer)]
    (only,) = tuning_plots.throughput_and_memory(result).axes[0].collections
    assert only.get_offsets()[0][0] == result.chosen_batch == 128
