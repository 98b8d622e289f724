"""Decisions from throughput, judged against noise, and measurements that are re-taken until
they can carry one.

Every choice notebook 04 makes (batch size, DataLoader setting, data-parallel width) follows one
rule: the fastest measured setting wins, and only a setting indistinguishable from it, given
both spreads, may stand in for it because it is cheaper. A measurement too noisy to compare
(relative IQR above timing.FLUCTUATION_SEVERE) or taken while the machine was loaded
(timing.HOST_LOAD_RULE) is measured again, within a time budget, before anything is read from it;
what stays noisy or loaded is named in the verdict.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

from workbench.timing import FLUCTUATION_SEVERE, HostLoad, Measurement, is_loaded, quantile

if TYPE_CHECKING:
    import psutil

# Separate processes of one setting differ by a few percent in throughput (memory layout, CPU
# frequency, where the scheduler puts threads) even when each one's own steps are steady, so a
# within-run IQR of nearly zero does not make a 3% gap real.
RUN_TO_RUN_FLOOR = 0.05

COMPARISON_RULE = (
    "the setting with the highest median throughput is the fastest; another is "
    "indistinguishable from it when their throughput ranges (items per step over the 75th and "
    "25th percentile step times) overlap, or its median throughput is within "
    f"{RUN_TO_RUN_FLOOR:.0%} of the fastest's (the variation between separate processes of one "
    "setting); a setting measured slower beyond that is never chosen"
)

T = TypeVar("T")


@dataclass(frozen=True)
class Rated(Generic[T]):
    """One candidate setting with the step times its throughput comes from."""

    setting: T
    items_per_step: float
    step: Measurement

    @property
    def rate(self) -> float:
        return self.items_per_step / self.step.median

    @property
    def low(self) -> float:
        """Throughput at the 75th percentile step time."""
        return self.items_per_step / quantile(sorted(self.step.times), 0.75)

    @property
    def high(self) -> float:
        """Throughput at the 25th percentile step time."""
        return self.items_per_step / quantile(sorted(self.step.times), 0.25)


def indistinguishable(candidate: Rated[T], fastest: Rated[T]) -> bool:
    """COMPARISON_RULE: whether `candidate` cannot be told apart from `fastest`."""
    return candidate.high >= fastest.low or candidate.rate >= (1 - RUN_TO_RUN_FLOOR) * fastest.rate


@dataclass(frozen=True)
class Pick(Generic[T]):
    chosen: Rated[T]
    fastest: Rated[T]
    tied: list[Rated[T]]  # every candidate indistinguishable from the fastest, itself included


def fastest_then_cheapest(
    candidates: Sequence[Rated[T]], cost: Callable[[T], tuple[float, ...]]
) -> Pick[T] | None:
    """The cheapest setting (lowest `cost`) among those indistinguishable from the fastest."""
    measured = [c for c in candidates if c.step.median > 0]
    if not measured:
        return None
    fastest = max(measured, key=lambda c: c.rate)
    tied = [c for c in measured if indistinguishable(c, fastest)]
    return Pick(min(tied, key=lambda c: cost(c.setting)), fastest, tied)


def unsettled(measurement: Measurement | None, limit: float = FLUCTUATION_SEVERE) -> str | None:
    """Why a measurement cannot carry a decision as if it were clean, or None if it can."""
    if measurement is None:
        return None
    reasons = []
    if measurement.relative_iqr > limit:
        reasons.append(f"IQR {measurement.relative_iqr:.0%} of the median (limit {limit:.0%})")
    if measurement.loaded and measurement.host is not None:
        reasons.append(measurement.host.sentence())
    return "; ".join(reasons) or None


class Remeasurable(Protocol):
    """A record of one measured setting (a trial, a DataLoader setting, a launch)."""

    seconds: float  # what taking it cost, start to finish
    earlier: list[Measurement]  # attempts set aside for a quieter one
    remeasure_note: str

    @property
    def measurement(self) -> Measurement | None: ...


R = TypeVar("R", bound=Remeasurable)


def _quietness(record: Remeasurable) -> tuple[bool, float]:
    """Sort key: a clean attempt before a loaded one, then the smaller relative IQR."""
    measurement = record.measurement
    if measurement is None:
        return True, float("inf")
    return measurement.loaded, measurement.relative_iqr


@dataclass
class RemeasurePolicy:
    """How often, and for how long in all, unsettled measurements are taken again."""

    max_repeats: int = 2
    budget_s: float = 120.0
    limit: float = FLUCTUATION_SEVERE
    spent_s: float = 0.0
    repeats: int = 0  # attempts taken again, over the whole run
    refused: list[str] = field(default_factory=list)  # what the budget left unrepeated

    def rule(self) -> str:
        return (
            f"a measurement whose relative IQR is above {self.limit:.0%} or that ran while the "
            f"machine was loaded is taken again, up to {self.max_repeats} more time(s), while "
            f"the re-measures of the whole run stay within {self.budget_s:g} s; the quietest "
            "attempt (clean before loaded, then the smallest IQR) is kept, with the others"
        )

    def settle(self, first: R, again: Callable[[], R], name: str) -> R:
        """`first`, or a quieter attempt from `again()`, with the attempts set aside kept."""
        attempts = [first]
        refused = False
        while unsettled(attempts[-1].measurement, self.limit) and len(attempts) <= self.max_repeats:
            # The next attempt should cost about what the last one did.
            if self.spent_s + attempts[-1].seconds > self.budget_s:
                refused = True
                self.refused.append(name)
                break
            attempt = again()
            self.spent_s += attempt.seconds
            self.repeats += 1
            attempts.append(attempt)
        best = min(attempts, key=_quietness)
        best.earlier = [a.measurement for a in attempts if a is not best and a.measurement]
        notes = []
        if len(attempts) > 1:
            notes.append(f"measured {len(attempts)} times, the quietest attempt kept")
        if refused:
            notes.append(
                f"not measured again: the re-measure budget of {self.budget_s:g} s is spent"
            )
        best.remeasure_note = "; ".join(notes)
        return best


@dataclass(frozen=True)
class SweepRun:
    """How a sweep takes its measurements: the re-measure policy the whole retuning shares (one
    time budget for all of them), where its log lines go, and whether it draws a progress bar."""

    policy: RemeasurePolicy = field(default_factory=RemeasurePolicy)
    log: Callable[[str], None] = print
    progress_bars: bool = False


def cpu_seconds(process: psutil.Process) -> float:
    """User and system CPU time of one live process."""
    times = process.cpu_times()
    return float(times.user + times.system)


def with_own_helpers(load: HostLoad, helper_cpu_seconds: float) -> HostLoad:
    """`load` with the CPU time of this measurement's own helper processes (DataLoader workers,
    the other ranks of a data-parallel launch) moved out of other processes' share, and
    `loaded` judged again by the same rule."""
    if load.other_share is None or load.wall_seconds <= 0:
        return load
    machine_seconds = load.wall_seconds * (os.cpu_count() or load.cores)
    other = max(0.0, load.other_share - helper_cpu_seconds / machine_seconds)
    return dataclasses.replace(load, other_share=other, loaded=is_loaded(other, load.steal_share))


def host_load_from(data: dict[str, Any] | None) -> HostLoad | None:
    """A HostLoad from its result-file form (a child process reports it as JSON)."""
    return HostLoad(**data) if data else None
