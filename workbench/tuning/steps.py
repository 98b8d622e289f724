"""What the timed steps of one measured setting (a trial, a DataLoader setting, a launch) say in
its record and its log line."""

from __future__ import annotations

from collections.abc import Sequence

from workbench.timing import Measurement, format_seconds


def items_per_second(items_per_step: float | None, step: Measurement | None) -> float | None:
    """Items per second at the median step time; None where nothing was timed."""
    if step is None or items_per_step is None or step.median <= 0:
        return None
    return items_per_step / step.median


def step_summary(step: Measurement) -> str:
    """A measured setting's steps in its log line: median, spread, and whether it ran loaded."""
    text = f"median step {format_seconds(step.median)}, IQR {step.relative_iqr:.0%} of the median"
    return text + (" (LOADED)" if step.loaded else "")


def log_line(
    head: str,
    step: Measurement | None,
    *,
    details: Sequence[str] = (),
    why: str | None = None,
    seconds: float | None = None,
) -> str:
    """One measured setting's log line: what it is and how it ended, its steps, other details,
    why it failed, and how long it took."""
    text = ", ".join([head, *([step_summary(step)] if step is not None else []), *details])
    if why is not None:
        text += f" ({why})"
    if seconds is not None:
        text += f" [{format_seconds(seconds)}]"
    return text
