"""The statistics a comparison rests on: medians, a two-sided Mann-Whitney U test, a bootstrap
for an estimate's own noise, and the sign test with its interval for the median of paired
ratios (Student's t is workbench.student_t).

The U test compares whole samples by rank, so a burst of slow steps moves it far less than it
moves a mean; it needs no assumption about the shape of step-time distributions, which are
skewed. The p-value uses the normal approximation with tie and continuity corrections, accurate
for the sample sizes a baseline keeps (tens of steady-state steps per run).
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence


def median(values: Sequence[float]) -> float:
    ordered = sorted(values)
    n = len(ordered)
    if n == 0:
        raise ValueError("median of no values")
    middle = n // 2
    return ordered[middle] if n % 2 else (ordered[middle - 1] + ordered[middle]) / 2


def _ranks(values: Sequence[float]) -> tuple[list[float], list[int]]:
    """Mid-ranks (ties share the mean of their ranks) and the size of each tie group."""
    order = sorted(range(len(values)), key=values.__getitem__)
    ranks = [0.0] * len(values)
    ties = []
    start = 0
    while start < len(order):
        end = start
        while end + 1 < len(order) and values[order[end + 1]] == values[order[start]]:
            end += 1
        for position in range(start, end + 1):
            ranks[order[position]] = (start + end) / 2 + 1
        ties.append(end - start + 1)
        start = end + 1
    return ranks, ties


def mann_whitney_u(a: Sequence[float], b: Sequence[float]) -> tuple[float, float]:
    """U statistic of `a` and the two-sided p-value that `a` and `b` come from one distribution."""
    n1, n2 = len(a), len(b)
    if n1 == 0 or n2 == 0:
        raise ValueError("the Mann-Whitney U test needs two non-empty samples")
    ranks, ties = _ranks(list(a) + list(b))
    u1 = sum(ranks[:n1]) - n1 * (n1 + 1) / 2
    n = n1 + n2
    mean_u = n1 * n2 / 2
    tie_term = sum(t**3 - t for t in ties) / (n * (n - 1)) if n > 1 else 0.0
    variance = n1 * n2 / 12 * ((n + 1) - tie_term)
    if variance <= 0:  # every value equal: no evidence of any difference
        return u1, 1.0
    z = (abs(u1 - mean_u) - 0.5) / math.sqrt(variance)
    p = math.erfc(max(z, 0.0) / math.sqrt(2))
    return u1, min(1.0, p)


def stdev(values: Sequence[float]) -> float:
    """The sample standard deviation (Bessel's n - 1); 0 for fewer than two values."""
    n = len(values)
    if n < 2:
        return 0.0
    mean = sum(values) / n
    return math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))


def bootstrap_log_sd(
    samples: Sequence[float], estimate: Callable[[list[float]], float], resamples: int = 200
) -> float:
    """How much an estimate of these samples (a median, a low quantile) moves by which samples
    happened to be drawn: the standard deviation of its logarithm over `resamples` resamples
    with replacement, seeded so that one comparison always reads the same."""
    values = [v for v in samples if v > 0]
    if len(values) < 2:
        return 0.0
    rng = random.Random(len(values))
    logs = []
    for _ in range(resamples):
        drawn = [values[rng.randrange(len(values))] for _ in values]
        found = estimate(drawn)
        if found > 0:
            logs.append(math.log(found))
    return stdev(logs)


def sign_test(ratios: Sequence[float]) -> float:
    """Two-sided exact sign test of pair ratios against no change (ties dropped)."""
    above = sum(r > 1 for r in ratios)
    below = sum(r < 1 for r in ratios)
    n = above + below
    if n == 0:
        return 1.0
    fewer = min(above, below)
    tail = sum(math.comb(n, k) for k in range(fewer + 1)) / 2**n
    return min(1.0, 2 * tail)


def median_interval(values: Sequence[float], confidence: float) -> tuple[float, float] | None:
    """A distribution-free confidence interval for the median: the order statistics the sign
    test's binomial puts at least `confidence` between (None when too few values reach it)."""
    ordered = sorted(values)
    n = len(ordered)
    alpha = 1.0 - confidence
    # The largest k with P(Binomial(n, 1/2) < k) <= alpha / 2: [x_(k), x_(n-k+1)] (1-based).
    k, cumulative = 0, 0.0
    while k < n:
        cumulative += math.comb(n, k) / 2**n
        if cumulative > alpha / 2:
            break
        k += 1
    if k == 0:
        return None
    return ordered[k - 1], ordered[n - k]
