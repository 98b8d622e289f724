"""`workbench run`: validate everything, then execute the notebooks in order with papermill.

Each notebook gets a fresh kernel that is shut down afterwards (NeuronCores are held per process),
a failing notebook does not stop the others, and `reports/latest` only ever moves to a run in
which every notebook succeeded.
"""

from __future__ import annotations

import logging
import os
import re
import signal
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import nbformat
import papermill
from nbclient.exceptions import CellTimeoutError, DeadKernelError
from papermill.exceptions import PapermillExecutionError

from workbench import results
from workbench.context import NOTEBOOKS_DIR
from workbench.errors import (
    EXIT_INTERRUPTED,
    EXIT_NOTEBOOK_FAILED,
    EXIT_OK,
    BadInput,
    describe_error,
    one_line,
)
from workbench.kernel import private_kernelspec
from workbench.params import notebook_parameters, validate
from workbench.redact import scrub_text
from workbench.report import export_html, write_index
from workbench.scorecard import run_verdict, verdict_from_data
from workbench.targets import TARGET_NAMES, get_target, resolve_target_name
from workbench.workload import WorkloadSpec
from workbench.workloads import DEFAULT_WORKLOAD

# Set by the runner itself; users choose them with --workload / --target / --out.
RUNNER_PARAMETERS = ("workload", "target", "out_dir")
DEFAULT_CELL_TIMEOUT_S = 3600  # a cold Neuron compile can take most of an hour


@dataclass
class RunRequest:
    workload: str = DEFAULT_WORKLOAD
    target: str = "auto"
    only: list[str] = field(default_factory=list)  # notebook numbers such as "00"
    out: Path | None = None
    parameters: dict[str, Any] = field(default_factory=dict)
    show_code: bool = False
    cell_timeout: int = DEFAULT_CELL_TIMEOUT_S
    reports_root: Path = Path("reports")


@dataclass
class NotebookOutcome:
    notebook: str
    status: str  # ok | failed | timeout | kernel-died | interrupted | not-run
    seconds: float
    error: str | None = None
    failed_cell: int | None = None
    html: str | None = None
    result: str | None = None
    headline: str | None = None
    verdict: dict[str, Any] | None = None  # the scorecard verdict from the result file


def available_notebooks() -> dict[str, Path]:
    """Notebook number -> path, for notebooks named NN_name.ipynb."""
    found = {}
    for path in sorted(NOTEBOOKS_DIR.glob("[0-9][0-9]_*.ipynb")):
        found[path.name[:2]] = path
    return found


def select_notebooks(only: list[str]) -> list[Path]:
    notebooks = available_notebooks()
    if not only:
        return list(notebooks.values())
    picked = []
    for number in only:
        key = number.strip().zfill(2)
        if key not in notebooks:
            raise BadInput(
                f"--only {number!r} names no notebook; choose from {', '.join(notebooks)}."
            )
        picked.append(notebooks[key])
    return sorted(set(picked))


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text).strip("_") or "workload"


def prepare_out_dir(request: RunRequest, workload_name: str, target: str) -> Path:
    """Create the run folder; an existing non-empty --out or an unwritable place is BadInput."""
    if request.out is None:
        stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
        out = request.reports_root / f"{stamp}-{_slug(workload_name)}-{target}"
    else:
        out = request.out
    out = out.resolve()
    if out.exists() and any(out.iterdir()):
        raise BadInput(
            f"Output folder {out} already holds files; choose a new --out so no earlier run "
            "is overwritten."
        )
    try:
        out.mkdir(parents=True, exist_ok=True)
        probe = out / ".write-test"
        probe.write_text("")
        probe.unlink()
    except OSError as exc:
        raise BadInput(f"Output folder {out} is not writable: {exc.strerror or exc}.") from None
    return out


class _PrintedLines:
    """File-like target for a notebook's stdout: each printed line (a phase, a trial, a launch)
    goes to the console as progress, indented under its notebook. Tables and figures are display
    outputs, not stdout, so they stay in the report and run.log."""

    def __init__(self, progress: Callable[[str], None]) -> None:
        self.progress = progress

    def write(self, text: str) -> None:
        for line in scrub_text(text).splitlines():
            if line.strip():
                self.progress(f"    {line}")

    def flush(self) -> None:
        pass


def _execute(
    path: Path,
    out: Path,
    params: dict[str, Any],
    kernel: str,
    request: RunRequest,
    progress: Callable[[str], None],
) -> NotebookOutcome:
    stem = path.stem
    started = time.perf_counter()
    outcome = NotebookOutcome(stem, "ok", 0.0)
    try:
        papermill.execute_notebook(
            str(path),
            str(out / f"{stem}.ipynb"),
            parameters=params,
            kernel_name=kernel,
            cwd=str(out),
            log_output=True,
            progress_bar=False,
            start_timeout=120,
            execution_timeout=request.cell_timeout,
            stdout_file=_PrintedLines(progress),
        )
    except PapermillExecutionError as exc:
        outcome.status = "failed"
        # The kernel's exception arrives as text: its traceback is in the notebook itself.
        outcome.error = scrub_text(one_line(f"{exc.ename}: {exc.evalue}"))
        outcome.failed_cell = exc.cell_index
    except CellTimeoutError:
        outcome.status = "timeout"
        outcome.error = f"a cell ran past the {request.cell_timeout} s cell timeout"
    except DeadKernelError:
        outcome.status = "kernel-died"
        outcome.error = "the kernel died (killed, out of memory or crashed) during a cell"
    except KeyboardInterrupt:
        outcome.status = "interrupted"
        outcome.error = "interrupted"
        raise
    finally:
        outcome.seconds = time.perf_counter() - started
        _finish_outputs(path, out, outcome, request.show_code)
    return outcome


def _finish_outputs(path: Path, out: Path, outcome: NotebookOutcome, show_code: bool) -> None:
    """Scrub the executed notebook and export its report, whatever happened in the kernel."""
    executed = out / f"{path.stem}.ipynb"
    if executed.exists():
        nb = nbformat.read(str(executed), as_version=4)
        text = nbformat.writes(nb)
        scrubbed = scrub_text(text)
        if scrubbed != text:
            results.write_text_atomic(executed, scrubbed)
        html_path = out / f"{path.stem}.html"
        try:
            export_html(executed, html_path, show_code=show_code)
            outcome.html = html_path.name
        except Exception as exc:  # the run must go on; the index says the report is missing
            failure = scrub_text(describe_error(exc).text)
            outcome.error = (outcome.error or "") + f" (report export failed: {failure})"
    result_path = out / f"{path.stem}.json"
    if result_path.exists():
        outcome.result = result_path.name
        try:
            data = results.load_result(result_path)["data"]
        except (ValueError, KeyError, OSError):
            data = {}
        outcome.headline = data.get("headline")
        verdict = verdict_from_data(data)
        outcome.verdict = (
            None if verdict is None else {"status": verdict.status, "reason": verdict.reason}
        )
    elif outcome.status == "ok":
        outcome.status = "failed"
        outcome.error = f"the notebook finished without writing {result_path.name}"


def update_latest(reports_root: Path, out: Path) -> None:
    """Point `<reports_root>/latest` at `out` atomically (a new link renamed over the old)."""
    link = reports_root / "latest"
    tmp = reports_root / f".latest.{os.getpid()}"
    tmp.unlink(missing_ok=True)
    tmp.symlink_to(os.path.relpath(out, reports_root))
    os.replace(tmp, link)


def run(request: RunRequest, progress: Callable[[str], None] = print) -> int:
    """Run the selected notebooks; returns the exit code (see workbench.errors)."""
    if request.target not in TARGET_NAMES:
        raise BadInput(
            f"Unknown target {request.target!r}; choose one of {', '.join(TARGET_NAMES)}."
        )
    reserved = sorted(set(request.parameters) & set(RUNNER_PARAMETERS))
    if reserved:
        raise BadInput(
            f"Parameter {reserved[0]!r} is set by the runner; "
            f"use --{reserved[0].replace('_dir', '')} instead."
        )
    notebooks = select_notebooks(request.only)
    declared = {path.stem: notebook_parameters(path) for path in notebooks}
    per_notebook = validate(request.parameters, declared)
    given = {k: v for params in per_notebook.values() for k, v in params.items()}
    # Loaded once here so that a bad workload is rejected before any notebook starts.
    workload = WorkloadSpec.from_params({**given, "workload": request.workload}).load()
    target, reason = resolve_target_name(request.target)
    validation = get_target(target).validation_statement()
    out = prepare_out_dir(request, workload.name, target)

    log_handler = _stream_notebook_output_to(out / "run.log")
    started_at = datetime.now(timezone.utc)
    started = time.perf_counter()
    outcomes: list[NotebookOutcome] = []
    progress(f"workbench: {workload.name} on {target} ({reason}) -> {out}")
    interrupted = False
    previous_sigterm = signal.signal(signal.SIGTERM, _raise_interrupt)
    try:
        with private_kernelspec([os.getcwd()]) as kernel:
            for index, path in enumerate(notebooks, 1):
                runner_values = {
                    "workload": request.workload,
                    # The request, not its resolution: each report says why its target was chosen.
                    "target": request.target,
                    "out_dir": str(out),
                    # tqdm bars freeze into one stale line in a headless notebook's output.
                    "progress_bars": False,
                }
                params = {
                    **{k: v for k, v in runner_values.items() if k in declared[path.stem]},
                    **per_notebook[path.stem],
                }
                progress(f"[{index}/{len(notebooks)}] {path.stem} ...")
                try:
                    outcome = _execute(path, out, params, kernel, request, progress)
                except KeyboardInterrupt:
                    outcomes.append(NotebookOutcome(path.stem, "interrupted", 0.0, "interrupted"))
                    interrupted = True
                    break
                outcomes.append(outcome)
                line = f"[{index}/{len(notebooks)}] {path.stem} {outcome.status}"
                line += f" in {outcome.seconds:.1f} s"
                if outcome.error:
                    line += f": {outcome.error}"
                progress(line)
    finally:
        signal.signal(signal.SIGTERM, previous_sigterm)
        logging.getLogger("papermill").removeHandler(log_handler)
        log_handler.close()

    if interrupted:
        exit_code = EXIT_INTERRUPTED
    elif all(o.status == "ok" for o in outcomes):
        exit_code = EXIT_OK
    else:
        exit_code = EXIT_NOTEBOOK_FAILED
    summary = {
        "schema_version": results.SCHEMA_VERSION,
        "workload": workload.name,
        "workload_spec": request.workload,
        "target": target,
        "target_requested": request.target,
        "target_reason": reason,
        "validation": validation,
        "started_at": started_at.isoformat(timespec="seconds"),
        "seconds": time.perf_counter() - started,
        "exit_code": exit_code,
        "notebooks": [asdict(o) for o in outcomes],
    }
    overall = run_verdict([asdict(o) for o in outcomes])
    summary["verdict"] = {"status": overall.status, "reasons": overall.reasons}
    results.write_json_atomic(out / "summary.json", summary)
    write_index(out, summary)
    if exit_code == EXIT_OK and request.out is None:
        update_latest(request.reports_root.resolve(), out)
    progress(f"report: {out / 'index.html'} (exit {exit_code})")
    return exit_code


def _raise_interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


def _stream_notebook_output_to(path: Path) -> logging.Handler:
    """papermill logs every cell's output under log_output=True; keep it in the run's log file."""
    handler = logging.FileHandler(path, encoding="utf-8")
    handler.setFormatter(logging.Formatter("%(asctime)s %(message)s"))
    handler.addFilter(_ScrubFilter())
    logger = logging.getLogger("papermill")
    logger.setLevel(logging.INFO)
    logger.propagate = False
    logger.addHandler(handler)
    return handler


class _ScrubFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        record.msg = scrub_text(record.getMessage())
        record.args = None
        return True
