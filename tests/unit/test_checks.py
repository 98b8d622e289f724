"""Every finding a notebook's verdict makes names one of that notebook's checks, so the JUnit
report's testcases (one per check) are the same in every run."""

from __future__ import annotations

import ast
from pathlib import Path

from workbench import checks
from workbench.questions import QUESTIONS

WORKBENCH = Path(checks.__file__).parent
VERDICT_MODULES = {
    "environment": ("records.py",),
    "baseline": ("records.py",),
    "coverage": ("records.py",),
    "numerics": ("records.py", "wording.py"),
    "tuning": ("records.py",),
    "serving": ("records.py",),
}


def _finding_calls(path: Path) -> list[ast.Call]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return [
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "Finding"
    ]


def test_every_verdict_finding_names_a_check() -> None:
    unnamed = []
    for package, modules in VERDICT_MODULES.items():
        for module in modules:
            path = WORKBENCH / package / module
            for call in _finding_calls(path):
                if len(call.args) < 3 and not any(k.arg == "check" for k in call.keywords):
                    unnamed.append(f"{path.relative_to(WORKBENCH.parent)}:{call.lineno}")
    assert unnamed == []


def test_each_notebook_has_distinct_checks_and_other_is_none_of_them() -> None:
    assert set(checks.CHECKS) == {question.notebook for question in QUESTIONS}
    for names in checks.CHECKS.values():
        assert len(set(names)) == len(names) and checks.OTHER not in names
