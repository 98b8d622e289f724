"""Run folders as a comparison reads them: summary.json and each notebook's result file.

A comparison never reads HTML. A folder is a run when it holds summary.json; a folder that holds
runs (such as reports/) contributes each of them, oldest first, and lists the ones it cannot read.

Every file is read within bounds; summary.json is read into summary.RunSummary and each result
file by its notebook's own ResultFile (workbench.questions), into the typed record the
notebook's package writes it from. The code that judges runs reads attributes of those records,
never string keys, so a renamed field is a type error there; a hand-edited field is one sentence
naming it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from workbench.errors import BadInput
from workbench.questions import result_file
from workbench.results import LEAD, SCHEMA_VERSION, ResultFile, ResultLead
from workbench.safe_load import (
    RESULT_MAX_BYTES,
    RESULT_MAX_VALUES,
    Shape,
    check_fields,
    load_json,
    read_bounded,
    shown,
)
from workbench.summary import RunSummary, read_summary

# What compare reads of every result file's header; `data` is read by its notebook's ResultFile.
RECORD_SHAPE: Shape = {"target": ({"is_trainium": (bool, None)}, None)}
D = TypeVar("D", bound=ResultLead)


@dataclass
class Run:
    path: Path
    summary: RunSummary
    results: dict[str, ResultLead] = field(default_factory=dict)  # notebook -> typed data
    # Notebooks whose result file says it ran on Trainium (its header's target.is_trainium).
    on_trainium: set[str] = field(default_factory=set)

    @property
    def label(self) -> str:
        return self.path.name

    @property
    def workload(self) -> str:
        return self.summary.workload

    @property
    def target(self) -> str:
        return self.summary.target

    @property
    def started_at(self) -> str:
        return self.summary.started_at

    def result(self, file: ResultFile[D]) -> D | None:
        """The typed data of one notebook's result file; None where the run has none."""
        found = self.results.get(file.notebook)
        return found if isinstance(found, file.data_type) else None


class UnreadableRun(BadInput):
    """A run folder that cannot be compared: missing, interrupted, or from another schema."""


def _read_json(path: Path, shape: Shape) -> dict[str, Any]:
    """The file's object, within the bounds safe_load keeps and checked against `shape`."""
    if not path.exists():
        raise UnreadableRun(f"{path} is missing")
    try:
        # A link (to /proc/self/environ, to a file outside the run) is refused, not followed:
        # exports upload and compare shows what these files hold.
        text = read_bounded(path, "File", RESULT_MAX_BYTES, follow_links=False)
        value = load_json(text, str(path), RESULT_MAX_VALUES)
        if not isinstance(value, dict):
            raise UnreadableRun(f"{path} does not hold a JSON object")
        check_fields(value, shape, str(path))
    except BadInput as exc:
        raise UnreadableRun(str(exc).rstrip(".")) from None
    return value


def result_path(folder: Path, name: str) -> Path:
    """The result file a summary names: a plain file name inside the run folder, never a path
    elsewhere (a hand-edited summary naming /etc/passwd or ../x makes the run unreadable)."""
    plain = name not in ("", ".", "..") and not any(c in name for c in "/\\\x00")
    path = folder / name
    if not plain or not _inside(path, folder):
        raise UnreadableRun(
            f"{folder / 'summary.json'} names result {shown(name)}, which is not a file name "
            "inside the run folder"
        )
    if path.exists() and not path.is_file():
        raise UnreadableRun(f"{path} is not a regular file")
    return path


def _inside(path: Path, folder: Path) -> bool:
    """Whether `path` is in `folder` itself once symlinks are followed (a link leading out of
    the folder is refused like ../x)."""
    try:
        return path.resolve().parent == folder.resolve()
    except (OSError, RuntimeError):  # a symlink loop
        return False


def _check_schema(path: Path, record: dict[str, Any]) -> None:
    version = record.get("schema_version")
    if version != SCHEMA_VERSION:
        raise UnreadableRun(
            f"{path} has schema {version!r}; this workbench compares schema {SCHEMA_VERSION} "
            "(rerun the workbook with this version to compare)"
        )


def load_run(folder: Path) -> Run:
    """One run folder, every result file its summary names; UnreadableRun says what is wrong."""
    folder = Path(folder)
    if not folder.is_dir():
        raise UnreadableRun(f"run folder {folder} does not exist")
    summary_path = folder / "summary.json"
    if not summary_path.exists():
        raise UnreadableRun(
            f"{folder} has no summary.json: the run was interrupted or this is not a run folder"
        )
    record = _read_json(summary_path, {})
    _check_schema(summary_path, record)
    try:
        summary = read_summary(record, str(summary_path))
    except BadInput as exc:
        raise UnreadableRun(str(exc).rstrip(".")) from None
    run = Run(folder, summary)
    for entry in summary.notebooks:
        name = entry.result
        if not name:
            continue
        path = result_path(folder, name)
        notebook = entry.notebook
        record = _read_json(path, RECORD_SHAPE)
        _check_schema(path, record)
        reader = result_file(notebook) or LEAD  # a notebook outside the workbook: its lead
        try:
            run.results[notebook] = reader.read(record, str(path))
        except BadInput as exc:
            raise UnreadableRun(str(exc).rstrip(".")) from None
        if (record.get("target") or {}).get("is_trainium"):
            run.on_trainium.add(notebook)
    return run


def collect_runs(paths: Sequence[str | Path]) -> tuple[list[Run], list[str]]:
    """The runs named, in the order given (the baseline first), and the ones skipped.

    A run folder named directly must be readable (BadInput otherwise). A folder of runs, such as
    reports/, contributes its runs oldest first; unreadable ones among them are skipped and
    listed, so one broken night does not hide the others. A run named twice counts once.
    """
    runs: list[Run] = []
    seen: set[Path] = set()
    skipped: list[str] = []

    def add(run: Run) -> None:
        key = run.path.resolve()
        if key not in seen:
            seen.add(key)
            runs.append(run)

    for given in paths:
        path = Path(given)
        if (path / "summary.json").exists() or not path.is_dir():
            add(load_run(path))
            continue
        children = [p for p in path.iterdir() if p.is_dir() and not p.is_symlink()]
        if not children:
            raise UnreadableRun(f"{path} holds no run folders")
        found = []
        for child in children:
            try:
                found.append(load_run(child))
            except UnreadableRun as exc:
                skipped.append(str(exc))
        for run in sorted(found, key=lambda r: (r.started_at, r.label)):
            add(run)
    return runs, skipped
