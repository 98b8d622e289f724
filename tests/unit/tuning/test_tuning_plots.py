"""Notebook 04's figures and result file, from a retuning result assembled by hand (the stages
themselves are tested, with real processes, in test_tuning.py)."""

from __future__ import annotations

import io
import json
from pathlib import Path

import matplotlib
import pytest
from matplotlib.figure import Figure

from workbench.environment.instance import InstanceType
from workbench.results import write_json_atomic
from workbench.timing import Measurement
from workbench.tuning import plots as tuning_plots
from workbench.tuning import records as tuning_records
from workbench.tuning import views as tuning_views
from workbench.tuning.buckets import plan_buckets
from workbench.tuning.cost import cost_study, load_prices
from workbench.tuning.dataloader import (
    LoaderResult,
    LoaderSetting,
    LoaderStudy,
    SampleWork,
    choose_setting,
)
from workbench.tuning.parallel import OK as RUN_OK
from workbench.tuning.parallel import SKIPPED, ScalingRun, ScalingStudy
from workbench.tuning.plan import check_accumulation, plan_global_batch
from workbench.tuning.recommend import recommend
from workbench.tuning.records import RetuneResult, RetuneSettings
from workbench.tuning.trials import OK, OOM, MemoryBudget, SearchResult, Trial, choose_batch
from workbench.workload import load_workload

MiB = 2**20


def trial(stage: str, batch: int, status: str, step: float = 0.01) -> Trial:
    fits = status == OK
    return Trial(
        stage,
        batch,
        status,
        0.5,
        Measurement([step, step * 1.1, step * 0.9]) if fits else None,
        batch,
        peak_memory_bytes=(200 + batch) * MiB if fits else None,
        memory_source="host: test",
        error=None if fits else "MemoryError: test",
        oom_evidence=None if fits else "MemoryError",
    )


def make_result(*, scaling_skipped: bool = False, with_buckets: bool = True) -> RetuneResult:
    workload = load_workload("seed-mlp")
    budget = MemoryBudget(1024 * MiB, "test budget", 0.1)
    search = SearchResult(1, 1024, 12)
    search.trials = [trial("search", 1, OK), trial("search", 1024, OOM), trial("search", 512, OK)]
    search.largest_fit, search.smallest_failure, search.stopped = 700, 701, "700 fits"
    sweep = [trial("sweep", b, OK, 0.001 * (1 + b / 64)) for b in (64, 128, 256, 512)]
    choice = choose_batch(sweep)
    runs = [
        ScalingRun(1, RUN_OK, step=Measurement([0.01] * 3), items_per_step=256, efficiency=1.0),
        ScalingRun(2, RUN_OK, step=Measurement([0.0125] * 3), items_per_step=512, efficiency=0.8),
    ]
    scaling = ScalingStudy("gloo", 256, 1, 2, 5, 20, runs)
    if scaling_skipped:
        scaling.runs = [ScalingRun(1, SKIPPED, "collectives unavailable")]
        scaling.skipped_reason = "collectives unavailable"
    optimizer = workload.make_optimizer(workload.build_model())
    plans = [plan_global_batch("the target global batch", 64, choice.batch_size, 2, 64, optimizer)]
    settings = [LoaderSetting(0, False, None), LoaderSetting(1, False, 2)]
    loader = LoaderStudy(64, SampleWork(0.02, 10, "test"), 4, 20)
    loader.results = [
        LoaderResult(settings[0], "ok", Measurement([0.3] * 3), Measurement([1.0] * 3), 64),
        LoaderResult(settings[1], "ok", Measurement([0.01] * 3), Measurement([0.7] * 3), 64),
    ]
    loader.recommended, loader.fastest = choose_setting(loader.results) or (None, None)
    assert loader.recommended is loader.results[1]
    buckets = plan_buckets([5, 9, 30, 31, 32] * 10, 4, 0.1, "test") if with_buckets else None
    cost = cost_study(
        load_prices(),
        per_worker_rate=choice.throughput,
        per_worker_basis="test",
        world=None if scaling_skipped else runs[1],
        instance=InstanceType(None, "not an EC2 instance (no EC2 DMI data)"),
        target_name="cpu",
        unit="samples",
        items=10**6,
    )
    result = RetuneResult(
        workload=workload.describe(),
        target={"name": "cpu", "is_trainium": False},
        measured_label="measured on this machine (cpu)",
        settings=RetuneSettings(),
        throughput_unit="samples/s",
        budget=budget,
        search=search,
        sweep=sweep,
        choice=choice,
        scaling=scaling,
        world=None if scaling_skipped else runs[1],
        plans=plans,
        accumulation=check_accumulation(workload, 8, 2),
        loader=loader,
        buckets=buckets,
        cost=cost,
        recommendation=None,  # type: ignore[arg-type]
        skipped={"scaling": "collectives unavailable"} if scaling_skipped else {},
        wall_seconds=1.0,
    )
    result.recommendation = recommend(result)
    return result


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
