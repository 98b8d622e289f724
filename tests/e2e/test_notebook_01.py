"""Notebook 01 end to end: `workbench run --only 01` in a subprocess, real kernel, real compile.

Small knobs keep it quick; later notebooks' tests can copy the pattern.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fixtures import REPO_ROOT

pytestmark = pytest.mark.e2e

REPO = REPO_ROOT
WORKBENCH = str(Path(sys.executable).parent / "workbench")
SMALL = ["-p", "steady_steps=5", "-p", "warmup_window=4", "-p", "warmup_max_steps=12"]

RAISING_WORKLOAD = """
import torch
from torch import nn

from workbench.workload import Workload


class Breaks(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(8, 3)
        self.calls = 0

    def forward(self, x):
        if self.training:
            self.calls += 1
            if self.calls == 3:
                raise RuntimeError("optimizer state corrupted")
        return self.lin(x)


def batch(n, g):
    return (torch.randn(n, 8, generator=g),), torch.randint(3, (n,), generator=g)


def make():
    return Workload(
        name="breaks",
        model_factory=Breaks,
        batch_maker=batch,
        loss_fn=nn.functional.cross_entropy,
        optimizer_factory=lambda params: torch.optim.SGD(params, lr=0.1),
        batch_size=4,
    )
"""


def workbench(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run(
        [WORKBENCH, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=600
    )


def test_run_01_on_seed_mlp_writes_result_report_and_reference(tmp_path):
    out = tmp_path / "run"
    cache = tmp_path / "cache"
    done = workbench(
        "run",
        "--only",
        "01",
        "--out",
        str(out),
        "--compile-cache",
        str(cache),
        *SMALL,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert (out / "01_baseline.html").stat().st_size > 0
    assert (out / "01_baseline_reference.pt").exists()
    record = json.loads((out / "01_baseline.json").read_text())
    data = record["data"]
    assert data["headline"].startswith("On cpu, ")
    assert data["target"]["name"] == "cpu" and data["workload"]["name"] == "seed-mlp"
    assert data["modes"] == ["eager", "compiled"] and data["kinds"] == ["train", "infer"]
    assert data["versions"]["torch"] and data["failures"] == []
    assert len(data["configs"]) == 4 and len(data["comparison"]) == 2
    for config in data["configs"]:
        phases = {p["phase"]: p for p in config["phases"]}
        assert set(config["phase_seconds"]) == {"first_call", "warmup", "steady"}
        steady = phases["steady"]["measurement"]
        assert len(steady["times"]) == 5 and steady["median"] > 0
        assert config["throughput"] > 0 and config["loss_first"] is not None
        assert phases["steady"]["memory"]["host_peak_rss"] > 0
    compiled_train = data["configs"][1]
    assert compiled_train["phases"][0]["compile"]["graphs"] >= 1
    # The initial weights the result file states are those the reference artifact was made of.
    assert data["reference"]["state_sha256"] == record["workload"]["initial_state_sha256"]
    for comparison in data["comparison"]:
        assert 0 < comparison["speedup_low"] <= comparison["speedup_high"]
        assert "bootstrap" in comparison["interval_method"]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["notebooks"][0]["headline"] == data["headline"]
    # The compile cache the runner handed over, with the cache's own counters for this run.
    cached = record["compile_cache"]
    assert cached["status"] == "in use" and Path(cached["folder"]).parent == cache
    assert cached["counters"]["misses"] + cached["counters"]["hits"] >= 2
    # The ledger: both compiled first calls compiled, and the report shows it.
    ledger = data["compile_ledger"]
    assert {(e["kind"], e["phase"]) for e in ledger if e["mode"] == "compiled"} >= {
        ("train", "first_call"),
        ("infer", "first_call"),
    }
    html = (out / "01_baseline.html").read_text()
    assert "Compile ledger" in html and "first compile" in html


def test_run_01_with_a_raising_step_saves_everything_then_exits_non_zero(tmp_path):
    (tmp_path / "breaking_workload.py").write_text(RAISING_WORKLOAD)
    out = tmp_path / "run"
    done = workbench(
        "run", "--only", "01", "--out", str(out), "--workload", "breaking_workload:make",
        *SMALL, "-p", "modes=[eager]", cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 1, done.stdout + done.stderr
    assert "train/eager failed in warm-up step 3" in done.stdout + done.stderr
    data = json.loads((out / "01_baseline.json").read_text())["data"]
    assert [(f["phase"], f["step"]) for f in data["failures"]] == [("warmup", 3)]
    assert "optimizer state corrupted" in data["failures"][0]["error"]
    assert data["configs"][1]["status"] == "ok"  # inference still measured
    html = (out / "01_baseline.html").read_text()
    assert "optimizer state corrupted" in html
