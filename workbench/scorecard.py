"""The scorecard: one verdict per notebook and one per run, each with its reason and its rule.

Every notebook judges its own findings by a rule stated in its records module and stores the
verdict in its result file (`data.verdict`). A run's verdict is the worst of its notebooks'
(`worst`, `top_reasons`), judged from summary.json's typed entries in workbench.summary.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Final, Literal, get_args

# A verdict's status, one definition: mypy (strict_equality) rejects a comparison with any other
# string, so a misspelt status is a type error rather than a branch that never runs.
Status = Literal["pass", "attention", "blocker"]
PASS: Final = "pass"
ATTENTION: Final = "attention"
BLOCKER: Final = "blocker"
STATUSES: tuple[Status, ...] = get_args(Status)  # best first
_RANK = {status: rank for rank, status in enumerate(STATUSES)}
TOP_REASONS = 3


@dataclass(frozen=True)
class Finding:
    """One thing a rule found: how bad it is and the sentence that says it."""

    status: Status
    reason: str
    # Which of its notebook's checks (the reader module's CHECKS) found it: the name a CI's test
    # history follows from run to run. "" for a finding outside them (the workload's own).
    check: str = ""


@dataclass(frozen=True)
class Verdict:
    status: Status
    reason: str  # one line: the worst finding, or why the notebook passes
    rule: str  # the stated rule the findings were judged by
    findings: list[Finding] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"verdict status {self.status!r}: choose from {', '.join(STATUSES)}")


def worst(statuses: Iterable[Status]) -> Status:
    return max(statuses, key=_RANK.__getitem__, default=PASS)


def judge(findings: Iterable[Finding], rule: str, pass_reason: str) -> Verdict:
    """The verdict of a notebook: the worst finding leads; no finding above pass is a pass."""
    ranked = sorted((f for f in findings if f.status != PASS), key=lambda f: -_RANK[f.status])
    if not ranked:
        return Verdict(PASS, pass_reason, rule, [])
    lead = ranked[0]
    more = len(ranked) - 1
    reason = lead.reason + (f" (and {more} more finding{'s' if more > 1 else ''})" if more else "")
    return Verdict(lead.status, reason, rule, ranked)


def top_reasons(findings: Iterable[Finding]) -> list[str]:
    """The reasons of the findings above pass, worst first, at most TOP_REASONS of them; a cut
    list says how many more there are."""
    flagged = sorted((f for f in findings if f.status != PASS), key=lambda f: -_RANK[f.status])
    reasons = [f.reason for f in flagged[:TOP_REASONS]]
    if len(flagged) > TOP_REASONS:
        reasons.append(f"and {len(flagged) - TOP_REASONS} more")
    return reasons
