"""Notebook 02, run against run: ops that appeared or went, and support verdicts that changed.

An op that newly falls back or fails on a flavour is a regression: exact data, no noise to test.
"""

from __future__ import annotations

from typing import Any

from workbench.compare.records import CHANGED, IMPROVEMENT, REGRESSION, Change, ChangeStatus
from workbench.compare.runs import Run
from workbench.coverage.reader import RESULT_FILE as COVERAGE_FILE
from workbench.coverage.support import FALLS_BACK, SUPPORTED, OpStatus


def _verdicts(run: Run) -> dict[str, dict[str, OpStatus]] | None:
    data = run.result(COVERAGE_FILE)
    if data is None:
        return None
    return {row.op: {flavour: v.status for flavour, v in row.verdicts.items()} for row in data.ops}


def coverage_changes(base_run: Run, new_run: Run) -> list[Change]:
    base, new = _verdicts(base_run), _verdicts(new_run)
    if base is None or new is None:
        return []
    changes = []
    added = sorted(set(new) - set(base))
    gone = sorted(set(base) - set(new))
    if added:
        changes.append(
            Change(
                "coverage",
                "ops new in this run",
                None,
                ", ".join(added),
                CHANGED,
                note=f"{len(added)} op(s)",
            )
        )
    if gone:
        changes.append(
            Change(
                "coverage",
                "ops no longer run",
                ", ".join(gone),
                None,
                CHANGED,
                note=f"{len(gone)} op(s)",
            )
        )
    for op in sorted(set(base) & set(new)):
        for flavour, status in new[op].items():
            before = base[op].get(flavour)
            if before is None or before == status:
                continue
            verdict: ChangeStatus
            if status == FALLS_BACK:
                verdict = REGRESSION
            elif before == FALLS_BACK or status == SUPPORTED:
                verdict = IMPROVEMENT
            else:
                verdict = CHANGED
            changes.append(Change("coverage", f"{op} on {flavour}", before, status, verdict))
    for op in added:
        for flavour, status in new[op].items():
            if status == FALLS_BACK:
                changes.append(
                    Change(
                        "coverage",
                        f"{op} on {flavour}",
                        None,
                        status,
                        REGRESSION,
                        note="a new op that falls back or fails",
                    )
                )
    return changes


def coverage_counts(run: Run) -> dict[str, Any] | None:
    verdicts = _verdicts(run)
    if verdicts is None:
        return None
    counts: dict[str, dict[str, int]] = {}
    for per_flavour in verdicts.values():
        for flavour, status in per_flavour.items():
            counts.setdefault(flavour, {}).setdefault(status, 0)
            counts[flavour][status] += 1
    return counts
