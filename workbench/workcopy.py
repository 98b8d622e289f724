"""Working copies for stepping through in JupyterLab: `workbench open` and `workbench export`.

The notebooks in notebooks/ are templates. `open` writes parameterized copies of them into a new
run folder (papermill's prepare-only mode injects the values without executing anything), so an
engineer's outputs and results land beside the copies and the checkout stays clean. `export`
turns the executed copies into the reports, index.html and summary.json a headless run leaves,
with the runner's own export and summary code.
"""

from __future__ import annotations

import json
import shlex
import sys
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import nbformat
import papermill

from workbench import results
from workbench.errors import BadInput, one_line
from workbench.markup import cut_at_word
from workbench.redact import scrub_data, scrub_text
from workbench.report import REMOVED_CELL_TAGS
from workbench.runner import (
    LINE_LIMIT,
    NOT_RUN,
    NotebookOutcome,
    RunRequest,
    available_notebooks,
    prepare_out_dir,
    prepare_run,
    report_notebook,
    write_run_files,
)

# Written by `open`: what the run is, for `export` to put in summary.json and the index.
OPENED_FILE = "open.json"
__all__ = ["NOT_RUN", "OPENED_FILE", "OpenedRun", "export_run", "jupyter_command", "open_run"]


@dataclass(frozen=True)
class OpenedRun:
    folder: Path
    notebooks: list[Path]
    command: str  # the shell command that serves the folder in JupyterLab


def open_run(request: RunRequest) -> OpenedRun:
    """Check the request as `workbench run` does, then write one prepared copy per notebook."""
    prepared = prepare_run(request)
    out = prepare_out_dir(request, prepared.workload_name, prepared.target)
    copies = []
    for path in prepared.notebooks:
        copy = out / path.name
        papermill.execute_notebook(
            str(path),
            str(copy),
            parameters=prepared.values(path, request, out, headless=False),
            prepare_only=True,
            progress_bar=False,
        )
        copies.append(copy)
    opened = {
        **prepared.summary_fields(request),
        "started_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "parameters": scrub_data(dict(request.parameters)),
    }
    results.write_json_atomic(out / OPENED_FILE, opened)
    return OpenedRun(out, copies, jupyter_command(out, request.workload))


def jupyter_command(folder: Path, workload: str) -> str:
    """`jupyter lab FOLDER` from this interpreter's environment; a workload given as
    package.module:factory is found from the folder `workbench open` was run in."""
    beside = Path(sys.executable).parent / "jupyter"
    jupyter = shlex.quote(str(beside)) if beside.exists() else "jupyter"
    command = f"{jupyter} lab {shlex.quote(str(folder))}"
    if ":" in workload:
        here = shlex.quote(str(Path.cwd()))
        command = f"PYTHONPATH={here}${{PYTHONPATH:+:$PYTHONPATH}} {command}"
    return command


def _run_fields(folder: Path) -> dict[str, Any]:
    """The run-level fields from `open`'s record, or from an earlier summary.json."""
    for name in (OPENED_FILE, "summary.json"):
        path = folder / name
        if path.exists():
            try:
                data = json.loads(path.read_text(encoding="utf-8"))
            except (OSError, ValueError) as exc:
                raise BadInput(f"{path} cannot be read: {one_line(str(exc))}.") from None
            keep = (
                *("schema_version", "workload", "workload_spec", "target"),
                *("target_requested", "target_reason", "validation", "started_at"),
            )
            if isinstance(data, dict) and all(k in data for k in ("workload", "target")):
                return {k: data[k] for k in keep if k in data}
    raise BadInput(
        f"{folder} holds neither {OPENED_FILE} nor summary.json; export a folder that "
        "`workbench open` or `workbench run` wrote."
    )


def _timed_seconds(nb: nbformat.NotebookNode) -> float | None:
    """Seconds the cells ran, from the timings JupyterLab records (when recording is on)."""
    total, timed = 0.0, False
    for cell in nb.cells:
        execution = cell.get("metadata", {}).get("execution", {})
        start, end = execution.get("iopub.execute_input"), execution.get("shell.execute_reply")
        if start and end:
            try:
                delta = datetime.fromisoformat(end) - datetime.fromisoformat(start)
            except ValueError:
                continue
            total += delta.total_seconds()
            timed = True
    return total if timed else None


def _cells_to_run(nb: nbformat.NotebookNode) -> list[nbformat.NotebookNode]:
    """The code cells a copy stepped through to its end has run: every one with code in it,
    except the live-only ones a report leaves out (the widget panel)."""
    return [
        cell
        for cell in nb.cells
        if cell.cell_type == "code"
        and cell.source.strip()
        and not REMOVED_CELL_TAGS & set(cell.get("metadata", {}).get("tags", []))
    ]


def _outcome(path: Path) -> NotebookOutcome:
    """What an executed copy says about its run: the first error output; otherwise "not run"
    unless every cell ran (a copy stepped through part-way has measured part of its question,
    and its verdict would claim the rest)."""
    try:
        nb = nbformat.read(str(path), as_version=4)
    except (OSError, ValueError) as exc:
        return NotebookOutcome(path.stem, "failed", None, f"not readable: {one_line(str(exc))}")
    outcome = NotebookOutcome(path.stem, "ok", _timed_seconds(nb))
    for index, cell in enumerate(nb.cells):
        for output in cell.get("outputs", []):
            if output.get("output_type") == "error":
                outcome.status, outcome.failed_cell = "failed", index
                text = f"{output.get('ename', 'Error')}: {output.get('evalue', '')}"
                outcome.error = cut_at_word(scrub_text(one_line(text)), LINE_LIMIT)
                return outcome
    cells = _cells_to_run(nb)
    ran = sum(1 for cell in cells if cell.get("execution_count"))
    if ran < len(cells):
        outcome.status = NOT_RUN
        outcome.error = "no cell was run" if ran == 0 else f"{ran} of {len(cells)} cells were run"
    return outcome


def _workbook_stems() -> list[str]:
    return [path.stem for path in available_notebooks().values()]


def export_run(folder: Path, *, show_code: bool = False) -> tuple[int, Path]:
    """Reports, index.html and summary.json for the executed copies in `folder`; returns the
    exit code (0 when every notebook ran cleanly and wrote its result) and the index path."""
    if not folder.is_dir():
        raise BadInput(f"{folder} is not a folder; give the folder `workbench open` printed.")
    copies = sorted(folder.glob("[0-9][0-9]_*.ipynb"))
    if not copies:
        raise BadInput(f"{folder} holds no notebook copies (NN_name.ipynb) to export.")
    summary = _run_fields(folder.resolve())
    outcomes = []
    for path in copies:
        outcome = _outcome(path)
        if outcome.status != NOT_RUN:  # a copy not run through has no report and no verdict
            report_notebook(path, outcome, show_code)
        outcomes.append(outcome)
    copied = {path.stem for path in copies}
    summary["not_run"] = [stem for stem in _workbook_stems() if stem not in copied]
    timed = [o.seconds for o in outcomes if o.seconds is not None]
    summary["seconds"] = sum(timed) if timed else None
    exit_code = write_run_files(folder, summary, outcomes, {})
    return exit_code, folder / "index.html"
