"""Child processes and this machine's cores: the one place every package starts, bounds and
counts processes from (notebook 04's trials and torchrun launches, the planner's gloo check
runs, notebook 05's stream cap, a target's data-parallel workers).

A trial that runs out of memory, crashes the interpreter or hangs must not take the notebook's
kernel with it, and a device runtime must be released after every trial. So each job runs in a
child process that starts a session of its own (the whole process group, compiler and DataLoader
processes included, can then be killed at once), sends its output to a log file, and reports
through a JSON result file before it exits.
"""

from __future__ import annotations

import contextlib
import json
import math
import multiprocessing
import os
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Literal, Protocol

from workbench.errors import describe_error
from workbench.redact import scrub_text
from workbench.results import write_json_atomic

# What a forkserver imports once, so that each trial forked from it starts warm. Creating the
# first optimizer imports torch._dynamo (seconds), so it is preloaded too; and fast_exit, so the
# server, holding all of that, ends in a tenth of a second when its kernel stops it.
FORKSERVER_PRELOAD = [
    "workbench.execution.fast_exit",
    "torch",
    "torch._dynamo",
    "workbench.baseline.measure",
    "workbench.tuning.trials",
    "workbench.tuning.dataloader",
]
OUTPUT_TAIL_CHARS = 4000
# A killed process group gets this long to exit on SIGTERM before SIGKILL.
TERMINATE_GRACE_S = 5.0

FINISHED: Final = "finished"  # the job returned (its result may still record a failure)
TIMED_OUT: Final = "timeout"  # still running at the deadline: killed with its process group
SIGNALLED: Final = "signal"  # killed by a signal before it could report
EXITED: Final = "exit"  # exited without a result (an error outside the job, or os._exit)
ProcessStatus = Literal["finished", "timeout", "signal", "exit"]  # how a child process ended


class Job(Protocol):
    """A picklable description of work; `run()` executes in the child and returns JSON data."""

    def run(self) -> dict[str, Any]: ...


@dataclass
class ChildOutcome:
    status: ProcessStatus
    result: dict[str, Any] | None
    exit_code: int | None  # negative: the signal that killed it
    seconds: float  # from process start to exit (or kill)
    output_tail: str  # the end of what the child printed, secrets scrubbed

    @property
    def signal_name(self) -> str | None:
        if self.exit_code is None or self.exit_code >= 0:
            return None
        try:
            return signal.Signals(-self.exit_code).name
        except ValueError:
            return f"signal {-self.exit_code}"


# What torchrun tells each rank: a script run inside a rank the workbook launched must not
# read them as its own launch (a torchrun-ready script would join a second process group).
LAUNCHER_VARIABLES: Final = (
    "RANK",
    "WORLD_SIZE",
    "LOCAL_RANK",
    "LOCAL_WORLD_SIZE",
    "GROUP_RANK",
    "GROUP_WORLD_SIZE",
    "ROLE_RANK",
    "ROLE_WORLD_SIZE",
    "ROLE_NAME",
    "MASTER_ADDR",
    "MASTER_PORT",
    "TORCHELASTIC_RUN_ID",
    "TORCHELASTIC_RESTART_COUNT",
    "TORCHELASTIC_MAX_RESTARTS",
)


@contextlib.contextmanager
def launcher_environment_hidden() -> Iterator[None]:
    """Inside, this process looks launched alone; torchrun's variables come back after."""
    saved = {name: os.environ.pop(name) for name in LAUNCHER_VARIABLES if name in os.environ}
    try:
        yield
    finally:
        os.environ.update(saved)


def usable_cores() -> int:
    """Cores this process may run on (os.sched_getaffinity honours CPU pinning)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def _child_main(
    job: Job, result_path: str, log_path: str, environ: dict[str, str], deadline_s: int
) -> None:
    # A session of its own: the parent can kill this process and everything it starts together.
    os.setsid()
    # The parent kills the session at its deadline; should the parent itself die first (a
    # killed kernel), SIGALRM ends this process a little later instead of leaving it hung.
    signal.alarm(deadline_s)
    # A forkserver child inherits the server's environment, frozen when the server started:
    # take the parent's as it is now, as a freshly started process would.
    os.environ.clear()
    os.environ.update(environ)
    log = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    sys.stdout.flush()
    sys.stderr.flush()
    os.dup2(log, 1)
    os.dup2(log, 2)
    try:
        result = job.run()
    except BaseException as exc:  # reported as the job's error; the parent classifies it
        error = describe_error(exc)
        traceback.print_exc()
        result = {"error": error.text, "location": error.location}
    sys.stdout.flush()
    sys.stderr.flush()
    write_json_atomic(Path(result_path), result)


def kill_group(pgid: int, grace_s: float = 0.0, leader: Any = None) -> None:
    """SIGTERM the process group (when `grace_s` > 0, waiting that long for `leader`, a Popen
    or Process, to exit), then SIGKILL whatever is left of it."""
    if grace_s > 0:
        try:
            os.killpg(pgid, signal.SIGTERM)
        except ProcessLookupError:
            return
        if leader is not None:
            deadline = time.monotonic() + grace_s
            while time.monotonic() < deadline and _alive(leader):
                time.sleep(0.05)
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _alive(process: Any) -> bool:
    return process.poll() is None if hasattr(process, "poll") else process.is_alive()


def read_tail(path: Path) -> str:
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            fh.seek(max(0, fh.tell() - OUTPUT_TAIL_CHARS))
            return scrub_text(fh.read().decode("utf-8", "replace"))
    except OSError:
        return ""


def torchrun(
    module_args: list[str], world_size: int, env: dict[str, str], log_path: Path, timeout_s: float
) -> int | None:
    """`python -m torch.distributed.run --standalone` of `module_args` ("-m module ...") in its
    own process group, its output into `log_path`; its exit code, or None when it was still
    running at the deadline. torchrun forwards SIGTERM to its workers; SIGKILL then takes what
    is left, also when the wait itself was interrupted (Ctrl-C in the notebook)."""
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone",
               f"--nproc-per-node={world_size}", *module_args]  # fmt: skip
    with open(log_path, "wb") as log:
        process = subprocess.Popen(
            command, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )
        code = None
        try:
            code = process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            pass
        finally:
            running = process.poll() is None
            kill_group(process.pid, TERMINATE_GRACE_S if running else 0.0, process)
            process.wait()
    return code


def run_in_child(job: Job, start_method: str, timeout_s: float) -> ChildOutcome:
    """Run `job` in a child process started with `start_method`; kill it at `timeout_s`."""
    context = multiprocessing.get_context(start_method)
    if start_method == "forkserver":
        # Only takes effect when the server starts, the first time a trial runs.
        context.set_forkserver_preload(FORKSERVER_PRELOAD)
    backstop = math.ceil(timeout_s + 2 * TERMINATE_GRACE_S)
    with tempfile.TemporaryDirectory(prefix="workbench-trial-") as folder:
        result_path = Path(folder) / "result.json"
        log_path = Path(folder) / "output.log"
        # Every concrete context has Process; typeshed gives get_context(str) only BaseContext.
        process = context.Process(  # type: ignore[attr-defined]
            target=_child_main,
            args=(job, str(result_path), str(log_path), dict(os.environ), backstop),
            daemon=False,
        )
        started = time.perf_counter()
        process.start()
        try:
            process.join(timeout_s)
            timed_out = process.is_alive()
        finally:
            # Whatever it started (compiler, DataLoader workers) goes with it: finished, timed
            # out, or the wait interrupted (Ctrl-C in the notebook).
            kill_group(process.pid)
            process.join()
        seconds = time.perf_counter() - started
        result = json.loads(result_path.read_text()) if result_path.exists() else None
        status: ProcessStatus
        if timed_out:
            status = TIMED_OUT
        elif result is not None:
            status = FINISHED
        elif process.exitcode is not None and process.exitcode < 0:
            status = SIGNALLED
        else:
            status = EXITED
        return ChildOutcome(status, result, process.exitcode, seconds, read_tail(log_path))
