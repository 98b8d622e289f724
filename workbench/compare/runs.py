"""Run folders as a comparison reads them: summary.json and each notebook's result file.

A comparison never reads HTML. A folder is a run when it holds summary.json; a folder that holds
runs (such as reports/) contributes each of them, oldest first, and lists the ones it cannot read.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from workbench.errors import BadInput
from workbench.results import SCHEMA_VERSION


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


def _read_json(path: Path) -> dict[str, Any]:
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UnreadableRun(f"{path} is missing") from None
    except (OSError, ValueError) as exc:
        raise UnreadableRun(f"{path} is not readable JSON ({exc})") from None
    if not isinstance(value, dict):
        raise UnreadableRun(f"{path} does not hold a JSON object")
    return value


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
    summary = _read_json(summary_path)
    _check_schema(summary_path, summary)
    run = Run(folder, summary)
    for entry in summary.get("notebooks", []):
        name = entry.get("result")
        if not name:
            continue
        path = folder / name
        record = _read_json(path)
        _check_schema(path, record)
        run.results[entry["notebook"]] = record
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
