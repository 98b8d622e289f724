"""`workbench run`: validate everything, then execute the notebooks in order with papermill.

Each notebook gets a fresh kernel that is shut down afterwards (NeuronCores are held per process),
a failing notebook does not stop the others, and `reports/latest` only ever moves to a full run
(every notebook of the workbook, not an --only selection) in which every notebook succeeded.
"""

from __future__ import annotations

import errno
import logging
import os
import re
import secrets
import signal
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

import nbformat
import papermill
from nbclient.exceptions import CellTimeoutError, DeadKernelError
from papermill.exceptions import PapermillExecutionError

from workbench import results
from workbench.compile_cache.cache import default_cache_root
from workbench.errors import (
    EXIT_INTERRUPTED,
    EXIT_NOTEBOOK_FAILED,
    EXIT_OK,
    BadInput,
    NotAnswered,
    one_line,
)
from workbench.execution.engine import ENGINE_NAME
from workbench.execution.kernel import kernel_manager_writing_stderr_to, private_kernelspec
from workbench.markup import cut_at_word, named_list
from workbench.params import NOTEBOOKS_DIR, RUNNER_PARAMETERS, notebook_parameters, validate
from workbench.questions import question
from workbench.redact import console_line, scrub_data, scrub_text
from workbench.report import UnsafeReport, export_html, write_index
from workbench.safe_load import shown
from workbench.summary import (
    NOT_ANSWERED,
    NotebookOutcome,
    NotebookVerdict,
    OutcomeStatus,
    RunSummary,
    judge_run,
    write_summary,
)
from workbench.targets import TARGET_NAMES, get_target, resolve_target_name
from workbench.workloads import BUILTIN_WORKLOADS, DEFAULT_WORKLOAD, HF_PREFIX, SCRIPT_PREFIX

if TYPE_CHECKING:  # imported when a run exports, not for every run
    from workbench.export.command import ExportOptions

DEFAULT_CELL_TIMEOUT_S = 3600  # a cold Neuron compile can take most of an hour
# Held in the run folder while notebooks write, and freed just before index.html and
# summary.json: a disk that a notebook's figures fill still has room for the record of the run.
# Both files together are under 30 KiB for a five-notebook run.
RUN_FILES_RESERVE = ".space-for-summary"
RUN_FILES_RESERVE_BYTES = 128 * 1024
# Longest headline or error kept in summary.json and the index (cut at a word, with an ellipsis).
LINE_LIMIT = 500


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
    # A folder, "" for the default under the user's cache directory, or "off".
    compile_cache: str = ""
    # The notebooks a run stands for as a whole: a matrix item's own selection is its workbook,
    # so its runs are judged, and move its `latest`, as full runs. Empty: every notebook.
    workbook: list[str] = field(default_factory=list)
    # Trackers the finished run is exported to (workbench.export: mlflow, tensorboard, junit).
    export: list[str] = field(default_factory=list)


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


# Room for the time stamp, suffix and target within a file system's 255-byte name limit.
_SLUG_MAX = 80


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text).strip("_")[:_SLUG_MAX] or "workload"


def _new_run_folder(reports_root: Path, workload_name: str, target: str) -> Path:
    """A fresh folder named by the second plus a random suffix, created atomically, so two runs
    started in the same second never share (or fight over) a folder."""
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    reports_root.mkdir(parents=True, exist_ok=True)
    for _ in range(16):
        out = reports_root / f"{stamp}-{secrets.token_hex(3)}-{_slug(workload_name)}-{target}"
        try:
            out.mkdir()
        except FileExistsError:
            continue
        return out
    raise FileExistsError(errno.EEXIST, "no unused run folder name", str(reports_root))


def prepare_out_dir(request: RunRequest, workload_name: str, target: str) -> Path:
    """Create the run folder; an occupied --out, a file or an unwritable place is BadInput."""
    try:
        if request.out is None:
            out = _new_run_folder(request.reports_root.resolve(), workload_name, target)
        else:
            out = request.out.resolve()
            if out.exists() and not out.is_dir():
                raise BadInput(
                    f"--out {out} is a file, not a folder; choose a new folder for the run."
                )
            if out.exists() and any(out.iterdir()):
                raise BadInput(
                    f"Output folder {out} already holds files; choose a new --out so no "
                    "earlier run is overwritten."
                )
            out.mkdir(parents=True, exist_ok=True)
        # The write test is also the reserve, and the claim: it is created exclusively, so of two
        # runs given the same empty --out at the same moment, one gets the folder and the other
        # is told it is taken. A folder that cannot take it is no place for a run.
        reserve = out / RUN_FILES_RESERVE
        try:
            with open(reserve, "xb") as handle:
                handle.write(bytes(RUN_FILES_RESERVE_BYTES))
        except FileExistsError:
            raise BadInput(
                f"Output folder {out} was just taken by another run; choose a new --out so no "
                "run is overwritten."
            ) from None
        except OSError:
            reserve.unlink(missing_ok=True)  # a part-written reserve is not left behind
            raise
    except OSError as exc:
        where = request.out or request.reports_root
        raise BadInput(
            f"Output folder {where} cannot be used: {exc.strerror or exc}; choose another --out."
        ) from None
    return out


def _error_line(exc: BaseException | str) -> str:
    """One line for the console, summary.json and the index: no secret, no control sequence."""
    return cut_at_word(console_line(" ".join(str(exc).split())), LINE_LIMIT)


class _PrintedLines:
    """File-like target for a notebook's stdout: each printed line (a phase, a trial, a launch)
    goes to the console as progress, indented under its notebook. Tables and figures are display
    outputs, not stdout, so they stay in the report and run.log."""

    def __init__(self, progress: Callable[[str], None]) -> None:
        self.progress = progress

    def write(self, text: str) -> None:
        for line in console_line(text).splitlines():
            if line.strip():
                self.progress(f"    {line}")

    def flush(self) -> None:
        pass


def _partial_path(out: Path, stem: str) -> Path:
    """Where papermill saves the notebook, when it starts and when it ends (engine.py); a full
    disk would leave half a notebook under the final name."""
    return out / f".{stem}.partial.ipynb"


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
    # Outside the run folder: the kernel's own log lines must not use the room a full disk
    # leaves for the run's files.
    handle, stderr_name = tempfile.mkstemp(prefix=f"workbench-{stem}-kernel-", suffix=".log")
    os.close(handle)
    kernel_stderr = Path(stderr_name)
    try:
        papermill.execute_notebook(
            str(path),
            str(_partial_path(out, stem)),
            parameters=params,
            kernel_name=kernel,
            cwd=str(out),
            log_output=True,
            progress_bar=False,
            start_timeout=120,
            execution_timeout=request.cell_timeout,
            stdout_file=_PrintedLines(progress),
            kernel_manager_class=kernel_manager_writing_stderr_to(kernel_stderr),
            engine_name=ENGINE_NAME,
        )
    except PapermillExecutionError as exc:
        if exc.ename == NotAnswered.__name__:
            # Not a failure: the notebook said why its question has no answer here.
            outcome.status = NOT_ANSWERED
            outcome.error = scrub_text(one_line(exc.evalue))
        else:
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
    except OSError as exc:  # papermill's saves of the notebook: a full disk lands here
        outcome.status = "failed"
        outcome.error = f"the notebook could not be saved: {_error_line(exc.strerror or exc)}"
    except KeyboardInterrupt:
        outcome.status = "interrupted"
        outcome.error = "interrupted"
        raise
    finally:
        outcome.seconds = time.perf_counter() - started
        last_words = _log_kernel_stderr(kernel_stderr)
        if outcome.status == "kernel-died" and last_words:
            outcome.error = f"{outcome.error}; its last words: {last_words}"
        _finish_outputs(path, out, outcome, request.show_code)
    return outcome


def _log_kernel_stderr(path: Path) -> str:
    """The kernel process's own stderr into run.log (scrubbed like every line there), then
    deleted; returns its last line, for a kernel that died."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""
    finally:
        path.unlink(missing_ok=True)
    lines = [console_line(line) for line in text.splitlines() if line.strip()]
    log = logging.getLogger("papermill")
    for line in lines:
        log.info(f"kernel stderr: {line}")
    return cut_at_word(lines[-1], 300) if lines else ""


def _last_started_cell(nb: nbformat.NotebookNode) -> int | None:
    """The cell that was running when a timeout or a dead kernel stopped the notebook: papermill
    stamps each cell as it starts, and stops at the one that did not finish."""
    started = [
        index
        for index, cell in enumerate(nb.cells)
        if cell.get("metadata", {}).get("papermill", {}).get("start_time")
    ]
    return started[-1] if started else None


def _save_executed(partial: Path, executed: Path, outcome: NotebookOutcome) -> None:
    """The scrubbed notebook under its final name, atomically. On a full disk the partial copy
    is deleted first and the write tried once more: its space is often exactly what was missing."""
    nb = nbformat.reads(partial.read_text(encoding="utf-8"), as_version=4)
    if outcome.status in ("timeout", "kernel-died") and outcome.failed_cell is None:
        outcome.failed_cell = _last_started_cell(nb)
    text = nbformat.writes(nbformat.from_dict(scrub_data(nb)))
    try:
        results.write_text_atomic(executed, text)
    except OSError as exc:
        if exc.errno not in (errno.ENOSPC, errno.EDQUOT):
            raise
        partial.unlink()
        results.write_text_atomic(executed, text)


def _add_error(outcome: NotebookOutcome, status: OutcomeStatus, message: str) -> None:
    """Note a problem after the kernel finished; an earlier failure keeps its status."""
    if outcome.status == "ok":
        outcome.status = status
    outcome.error = f"{outcome.error}; {message}" if outcome.error else message


def _finish_outputs(path: Path, out: Path, outcome: NotebookOutcome, show_code: bool) -> None:
    """Save the scrubbed notebook and export its report, whatever happened in the kernel.

    Every write is atomic; one that fails (a full disk) is said in the outcome, and the run goes
    on to the next notebook.
    """
    partial = _partial_path(out, path.stem)
    executed = out / f"{path.stem}.ipynb"
    if partial.exists():
        try:
            _save_executed(partial, executed, outcome)
        except OSError as exc:  # not writable, or no room for the scrubbed copy
            _add_error(outcome, "failed", f"the executed notebook was not saved ({_reason(exc)})")
        except ValueError:  # papermill's copy was cut short, by a full disk most often
            _add_error(
                outcome, "failed", "the executed notebook was not saved (its copy is cut short)"
            )
        finally:
            # papermill's copy is unscrubbed and may be half-written: it never stays behind.
            partial.unlink(missing_ok=True)
    if outcome.status == NOT_ANSWERED:
        return  # no report of a question not asked: the index row says why
    report_notebook(executed, outcome, show_code)


def report_notebook(executed: Path, outcome: NotebookOutcome, show_code: bool) -> None:
    """Export an executed notebook's report and read its result file into `outcome`."""
    out = executed.parent
    if executed.exists():
        html_path = out / f"{executed.stem}.html"
        try:
            export_html(executed, html_path, show_code=show_code)
            outcome.html = html_path.name
        except Exception as exc:  # the run goes on; the status and the index say what is missing
            _add_error(outcome, "report-failed", f"report not written ({_reason(exc)})")
    result_path = out / f"{executed.stem}.json"
    if result_path.exists():
        outcome.result = result_path.name
        _read_lead(result_path, outcome)
    elif outcome.status == "ok":
        outcome.status = "failed"
        outcome.error = f"the notebook finished without writing {result_path.name}"


def _read_lead(result_path: Path, outcome: NotebookOutcome) -> None:
    """The headline and verdict of a result file into `outcome`; a file that cannot be read
    (too large, not JSON, a field of the wrong type) is named with why, never shown as a
    notebook that judged nothing."""
    try:
        lead = results.LEAD.load(result_path)
    except (ValueError, OSError) as exc:
        why = _reason(exc) if isinstance(exc, OSError) else _error_line(exc)
        outcome.unreadable_result = f"result file unreadable: {why}"
        return
    outcome.headline = _error_line(lead.headline) if lead.headline else None
    if lead.verdict is not None:
        outcome.verdict = NotebookVerdict(lead.verdict.status, _error_line(lead.verdict.reason))


def _reason(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.strerror:
        return _error_line(f"{exc.strerror}: {exc.filename}" if exc.filename else exc.strerror)
    if isinstance(exc, UnsafeReport):
        return _error_line(exc)
    return _error_line(f"{type(exc).__name__}: {exc}")


def check_settings(per_notebook: dict[str, dict[str, Any]]) -> None:
    """Build each notebook's settings from its parameters, as the notebook itself will, so a
    value out of range is rejected before any kernel starts or anything is written."""
    for stem, params in per_notebook.items():
        for name in _WORKLOAD_SIZES:
            if params.get(name, 0) < 0:
                raise BadInput(f"{name} {params[name]} must be 0 (the workload's own) or more.")
        found = question(stem)
        if found is not None:
            found.check_settings(params)


# Shared by the notebooks that build a workload; 0 keeps the workload's own value.
_WORKLOAD_SIZES = ("batch_size", "num_classes")


def notebooks_left_out(notebooks: list[Path], workbook: list[str] | None = None) -> list[str]:
    """The workbook's notebooks (every one, or those `workbook` numbers) that a run of
    `notebooks` does not execute (an --only run)."""
    chosen = {path.stem for path in notebooks}
    whole = select_notebooks(workbook or [])
    return [path.stem for path in whole if path.stem not in chosen]


def update_latest(reports_root: Path, out: Path) -> None:
    """Point `<reports_root>/latest` at `out` atomically (a new link renamed over the old)."""
    link = reports_root / "latest"
    tmp = reports_root / f".latest.{os.getpid()}"
    tmp.unlink(missing_ok=True)
    tmp.symlink_to(os.path.relpath(out, reports_root))
    os.replace(tmp, link)


@dataclass
class CheckedRequest:
    """A request checked for everything that does not need its target's device: the
    notebooks, their values, the workload and the target's name (not whether it is here)."""

    notebooks: list[Path]
    declared: dict[str, dict[str, Any]]
    per_notebook: dict[str, dict[str, Any]]
    workload_name: str


@dataclass
class PreparedRun(CheckedRequest):
    """A request checked end to end: a CheckedRequest whose target is available here."""

    target: str
    target_reason: str
    validation: str

    def values(
        self, path: Path, request: RunRequest, out: Path, *, headless: bool
    ) -> dict[str, Any]:
        """The values injected into one notebook: the runner's own, then the user's overrides."""
        runner_values: dict[str, Any] = {
            "workload": request.workload,
            # The request, not its resolution: each report says why its target was chosen.
            "target": request.target,
            "out_dir": str(out),
            # Every notebook of the run shares one cache: 02-04 reuse 01's compiles.
            "compile_cache": request.compile_cache or str(default_cache_root()),
        }
        if headless:
            # tqdm bars freeze into one stale line in a headless notebook's output.
            runner_values["progress_bars"] = False
        declared = self.declared[path.stem]
        return {
            **{k: v for k, v in runner_values.items() if k in declared},
            **self.per_notebook[path.stem],
        }

    def summary(self, request: RunRequest, started_at: str) -> RunSummary:
        """What summary.json says about the run as a whole, before any notebook ran."""
        return RunSummary(
            workload=self.workload_name,
            workload_spec=console_line(request.workload),
            target=self.target,
            target_requested=request.target,
            target_reason=self.target_reason,
            validation=self.validation,
            started_at=started_at,
        )


def check_request(request: RunRequest, *, load_workload: bool = True) -> CheckedRequest:
    """Check a request without its target's device (a matrix is checked on a login node, its
    items run on their own nodes); bad input is BadInput. Without `load_workload` nothing the
    workload names is run (no script, no module imported, no model folder's code): its spec
    is checked by its form and the files it names."""
    if request.target not in TARGET_NAMES:
        raise BadInput(
            f"Unknown target {request.target!r}; choose one of {', '.join(TARGET_NAMES)}."
        )
    reserved = sorted(set(request.parameters) & set(RUNNER_PARAMETERS))
    if reserved:
        raise BadInput(
            f"Parameter {reserved[0]!r} is set by the runner; "
            f"use --{reserved[0].replace('_dir', '').replace('_', '-')} instead."
        )
    if isinstance(request.cell_timeout, bool) or not isinstance(request.cell_timeout, int):
        raise BadInput(
            f"--cell-timeout {request.cell_timeout!r} must be a whole number of seconds."
        )
    if request.cell_timeout <= 0:
        raise BadInput(
            f"--cell-timeout {request.cell_timeout} must be 1 or more seconds "
            f"(the default is {DEFAULT_CELL_TIMEOUT_S})."
        )
    notebooks = select_notebooks(request.only)
    declared = {path.stem: notebook_parameters(path) for path in notebooks}
    per_notebook = validate(request.parameters, declared)
    check_settings(per_notebook)
    given = {k: v for params in per_notebook.values() for k, v in params.items()}
    name = (
        _checked_workload_name(request, given)
        if load_workload
        else _workload_name_unloaded(request.workload or DEFAULT_WORKLOAD)
    )
    return CheckedRequest(notebooks, declared, per_notebook, name)


# A `package.module:factory` spec, checked by its form alone.
_FACTORY_SPEC = re.compile(r"[A-Za-z_][\w.]*:[A-Za-z_]\w*")


def _workload_name_unloaded(spec: str) -> str:
    """The workload's name from its spec, running nothing: a built-in by its key, a script by
    its file (which must exist and parse; it is compiled, never run), a factory by its form,
    an hf: model by its last path part."""
    if spec in BUILTIN_WORKLOADS:
        return spec
    if spec.startswith(SCRIPT_PREFIX):
        from workbench.workloads.script import check_script_file, parse_script_spec

        path, _ = parse_script_spec(spec)
        check_script_file(spec, path)
        return console_line(f"script-{path.stem}")
    if spec.startswith(HF_PREFIX):
        return console_line(spec.removeprefix(HF_PREFIX).rstrip("/").rsplit("/", 1)[-1] or spec)
    if not _FACTORY_SPEC.fullmatch(spec):
        raise BadInput(
            f"Workload {shown(spec)} is not a built-in name ({', '.join(BUILTIN_WORKLOADS)}), "
            "package.module:factory, hf:NAME_OR_FOLDER or script:PATH."
        )
    import importlib.util

    # Only the top-level package is looked for: finding it runs none of its code (finding
    # `pkg.mod` would import `pkg`).
    top = spec.split(":", 1)[0].split(".", 1)[0]
    if importlib.util.find_spec(top) is None:
        raise BadInput(f"Workload {shown(spec)}: no module named {top!r} is importable here.")
    return console_line(spec.rsplit(":", 1)[1])


def _checked_workload_name(request: RunRequest, given: dict[str, Any]) -> str:
    """The workload's name, once it is known to load, so that a bad workload is rejected before
    any notebook starts. A built-in is named by its registry key and needs no loading: its
    factory ships with the package, and skipping it keeps torch out of this process (2 s)."""
    spec = request.workload or DEFAULT_WORKLOAD
    if spec in BUILTIN_WORKLOADS:
        return spec
    from workbench.workload import WorkloadSpec

    # The target too: a script: workload's device calls are redirected to it as it loads.
    workload = WorkloadSpec.from_params(
        {**given, "workload": spec, "target": request.target}
    ).load()
    # Scrubbed too: the name becomes the run folder's, the console's and summary.json's, and a
    # folder path may hold a password (hf:/mnt/https://user:pw@host/ckpt).
    return console_line(workload.name)


def prepare_run(request: RunRequest) -> PreparedRun:
    """Check everything about a request, its target's presence here included, before anything
    is written; bad input is BadInput."""
    checked = check_request(request)
    target, reason = resolve_target_name(request.target)
    return PreparedRun(
        **vars(checked),
        target=target,
        target_reason=reason,
        validation=get_target(target).validation_statement(),
    )


def run(request: RunRequest, progress: Callable[[str], None] = print) -> int:
    """Run the selected notebooks; returns the exit code (see workbench.errors)."""
    prepared = prepare_run(request)
    exports = _checked_exports(request)  # the tracker must answer before any notebook runs
    out = prepare_out_dir(request, prepared.workload_name, prepared.target)
    summary = prepared.summary(request, datetime.now(timezone.utc).isoformat(timespec="seconds"))
    progress(
        f"workbench: {prepared.workload_name} on {prepared.target} "
        f"({prepared.target_reason}) -> {out}"
    )
    started = time.perf_counter()
    executed = _execute_all(prepared, request, out, progress)
    summary.seconds = time.perf_counter() - started
    summary.not_run = notebooks_left_out(prepared.notebooks, request.workbook)
    unwritten = {"run.log": executed.log_failure} if executed.log_failure else {}
    exit_code = write_run_files(
        out, summary, executed.outcomes, unwritten, interrupted=executed.interrupted
    )
    exit_code = _move_latest(request, out, summary.not_run, exit_code, unwritten, progress)
    if exports is not None and not unwritten:
        from workbench.export.command import export_finished

        if not export_finished(out, exports, progress) and exit_code == EXIT_OK:
            exit_code = EXIT_NOTEBOOK_FAILED
    if unwritten:
        progress(
            f"workbench: error: {', '.join(unwritten)} could not be written in {out} "
            f"({next(iter(unwritten.values()))}), so this run is incomplete and "
            "reports/latest was not moved."
        )
    else:
        progress(f"report: {out / 'index.html'} (exit {exit_code})")
    return exit_code


def _checked_exports(request: RunRequest) -> ExportOptions | None:
    """The trackers the run is exported to, each checked to answer now."""
    if not request.export:
        return None
    from workbench.export.command import ExportOptions, check_destinations

    exports = ExportOptions(request.export)
    check_destinations(exports, request.out or request.reports_root / "run")
    return exports


@dataclass
class _Executed:
    outcomes: list[NotebookOutcome] = field(default_factory=list)
    interrupted: bool = False  # Ctrl-C or SIGTERM stopped the run
    log_failure: str | None = None  # why run.log is incomplete, where it is


def _execute_all(
    prepared: PreparedRun, request: RunRequest, out: Path, progress: Callable[[str], None]
) -> _Executed:
    """Each notebook in its own fresh kernel, in order, every cell's output into run.log; an
    interrupt stops the run at the notebook it reached, which is recorded as interrupted."""
    log_handler = _stream_notebook_output_to(out / "run.log")
    executed = _Executed()
    notebooks = prepared.notebooks
    previous_sigterm = signal.signal(signal.SIGTERM, _raise_interrupt)
    try:
        with private_kernelspec([os.getcwd()]) as kernel:
            for index, path in enumerate(notebooks, 1):
                params = prepared.values(path, request, out, headless=True)
                progress(f"[{index}/{len(notebooks)}] {path.stem} ...")
                try:
                    outcome = _execute(path, out, params, kernel, request, progress)
                except KeyboardInterrupt:
                    stopped = NotebookOutcome(path.stem, "interrupted", 0.0, "interrupted")
                    executed.outcomes.append(stopped)
                    executed.interrupted = True
                    break
                executed.outcomes.append(outcome)
                line = f"[{index}/{len(notebooks)}] {path.stem} {outcome.status}"
                line += f" in {outcome.seconds:.1f} s"
                progress(f"{line}: {outcome.error}" if outcome.error else line)
    finally:
        signal.signal(signal.SIGTERM, previous_sigterm)
        logging.getLogger("papermill").removeHandler(log_handler)
        log_handler.close()
    executed.log_failure = log_handler.failure
    return executed


def _move_latest(
    request: RunRequest,
    out: Path,
    left_out: list[str],
    exit_code: int,
    unwritten: dict[str, str],
    progress: Callable[[str], None],
) -> int:
    """Point reports/latest at a full, clean run in the default place; returns the exit code,
    which a link that cannot be moved makes 1 (and says so in `unwritten`)."""
    if exit_code != EXIT_OK or request.out is not None:
        return exit_code
    if left_out:
        progress(
            f"workbench: reports/latest was not moved: this run left out {named_list(left_out)} "
            "(--only), and only a run of every notebook moves it."
        )
        return exit_code
    try:
        update_latest(request.reports_root.resolve(), out)
    except OSError as exc:
        unwritten["reports/latest"] = _reason(exc)
        return EXIT_NOTEBOOK_FAILED
    return exit_code


def write_run_files(
    out: Path,
    summary: RunSummary,
    outcomes: list[NotebookOutcome],
    unwritten: dict[str, str],
    *,
    interrupted: bool = False,
) -> int:
    """Judge the run, then write index.html and summary.json; returns the run's exit code.

    `summary` holds the run-level fields (its not_run among them); the outcomes, the exit code,
    the verdict and what could not be written (added to `unwritten`) are filled in here.
    """
    if interrupted:
        exit_code = EXIT_INTERRUPTED
    elif all(o.status in ("ok", NOT_ANSWERED) for o in outcomes):
        exit_code = EXIT_OK
    else:
        exit_code = EXIT_NOTEBOOK_FAILED
    summary.exit_code = exit_code
    summary.notebooks = list(outcomes)
    summary.verdict = judge_run(outcomes, summary.not_run)
    summary.unwritten = unwritten  # what a failed write (a full disk) left out, and why
    (out / RUN_FILES_RESERVE).unlink(missing_ok=True)
    # The index is written first, so summary.json can record whether it was; a run with
    # anything unwritten is incomplete and exits 1.
    for name, write in (
        ("index.html", lambda: write_index(out, summary)),
        ("summary.json", lambda: write_summary(out / "summary.json", summary)),
    ):
        if unwritten and exit_code == EXIT_OK:
            exit_code = summary.exit_code = EXIT_NOTEBOOK_FAILED
        try:
            write()
        except OSError as exc:
            unwritten[name] = _reason(exc)
    if unwritten and exit_code == EXIT_OK:
        exit_code = EXIT_NOTEBOOK_FAILED
    return exit_code


def _raise_interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


class _RunLogHandler(logging.FileHandler):
    """run.log: every cell's output, scrubbed and stripped of control sequences.

    A write that fails (a full disk) is remembered once instead of printing a logging traceback
    for every later line; the run then says that run.log is incomplete.
    """

    def __init__(self, path: Path) -> None:
        super().__init__(path, encoding="utf-8")
        self.failure: str | None = None

    def handleError(self, record: logging.LogRecord) -> None:  # noqa: N802 (logging's name)
        if self.failure is None:
            error = sys.exc_info()[1]
            self.failure = _reason(error) if error else "a line could not be written"

    def close(self) -> None:
        try:
            super().close()
        except OSError as exc:
            self.failure = self.failure or _reason(exc)


def _stream_notebook_output_to(path: Path) -> _RunLogHandler:
    """papermill logs every cell's output under log_output=True; keep it in the run's log file."""
    handler = _RunLogHandler(path)
    handler.setFormatter(logging.Formatter("%(asctime)s %(message)s"))
    handler.addFilter(_ScrubFilter())
    logger = logging.getLogger("papermill")
    logger.setLevel(logging.INFO)
    logger.propagate = False
    logger.addHandler(handler)
    return handler


class _ScrubFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        record.msg = console_line(record.getMessage())
        record.args = None
        return True
