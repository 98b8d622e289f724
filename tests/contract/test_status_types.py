"""Statuses are Literal types checked by mypy with strict_equality (pyproject.toml): a misspelt
status in a comparison is a type error, not a branch that silently never runs."""

from __future__ import annotations

from mypy import api

from tests.fixtures import REPO_ROOT

# Two modules light enough to type-check in seconds; every status type works the same way.
USES = """\
from workbench.compare.records import Change
from workbench.scorecard import Verdict

def blocks(verdict: Verdict) -> bool:
    return verdict.status == "blocker"

def regressed(change: Change) -> bool:
    return change.status == "regression"

def blocks_misspelt(verdict: Verdict) -> bool:
    return verdict.status == "blocked"

def regressed_misspelt(change: Change) -> bool:
    return change.status == "regresion"
"""


def test_mypy_rejects_a_misspelt_status_and_accepts_the_right_one(tmp_path) -> None:
    source = tmp_path / "uses_statuses.py"
    source.write_text(USES)
    config = str(REPO_ROOT / "pyproject.toml")
    args = ["--config-file", config, "--cache-dir", str(tmp_path / "cache"), str(source)]
    out, _, code = api.run(args)
    errors = [line for line in out.splitlines() if ": error:" in line]
    assert code == 1, out
    assert [line.split(":")[1] for line in errors] == ["11", "14"], out
    assert all("Non-overlapping equality check" in line for line in errors), out
    assert "blocked" in errors[0] and "regresion" in errors[1]
