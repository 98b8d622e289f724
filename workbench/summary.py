"""summary.json, the run's own record: one typed record the runner writes and every reader
(the index, `workbench compare`, `workbench export-metrics`, `workbench collect`) reads back.

How each notebook's execution ended (`NotebookOutcome`), its verdict as its result file gave it
(`NotebookVerdict`: status and reason) and the run's verdict (`RunVerdict`) are the same
dataclasses on both sides, so a renamed field or a misspelt status is a type error for the
writer and every reader at once. Fields added since the first schema have defaults: an older
summary.json still reads (decode fills them in).

The run's verdict is judged from these typed entries: the worst notebook verdict (the
scorecard's worst-of rule); a notebook that did not finish, or whose result file cannot be
read, counts as a blocker, since nothing it should have checked is known; a run that left a
notebook out has no verdict ("not run").
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, Literal

from workbench.decode import decode
from workbench.errors import BadInput
from workbench.markup import named_list
from workbench.results import SCHEMA_VERSION, UnreadableResult, write_json_atomic
from workbench.safe_load import shown
from workbench.scorecard import ATTENTION, BLOCKER, Finding, Status, top_reasons, worst

# How a notebook's execution ended, one definition (report-failed: it ran, but its page could
# not be written; not-run: left out of the run, or a copy not stepped through to its end).
OutcomeStatus = Literal[
    "ok",
    "failed",
    "timeout",
    "kernel-died",
    "report-failed",
    "interrupted",
    "not-run",
    "not-answered",
]
NOT_RUN: Final = "not-run"
# It ran, and said its question cannot be answered for this workload (errors.NotAnswered).
NOT_ANSWERED: Final = "not-answered"
# The run's verdict: a scorecard status, or "not run" when the run left notebooks out.
RunStatus = Literal[Status, "not run"]
NO_RUN_VERDICT: Final = "not run"


@dataclass
class NotebookVerdict:
    """A notebook's scorecard verdict as the summary and the index carry it: status, reason."""

    status: Status
    reason: str = ""


@dataclass
class NotebookOutcome:
    """One notebook of a run: how its execution ended and what its result file says."""

    notebook: str
    status: OutcomeStatus
    seconds: float | None = None  # its execution's wall time; None where it was not timed
    error: str | None = None
    failed_cell: int | None = None
    html: str | None = None  # its report's file name, when one was written
    result: str | None = None  # its result file's name, when it saved one
    headline: str | None = None
    verdict: NotebookVerdict | None = None  # None: judged nothing, or its result is unreadable
    # Why its result file could not be read (too large, not JSON, a field of the wrong type).
    unreadable_result: str | None = None

    def finding(self) -> Finding | None:
        """What this notebook adds to the run's verdict: its own verdict; a blocker where it did
        not finish or its result cannot be read; nothing where it ran and judged nothing."""
        if self.verdict is not None:
            return Finding(self.verdict.status, f"{self.notebook}: {self.verdict.reason}")
        if self.status == NOT_ANSWERED:
            return Finding(ATTENTION, self.error or f"{self.notebook}: not answered")
        if self.status != "ok":
            return Finding(BLOCKER, f"{self.notebook}: did not finish ({self.status})")
        if self.unreadable_result is not None:
            return Finding(BLOCKER, f"{self.notebook}: {self.unreadable_result}")
        return None


@dataclass
class RunVerdict:
    """The run's verdict: the worst notebook verdict, or "not run" when notebooks were left out
    (then `not_run` names them and `of_the_notebooks_run` is the worst of those that ran)."""

    status: RunStatus
    reasons: list[str] = field(default_factory=list)  # the top reasons, blockers first
    not_run: list[str] = field(default_factory=list)
    of_the_notebooks_run: Status | None = None


@dataclass
class RunSummary:
    """summary.json: the run as a whole, then each notebook's outcome, then the verdict."""

    schema_version: int = SCHEMA_VERSION
    # "" where a hand-made or older summary lacks them: the run is then named by its folder.
    workload: str = ""
    workload_spec: str = ""  # as the user gave it (a path, an hf: name), scrubbed
    target: str = ""
    target_requested: str = ""  # "auto", or the target asked for
    target_reason: str = ""  # why that target was chosen
    validation: str = ""  # what the run validates ("measured on cpu", ...)
    started_at: str = ""
    seconds: float | None = None  # the whole run's wall time; None where it was not timed
    not_run: list[str] = field(default_factory=list)  # the workbook's notebooks left out
    exit_code: int | None = None
    notebooks: list[NotebookOutcome] = field(default_factory=list)
    verdict: RunVerdict | None = None
    unwritten: dict[str, str] = field(default_factory=dict)  # file -> why it was not written


def judge_run(notebooks: Sequence[NotebookOutcome], left_out: Sequence[str]) -> RunVerdict:
    """The run's verdict: the worst notebook verdict when every notebook of the workbook ran;
    "not run" when any did not (left out by --only, or a copy not stepped through), since what
    those check is not known. The reasons then name every notebook not run, and still carry
    what the notebooks that ran found."""
    ran = [entry for entry in notebooks if entry.status != NOT_RUN]
    findings = [found for found in (entry.finding() for entry in ran) if found is not None]
    overall = worst(f.status for f in findings)
    reasons = top_reasons(findings)
    missing = [*left_out, *(entry.notebook for entry in notebooks if entry.status == NOT_RUN)]
    if not missing:
        return RunVerdict(overall, reasons)
    return RunVerdict(
        NO_RUN_VERDICT,
        [f"not run: {named_list(missing)}", *reasons],
        missing,
        overall if ran else None,
    )


def write_summary(path: Path, summary: RunSummary) -> Path:
    return write_json_atomic(path, summary)


def read_summary(record: Mapping[str, Any], where: str) -> RunSummary:
    """summary.json's record, typed; UnreadableResult says what is wrong in one sentence."""
    version = record.get("schema_version")
    if version != SCHEMA_VERSION:
        raise UnreadableResult(
            f"{where} has schema {shown(version)}; this workbench reads schema {SCHEMA_VERSION} "
            "(rerun the workbook with this version)."
        )
    try:
        return decode(RunSummary, record, where)
    except BadInput as exc:
        raise UnreadableResult(str(exc)) from None
