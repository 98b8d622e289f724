"""compare's serving judge, by step time's rules (compare/noise.py): a planted slowdown of the
tail is a regression, one within the pair's allowance is inconclusive, and a run measured loaded
is judged only beyond what its load explains."""

from __future__ import annotations

from tests.fixtures.run_folders import loaded_host, quiet_host, samples
from workbench.compare import noise
from workbench.compare.records import INCONCLUSIVE, REGRESSION, WITHIN_GATE, Gates
from workbench.compare.stats import median


def side(label: str, middle: float, seed: int, loaded: bool = False) -> noise.Reading:
    times = samples(seed, middle, n=200, spread=0.01)
    host = loaded_host() if loaded else quiet_host()
    return noise.Reading(label, median(times), times, host)


def judge(newest: noise.Reading, earlier: list[noise.Reading]):
    rule = noise.Rule("batch 1 compiled p99 latency", "s", True, Gates().step_time, median)
    return noise.judge(rule, "serving", newest, earlier, Gates())


def test_a_pair_flags_a_doubled_tail_and_allows_run_to_run_variation() -> None:
    base = side("base", 0.001, 1)
    assert judge(side("new", 0.0025, 2), [base]).status == REGRESSION
    assert judge(side("new", 0.0011, 2), [base]).status == INCONCLUSIVE  # 10%: within 2x
    assert judge(side("new", 0.001, 2), [base]).status == WITHIN_GATE


def test_a_history_flags_what_leaves_its_band() -> None:
    history = [side(f"night{i}", 0.001 * (1 + 0.005 * i), 10 + i) for i in range(4)]
    slower = judge(side("tonight", 0.0012, 20), history)
    assert slower.status == REGRESSION and slower.ratio is not None and slower.ratio > 1.15


def test_a_loaded_newest_run_is_judged_only_beyond_its_load() -> None:
    change = judge(side("new", 0.002, 2, loaded=True), [side("base", 0.001, 1)])
    assert change.status == INCONCLUSIVE and "loaded" in change.note
