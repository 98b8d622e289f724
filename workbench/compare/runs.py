"""Run folders as a comparison reads them: summary.json and each notebook's result file.

A comparison never reads HTML. A folder is a run when it holds summary.json; a folder that holds
runs (such as reports/) contributes each of them, oldest first, and lists the ones it cannot read.

Every file is read within bounds and checked against the shape of the fields a comparison reads
(SUMMARY_SHAPE here, each notebook's data shape beside the code that reads it), so the code that
judges runs only ever sees well-typed data; a hand-edited field is one sentence naming it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from workbench.errors import BadInput
from workbench.results import SCHEMA_VERSION
from workbench.safe_load import (
    RESULT_MAX_BYTES,
    Required,
    Shape,
    check_fields,
    load_json,
    read_bounded,
    shown,
)

_VERDICT = ({"status": (str, None), "reason": (str, None)}, None)
# What compare reads of summary.json, and what collect's dashboard shows of it.
SUMMARY_SHAPE: Shape = {
    "workload": str,
    "target": str,
    "started_at": str,
    "exit_code": (int, None),
    "verdict": ({"status": (str, None), "reasons": [str]}, None),
    "notebooks": [
        {
            "notebook": Required(str),
            "result": (str, None),
            "headline": (str, None),
            "verdict": _VERDICT,
        }
    ],
}
# What compare reads of every result file's header; `data` is checked by its notebook's shape.
RECORD_SHAPE: Shape = {"target": ({"is_trainium": (bool, None)}, None)}


@dataclass
class Run:
    path: Path
    summary: dict[str, Any]
    results: dict[str, dict[str, Any]] = field(default_factory=dict)  # notebook -> whole record

    @property
    def label(self) -> str:
        return self.path.name

    @property
    def workload(self) -> str:
        return str(self.summary.get("workload", ""))

    @property
    def target(self) -> str:
        return str(self.summary.get("target", ""))

    @property
    def started_at(self) -> str:
        return str(self.summary.get("started_at", ""))

    def data(self, notebook: str) -> dict[str, Any] | None:
        record = self.results.get(notebook)
        return None if record is None else record.get("data")


class UnreadableRun(BadInput):
    """A run folder that cannot be compared: missing, interrupted, or from another schema."""


def _read_json(path: Path, shape: Shape) -> dict[str, Any]:
    """The file's object, within the bounds safe_load keeps and checked against `shape`."""
    if not path.exists():
        raise UnreadableRun(f"{path} is missing")
    try:
        value = load_json(read_bounded(path, "File", RESULT_MAX_BYTES), str(path))
        if not isinstance(value, dict):
            raise UnreadableRun(f"{path} does not hold a JSON object")
        check_fields(value, shape, str(path))
    except BadInput as exc:
        raise UnreadableRun(str(exc).rstrip(".")) from None
    return value


def data_shapes() -> dict[str, Shape]:
    """Each notebook's `data` fields a comparison reads, declared in the module that reads
    them (imported here, not at the top: those modules import Run from this one)."""
    from workbench.compare import coverage, environment, numerics, retuning, timing

    return {
        environment.ENVIRONMENT_NOTEBOOK: environment.DATA_SHAPE,
        timing.BASELINE_NOTEBOOK: timing.DATA_SHAPE,
        coverage.COVERAGE_NOTEBOOK: coverage.DATA_SHAPE,
        numerics.NUMERICS_NOTEBOOK: numerics.DATA_SHAPE,
        retuning.RETUNING_NOTEBOOK: retuning.DATA_SHAPE,
    }


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
    summary = _read_json(summary_path, SUMMARY_SHAPE)
    _check_schema(summary_path, summary)
    run = Run(folder, summary)
    shapes = data_shapes()
    for entry in summary.get("notebooks", []):
        name = entry.get("result")
        if not name:
            continue
        path = result_path(folder, name)
        notebook = entry["notebook"]
        record = _read_json(path, {**RECORD_SHAPE, "data": (shapes.get(notebook, dict), None)})
        _check_schema(path, record)
        run.results[notebook] = record
    return run


def collect_runs(paths: list[str | Path]) -> tuple[list[Run], list[str]]:
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
