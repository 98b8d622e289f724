"""Notebook 02 as a user runs it (`workbench run --only 02`) on a workload that fails midway: real
papermill, kernel and nbconvert."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

from tests.fixtures import REPO_ROOT

REPO = REPO_ROOT

FAILING_WORKLOAD = """
import torch
from torch import nn

from workbench.workload import Workload

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


class Midway(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(8, 6)
        self.fc2 = nn.Linear(5, 3)

    def forward(self, x):
        hidden = torch.relu(self.fc1(x))
        return self.fc2(hidden)  # MARK-midway


def make():
    return Workload(
        name="midway",
        model_factory=Midway,
        batch_maker=lambda n, g: (
            (torch.randn(n, 8, generator=g),),
            torch.randint(3, (n,), generator=g),
        ),
        loss_fn=nn.functional.cross_entropy,
        optimizer_factory=lambda params: torch.optim.SGD(params, lr=0.1),
        batch_size=4,
    )
"""


def test_notebook_02_shows_a_failure_midway_and_keeps_the_ops(tmp_path: Path) -> None:
    """`workbench run --only 02` on a model that fails in its second layer: exit 1, and the
    report and result file still hold the ops captured so far, the failure with its line, and
    the scan of the workload's own file."""
    (tmp_path / "midway_model.py").write_text(textwrap.dedent(FAILING_WORKLOAD))
    workbench = str(Path(sys.executable).parent / "workbench")
    done = subprocess.run(
        [workbench, "run", "--only", "02", "--workload", "midway_model:make", "--out", "run"],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 1, done.stderr
    result = json.loads((tmp_path / "run" / "02_op_coverage.json").read_text())["data"]
    failure = result["capture"]["failure"]
    assert failure["phase"] == "forward" and failure["op"] == "aten::addmm"
    assert failure["site"]["path"].endswith("midway_model.py")
    lines = FAILING_WORKLOAD.splitlines()
    assert (
        failure["site"]["line"] == lines.index("        return self.fc2(hidden)  # MARK-midway") + 1
    )
    assert {"aten::addmm", "aten::relu"} <= {op["op"] for op in result["ops"]}
    assert "the step failed (forward)" in result["headline"]
    findings = result["scan"]["findings"]
    device_line = next(n for n, text in enumerate(lines, 1) if text.startswith("DEVICE ="))
    assert {(f["rule"], f["line"]) for f in findings} == {
        ("cuda-device", device_line),
        ("cuda-check", device_line),
    }
    html = (tmp_path / "run" / "02_op_coverage.html").read_text()
    assert "The training step failed" in html
    assert "midway_model.py:" in html
