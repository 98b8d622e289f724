"""The statistics a comparison rests on: medians and a two-sided Mann-Whitney U test.

The U test compares whole samples by rank, so a burst of slow steps moves it far less than it
moves a mean; it needs no assumption about the shape of step-time distributions, which are
skewed. The p-value uses the normal approximation with tie and continuity corrections, accurate
for the sample sizes a baseline keeps (tens of steady-state steps per run).
"""

from __future__ import annotations

import math
from collections.abc import Sequence


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
