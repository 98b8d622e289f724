"""The one tail rule, MLPerf LoadGen's early-stopping estimate (mlcommons/inference
loadgen/early_stopping.cc, results.cc): the minimum counts LoadGen asks for before it reports a
percentile, and the "would discard" counts it prints past them, at the points its own algorithm
gives (computed with LoadGen's binary search over its regularized incomplete beta, single-stream
scenario, 99% confidence, tolerance 0)."""

from __future__ import annotations

import math
from fractions import Fraction

import pytest

from workbench.timing import (
    Measurement,
    early_stopping_discards,
    early_stopping_estimate,
    samples_for_percentile,
)


def test_the_minimum_counts_are_loadgens() -> None:
    assert samples_for_percentile(0.90) == 64
    assert samples_for_percentile(0.95) == 130
    assert samples_for_percentile(0.99) == 662
    # Must fail: one fewer is "Only processed n queries" in LoadGen: no estimate at all.
    assert early_stopping_discards(63, 0.90) is None
    assert early_stopping_discards(129, 0.95) is None
    assert early_stopping_discards(661, 0.99) is None


@pytest.mark.parametrize(
    ("count", "q", "discarded"),
    [
        (64, 0.90, 0),
        (130, 0.95, 0),
        (662, 0.99, 0),
        (837, 0.99, 0),  # the last count whose p99 is the maximum
        (838, 0.99, 1),
        (1000, 0.99, 1),
        (1001, 0.99, 2),
        (2048, 0.90, 172),
        (5000, 0.99, 32),
    ],
)
def test_the_discard_counts_are_the_ones_loadgen_prints(
    count: int, q: float, discarded: int
) -> None:
    assert early_stopping_discards(count, q) == discarded


def test_the_estimate_is_the_order_statistic_above_the_sample_percentile() -> None:
    ordered = [float(i) for i in range(1, 5001)]  # 1 .. 5000
    # 32 discarded: the 33rd largest, above the interpolated p99 (4950.01).
    assert early_stopping_estimate(ordered, 0.99) == 4968.0
    assert early_stopping_estimate(ordered[:662], 0.99) == 662.0  # the maximum
    assert early_stopping_estimate(ordered[:661], 0.99) is None


def test_a_tail_is_claimed_only_where_the_samples_support_it() -> None:
    few = Measurement([0.001 * (i + 1) for i in range(661)])
    assert few.tail(0.99) == ("max of 661", pytest.approx(0.661))
    assert not few.supports(0.99) and few.p99 is None
    many = Measurement([0.001 * (i + 1) for i in range(2000)])
    label, value = many.tail(0.99)
    assert label == "p99" and many.supports(0.99)
    discarded = early_stopping_discards(2000, 0.99)
    assert discarded is not None and discarded > 0
    assert value == pytest.approx(0.001 * (2000 - discarded)) == many.p99


def _at_most(over: int, count: int, q: Fraction) -> Fraction:
    """P(at most `over` of `count` samples above the q-th percentile), exactly: LoadGen's
    odds(h, t) = BetaRegularized[q, h, 1 + t] with h + t = count."""
    return sum(
        (Fraction(math.comb(count, k)) * (1 - q) ** k * q ** (count - k) for k in range(over + 1)),
        Fraction(0),
    )


def test_the_first_discard_sits_where_loadgens_binomial_puts_it_in_exact_arithmetic() -> None:
    """LoadGen allows t over-latency queries while P(at most t of n over) < 1 - 0.99; in exact
    rationals the second allowed one (the first discard) arrives at 838 queries for p99."""
    q, bound = Fraction(99, 100), Fraction(1, 100)
    assert _at_most(1, 661, q) >= bound > _at_most(1, 662, q)  # the minimum count, 662
    assert _at_most(2, 837, q) >= bound > _at_most(2, 838, q)  # the first discard, 838
    assert early_stopping_discards(837, 0.99) == 0 and early_stopping_discards(838, 0.99) == 1
