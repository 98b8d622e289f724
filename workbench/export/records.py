"""A run folder as the trackers take it: the run, then each notebook with its metrics, series,
verdicts, parameters and files.

Read only through the workbook's own readers: compare.runs.load_run (summary.json, and each
result file through its notebook's ResultFile in workbench.questions, so a notebook outside the
registry contributes its lead: headline and verdict) and results.load_result for each result
file's header (parameters, versions, target). A run folder from another schema is refused with
load_run's reason; nothing in the folder is written.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from workbench.compare.runs import Run, UnreadableRun, load_run, result_path
from workbench.errors import BadInput
from workbench.export.flatten import Flattened, flatten
from workbench.results import OutcomeStatus, UnreadableResult, load_result
from workbench.safe_load import is_plain_file
from workbench.scorecard import Verdict

# The run's own files a tracker keeps beside the parent run, where present.
RUN_FILES = ("index.html", "summary.json", "run.log")


@dataclass
class NotebookRecord:
    notebook: str
    status: OutcomeStatus  # how its execution ended (summary.json)
    headline: str | None
    verdict: Verdict | None  # the notebook's scorecard verdict, with its rule and findings
    found: Flattened  # metrics, per-step series and every verdict in its result
    parameters: dict[str, Any] = field(default_factory=dict)
    versions: dict[str, str] = field(default_factory=dict)
    files: list[Path] = field(default_factory=list)  # its HTML report and result file
    registered: bool = True  # False: a notebook outside the workbook, exported by its lead
    seconds: float | None = None  # its execution's wall time (summary.json)


@dataclass
class RunRecord:
    path: Path
    label: str  # the run folder's name
    key: str  # the run's identity in a tracker: folder name and start time
    workload: str
    target: str
    started_at: str
    exit_code: int | None
    verdict: str | None  # the run's verdict: pass, attention, blocker or "not run"
    reasons: list[str]
    notebooks: list[NotebookRecord]
    files: list[Path]

    @property
    def versions(self) -> dict[str, str]:
        """The stack the run measured, as its result files record it."""
        merged: dict[str, str] = {}
        for notebook in self.notebooks:
            merged.update(notebook.versions)
        return merged


def read_run(folder: str | Path) -> RunRecord:
    """One run folder as an exportable record; BadInput names what cannot be read and why."""
    folder = Path(folder)
    try:
        run = load_run(folder)
    except UnreadableRun as exc:
        raise BadInput(f"cannot export {folder}: {str(exc).rstrip('.')}.") from None
    verdict = run.summary.verdict
    return RunRecord(
        path=run.path,
        label=run.label,
        key=f"{run.label}@{run.started_at}",
        workload=run.workload,
        target=run.target,
        started_at=run.started_at,
        exit_code=run.summary.exit_code,
        verdict=verdict.status if verdict else None,
        reasons=list(verdict.reasons) if verdict else [],
        notebooks=[_notebook(run, entry) for entry in run.summary.notebooks],
        # Plain files only: a link (index.html -> /proc/self/environ) is never uploaded.
        files=[run.path / name for name in RUN_FILES if is_plain_file(run.path / name)],
    )


def _notebook(run: Run, entry: Any) -> NotebookRecord:
    data = run.results.get(entry.notebook)
    record = NotebookRecord(
        notebook=entry.notebook,
        status=entry.status,
        headline=data.headline if data else entry.headline,
        verdict=data.verdict if data else None,
        found=flatten(data) if data is not None else Flattened(),
        registered=_registered(entry.notebook),
        seconds=entry.seconds,
    )
    if entry.result:
        path = result_path(run.path, entry.result)
        try:
            header = load_result(path)
        except UnreadableResult as exc:
            raise BadInput(f"cannot export {run.path}: {str(exc).rstrip('.')}.") from None
        record.parameters = dict(header.get("parameters") or {})
        record.versions = {str(k): str(v) for k, v in (header.get("versions") or {}).items()}
        record.files.append(path)
    report = run.path / f"{entry.notebook}.html"
    if report.is_file() and not report.is_symlink():
        record.files.append(report)
    return record


def _registered(notebook: str) -> bool:
    from workbench.questions import question

    return question(notebook) is not None
