"""compare/noise.py's rule on readings built here: each answer (regression, within gate, within
measured noise, inconclusive) on a case that must give it and one that must not."""

from __future__ import annotations

import math
import random

import pytest

from tests.fixtures.run_folders import loaded_host, quiet_host, samples
from workbench.compare.noise import Reading, Rule, judge, low_quantile
from workbench.compare.records import (
    IMPROVEMENT,
    INCONCLUSIVE,
    REGRESSION,
    REPORTED,
    WITHIN_GATE,
    WITHIN_NOISE,
    Gates,
)
from workbench.compare.stats import median, median_interval
from workbench.student_t import t_quantile

STEADY = Rule("steady best", "s", True, 0.05, low_quantile, quartiles=False)
FIRST = Rule("first call", "s", True, 0.15, repeated_only=True)


def reading(label: str, step: float, seed: int, loaded: bool = False) -> Reading:
    times = samples(seed, step)
    return Reading(label, low_quantile(times), times, loaded_host() if loaded else quiet_host())


def status(rule: Rule, newest: Reading, earlier: list[Reading]) -> str:
    return judge(rule, "timing", newest, earlier, Gates()).status


def test_students_t_and_the_median_interval_match_their_tables() -> None:
    assert t_quantile(0.995, 2) == pytest.approx(9.925, abs=1e-3)
    assert t_quantile(0.975, 10) == pytest.approx(2.228, abs=1e-3)
    assert median_interval(list(range(20)), 0.99) == (3, 16)  # x(4), x(17) of 20
    assert median_interval([1.0] * 5, 0.99) is None  # five pairs cannot reach 99%


def test_a_pair_judges_beyond_2x_and_leaves_what_it_cannot_measure_inconclusive() -> None:
    base = reading("base", 0.010, 1)
    assert status(STEADY, reading("new", 0.025, 2), [base]) == REGRESSION
    assert status(STEADY, reading("new", 0.004, 2), [base]) == IMPROVEMENT
    assert status(STEADY, reading("new", 0.018, 2), [base]) == INCONCLUSIVE  # 1.8x < 2x
    assert status(STEADY, reading("new", 0.0101, 2), [base]) == WITHIN_GATE
    unsettled = judge(STEADY, "timing", reading("new", 0.0125, 2), [base], Gates())
    assert unsettled.status == INCONCLUSIVE and "--remeasure" in unsettled.note


def test_a_first_call_is_judged_only_from_repeated_measurements() -> None:
    def once(label: str, value: float) -> Reading:
        return Reading(label, value, [], quiet_host())

    assert status(FIRST, once("new", 0.9), [once("base", 0.003)]) == INCONCLUSIVE
    assert status(FIRST, once("new", 0.0031), [once("base", 0.003)]) == WITHIN_GATE
    nights = [once(f"n{i}", 0.003 * (1 + 0.02 * (i % 3))) for i in range(6)]
    assert status(FIRST, once("new", 0.009), nights) == REGRESSION
    assert status(FIRST, once("new", 0.00305), nights) == WITHIN_GATE


def test_load_explains_a_slowdown_up_to_its_bound_and_can_hide_one_in_the_baseline() -> None:
    quiet = reading("base", 0.010, 1)
    assert status(STEADY, reading("new", 0.020, 2, loaded=True), [quiet]) == INCONCLUSIVE
    assert status(STEADY, reading("new", 0.100, 2, loaded=True), [quiet]) == REGRESSION  # 10x
    # A newest run that is no slower though loaded is no slower.
    assert status(STEADY, reading("new", 0.010, 2, loaded=True), [quiet]) == WITHIN_GATE
    hidden = judge(STEADY, "timing", reading("new", 0.010, 2), [reading("b", 0.010, 1, True)],
                   Gates())  # fmt: skip
    assert hidden.status == INCONCLUSIVE and "could hide" in hidden.note


def _nights(rng: random.Random, n: int, spread: float) -> list[Reading]:
    steps = [0.010 * math.exp(rng.gauss(0, spread)) for _ in range(n)]
    return [reading(f"n{i}", step, rng.randrange(10**6)) for i, step in enumerate(steps)]


def test_a_history_of_identical_runs_flags_nothing_and_catches_a_planted_25_percent() -> None:
    """200 histories of 5 identical runs that vary 5% from run to run (sd of the log), each
    judged against a sixth: none flagged. A planted +25% on quiet nights within 1% is caught,
    and a 25% speed-up is an improvement: both directions."""
    rng = random.Random(7)
    flagged = 0
    for _ in range(200):
        runs = _nights(rng, 6, 0.05)
        flagged += status(STEADY, runs[-1], runs[:-1]) in (REGRESSION, IMPROVEMENT)
    assert flagged == 0
    nights = _nights(rng, 5, 0.01)
    assert status(STEADY, reading("tonight", 0.0125, 99), nights) == REGRESSION
    assert status(STEADY, reading("tonight", 0.0080, 99), nights) == IMPROVEMENT
    narrow = [reading(f"n{i}", 0.010 * (0.96 + 0.04 * (i % 3)), i) for i in range(8)]
    within = judge(STEADY, "timing", reading("tonight", 0.0108, 98), narrow, Gates())
    assert within.status == WITHIN_NOISE, within.line()
    # A band wider than three gates could hide a slowdown of its width: not a pass.
    wide = _nights(random.Random(3), 5, 0.10)
    unsettled = judge(STEADY, "timing", reading("tonight", 0.0125, 98), wide, Gates())
    assert unsettled.status == INCONCLUSIVE, unsettled.line()


def test_short_serving_calls_wait_for_a_history_and_the_slowest_step_is_shown_only() -> None:
    short = Rule("p99 latency", "s", True, 0.05, median, repeated_only=True)
    base = Reading("base", 60e-6, samples(1, 60e-6), quiet_host())
    doubled = Reading("new", 180e-6, samples(2, 180e-6), quiet_host())
    assert status(short, doubled, [base]) == INCONCLUSIVE
    longer = Rule("p99 latency", "s", True, 0.05, median)
    assert status(longer, doubled, [base]) == REGRESSION
    slowest = Rule("steady max", "s", True, 0.05, max, gated=False)
    assert status(slowest, doubled, [base]) == REPORTED


def test_memory_is_judged_by_its_gate_alone() -> None:
    memory = Rule("peak host memory", "MiB", True, 0.10, timing=False)
    base = Reading("base", 500.0, [], loaded_host())
    assert status(memory, Reading("new", 600.0, [], loaded_host()), [base]) == REGRESSION
    assert status(memory, Reading("new", 520.0, [], quiet_host()), [base]) == WITHIN_GATE
