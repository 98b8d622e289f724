"""Statuses are Literal types checked by mypy with strict_equality (pyproject.toml): a misspelt
status in a comparison is a type error, not a branch that silently never runs. That holds on
summary.json's path too: a notebook's outcome, its verdict there and the run's verdict."""

from __future__ import annotations

from mypy import api

# Modules light enough to type-check in seconds; every status type works the same way.
USES = """\
from workbench.compare.records import Change
from workbench.scorecard import Verdict
from workbench.summary import NotebookOutcome, RunSummary

def blocks(verdict: Verdict) -> bool:
    return verdict.status == "blocker"

def regressed(change: Change) -> bool:
    return change.status == "regression"

def blocks_misspelt(verdict: Verdict) -> bool:
    return verdict.status == "blocked"

def regressed_misspelt(change: Change) -> bool:
    return change.status == "regresion"

def died(outcome: NotebookOutcome) -> bool:
    return outcome.status == "kernel-died" or outcome.status == "kernel_died"

def left_out(summary: RunSummary) -> bool:
    return summary.verdict is not None and summary.verdict.status == "not-run"

def notebook_blocks(summary: RunSummary) -> bool:
    return any(e.verdict is not None and e.verdict.status == "blocked" for e in summary.notebooks)
"""


# The project's strict_equality, with workbench's own modules followed and every other package
# skipped (read as Any): the statuses are workbench's types, and following torch, transformers
# and the trackers from a fresh cache held over 13 GB in one test worker.
CONFIG = """\
[mypy]
python_version = 3.10
strict_equality = True
follow_imports = skip
ignore_missing_imports = True

[mypy-workbench.*]
follow_imports = normal
"""


def test_mypy_rejects_a_misspelt_status_and_accepts_the_right_one(tmp_path) -> None:
    source = tmp_path / "uses_statuses.py"
    source.write_text(USES)
    config = tmp_path / "mypy.ini"
    config.write_text(CONFIG)
    args = ["--config-file", str(config), "--cache-dir", str(tmp_path / "cache"), str(source)]
    out, _, code = api.run(args)
    errors = [line for line in out.splitlines() if ": error:" in line]
    assert code == 1, out
    assert [line.split(":")[1] for line in errors] == ["12", "15", "18", "21", "24"], out
    assert all("Non-overlapping equality check" in line for line in errors), out
    misspelt = ["blocked", "regresion", "kernel_died", "not-run", "blocked"]
    assert all(f"'{word}'" in line for word, line in zip(misspelt, errors, strict=True)), out
