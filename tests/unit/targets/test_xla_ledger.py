"""The compile ledger on the real XLA target: torch-xla 2.9 on XLA:CPU, as `make xla-venv` builds.

Runs only where torch_xla imports; it skips anywhere else. Each case runs in a fresh process:
torch_xla reads its debug level once, before the first graph, as a notebook kernel does.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fixtures import REPO_ROOT

pytest.importorskip("torch_xla")

pytestmark = pytest.mark.xla

REPO = REPO_ROOT

# A model that reads a value back to the host in its forward (a data-dependent branch): the
# graph is cut there, mid-step, and torch_xla names the line that did it.
PROBE = """
import json, sys, torch
from dataclasses import asdict
from tests.fixtures.user_workloads import classifier_workload
from workbench.baseline.measure import run_config
from workbench.baseline.records import EAGER, TRAIN, BaselineSettings
from workbench.coverage.analyze import measure_on_target
from workbench.targets import get_target
from workbench.timing import WarmupRule


class Branchy(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(8, 3)

    def forward(self, x):
        if x.abs().sum().item() > 0:  # VALUE READ
            x = x * 2
        return self.lin(x)


workload = classifier_workload(Branchy, "branchy", batch_size=8)
settings = BaselineSettings(steady_steps=3, warmup=WarmupRule(4, 0.9, 4))
target = get_target("xla")
if sys.argv[1] == "baseline":
    result = run_config(workload, target, TRAIN, EAGER, settings, log=lambda _: None)
    assert result.failure is None, result.failure
    print(json.dumps([asdict(e) for e in result.ledger]))
else:  # notebook 02's measured step, in a process of its own as in its own kernel
    reading, _ = measure_on_target(workload, target)
    print(json.dumps([asdict(e) for e in reading.compiles]))
"""


def test_xla_ledger_names_each_graph_by_hash_and_the_user_line_that_cut_one(
    tmp_path: Path,
) -> None:
    script = tmp_path / "branchy.py"
    script.write_text(PROBE)
    value_read_line = PROBE.splitlines().index(
        next(line for line in PROBE.splitlines() if "VALUE READ" in line)
    )

    def recorded(notebook: str) -> list[dict]:
        done = subprocess.run(
            [sys.executable, str(script), notebook],
            cwd=REPO,
            env={**os.environ, "PYTHONPATH": str(REPO), "PJRT_DEVICE": "CPU"},
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert done.returncode == 0, done.stderr[-3000:]
        return json.loads(done.stdout.strip().splitlines()[-1])

    ledger = recorded("baseline")
    xla = [e for e in ledger if e["cause"] == "new XLA graph hash"]
    assert xla, ledger
    # Every compile is named by torch_xla's graph hash, with torch_xla's own cause.
    assert all(re.fullmatch(r"xla [0-9a-f]{16}", e["graph_id"]) for e in xla), xla
    assert all("torch_xla: " in e["detail"] for e in xla), xla
    # The value read cut a graph inside the forward, at the line that did it ...
    read = [e for e in xla if "access tensor value" in e["detail"]]
    assert read, xla
    assert {e["location"] for e in read} == {f"branchy.py:{value_read_line + 1} in forward"}
    # ... while the graphs the step loop's own sync cut name no user line.
    cut_by_step_end = [e for e in xla if "user torch_xla.sync" in e["detail"]]
    assert cut_by_step_end and all(e["location"] == "" for e in cut_by_step_end), xla
    # Notebook 02's measured step names the same line (its samples restart at the clear_all
    # of fallback tracking: the analyses are matched from the newest end).
    coverage = recorded("coverage")
    coverage_reads = [e for e in coverage if "access tensor value" in e["detail"]]
    assert coverage_reads, coverage
    assert {e["location"] for e in coverage_reads} == {
        f"branchy.py:{value_read_line + 1} in forward"
    }
