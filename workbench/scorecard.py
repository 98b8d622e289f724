"""The scorecard: one verdict per notebook and one per run, each with its reason and its rule.

Every notebook judges its own findings by a rule stated in its records module and stores the
verdict in its result file (`data.verdict`). A run's verdict is the worst of its notebooks'; a
notebook that did not finish counts as a blocker, since nothing it should have checked is known.
Whether a notebook executed stays a separate status in summary.json.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Literal, get_args

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


@dataclass(frozen=True)
class RunVerdict:
    status: Status
    reasons: list[str]  # the top reasons, blockers first, each prefixed with its notebook


def run_verdict(notebooks: Iterable[Mapping[str, Any]]) -> RunVerdict:
    """The worst notebook verdict of a run, with its top reasons.

    `notebooks` are summary.json's entries: `notebook`, `status` and `verdict` (or None). A
    notebook that ran but judged nothing (a result file without a verdict) is left out.
    """
    scored: list[tuple[Status, str]] = []
    for entry in notebooks:
        verdict = entry.get("verdict")
        if isinstance(verdict, Mapping) and verdict.get("status") in STATUSES:
            scored.append((verdict["status"], f"{entry['notebook']}: {verdict.get('reason', '')}"))
        elif entry.get("status") != "ok":
            scored.append(
                (BLOCKER, f"{entry['notebook']}: did not finish ({entry.get('status', 'unknown')})")
            )
    status = worst(s for s, _ in scored)
    flagged = sorted((item for item in scored if item[0] != PASS), key=lambda i: -_RANK[i[0]])
    reasons = [reason for _, reason in flagged[:TOP_REASONS]]
    if len(flagged) > TOP_REASONS:  # a cut list says so
        reasons.append(f"and {len(flagged) - TOP_REASONS} more")
    return RunVerdict(status, reasons)
