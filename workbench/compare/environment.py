"""What notebook 00 recorded as changed between two runs: shown next to the timings it may
explain (a torch, torch-neuronx, neuronx-cc or torch-xla upgrade, a compiler flag)."""

from __future__ import annotations

from typing import Any

from workbench.compare.runs import Run
from workbench.environment.drift import CRITICAL, WARNING, diff_manifests
from workbench.environment.reader import RESULT_FILE as ENVIRONMENT_FILE


# The manifest is diffed whole (any value flattens to text); its package versions are shown.
def environment_changes(base_run: Run, new_run: Run) -> list[dict[str, Any]]:
    base, new = base_run.result(ENVIRONMENT_FILE), new_run.result(ENVIRONMENT_FILE)
    if base is None or new is None:
        return []
    return [
        {"key": d.key, "old": d.old, "new": d.new, "severity": d.severity, "reason": d.reason}
        for d in diff_manifests(base.manifest, new.manifest)
        if d.severity in (CRITICAL, WARNING)
    ]


def environment_note(changes: list[dict[str, Any]]) -> str:
    """The critical changes in one clause, for the timing rows they may explain."""
    critical = [c for c in changes if c["severity"] == CRITICAL]
    if not critical:
        return ""
    shown = ", ".join(f"{c['key'].split('.')[-1]} {c['old']} -> {c['new']}" for c in critical[:3])
    more = f" and {len(critical) - 3} more" if len(critical) > 3 else ""
    return f"environment changed: {shown}{more}"
