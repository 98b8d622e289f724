"""Notebook 03, run against run: each precision run's verdict and its error against the
reference. A run that passed and now fails (or now computes NaN/Inf) is a regression."""

from __future__ import annotations

from typing import Any

from workbench.compare.records import CHANGED, IMPROVEMENT, REGRESSION, UNCHANGED, Change
from workbench.compare.runs import Run
from workbench.safe_load import NonFinite, Shape

NUMERICS_NOTEBOOK = "03_numerics"
DATA_SHAPE: Shape = {
    "runs": [
        {
            "run": ({"label": (str, None)}, None),
            "verdict": ({"status": (str, None), "passed": (bool, None)}, None),
            "outputs": ([{"metrics": ({"relative_l2": (float, NonFinite, None)}, None)}], None),
        }
    ]
}


def _passed(run: dict[str, Any]) -> bool | None:
    verdict = run.get("verdict") or {}
    if "status" in verdict:
        return verdict["status"] == "pass"
    return verdict.get("passed")


def _output_error(run: dict[str, Any]) -> float | None:
    """Relative L2 error of the run's first output against the reference."""
    outputs = run.get("outputs") or []
    if not outputs:
        return None
    metrics = outputs[0].get("metrics") or {}
    error = metrics.get("relative_l2")
    return None if error is None else float(error)  # 'nan' and 'inf' as written for them


def numerics_runs(run: Run) -> dict[str, dict[str, Any]]:
    data = run.data(NUMERICS_NOTEBOOK) or {}
    found = {}
    for entry in data.get("runs", []):
        label = (entry.get("run") or {}).get("label")
        if label:
            found[label] = {"passed": _passed(entry), "output_error": _output_error(entry)}
    return found


def numerics_changes(runs: list[Run]) -> list[Change]:
    base, new = numerics_runs(runs[-2]), numerics_runs(runs[-1])
    series_of = [numerics_runs(run) for run in runs]
    changes = []
    for label, now in new.items():
        before = base.get(label)
        errors = [s.get(label, {}).get("output_error") for s in series_of]
        word = {True: "pass", False: "fail", None: "unknown"}
        if before is None:
            continue
        if before["passed"] == now["passed"]:
            status = UNCHANGED
        elif before["passed"] and now["passed"] is False:
            status = REGRESSION
        elif before["passed"] is False and now["passed"]:
            status = IMPROVEMENT
        else:
            status = CHANGED
        changes.append(
            Change(
                "numerics",
                f"{label} verdict",
                word[before["passed"]],
                word[now["passed"]],
                status,
                note=_error_note(before, now),
                series=errors,
            )
        )
    return changes


def _error_note(before: dict[str, Any], now: dict[str, Any]) -> str:
    a, b = before.get("output_error"), now.get("output_error")
    if a is None or b is None:
        return ""
    return f"output error vs reference (relative L2) {a:.3g} -> {b:.3g}"
