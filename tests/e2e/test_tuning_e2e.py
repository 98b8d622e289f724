"""Retuning (notebook 04's package side) with real processes: batch trials in child processes
(forkserver and spawn), the DataLoader sweep, a whole small retuning, and torchrun launches of real
gloo ranks. The fixture workloads fail on purpose; assertions are about structure and ratios,
never absolute times: a deadline is checked against the bound the test itself configured.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from tests.fixtures.retune_results import search_only_result
from tests.fixtures.tuning_workloads import OOM_ABOVE, failing_workloads
from workbench.processes import (
    FINISHED,
    TERMINATE_GRACE_S,
    run_in_child,
)
from workbench.targets.cpu import CpuTarget
from workbench.tuning import views
from workbench.tuning.dataloader import (
    calibrate_sample_work,
    loader_settings,
    sweep_loader,
)
from workbench.tuning.parallel import OK as RUN_OK
from workbench.tuning.parallel import TIMEOUT as RUN_TIMEOUT
from workbench.tuning.parallel import (
    RankJob,
    launch,
)
from workbench.tuning.records import (
    RetuneSettings,
    result_data,
)
from workbench.tuning.retune import run_retuning
from workbench.tuning.trials import (
    ERROR,
    OK,
    OOM,
    OVER_BUDGET,
    SEARCH,
    SEARCH_STEADY_STEPS,
    SEARCH_WARMUP,
    TIMEOUT,
    BatchTrialJob,
    MemoryBudget,
    SearchResult,
    Trial,
    TrialRunner,
    choose_batch,
    classify,
    search_largest_batch,
    sweep_batch_sizes,
    trial_bound,
)
from workbench.workload import WorkloadSpec, load_workload

# Trials, DataLoader workers and torchrun ranks are process trees of their own whose timings the
# tests compare: they run alone, not beside other tests on other xdist workers.
pytestmark = pytest.mark.serial

MiB = 2**20


def runner(spec: str, budget: MemoryBudget | None = None, timeout_s: float = 60.0) -> TrialRunner:
    budget = budget or MemoryBudget(64 * 2**30, "test", 0.0)
    return TrialRunner(WorkloadSpec(spec), CpuTarget(), budget, "eager", timeout_s, log=print)


def quick_trial(trials: TrialRunner, batch_size: int) -> Trial:
    return trials.run(SEARCH, batch_size, SEARCH_STEADY_STEPS, SEARCH_WARMUP)


def rank_job(spec: str, timeout_s: float) -> RankJob:
    return RankJob(WorkloadSpec(spec), "cpu", 16, 2, 5, timeout_s, 1, "")


@pytest.fixture(scope="module")
def fixtures(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with failing_workloads(tmp_path_factory.mktemp("tuning_fixtures")) as module:
        yield module


def test_search_converges_below_a_memory_error_within_the_bound(fixtures: str) -> None:
    lines: list[str] = []
    trials = runner(f"{fixtures}:oom_above")
    trials.log = lines.append
    result = search_largest_batch(trials, 1, 200)
    assert (result.largest_fit, result.smallest_failure) == (OOM_ABOVE, OOM_ABOVE + 1)
    assert len(result.trials) <= trial_bound(1, 200) == math.ceil(math.log2(200)) + 2
    # Every trial is kept, in order, and each printed its line.
    assert len(lines) == len(result.trials)
    assert [t.batch_size for t in result.trials][:2] == [1, 200]
    for trial in result.trials:
        assert trial.fits == (trial.batch_size <= OOM_ABOVE)
        if not trial.fits:
            assert trial.status == OOM and trial.oom_evidence == "MemoryError"
            assert "MemoryError" in (trial.error or "")
        else:
            assert trial.steady is not None and trial.throughput and trial.peak_memory_bytes


def test_trial_whose_peak_passes_the_budget_does_not_fit(fixtures: str) -> None:
    trials = runner(f"{fixtures}:allocates")
    small = quick_trial(trials, 8)
    # A budget between the two peaks: the larger batch holds 504 MiB more during its forward.
    budget = MemoryBudget((small.peak_memory_bytes or 0) + 256 * MiB, "test", 0.0)
    trials = runner(f"{fixtures}:allocates", budget)
    fits, over = quick_trial(trials, 8), quick_trial(trials, 512)
    assert fits.status == OK
    assert over.status == OVER_BUDGET and not over.fits
    assert (over.peak_memory_bytes or 0) - (fits.peak_memory_bytes or 0) > 256 * MiB
    assert "host: peak resident memory" in over.memory_source


@pytest.fixture
def hang_marker(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Where a hanging fixture writes its pid (HANG_MARKER) before it hangs."""
    marker = tmp_path / "hung-pid"
    monkeypatch.setenv("HANG_MARKER", str(marker))
    return marker


def _killed(marker: Path) -> bool:
    """The process that wrote its pid to the marker is gone (a zombie, not yet reaped, is)."""
    hung = int(marker.read_text())
    return not psutil.pid_exists(hung) or psutil.Process(hung).status() == psutil.STATUS_ZOMBIE


def test_hanging_trial_is_killed_at_its_deadline(fixtures: str, hang_marker: Path) -> None:
    timeout = 4.0
    trial = quick_trial(runner(f"{fixtures}:hangs", timeout_s=timeout), 16)
    assert trial.status == TIMEOUT and not trial.fits
    assert timeout <= trial.seconds < 2 * timeout
    assert _killed(hang_marker)


def test_a_batch_that_crashes_the_model_is_recorded_and_the_sweep_goes_on(fixtures: str) -> None:
    trials = sweep_batch_sizes(runner(f"{fixtures}:crashes"), [4, 8, 16], steady_steps=3)
    assert [t.status for t in trials] == [OK, ERROR, OK]
    broken = trials[1]
    assert broken.error.startswith("ValueError: reshape expects a batch divisible by 3")
    assert "wb_tuning_fixtures.py" in (broken.location or "")
    assert broken.oom_evidence is None
    assert choose_batch(trials).batch_size in (4, 16)


def test_a_trial_killed_by_sigkill_counts_as_out_of_memory(fixtures: str) -> None:
    trials = runner(f"{fixtures}:killed")
    assert quick_trial(trials, 16).status == OK
    killed = quick_trial(trials, 32)
    assert killed.status == OOM and "SIGKILL" in (killed.oom_evidence or "")
    assert killed.exit_code == -9


def test_a_trial_in_a_fresh_interpreter_reports_like_a_forked_one() -> None:
    """Neuron and XLA trials start with "spawn" (their runtimes may start at import)."""
    job = BatchTrialJob(WorkloadSpec("seed-mlp"), "cpu", 4, "eager", 3, SEARCH_WARMUP)
    outcome = run_in_child(job, "spawn", timeout_s=120)
    assert outcome.status == FINISHED, outcome.output_tail
    assert outcome.result["error"] is None and len(outcome.result["steady_times"]) == 3
    assert outcome.result["peak_memory_bytes"] > 0


def test_a_compiled_trial_carries_its_compile_ledger_into_the_table_and_result(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A real torch.compile (Inductor) trial in a child process: its compiles come back with
    cause and phase, and 04's trial table and ledger show them."""
    job = BatchTrialJob(WorkloadSpec("seed-mlp"), "cpu", 4, "compiled", 3, SEARCH_WARMUP)
    outcome = run_in_child(job, CpuTarget.trial_start_method, timeout_s=300)
    assert outcome.status == FINISHED, outcome.output_tail
    budget = MemoryBudget(2**40, "test", 0.1)
    trial = classify(SEARCH, 4, outcome, CpuTarget(), budget)
    assert trial.fits and trial.compiles, outcome.result
    assert trial.compiles[0].cause == "first compile" and trial.compiles[0].phase == "first_call"
    assert not trial.steady_compiles and trial.compile_seconds and trial.compile_seconds > 0
    assert f"{len(trial.compiles)} compile(s)" in trial.line()
    search = SearchResult(4, 4, 3, trials=[trial], largest_fit=4)
    result = search_only_result(search)
    views.compiles(result)
    shown = capsys.readouterr().out
    assert "Compile ledger of every trial" in shown and "first compile" in shown
    stored = json.loads(json.dumps(result_data(result), default=str))["search"]["trials"][0]
    assert stored["compiles"][0]["cause"] == "first compile"


def test_a_whole_small_retuning_runs_every_stage_and_recommends_from_them() -> None:
    settings = RetuneSettings(
        max_batch=8, batch_sizes=(4, 8), steady_steps=3, dataloader_workers=(0,),
        loader_steps=3, world_sizes=(1,), scaling_steps=3, per_sample_cost_ms=0.0,
    )  # fmt: skip
    result = run_retuning(
        WorkloadSpec("seed-mlp"), load_workload("seed-mlp"), CpuTarget(), settings, log=print
    )
    assert result.choice is not None and result.choice.batch_size in (4, 8)
    recommendation = result.recommendation
    # The plan may use any batch the sweep could not tell from the fastest (fewer accumulation
    # steps for the same global batch); which ones tie depends on this machine's noise.
    assert recommendation.per_core_batch in result.choice.within_noise
    assert result.choice.batch_size in result.choice.within_noise
    assert recommendation.world_size == 1
    # The DataLoader stage ran the one setting asked for, and its answer (which depends on how
    # long this machine takes to feed a step) is the one the recommendation carries.
    loader = result.loader
    assert loader is not None and [r.setting.num_workers for r in loader.results] == [0]
    chosen = loader.recommended.setting.num_workers if loader.recommended else None
    assert recommendation.dataloader_workers == chosen
    assert {item.knob for item in recommendation.items} >= {"per-core batch", "world size"}
    assert result.wall_seconds > 0


def test_dataloader_sweep_finds_the_worker_count_that_hides_the_data_cost(fixtures: str) -> None:
    """Each sample costs 6 ms of real CPU work and the step waits 400 ms on a (simulated)
    device: in the main process the loading adds about 50 ms to every step; one worker does it
    meanwhile and leaves only the hand-over: about 2 ms on a quiet machine, but 12 ms on every
    step (6% of a 200 ms step) in a CI run whose VM lost 15-38% of its CPU time to the
    hypervisor, when waking the main process and passing the batch's shared-memory handles
    wait for the scheduler. A 400 ms step keeps that under the 5% limit; 10 steps average
    the rest out."""
    work = calibrate_sample_work(6.0)
    assert work.rounds > 0
    study = sweep_loader(
        WorkloadSpec(f"{fixtures}:slow_step"),
        CpuTarget(),
        8,
        loader_settings([0, 1], [2], pin_memory_helps=False),
        work,
        items_per_sample=1,
        steps=10,
        timeout_s=60,
    )
    main, one = study.results
    assert main.status == one.status == "ok"
    assert main.wait_share > 3 * one.wait_share
    assert main.wait_share > study.limit
    assert study.recommended is one


def test_torchrun_gloo_launch_at_world_size_two_finishes() -> None:
    run = launch(rank_job("seed-mlp", 120), 2, timeout_s=120)
    assert run.status == RUN_OK, run.output_tail
    assert run.step is not None and len(run.step.times) == 5


def test_a_launch_hung_in_a_collective_is_killed_within_its_bound(
    fixtures: str, hang_marker: Path
) -> None:
    timeout = 15.0
    run = launch(rank_job(f"{fixtures}:rank1_never_arrives", timeout), 2, timeout_s=timeout)
    assert run.status == RUN_TIMEOUT and "process group killed" in run.reason
    assert hang_marker.exists(), "rank 1 never reached its step: the launch timed out earlier"
    assert run.seconds < timeout + TERMINATE_GRACE_S + timeout / 2
    assert _killed(hang_marker)
