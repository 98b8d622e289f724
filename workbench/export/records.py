"""A run folder as the trackers take it: the run, then each notebook with its metrics, series,
verdicts, parameters and files.

Read only through the workbook's own readers: compare.runs.load_run (summary.json, and each
result file through its notebook's ResultFile in workbench.questions, so a notebook outside the
registry contributes its lead: headline and verdict) and results.load_result for each result
file's header (parameters, versions, target). A run folder from another schema is refused with
load_run's reason; nothing in the folder is written.

A run is named by its real folder: `reports/latest` (a symlink to the newest run) exports as the
run it points at. Times are the run's own: it starts at summary.json's `started_at` and lasts its
`seconds`; each notebook starts when the ones before it ended (the runner runs them one after
another) and lasts its own `seconds`. Parameters are the values in effect: a parameter left at
its "the workload's default" value (batch_size 0, task "") takes the value the result file
records for the workload (batch_size 64).
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from workbench.compare.runs import Run, UnreadableRun, load_run, result_path
from workbench.errors import BadInput
from workbench.export.flatten import Flattened, flatten
from workbench.export.safety import component
from workbench.results import UnreadableResult, load_result
from workbench.safe_load import is_plain_file
from workbench.scorecard import STATUSES, Verdict
from workbench.summary import NotebookOutcome, OutcomeStatus, RunStatus

# The run's own files a tracker keeps beside the parent run, where present.
RUN_FILES = ("index.html", "summary.json", "run.log")
# A notebook's headline numbers, the ones its headline sentence states, as keys of its flattened
# record: 01's throughput and steady-state median per configuration, 02's op counts per verdict,
# 03's trajectory deviation and top-1 agreement per run, 04's recommendation, 05's throughput
# and p99 latency per batch size. The parent run carries them under `<notebook>/<key>`.
HEADLINE_KEYS = (
    "configs/*/throughput",
    "configs/*/phases/steady/measurement/median",
    "ops/verdicts/*/status/*",
    "runs/*/trajectory_deviation",
    "runs/*/acceptance/agreement/rate",
    "recommendation/per_core_batch",
    "recommendation/global_batch",
    "recommendation/world_size",
    "cost/rows/*/items_per_second",
    "points/*/throughput",
    "points/*/latency/median",
    "points/*/latency/p99",
)
VERDICT_RANK = "verdict_rank"  # 0 pass, 1 attention, 2 blocker: a verdict as a chartable number
# Parameters that say where the notebook wrote, not what it measured.
NOT_SETTINGS = ("out_dir",)


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
    start: float | None = None  # epoch seconds: when it started (None: the run's start unknown)
    workload: dict[str, Any] = field(default_factory=dict)  # the result's workload record

    @property
    def end(self) -> float | None:
        return None if self.start is None else self.start + (self.seconds or 0.0)

    @property
    def verdict_rank(self) -> float | None:
        return float(STATUSES.index(self.verdict.status)) if self.verdict else None

    @property
    def headline_metrics(self) -> dict[str, float]:
        """The numbers its headline states (HEADLINE_KEYS), by their keys."""
        return {
            key: value
            for key, value in self.found.metrics.items()
            if any(fnmatch.fnmatchcase(key, pattern) for pattern in HEADLINE_KEYS)
        }


@dataclass
class RunRecord:
    path: Path
    label: str  # the run folder's name
    key: str  # the run's identity in a tracker: folder name and start time
    workload: str
    target: str
    started_at: str
    exit_code: int | None
    verdict: RunStatus | None  # None: a hand-made summary without one
    reasons: list[str]
    notebooks: list[NotebookRecord]
    files: list[Path]
    seconds: float | None = None  # the run's wall time (summary.json, else its notebooks' sum)

    @property
    def start(self) -> float | None:
        """summary.json's start time in epoch seconds; None where it cannot be read."""
        try:
            return datetime.fromisoformat(self.started_at).timestamp()
        except ValueError:
            return None

    @property
    def end(self) -> float | None:
        start = self.start
        return None if start is None or self.seconds is None else start + self.seconds

    @property
    def verdict_rank(self) -> float | None:
        return float(STATUSES.index(self.verdict)) if self.verdict in STATUSES else None

    @property
    def parameters(self) -> dict[str, Any]:
        """The run's common settings: each parameter more than one notebook takes, where they
        all took the same value (the workload's batch size, the compile cache)."""
        seen: dict[str, list[Any]] = {}
        for notebook in self.notebooks:
            for name, value in notebook.parameters.items():
                seen.setdefault(name, []).append(value)
        return {
            name: values[0]
            for name, values in seen.items()
            if len(values) > 1 and all(v == values[0] for v in values)
        }

    @property
    def headline(self) -> dict[str, float]:
        """Each notebook's headline numbers and verdict rank, under `<notebook>/<key>`."""
        found: dict[str, float] = {}
        for notebook in self.notebooks:
            name = component(notebook.notebook)  # one key part, whatever summary.json says
            if notebook.verdict_rank is not None:
                found[f"{name}/{VERDICT_RANK}"] = notebook.verdict_rank
            for key, value in notebook.headline_metrics.items():
                found[f"{name}/{key}"] = value
        return found

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
        # The real folder, so reports/latest is named (and found again) as the run it points at.
        run = load_run(folder.resolve())
    except UnreadableRun as exc:
        raise BadInput(f"cannot export {folder}: {str(exc).rstrip('.')}.") from None
    verdict = run.summary.verdict
    notebooks = [_notebook(run, entry) for entry in run.summary.notebooks]
    timed = [n.seconds for n in notebooks if n.seconds is not None]
    record = RunRecord(
        path=run.path,
        label=run.label,
        key=f"{run.label}@{run.started_at}",
        workload=run.workload,
        target=run.target,
        started_at=run.started_at,
        exit_code=run.summary.exit_code,
        verdict=verdict.status if verdict else None,
        reasons=list(verdict.reasons) if verdict else [],
        notebooks=notebooks,
        # Plain files only: a link (index.html -> /proc/self/environ) is never uploaded.
        files=[run.path / name for name in RUN_FILES if is_plain_file(run.path / name)],
        seconds=run.summary.seconds if run.summary.seconds is not None else sum(timed) or None,
    )
    # The runner runs the notebooks one after another, each timed on its own.
    moment = record.start
    for notebook in notebooks:
        notebook.start = moment
        if moment is not None:
            moment += notebook.seconds or 0.0
    return record


def _notebook(run: Run, entry: NotebookOutcome) -> NotebookRecord:
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
        record.workload = dict(header.get("workload") or {})
        target = (header.get("target") or {}).get("name")
        record.parameters = effective_parameters(
            dict(header.get("parameters") or {}), record.workload, target
        )
        record.versions = {str(k): str(v) for k, v in (header.get("versions") or {}).items()}
        record.files.append(path)
    report = run.path / f"{entry.notebook}.html"
    if report.is_file() and not report.is_symlink():
        record.files.append(report)
    return record


def effective_parameters(
    given: dict[str, Any], workload: dict[str, Any], target: Any = None
) -> dict[str, Any]:
    """The parameters as they took effect: one left at its "the workload's default" value (0 or
    "") takes the value the result records for the workload, `target` ("auto") the target that
    ran; where the notebook wrote is left out."""
    effective: dict[str, Any] = {}
    for name, value in given.items():
        if name in NOT_SETTINGS:
            continue
        default = value in (0, "", None) and not isinstance(value, bool)
        if default and workload.get(name) is not None:
            value = workload[name]
        elif name == "target" and isinstance(target, str) and target:
            value = target
        effective[name] = value
    return effective


def _registered(notebook: str) -> bool:
    from workbench.questions import question

    return question(notebook) is not None
