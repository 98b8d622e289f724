"""Notebook 03, run against run: each precision run's verdict and its error against the
reference. A run that passed and now fails (or now computes NaN/Inf) is a regression."""

from __future__ import annotations

from dataclasses import dataclass

from workbench.compare.records import (
    CHANGED,
    IMPROVEMENT,
    REGRESSION,
    UNCHANGED,
    Change,
    ChangeStatus,
)
from workbench.compare.runs import Run
from workbench.numerics.acceptance_records import GATE_FAIL, GATE_PASS, GateResult
from workbench.numerics.reader import RESULT_FILE as NUMERICS_FILE
from workbench.numerics.records import RunResult


@dataclass
class NumericsSide:
    """One precision run of one workbook run, as compare judges it."""

    passed: bool | None  # its verdict passes; None where it has none
    output_error: float | None  # relative L2 of its first output against the reference
    gates: dict[str, GateResult]  # AWS's acceptance gates, by name (empty before they existed)


def _side(run: RunResult) -> NumericsSide:
    gates = {g.gate: g for g in run.acceptance.gates} if run.acceptance else {}
    return NumericsSide(
        run.verdict.passed if run.verdict else None,
        run.outputs[0].metrics.relative_l2 if run.outputs else None,
        gates,
    )


def numerics_runs(run: Run) -> dict[str, NumericsSide]:
    """Each precision run's verdict, output error and gates, by its label."""
    data = run.result(NUMERICS_FILE)
    return {r.label: _side(r) for r in (data.runs if data else [])}


_WORD = {True: "pass", False: "fail", None: "unknown"}


def _verdict_status(before: bool | None, now: bool | None) -> ChangeStatus:
    if before == now:
        return UNCHANGED
    if before and now is False:
        return REGRESSION
    if before is False and now:
        return IMPROVEMENT
    return CHANGED


def _gate_changes(label: str, before: NumericsSide, now: NumericsSide) -> list[Change]:
    """A gate judged on both sides whose outcome moved: newly failing is a regression, newly
    passing an improvement; a gate judged on one side only is a change."""
    changes = []
    for name, gate in now.gates.items():
        old = before.gates.get(name)
        if old is None or old.status == gate.status:
            continue
        moved = (old.status, gate.status)
        status: ChangeStatus = (
            REGRESSION if moved == (GATE_PASS, GATE_FAIL)
            else IMPROVEMENT if moved == (GATE_FAIL, GATE_PASS)
            else CHANGED
        )  # fmt: skip
        note = f"{old.measured} -> {gate.measured} (gate: {gate.threshold}; {gate.source})"
        changes.append(Change("numerics", f"{label} {name}", old.status, gate.status, status,
                              note=note))  # fmt: skip
    return changes


def numerics_changes(runs: list[Run]) -> list[Change]:
    base, new = numerics_runs(runs[-2]), numerics_runs(runs[-1])
    series_of = [numerics_runs(run) for run in runs]
    changes = []
    for label, now in new.items():
        before = base.get(label)
        if before is None:
            continue
        errors = [s[label].output_error if label in s else None for s in series_of]
        status = _verdict_status(before.passed, now.passed)
        changes.append(
            Change("numerics", f"{label} verdict", _WORD[before.passed], _WORD[now.passed],
                   status, note=_error_note(before, now), series=errors)
        )  # fmt: skip
        changes += _gate_changes(label, before, now)
    return changes


def _error_note(before: NumericsSide, now: NumericsSide) -> str:
    a, b = before.output_error, now.output_error
    if a is None or b is None:
        return ""
    return f"output error vs reference (relative L2) {a:.3g} -> {b:.3g}"
