"""Student's t distribution without SciPy: its tail by the regularized incomplete beta function,
and its quantiles by bisection on that tail. Notebook 03's convergence test and the regression
gate's history band both read it; neither imports SciPy for two functions."""

from __future__ import annotations

import math


def _betacf(a: float, b: float, x: float) -> float:
    """The continued fraction of the regularized incomplete beta (modified Lentz)."""
    tiny, c, d = 1e-300, 1.0, 1.0 - (a + b) * x / (a + 1.0)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 300):
        for numerator in (
            m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
            -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1)),
        ):
            d = 1.0 + numerator * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + numerator / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1.0) < 1e-15:
            break
    return h


def regularized_beta(a: float, b: float, x: float) -> float:
    """I_x(a, b), the regularized incomplete beta function."""
    if x <= 0:
        return 0.0
    if x >= 1:
        return 1.0
    log_front = (
        math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    )
    front = math.exp(log_front)
    if x < (a + 1) / (a + b + 2):
        return front * _betacf(a, b, x) / a
    return 1.0 - front * _betacf(b, a, 1.0 - x) / b


def t_survival(t: float, df: float) -> float:
    """P(T > t) for Student's t with `df` degrees of freedom."""
    tail = 0.5 * regularized_beta(df / 2, 0.5, df / (df + t * t))
    return tail if t >= 0 else 1.0 - tail


def t_quantile(probability: float, df: float) -> float:
    """The t below which `probability` of Student's t with `df` degrees of freedom lies."""
    if not 0.0 < probability < 1.0:
        raise ValueError("a quantile needs a probability strictly between 0 and 1")
    low, high = -1e6, 1e6
    for _ in range(200):
        middle = (low + high) / 2
        if 1.0 - t_survival(middle, df) < probability:
            low = middle
        else:
            high = middle
        if high - low < 1e-9 * max(1.0, abs(middle)):
            break
    return (low + high) / 2
