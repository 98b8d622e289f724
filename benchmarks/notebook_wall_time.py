"""Wall time of one notebook run the way a user starts it: `workbench run --only NN`."""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from pathlib import Path


def notebook_wall_seconds(number: str) -> float:
    """Seconds from launch to exit (kernel start, the notebook, report export), default workload."""
    workbench = Path(sys.executable).parent / "workbench"
    with tempfile.TemporaryDirectory() as folder:
        start = time.perf_counter()
        done = subprocess.run(
            [str(workbench), "run", "--only", number, "--out", str(Path(folder) / "run")],
            capture_output=True,
            text=True,
        )
        elapsed = time.perf_counter() - start
    if done.returncode != 0:
        sys.exit(f"workbench run --only {number} failed:\n{done.stderr}")
    return elapsed
