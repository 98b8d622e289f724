"""The rehearsal's pin rule, each branch on a case that takes it, and its page naming every metric
it compared (moved or not) with user strings escaped."""

from __future__ import annotations

import shlex
from pathlib import Path

from workbench.compare.records import (
    INCONCLUSIVE,
    ONE_SIDE,
    REGRESSION,
    UNCHANGED,
    WITHIN_GATE,
    Change,
    ChangeStatus,
    Comparison,
    Gates,
    RunInfo,
)
from workbench.rehearse.environments import Environment
from workbench.rehearse.report import render
from workbench.rehearse.verdict import HOLD, MOVE, NOT_JUDGED, judge_pin


def _timing(name: str, status: ChangeStatus, ratio: float = 1.0) -> Change:
    return Change("timing", name, 10.0, 10.0 * ratio, status, unit="ms", ratio=ratio)


def _comparison(*changes: Change) -> Comparison:
    runs = [
        RunInfo(role, f"/runs/{role}", "2026-12-05T10:00:00", "seed-mlp", "cpu", "pass", {})
        for role in ("pinned", "candidate")
    ]
    return Comparison("pair", runs, "pinned", Gates(), list(changes), [], [], "", [])


def test_a_clean_comparison_moves_the_pin():
    verdict = judge_pin(_comparison(_timing("train/eager steady median", UNCHANGED)), 0, "")
    assert verdict.decision == MOVE


def test_a_regression_a_failed_notebook_or_no_run_holds_it():
    regressed = _comparison(_timing("train/eager steady median", REGRESSION, 1.3))
    assert judge_pin(regressed, 0, "").decision == HOLD
    assert judge_pin(_comparison(), 1, "").reasons[0].startswith("a notebook failed")
    nothing = judge_pin(None, 3, "killed")
    assert nothing.decision == HOLD and "did not finish (exit 3: killed)" in nothing.reasons[0]


def test_inconclusive_timings_or_a_one_sided_notebook_leave_it_not_judged():
    unsettled = judge_pin(_comparison(_timing("infer/eager steady median", INCONCLUSIVE)), 0, "")
    assert unsettled.decision == NOT_JUDGED and "--remeasure" in unsettled.reasons[0]
    alone = Change("scorecard", "03_numerics", None, "pass", ONE_SIDE, note="newest run only")
    assert judge_pin(_comparison(alone), 0, "").decision == NOT_JUDGED


def test_the_page_names_the_metrics_that_did_not_move_and_escapes_them():
    comparison = _comparison(
        _timing("train/eager steady median", REGRESSION, 1.3),
        _timing("infer/eager steady median", WITHIN_GATE, 1.02),
        _timing("<b>custom</b> p99", UNCHANGED),
    )
    sides = (
        Environment("pinned", "pinned", Path("/pinned/bin/python"), "2.9.0"),
        Environment("candidate", "candidate", Path("/candidate/bin/python"), "2.13.0"),
    )
    page = render(sides, comparison, judge_pin(comparison, 0, ""))
    assert "HOLD THE PIN" in page
    assert "Unchanged or within their gate (2): infer/eager steady median" in page
    assert "&lt;b&gt;custom&lt;/b&gt; p99" in page and "<b>custom</b>" not in page


def test_the_install_command_it_suggests_is_shell_quoted(tmp_path):
    from workbench.rehearse.environments import _install_hint

    python = tmp_path / "my env; rm -rf x" / "bin" / "python"
    hint = _install_hint(python)
    assert hint.startswith(f"'{python}' -m pip install")
    assert shlex.split(hint)[0] == str(python)  # one word, as a shell reads it
    plain = _install_hint(tmp_path / "venv" / "bin" / "python")
    assert plain.startswith(f"{tmp_path}/venv/bin/python -m pip install")  # nothing to quote


def test_a_rollback_rehearsal_labels_the_current_environment_first():
    comparison = _comparison(_timing("train/eager steady median", REGRESSION, 1.3))
    sides = (
        Environment("current", "candidate", Path("/candidate/bin/python"), "2.13.0"),
        Environment("pinned", "pinned", Path("/pinned/bin/python"), "2.9.0"),
    )
    page = render(sides, comparison, judge_pin(comparison, 0, ""))
    assert "Rolling back from torch 2.13.0 (in use now) to the pinned torch 2.9.0" in page
    assert "<th>current</th><th>pinned</th>" in page
    assert "href='current/index.html'" in page and "Moving the pin" not in page
