"""Whether to move the pin, by a stated rule, from the comparison of the two runs."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Literal

from workbench.compare.records import ONE_SIDE, Comparison

MOVE: Final = "move the pin"
HOLD: Final = "hold the pin"
NOT_JUDGED: Final = "not judged"
Decision = Literal["move the pin", "hold the pin", "not judged"]
RULE = (
    "hold the pin when the candidate's run did not finish or a notebook failed in it, or when "
    "`workbench compare` finds a regression (a timing beyond its gate and noise, an op that "
    "newly falls back, a numerics run or acceptance gate that newly fails, a verdict that became "
    "a blocker); not judged when nothing regressed but timings were inconclusive (beyond their "
    "gate, not beyond the noise the two runs can measure) or a notebook ran on one side only; "
    "move the pin otherwise"
)
SHOWN_REASONS = 5


@dataclass
class PinVerdict:
    decision: Decision
    reasons: list[str]
    rule: str = RULE


def judge_pin(
    comparison: Comparison | None, candidate_exit: int, candidate_tail: str
) -> PinVerdict:
    """The decision and its reasons; `comparison` is None where the candidate wrote no run."""
    if comparison is None:
        return PinVerdict(
            HOLD, [f"the candidate's run did not finish (exit {candidate_exit}: {candidate_tail})"]
        )
    held = [change.line() for change in comparison.regressions]
    if candidate_exit != 0:
        held.insert(0, f"a notebook failed in the candidate (exit {candidate_exit})")
    if held:
        return PinVerdict(HOLD, _cut(held))
    doubts = []
    unsettled = comparison.inconclusive
    if unsettled:
        doubts.append(
            f"{len(unsettled)} timing(s) moved beyond their gate but not beyond the noise two "
            f"runs can measure (first: {unsettled[0].name}): rerun the rehearsal on an idle "
            "machine, or compare its runs with --remeasure, before moving"
        )
    one_side = comparison.with_status(ONE_SIDE)
    if one_side:
        doubts.append(f"ran on one side only: {', '.join(c.name for c in one_side)}")
    if doubts:
        return PinVerdict(NOT_JUDGED, doubts)
    return PinVerdict(MOVE, [f"no regression: {comparison.headline()}"])


def _cut(reasons: list[str]) -> list[str]:
    if len(reasons) <= SHOWN_REASONS:
        return reasons
    return [*reasons[:SHOWN_REASONS], f"and {len(reasons) - SHOWN_REASONS} more"]
