"""Notebook 04's decision rules on constructed records: every choice is read from throughput
against noise, noisy or loaded measurements are taken again and, if they stay so, named in the
headline and the verdict. Each rule has a case it must pass and one it must fail."""

from __future__ import annotations

import dataclasses
import os

import pytest

from tests.fixtures.retune_results import make_result
from workbench.processes import FINISHED, ChildOutcome
from workbench.scorecard import ATTENTION, PASS
from workbench.targets.cpu import CpuTarget
from workbench.timing import HostLoad, Measurement
from workbench.tuning import views
from workbench.tuning.dataloader import LoaderResult, LoaderSetting, choose_setting
from workbench.tuning.dataloader import _line as loader_line
from workbench.tuning.noise import (
    RUN_TO_RUN_FLOOR,
    Rated,
    RemeasurePolicy,
    indistinguishable,
    with_own_helpers,
)
from workbench.tuning.parallel import OK as RUN_OK
from workbench.tuning.parallel import ScalingRun, ScalingStudy, choose_world_size, launch_load
from workbench.tuning.parallel import _line as launch_line
from workbench.tuning.records import RetuneResult, RetuneSettings, retuning_verdict
from workbench.tuning.retune import _plans, _skipped
from workbench.tuning.trials import OK, MemoryBudget, SearchResult, Trial, choose_batch, classify
from workbench.workload import load_workload


def spread(median: float, relative_iqr: float, n: int = 10) -> list[float]:
    """n evenly spaced step times around `median` whose IQR is about `relative_iqr` of it
    (the middle half of an even spacing spans half its range)."""
    half = median * relative_iqr
    return [median - half + 2 * half * i / (n - 1) for i in range(n)]


def noisy(median: float) -> list[float]:
    """Step times whose IQR is 250% of their median: other load stalling some steps."""
    return [median * 0.2, median * 0.5, median, median * 3, median * 6]


def host(other_share: float, loaded: bool) -> HostLoad:
    return HostLoad(2, 2, 1.0, other_share, 0.0, 1.0, loaded)


# ---------------------------------------------------------------------------------------------
# The comparison rule


def test_settings_apart_beyond_their_spread_are_distinguishable_and_overlapping_ones_are_not():
    fastest = Rated("a", 10, Measurement(spread(0.010, 0.04)))
    clearly_slower = Rated("b", 10, Measurement(spread(0.013, 0.04)))
    assert not indistinguishable(clearly_slower, fastest)
    overlapping = Rated("c", 10, Measurement(spread(0.0106, 0.2)))
    assert indistinguishable(overlapping, fastest)
    # Steady steps in both, a gap inside the run-to-run floor: not a real difference.
    within_floor = Rated("d", 10, Measurement([0.010 / (1 - RUN_TO_RUN_FLOOR / 2)] * 5))
    assert indistinguishable(within_floor, Rated("a", 10, Measurement([0.010] * 5)))


# ---------------------------------------------------------------------------------------------
# DataLoader workers


def loader(workers: int, wait: float, steps: list[float], items: int = 8) -> LoaderResult:
    setting = LoaderSetting(workers, False, 2 if workers else None)
    return LoaderResult(setting, "ok", Measurement([wait] * len(steps)), Measurement(steps), items)


def test_the_dataloader_rule_picks_200x_faster_workers_although_the_main_process_waits_less():
    """The issue's seed-mlp case: 0 workers at 46 samples/s waited a smaller share of its (long)
    step than 2 workers at 10,173 samples/s, and the wait-share rule chose 0."""
    main = loader(0, 0.0001, spread(0.177, 0.02))
    two = loader(2, 0.0004, spread(0.000786, 0.05))
    assert main.wait_share is not None and two.wait_share is not None
    assert main.wait_share < two.wait_share  # what misled the old rule
    chosen, fastest = choose_setting([main, two]) or (None, None)
    assert chosen is two and fastest is two


def test_the_dataloader_rule_takes_fewer_workers_only_when_equal_within_noise():
    # 10% apart, but each spreads 15%: their throughput ranges overlap.
    main = loader(0, 0.01, spread(0.100, 0.15))
    two_equal = loader(2, 0.001, spread(0.090, 0.15))
    chosen, fastest = choose_setting([two_equal, main]) or (None, None)
    assert fastest is two_equal and chosen is main, "equal within noise: the cheaper setting"
    two_faster = loader(2, 0.001, spread(0.080, 0.02))
    steady_main = loader(0, 0.01, spread(0.100, 0.02))
    chosen, _ = choose_setting([steady_main, two_faster]) or (None, None)
    assert chosen is two_faster, "faster beyond noise: never the slower, cheaper setting"


# ---------------------------------------------------------------------------------------------
# Batch size and accumulation


def sweep_trial(batch: int, step_times: list[float]) -> Trial:
    return Trial("sweep", batch, OK, 1.0, Measurement(step_times), batch)


def test_the_batch_rule_never_takes_a_batch_slower_beyond_noise():
    # 64 per step at 0.010 s is 6,400/s; 16 per step at 0.004 s is 4,000/s.
    slower_small = [sweep_trial(16, spread(0.004, 0.02)), sweep_trial(64, spread(0.010, 0.02))]
    choice = choose_batch(slower_small)
    assert choice is not None and choice.batch_size == 64 and choice.within_noise == (64,)
    # 16 at 0.0026 s is 6,150/s: inside the floor of 6,400, so the smaller batch may stand in.
    tied = [sweep_trial(16, spread(0.0026, 0.02)), sweep_trial(64, spread(0.010, 0.02))]
    choice = choose_batch(tied)
    assert choice is not None and (choice.batch_size, choice.best_batch_size) == (16, 64)
    assert choice.within_noise == (16, 64) and choice.largest_within_noise == 64


def test_the_plan_needs_no_accumulation_when_a_batch_within_noise_holds_the_global_batch():
    workload = load_workload("seed-mlp")
    settings = RetuneSettings(global_batch=64, reference_global_batch=64)
    tied = choose_batch(
        [sweep_trial(16, spread(0.0026, 0.02)), sweep_trial(64, spread(0.010, 0.02))]
    )
    assert tied is not None
    plan = _plans(workload, settings, tied, 1)[0]
    assert (plan.per_core_batch, plan.accumulation_steps) == (64, 1)
    # Only 16 is fast: the plan accumulates rather than run the slower 64.
    only_small = choose_batch(
        [sweep_trial(16, spread(0.002, 0.02)), sweep_trial(64, spread(0.010, 0.02))]
    )
    assert only_small is not None and only_small.within_noise == (16,)
    plan = _plans(workload, settings, only_small, 1)[0]
    assert (plan.per_core_batch, plan.accumulation_steps) == (16, 4)


# ---------------------------------------------------------------------------------------------
# Data-parallel width


def launch_run(world: int, step: float, efficiency: float, relative_iqr: float = 0.02):
    return ScalingRun(
        world, RUN_OK, step=Measurement(spread(step, relative_iqr)), items_per_step=100 * world,
        efficiency=efficiency,
    )  # fmt: skip


def test_the_world_size_rule_takes_the_fastest_and_a_narrower_one_only_within_noise():
    # World sizes 3 and 4: the widest above the floor (4, 2.8x) is slower than 3 (3.0x).
    three, four = launch_run(3, 0.010, 1.0), launch_run(4, 0.01429, 0.7)
    study = ScalingStudy("gloo", 100, 1, 4, 1, 10, [launch_run(1, 0.010, 1.0), three, four])
    assert choose_world_size(study, 0.7) is three
    # 4 clearly faster than 2 is taken; within noise of 2 the narrower 2 is.
    two, fast_four = launch_run(2, 0.010, 1.0), launch_run(4, 0.0105, 0.95)
    assert choose_world_size(ScalingStudy("gloo", 100, 1, 4, 1, 10, [two, fast_four]), 0.7) is (
        fast_four
    )
    tied_four = launch_run(4, 0.0195, 0.51)  # 2.6% faster than 2: inside the floor
    assert choose_world_size(ScalingStudy("gloo", 100, 1, 4, 1, 10, [two, tied_four]), 0.5) is (two)
    # Below the efficiency floor a size is not a candidate, however fast.
    assert choose_world_size(ScalingStudy("gloo", 100, 1, 4, 1, 10, [two, tied_four]), 0.7) is (two)
    assert choose_world_size(ScalingStudy("gloo", 100, 1, 4, 1, 10, [two, fast_four]), 0.96) is (
        two
    )


# ---------------------------------------------------------------------------------------------
# Re-measuring


@dataclasses.dataclass
class Attempt:
    step: Measurement
    seconds: float = 10.0
    earlier: list[Measurement] = dataclasses.field(default_factory=list)
    remeasure_note: str = ""

    @property
    def measurement(self) -> Measurement:
        return self.step


def test_a_noisy_measurement_is_taken_again_and_the_quiet_attempt_kept():
    first, quiet = Attempt(Measurement(noisy(0.01))), Attempt(Measurement(spread(0.01, 0.02)))
    policy = RemeasurePolicy(max_repeats=2, budget_s=100.0)
    kept = policy.settle(first, lambda: quiet, "sweep batch 16")
    assert kept is quiet and kept.earlier == [first.step] and policy.repeats == 1
    assert "measured 2 times" in kept.remeasure_note


def test_a_quiet_measurement_is_not_taken_again():
    quiet = Attempt(Measurement(spread(0.01, 0.02)))

    def again() -> Attempt:
        raise AssertionError("a quiet measurement was measured again")

    policy = RemeasurePolicy()
    assert policy.settle(quiet, again, "sweep batch 16") is quiet
    assert policy.repeats == 0 and quiet.remeasure_note == ""


def test_a_loaded_measurement_is_taken_again_and_the_budget_bounds_the_attempts():
    loaded = Attempt(Measurement(spread(0.01, 0.02), host=host(0.6, True)))
    clean = Attempt(Measurement(spread(0.012, 0.05), host=host(0.05, False)))
    kept = RemeasurePolicy().settle(loaded, lambda: clean, "DataLoader 2 worker(s)")
    assert kept is clean, "clean before loaded, even when the loaded attempt looked faster"
    stays = Attempt(Measurement(noisy(0.01)), seconds=80.0)
    policy = RemeasurePolicy(max_repeats=5, budget_s=100.0)
    calls: list[Attempt] = []

    def again() -> Attempt:
        calls.append(Attempt(Measurement(noisy(0.01)), seconds=80.0))
        return calls[-1]

    policy.settle(stays, again, "sweep batch 16")
    assert len(calls) == 1 and policy.spent_s == 80.0, "a second repeat would pass 100 s"
    assert policy.refused == ["sweep batch 16"]


def with_sweep_trial(result: RetuneResult, step: Measurement, note: str = "") -> RetuneResult:
    trial = result.sweep[0]
    trial.steady, trial.remeasure_note = step, note
    return result


def test_what_stays_noisy_is_attention_named_once_in_the_verdict_and_a_quiet_run_passes():
    quiet = make_result()
    assert retuning_verdict(quiet).status == PASS
    assert "Attention" not in quiet.headline()
    unsettled = with_sweep_trial(
        make_result(), Measurement(noisy(0.002)), "measured 3 times, the quietest kept"
    )
    verdict = retuning_verdict(unsettled)
    assert verdict.status == ATTENTION and "stayed noisy" in verdict.reason
    assert "sweep trial at batch 64 (IQR" in verdict.reason
    # The answer says its choices are provisional and points at the verdict, which names them:
    # a report shows both, so the measurement is named once.
    headline = unsettled.headline()
    assert "the 1 measurement the verdict names as unsettled are provisional" in headline
    assert "sweep trial at batch 64" not in headline


def test_a_loaded_measurement_is_attention_named_and_claims_no_clean_choice():
    result = make_result()
    assert result.loader is not None and result.loader.recommended is not None
    chosen = result.loader.recommended
    assert chosen.steps is not None
    chosen.steps = Measurement(chosen.steps.times, host=host(0.6, True))
    verdict = retuning_verdict(result)
    assert verdict.status == ATTENTION and "loaded" in verdict.reason
    assert "DataLoader 1 worker(s), prefetch 2" in verdict.reason
    assert "the verdict names as unsettled are provisional" in result.headline()
    from workbench.tuning.recommend import recommend

    evidence = next(i.evidence for i in recommend(result).items if i.knob == "DataLoader")
    assert "PROVISIONAL" in evidence and "1 worker(s), prefetch 2: LOADED" in evidence
    chosen.steps = Measurement(chosen.steps.times, host=host(0.05, False))
    assert retuning_verdict(result).status == PASS


def test_dataloader_workers_and_sibling_ranks_are_the_measurements_own_cpu_not_other_load():
    cores = os.cpu_count() or 1
    # Workers kept 60% of the machine busy for the 1 s window: that is this setting's work.
    reading = host(0.6, True)
    own = with_own_helpers(reading, 0.6 * cores)
    assert not own.loaded and own.other_share == pytest.approx(0.0)
    # Other load beyond the workers' share still marks it loaded.
    assert with_own_helpers(reading, 0.1 * cores).loaded


# ---------------------------------------------------------------------------------------------
# What the report shows


def test_the_headline_box_takes_the_verdicts_colour(capsys: pytest.CaptureFixture[str]):
    """A stage skipped for a good reason (no sequence workload: no buckets) once turned the
    headline yellow under a green PASS."""
    passing = make_result(with_buckets=False)
    passing.skipped["buckets"] = "not a sequence workload"
    assert retuning_verdict(passing).status == PASS
    views.headline(passing)
    assert capsys.readouterr().out.startswith("[ok] ")
    views.headline(with_sweep_trial(make_result(), Measurement(noisy(0.002))))
    assert capsys.readouterr().out.startswith("[warn] ")


def test_tables_claim_a_p99_only_where_the_samples_support_it(capsys: pytest.CaptureFixture[str]):
    result = make_result()
    views.sweep(result)
    shown = capsys.readouterr().out
    assert "max of 3" in shown and "p99:" not in shown
    with_sweep_trial(result, Measurement(spread(0.002, 0.02, n=662)))
    views.sweep(result)
    assert "p99:" in capsys.readouterr().out


def test_the_cost_caption_names_the_world_size_it_prices(capsys: pytest.CaptureFixture[str]):
    result = make_result()
    assert result.cost is not None and result.cost.rows[0].workers == 2
    views.cost(result)
    shown = capsys.readouterr().out
    assert "at world size 2" in shown and "world size 1" not in shown


def test_a_launch_counts_its_other_ranks_as_its_own_work_but_not_other_processes():
    cores = os.cpu_count() or 1
    # Two ranks each saw the other's CPU (half the machine) as other load.
    ranks = [
        {"host": dataclasses.asdict(host(0.5, True)), "cpu_seconds": 0.5 * cores},
        {"host": dataclasses.asdict(host(0.5, True)), "cpu_seconds": 0.5 * cores},
    ]
    load = launch_load(ranks)
    assert load is not None and not load.loaded
    # A third process's load on top stays: the launch is loaded.
    ranks[1]["host"] = dataclasses.asdict(host(0.9, True))
    busy = launch_load(ranks)
    assert busy is not None and busy.loaded and busy.other_share == pytest.approx(0.4)


def test_a_trial_carries_the_load_its_child_measured_into_its_steady_measurement():
    def outcome(load: HostLoad | None) -> ChildOutcome:
        result = {
            "items_per_step": 8,
            "steady_times": [0.01] * 5,
            "steady_host": dataclasses.asdict(load) if load else None,
        }
        return ChildOutcome(FINISHED, result, 0, 2.0, "")

    budget = MemoryBudget(2**30, "test", 0.1)
    loaded = classify("sweep", 8, outcome(host(0.6, True)), CpuTarget(), budget)
    assert loaded.steady is not None and loaded.steady.loaded
    assert "(LOADED)" in loaded.line()
    quiet = classify("sweep", 8, outcome(host(0.05, False)), CpuTarget(), budget)
    assert quiet.steady is not None and not quiet.steady.loaded
    assert "LOADED" not in quiet.line()


def test_each_measured_setting_says_its_steps_why_it_failed_and_its_time_in_one_line():
    """Trials, launches and DataLoader settings word their log lines alike (steps.log_line):
    the steps only where they were timed, the failure's first words only where it failed."""
    steps = Measurement([0.010, 0.011, 0.012])
    fits = Trial("sweep", 8, OK, 0.5, steps, 8, peak_memory_bytes=3 * 2**20)
    assert fits.line().startswith("sweep batch 8: ok, median step ")
    assert ", peak 3 MiB" in fits.line() and "(" not in fits.line()
    assert fits.line().endswith("]")
    failed = Trial("sweep", 16, OK, 0.5, None, 16, error="MemoryError: test\nmore")
    assert "median step" not in failed.line() and "(MemoryError: test)" in failed.line()
    hung = ScalingRun(2, RUN_OK, "rank 1 never arrived", None, 0, 0.0)
    assert launch_line(hung) == "world size 2: ok (rank 1 never arrived)"  # no time: none taken
    waits = Measurement([0.001, 0.001, 0.001])
    loader = LoaderResult(LoaderSetting(1, False, 2), "ok", waits, steps, 8)
    assert loader_line(loader).startswith("dataloader 1 worker(s), prefetch 2: ok, waiting 9%")
    assert "median step" not in loader_line(dataclasses.replace(loader, waits=None))


def test_a_stage_that_did_not_run_says_why_in_the_order_the_stages_run():
    search = SearchResult(1, 8, 5, stopped="even batch 1 ran out of memory")
    nothing = _skipped(search, [], None, None)
    assert list(nothing) == [
        "sweep", "scaling", "plan", "accumulation", "dataloader", "buckets", "cost"
    ]  # fmt: skip
    assert nothing["dataloader"] == "no batch size fits (even batch 1 ran out of memory)"
    result = make_result(scaling_skipped=True)
    assert result.scaling is not None and result.buckets is not None
    ran = _skipped(result.search, result.sweep, result.scaling, result.buckets)
    assert ran == {"scaling": "collectives unavailable"}
