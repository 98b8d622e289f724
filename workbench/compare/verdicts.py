"""The scorecard, run against run: a notebook whose verdict became a blocker is a regression."""

from __future__ import annotations

from workbench.compare.records import CHANGED, IMPROVEMENT, REGRESSION, Change, ChangeStatus
from workbench.compare.runs import Run
from workbench.scorecard import BLOCKER, STATUSES, Status


def _notebook_verdicts(run: Run) -> dict[str, Status]:
    return {e.notebook: e.verdict.status for e in run.summary.notebooks if e.verdict}


def verdict_changes(base_run: Run, new_run: Run) -> list[Change]:
    base, new = _notebook_verdicts(base_run), _notebook_verdicts(new_run)
    changes = []
    for notebook, status in new.items():
        before = base.get(notebook)
        if before is None or before == status:
            continue
        verdict: ChangeStatus
        if status == BLOCKER:
            verdict = REGRESSION
        elif STATUSES.index(status) < STATUSES.index(before):
            verdict = IMPROVEMENT
        else:
            verdict = CHANGED
        entry = next(e for e in new_run.summary.notebooks if e.notebook == notebook)
        note = entry.verdict.reason if entry.verdict else ""
        changes.append(
            Change("scorecard", f"{notebook} verdict", before, status, verdict, note=note)
        )
    return changes
