"""Working copies for stepping through in JupyterLab: `workbench open` and `workbench export`.

The notebooks in notebooks/ are templates. `open` writes parameterized copies of them into a new
run folder (papermill's prepare-only mode injects the values without executing anything), so an
engineer's outputs and results land beside the copies and the checkout stays clean. `export`
turns the executed copies into the reports, index.html and summary.json a headless run leaves,
with the runner's own export and summary code.
"""

from __future__ import annotations

import os
import shlex
import sys
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path

import nbformat
import papermill

from workbench import results
from workbench.errors import BadInput, one_line
from workbench.markup import cut_at_word
from workbench.redact import scrub_data, scrub_text
from workbench.report import REMOVED_CELL_TAGS
from workbench.runner import (
    LINE_LIMIT,
    RunRequest,
    available_notebooks,
    prepare_out_dir,
    prepare_run,
    report_notebook,
    write_run_files,
)
from workbench.safe_load import (
    RESULT_MAX_BYTES,
    Required,
    Shape,
    check_fields,
    load_json,
    read_bounded,
)
from workbench.summary import NOT_RUN, NotebookOutcome, RunSummary, read_summary

# papermill's tag on the cell holding the injected values.
INJECTED_TAG = "injected-parameters"
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
        # Prepared in memory (no output path): the copy is written once, by _write_copy.
        prepared_copy = papermill.execute_notebook(
            str(path),
            None,
            parameters=prepared.values(path, request, out, headless=False),
            prepare_only=True,
            progress_bar=False,
        )
        _write_copy(copy, prepared_copy)
        copies.append(copy)
    run = prepared.summary(request, datetime.now(timezone.utc).isoformat(timespec="seconds"))
    opened = {**asdict(run), "parameters": dict(request.parameters)}
    results.write_json_atomic(out / OPENED_FILE, scrub_data(opened))
    return OpenedRun(out, copies, jupyter_command(out, request.workload))


def _write_copy(copy: Path, nb: nbformat.NotebookNode) -> None:
    """Write a prepared copy. The kernel runs its parameters cell, so that cell holds each value
    as given: scrubbed, a URL password would not reach the code. Every other place the values
    appear (papermill's record of them in the metadata) is scrubbed as `workbench run` scrubs a
    finished notebook, and a copy whose parameters cell holds a secret is created owner-only
    (0600): it is the one file the value is in. Reports made from it are scrubbed by export."""
    record = nb.metadata.setdefault("papermill", {})
    record["output_path"] = str(copy)
    record["parameters"] = scrub_data(record.get("parameters", {}))
    injected = [c for c in nb.cells if INJECTED_TAG in c.get("metadata", {}).get("tags", [])]
    holds_secret = any(scrub_text(cell.source) != cell.source for cell in injected)
    # Created with its final mode: never readable by others, not even for a moment.
    handle = os.open(copy, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600 if holds_secret else 0o666)
    with os.fdopen(handle, "w", encoding="utf-8") as stream:
        stream.write(nbformat.writes(nb))


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


# What export reads of each copy: its cells' types, code, tags, run counts, errors, and the
# cell timings JupyterLab records (with "record timing" on).
_TIMING = {"iopub.execute_input": str, "shell.execute_reply": str}
COPY_SHAPE: Shape = {
    "cells": Required(
        [
            {
                "cell_type": str,
                "source": (str, [str]),
                "execution_count": (int, None),
                "metadata": {"tags": [str], "execution": _TIMING},
                "outputs": [{"output_type": str, "ename": str, "evalue": str}],
            }
        ]
    )
}


def _run_summary(folder: Path) -> RunSummary:
    """The run-level fields from `open`'s record, or from an earlier summary.json."""
    for name in (OPENED_FILE, "summary.json"):
        path = folder / name
        if path.exists():
            data = load_json(read_bounded(path, "Run record", RESULT_MAX_BYTES), str(path))
            if isinstance(data, dict) and all(k in data for k in ("workload", "target")):
                return read_summary(data, str(path))
    raise BadInput(
        f"{folder} holds neither {OPENED_FILE} nor summary.json; export a folder that "
        "`workbench open` or `workbench run` wrote."
    )


def _read_copy(path: Path) -> nbformat.NotebookNode:
    """An executed copy, read within bounds with the fields export reads checked: a copy that
    is not a notebook, or holds a field of the wrong type, is one sentence (exit 2), since
    nothing of it could be reported truthfully."""
    text = read_bounded(path, "Notebook copy", RESULT_MAX_BYTES)
    check_fields(load_json(text, str(path)), COPY_SHAPE, str(path))
    try:
        return nbformat.reads(text, as_version=4)
    except (ValueError, KeyError, AttributeError) as exc:  # nbformat's own refusals
        raise BadInput(f"{path} is not a notebook nbformat reads ({one_line(str(exc))}).") from None


def _check_result_beside(copy: Path) -> None:
    """The copy's result file, when it saved one, read as a run's report will read it."""
    result = copy.with_suffix(".json")
    if result.exists():
        results.load_result(result)


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


def _outcome(path: Path, nb: nbformat.NotebookNode) -> NotebookOutcome:
    """What an executed copy says about its run: the first error output; otherwise "not run"
    unless every cell ran (a copy stepped through part-way has measured part of its question,
    and its verdict would claim the rest)."""
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
    summary = _run_summary(folder.resolve())
    # Everything is read and checked before the first report is written.
    notebooks = {path: _read_copy(path) for path in copies}
    for path in copies:
        _check_result_beside(path)
    outcomes = []
    for path, nb in notebooks.items():
        outcome = _outcome(path, nb)
        if outcome.status != NOT_RUN:  # a copy not run through has no report and no verdict
            report_notebook(path, outcome, show_code)
        outcomes.append(outcome)
    copied = {path.stem for path in copies}
    summary.not_run = [stem for stem in _workbook_stems() if stem not in copied]
    timed = [o.seconds for o in outcomes if o.seconds is not None]
    summary.seconds = sum(timed) if timed else None
    exit_code = write_run_files(folder, summary, outcomes, {})
    return exit_code, folder / "index.html"
