"""compare's serving judge, by step time's rules: a planted slowdown of the tail or the host gap
is a regression, one within the run-to-run allowance or the history band is not, and a run
measured loaded is not judged."""

from __future__ import annotations

from tests.fixtures.run_folders import loaded_host, quiet_host, samples
from workbench.compare.records import LOADED, REGRESSION, RUN_TO_RUN, WITHIN_GATE, Gates
from workbench.compare.serving import Sample, judge_samples


def side(label: str, median: float, seed: int, loaded: bool = False) -> Sample:
    times = samples(seed, median, n=200, spread=0.01)
    host = loaded_host() if loaded else quiet_host()
    return Sample(label, sorted(times)[len(times) // 2], times, host)


def judge(newest: Sample, earlier: list[Sample]):
    return judge_samples("batch 1 compiled p99 latency", "s", True, newest, earlier, Gates())


def test_a_pair_flags_a_doubled_tail_and_allows_run_to_run_variation() -> None:
    base = side("base", 0.001, 1)
    assert judge(side("new", 0.002, 2), [base]).status == REGRESSION
    assert judge(side("new", 0.0011, 2), [base]).status == RUN_TO_RUN  # 10%: within 50%
    assert judge(side("new", 0.001, 2), [base]).status == WITHIN_GATE


def test_a_history_flags_what_leaves_its_band() -> None:
    history = [side(f"night{i}", 0.001 * (1 + 0.005 * i), 10 + i) for i in range(4)]
    slower = judge(side("tonight", 0.0012, 20), history)
    assert slower.status == REGRESSION and slower.ratio is not None and slower.ratio > 1.15


def test_a_loaded_newest_run_is_not_judged() -> None:
    change = judge(side("new", 0.002, 2, loaded=True), [side("base", 0.001, 1)])
    assert change.status == LOADED and "loaded" in change.note
