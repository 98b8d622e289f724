"""Wall time of commands the way a user starts them, from process start to exit: one notebook
run (`workbench run --only NN`), or any command timed against a reference command in pairs."""

from __future__ import annotations

import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

WORKBENCH = str(Path(sys.executable).parent / "workbench")


def command_seconds(command: Sequence[str], ok: tuple[int, ...] = (0,)) -> float:
    """Seconds from launch to exit of `command`; an exit code outside `ok` stops the benchmark
    with the command's standard error, so a failed command is never published as a time."""
    start = time.perf_counter()
    done = subprocess.run(list(command), capture_output=True, text=True)
    elapsed = time.perf_counter() - start
    if done.returncode not in ok:
        sys.exit(f"{' '.join(command)} exited {done.returncode}:\n{done.stderr[-3000:]}")
    return elapsed


def paired_medians(
    command: Sequence[str], reference: Sequence[str], pairs: int, ok: tuple[int, ...] = (0,)
) -> tuple[float, float, list[float]]:
    """Medians of `command` and `reference` timed in alternating pairs (a change in load hits
    both alike), after one untimed run of each warms the file-system cache; and each pair's
    ratio."""
    command_seconds(command, ok)
    command_seconds(reference)
    timed, references = [], []
    for _ in range(pairs):
        timed.append(command_seconds(command, ok))
        references.append(command_seconds(reference))
    ratios = [t / r for t, r in zip(timed, references, strict=True)]
    return statistics.median(timed), statistics.median(references), ratios


def notebook_wall_seconds(number: str) -> float:
    """Seconds from launch to exit (kernel start, the notebook, report export), default workload."""
    with tempfile.TemporaryDirectory() as folder:
        out = str(Path(folder) / "run")
        return command_seconds([WORKBENCH, "run", "--only", number, "--out", out])
