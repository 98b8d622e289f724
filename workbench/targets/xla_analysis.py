"""torch_xla's own account of each compile: the graph hash, the cause and the Python frame.

With PT_XLA_DEBUG_LEVEL=1, torch_xla writes a "Compilation Analysis" block for every graph it
compiles (level 2 adds a block per execution, which a timed loop cannot afford), to
PT_XLA_DEBUG_FILE when that is set (xla_cpu.md 2.4, neuron.md 2.3). A block reads:

    Compilation Analysis: Compilation Cause
    Compilation Analysis:   user torch_xla.sync
    Compilation Analysis: Graph Info:
    Compilation Analysis:   Graph Hash: b73714bec594f89436ffa9599b12d9c4
    ...
    Compilation Analysis: Python Frame Triggered Execution:
    Compilation Analysis:   sync (.../torch_xla/torch_xla.py:87)
    Compilation Analysis:   step (/home/me/model.py:41)

torch_xla reads the level when it first needs it, so it is set before anything is traced.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import re
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

_PREFIX = "Compilation Analysis:"
# Marks the debug variables as set by the workbook (not by the user), and in which process.
_OWNED = "WORKBENCH_XLA_ANALYSIS"
_FRAME = re.compile(r"^\s*(?P<function>\S+) \((?P<file>.+):(?P<line>\d+)\)\s*$")
# Frames inside these packages say how the graph was cut, not which user code cut it.
_LIBRARY_PARTS = (f"{os.sep}torch_xla{os.sep}", f"{os.sep}torch{os.sep}")
# The workbook's own frames (its step loop) and the workloads it ships (the user's side).
_WORKBOOK = str(Path(__file__).resolve().parent.parent) + os.sep
_WORKLOADS = os.path.join(_WORKBOOK, "workloads") + os.sep
_CAPTURE = os.path.join(_WORKBOOK, "coverage") + os.sep


@dataclass(frozen=True)
class Frame:
    function: str
    file: str
    line: int

    def label(self) -> str:
        return f"{os.path.basename(self.file)}:{self.line} in {self.function}"


@dataclass
class CompileAnalysis:
    """One compile as torch_xla described it."""

    cause: str  # torch_xla's words, e.g. "user torch_xla.sync"
    graph_hash: str
    frames: list[Frame] = field(default_factory=list)  # innermost first, as torch_xla lists them

    def user_frame(self) -> Frame | None:
        """The line of the workload's code that made the graph end here: the innermost frame
        past torch, torch_xla and notebook 02's op capture, when it is not the workbook's own
        code (its step loop ends every step with a sync, and reads losses after a phase: not
        the user's doing). Workload modules shipped with the workbook count as the user's."""
        for frame in self.frames:
            if frame.file.startswith("<") or any(part in frame.file for part in _LIBRARY_PARTS):
                continue  # torch, torch_xla, or code they generated (Dynamo's FX modules)
            if frame.file.startswith(_WORKLOADS):
                return frame
            if frame.file.startswith(_CAPTURE):
                continue  # notebook 02's op capture sits between every op and its caller
            return None if frame.file.startswith(_WORKBOOK) else frame
        return None


def parse(text: str) -> list[CompileAnalysis]:
    """Every Compilation Analysis block in `text`, in the order torch_xla wrote them."""
    analyses: list[CompileAnalysis] = []
    section = ""
    current: CompileAnalysis | None = None
    for raw in text.splitlines():
        if not raw.startswith(_PREFIX):
            continue
        line = raw[len(_PREFIX) :]
        heading = line.strip()
        if heading == "Compilation Cause":
            current = CompileAnalysis(cause="", graph_hash="")
            analyses.append(current)
            section = "cause"
        elif heading.startswith("Graph Info"):
            section = "graph"
        elif heading.startswith("Python Frame"):
            section = "frames"
        elif heading.startswith(("=", "-")):
            section = ""
        elif current is not None and heading:
            if section == "cause" and not current.cause:
                current.cause = heading
            elif section == "graph" and heading.startswith("Graph Hash:"):
                current.graph_hash = heading.split(":", 1)[1].strip()
            elif section == "frames" and (match := _FRAME.match(heading)):
                current.frames.append(Frame(match["function"], match["file"], int(match["line"])))
    return analyses


class AnalysisFile:
    """The file torch_xla writes its compile analyses to, for this process.

    Only where the user has not configured torch_xla's debug output already: their
    PT_XLA_DEBUG_LEVEL and PT_XLA_DEBUG_FILE win, and then this reads their file, if any.
    """

    def __init__(self) -> None:
        self.path: str | None = os.environ.get("PT_XLA_DEBUG_FILE")
        self.enabled_here = False
        owner = os.environ.get(_OWNED)
        if "PT_XLA_DEBUG_LEVEL" in os.environ and owner is None:
            return  # the user's settings
        if owner == str(os.getpid()):
            # Another target in this process set it up: torch_xla keeps writing where it
            # started, so this one reads the same file.
            self.enabled_here = True
            return
        # A child process (a tuning trial) inherits the parent's variables: it gets a file of
        # its own, so the two processes' blocks never interleave in one file.
        handle, path = tempfile.mkstemp(prefix="workbench-xla-compiles-", suffix=".txt")
        os.close(handle)
        atexit.register(_remove, path)
        os.environ["PT_XLA_DEBUG_LEVEL"] = "1"
        os.environ[_OWNED] = str(os.getpid())
        os.environ["PT_XLA_DEBUG_FILE"] = path
        self.path = path
        self.enabled_here = True

    def analyses(self) -> list[CompileAnalysis]:
        if not self.path:
            return []
        try:
            with open(self.path, encoding="utf-8", errors="replace") as handle:
                return parse(handle.read())
        except OSError:
            return []


def _remove(path: str) -> None:
    with contextlib.suppress(OSError):
        os.remove(path)
