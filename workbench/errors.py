"""Errors that reach the user as one sentence and a documented exit code, and the one way any
exception is put on one line with the place in the user's code it points at."""

from __future__ import annotations

import difflib
import functools
import importlib.util
import os
import sysconfig
import traceback
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

# Exit codes of `workbench` commands. EXIT_CODES below is the one table of them: the command
# line's help is written from it, and a unit test holds README's table to it.
EXIT_OK = 0
EXIT_NOTEBOOK_FAILED = 1
EXIT_BAD_INPUT = 2
EXIT_DRIFT = 3
EXIT_BLOCKING_FINDINGS = 4
EXIT_REGRESSION = 5
EXIT_INCONCLUSIVE = 6
EXIT_INTERRUPTED = 130


@dataclass(frozen=True)
class ExitCode:
    """One exit code: its number, its constant's name, what it means, and the subcommands that
    exit with it (none named where any command may)."""

    code: int
    name: str
    meaning: str
    commands: tuple[str, ...] = ()

    def summary(self) -> str:
        """The meaning as the command line's help shows it, with the commands that exit so."""
        return f"{self.meaning} ({' or '.join(self.commands)})" if self.commands else self.meaning


EXIT_CODES: tuple[ExitCode, ...] = (
    ExitCode(EXIT_OK, "EXIT_OK", "every notebook succeeded"),
    # Its report and the other notebooks' are still written.
    ExitCode(EXIT_NOTEBOOK_FAILED, "EXIT_NOTEBOOK_FAILED", "a notebook failed"),
    # Rejected before anything ran; nothing was written.
    ExitCode(EXIT_BAD_INPUT, "EXIT_BAD_INPUT", "bad input"),
    ExitCode(EXIT_DRIFT, "EXIT_DRIFT", "critical drift between the two manifests", ("env diff",)),
    # Code that will not run on the chosen Neuron path.
    ExitCode(EXIT_BLOCKING_FINDINGS, "EXIT_BLOCKING_FINDINGS", "a blocking finding", ("scan",)),
    # The newest run regressed against its baseline or history; an item of a matrix did; the
    # candidate environment of a rehearsal regressed (hold the pin).
    ExitCode(
        EXIT_REGRESSION, "EXIT_REGRESSION", "a regression", ("compare", "collect", "rehearse")
    ),
    # No regression, but a timing beyond its gate that no measured noise level can judge (a
    # pair, a loaded machine, one value per run): a scheduler alerts on it; --inconclusive
    # pass|fail turns it into 0 or 5.
    ExitCode(
        EXIT_INCONCLUSIVE,
        "EXIT_INCONCLUSIVE",
        "timings inconclusive and no regression",
        ("compare", "collect"),
    ),
    # Ctrl-C or SIGTERM: the partial run is kept, `latest` untouched.
    ExitCode(EXIT_INTERRUPTED, "EXIT_INTERRUPTED", "interrupted"),
)


def exit_codes_line(
    codes: Iterable[int] | None = None, wording: Mapping[int, str] | None = None
) -> str:
    """The help line that lists `codes` (every one by default) in EXIT_CODES' words, or in a
    command's own `wording` of what a code means for it: "exit codes: 0 ..., 2 ..."."""
    by_code = {entry.code: entry for entry in EXIT_CODES}
    wording = wording or {}
    listed = [by_code[code] for code in codes] if codes is not None else list(EXIT_CODES)
    return "exit codes: " + ", ".join(
        f"{entry.code} {wording.get(entry.code, entry.summary())}" for entry in listed
    )


class WorkbenchError(Exception):
    """An expected failure with a message meant for the user, not a traceback."""

    exit_code = EXIT_NOTEBOOK_FAILED


class BadInput(WorkbenchError):
    """Wrong workload spec, unknown parameter, bad config, unwritable output..."""

    exit_code = EXIT_BAD_INPUT


class NotAnswered(Exception):
    """A notebook whose question the workload cannot answer (a script's loss that cannot be
    recomputed leaves 03 and 04 without one): raised by context.start in the kernel, and the
    run records the notebook as not answered, with this sentence, instead of failed."""


# An error shown in a table cell, a console line or a result file stays readable at this length;
# the full traceback is kept where one exists (the notebook, the trial's log).
ERROR_MESSAGE_CHARS = 500


@dataclass(frozen=True)
class FrameRef:
    """One frame of a traceback or stack: where, and whether that is the user's own code."""

    path: str
    line: int
    function: str
    in_user_code: bool

    def describe(self) -> str:
        return f"{short_path(self.path)}:{self.line} in {self.function}"


@dataclass(frozen=True)
class ErrorLine:
    """An exception on one line: its type, its message (whitespace collapsed, cut to
    ERROR_MESSAGE_CHARS) and the frame a user should open first."""

    error_type: str
    message: str
    frame: FrameRef | None

    @property
    def text(self) -> str:
        return f"{self.error_type}: {self.message}" if self.message else self.error_type

    @property
    def location(self) -> str:
        return self.frame.describe() if self.frame else ""

    def __str__(self) -> str:
        return f"{self.text} (at {self.location})" if self.frame else self.text


def describe_error(exc: BaseException) -> ErrorLine:
    """`exc` on one line, located at the innermost frame of its traceback in the user's code
    (else its innermost frame): the line a user opens, not torch's or workbench's."""
    frames = traceback.extract_tb(exc.__traceback__)
    return ErrorLine(type(exc).__name__, one_line(str(exc)), pick_user_frame(frames))


def one_line(text: str) -> str:
    """`text` with every run of whitespace (newlines too) as one space, cut to
    ERROR_MESSAGE_CHARS with a closing ellipsis when it was longer."""
    flat = " ".join(text.split())
    if len(flat) <= ERROR_MESSAGE_CHARS:
        return flat
    return flat[: ERROR_MESSAGE_CHARS - 1] + "…"


def pick_user_frame(frames: Sequence[traceback.FrameSummary]) -> FrameRef | None:
    """The innermost of `frames` (listed outermost first, as tracebacks and Dynamo's user stacks
    are) that is the user's code; the innermost of all when none is; None for no frames."""
    for frame in reversed(frames):
        if is_user_code(frame.filename):
            return FrameRef(frame.filename, frame.lineno or 0, frame.name, True)
    if not frames:
        return None
    frame = frames[-1]
    return FrameRef(frame.filename, frame.lineno or 0, frame.name, False)


def is_user_code(filename: str) -> bool:
    """True for the user's (or a built-in workload's) source: not torch or its torch* sibling
    packages, not the workbench machinery, not the standard library, not generated code."""
    if filename.startswith("<"):
        # <frozen ...> and <string> are generated; IPython names notebook cells <ipython-input-...>.
        return filename.startswith("<ipython-input")
    path = os.path.realpath(filename)
    dirs = _library_dirs()
    if path.startswith(dirs.torch_family):
        return False
    if path.startswith(dirs.workbench) and not path.startswith(dirs.workload_code):
        return False
    return not (path.startswith(dirs.stdlib) and "site-packages" not in path)


@dataclass(frozen=True)
class _LibraryDirs:
    torch_family: str  # ".../site-packages/torch": no separator, so torch_xla, torchvision match
    workbench: str
    workload_code: tuple[str, ...]  # inside workbench, but the user's kind of code
    stdlib: str


@functools.cache
def _library_dirs() -> _LibraryDirs:
    # find_spec, not import: the command line reports bad input without paying for torch.
    torch_spec = importlib.util.find_spec("torch")
    torch_dir = (
        os.path.dirname(os.path.realpath(torch_spec.origin))
        if torch_spec and torch_spec.origin
        else os.path.join(sysconfig.get_paths()["purelib"], "torch")
    )
    workbench_dir = os.path.dirname(os.path.realpath(__file__)) + os.sep
    return _LibraryDirs(
        torch_family=torch_dir,
        workbench=workbench_dir,
        # Built-in workloads and the plain-module wrapper are workload code like any user's.
        workload_code=(workbench_dir + "workloads" + os.sep, workbench_dir + "workload.py"),
        stdlib=os.path.realpath(sysconfig.get_paths()["stdlib"]) + os.sep,
    )


def short_path(path: str) -> str:
    """A source file as a reader finds it: a library's by its import path
    (transformers/models/gpt2/modeling_gpt2.py, torch/nn/modules/linear.py) rather than where
    this machine's environment keeps it, workbench's by its package path, and the user's
    relative to the working folder."""
    if path.startswith("<"):
        return path
    real = os.path.realpath(path)
    for packages in (f"{os.sep}site-packages{os.sep}", f"{os.sep}dist-packages{os.sep}"):
        if packages in real:
            return real.rsplit(packages, 1)[1]
    torch_parent = os.path.dirname(_library_dirs().torch_family) + os.sep
    if real.startswith(torch_parent):  # torch from a source checkout
        return real[len(torch_parent) :]
    workbench_dir = _library_dirs().workbench
    if real.startswith(workbench_dir):
        return "workbench/" + real[len(workbench_dir) :]
    cwd = os.getcwd() + os.sep
    return real[len(cwd) :] if real.startswith(cwd) else path


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    """` (did you mean X?)` for the closest of `choices` to a misspelt `word`, else nothing."""
    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return f" (did you mean {close[0]}?)" if close else ""
