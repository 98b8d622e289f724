"""The fleet as a user drives it: `workbench run --matrix` items and `collect` in real
processes, and submit.sh against a stand-in sbatch with the array task run as Slurm would run it."""

from __future__ import annotations

import html
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fixtures import REPO_ROOT
from tests.fixtures.fleet_matrices import DEPLOY, TWO_TARGETS, workbench, write
from workbench.fleet.collect import COMPLETE, INCOMPLETE, MISSING, collect
from workbench.report import network_references
from workbench.targets import target_class


def test_matrix_items_run_into_root_and_collect_shows_every_item(tmp_path: Path) -> None:
    path = write(
        tmp_path / "m.yaml",
        "defaults: {target: cpu, only: ['00']}\n"
        "items:\n"
        "  - {workload: seed-mlp, name: '<b>mlp</b>'}\n"
        "  - {workload: tiny-cnn}\n",
    )
    for _ in range(2):
        result = workbench(
            "run", "--matrix", str(path), "--index", "0", "--out", "root", cwd=tmp_path
        )
        assert result.returncode == 0, result.stderr
    item_dir = tmp_path / "root" / "b-mlp-b"
    assert (item_dir / "latest" / "summary.json").is_file()
    # The item's own selection (only 00) is its workbook: its runs are judged as whole runs.
    summary = json.loads((item_dir / "latest" / "summary.json").read_text())
    assert summary["not_run"] == [] and summary["verdict"]["status"] in ("pass", "attention")
    out_of_range = workbench(
        "run", "--matrix", str(path), "--index", "2", "--out", "root", cwd=tmp_path
    )
    assert out_of_range.returncode == 2 and "out of range" in out_of_range.stderr
    clash = workbench("run", "--matrix", str(path), "--index", "0", "--workload", "x", cwd=tmp_path)
    assert clash.returncode == 2 and "cannot be combined" in clash.stderr
    (item_dir / "20991231-000000-killed").mkdir()  # a run that never wrote summary.json
    (tmp_path / "root" / "tiny-cnn-cpu" / "20991231-000000-half").mkdir(parents=True)

    rows = {row.name: row for row in collect(tmp_path / "root")}
    mlp, cnn = rows["b-mlp-b"], rows["tiny-cnn-cpu"]
    assert mlp.state == COMPLETE and mlp.runs == 2 and mlp.incomplete == ["20991231-000000-killed"]
    assert "no regression" in mlp.change and mlp.comparison.endswith("compare.html")
    assert cnn.state == INCOMPLETE and cnn.incomplete == ["20991231-000000-half"]

    result = workbench("collect", "root", cwd=tmp_path)
    # Two real runs of identical code: a pair cannot measure run-to-run variation, so a timing
    # beyond its gate is inconclusive (6); never a regression (5).
    assert result.returncode in (0, 6), result.stderr
    page = (tmp_path / "root" / "index.html").read_text()
    assert network_references(page) == [] and "<b>" not in page
    data = json.loads((tmp_path / "root" / "matrix.json").read_text())
    assert [item["state"] for item in data["items"]] == [COMPLETE, INCOMPLETE]
    assert data["verdict"] == "blocker", "an item without a complete run is never a pass"
    headline = data["items"][0]["headlines"][0]
    assert headline.startswith("00_environment: ") and len(headline) > len("00_environment: ")
    assert html.escape(headline) in page, "each item shows what its latest run found"
    assert "Fleet verdict: blocker</strong>" in page


@pytest.mark.skipif(
    target_class("neuron").availability().available, reason="this machine has a Neuron device"
)
def test_a_two_target_fleet_is_one_array_per_target_into_one_root(tmp_path: Path) -> None:
    """submit.sh against a stand-in sbatch, the cpu array's task run as Slurm would run it, the
    neuron item refused here, and one collect over both."""
    path = write(tmp_path / "m.yaml", TWO_TARGETS)
    root = tmp_path / "root"
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    calls = tmp_path / "sbatch-calls"
    sbatch = write(
        bin_dir / "sbatch",
        f'#!/bin/bash\necho "$*" >> {calls}\necho $((100 + $(wc -l < {calls})))\n',
    )
    workbook = write(bin_dir / "wb", f'#!/bin/bash\nexec {sys.executable} -m workbench.cli "$@"\n')
    for script in (sbatch, workbook):
        script.chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "WORKBENCH": str(workbook)}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO_ROOT), env.get("PYTHONPATH", "")])
    submit = DEPLOY / "slurm" / "submit.sh"
    submitted = subprocess.run(
        [str(submit), str(path), str(root), "2", "neuron:trn2", "cpu"],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert submitted.returncode == 0, submitted.stderr
    assert submitted.stdout.splitlines()[-1] == "collect job after every array: 103"
    neuron_array, cpu_array, collect_job = calls.read_text().splitlines()
    assert (
        "--partition=trn2 --array=0-0%2" in neuron_array
        and "WORKBENCH_TARGET=neuron" in neuron_array
    )
    assert "--partition" not in cpu_array and "--array=0-0%2" in cpu_array
    assert "WORKBENCH_TARGET=cpu" in cpu_array and "--dependency=afterany:101:102" in collect_job

    def array_task(target: str) -> subprocess.CompletedProcess[str]:
        task_env = {
            **env,
            "WORKBENCH_MATRIX": str(path),
            "WORKBENCH_ROOT": str(root),
            "WORKBENCH_TARGET": target,
            "SLURM_ARRAY_TASK_ID": "0",
        }
        return subprocess.run(
            ["bash", str(DEPLOY / "slurm" / "workbench-array.sbatch")],
            cwd=tmp_path,
            env=task_env,
            capture_output=True,
            text=True,
            timeout=600,
        )

    refused = array_task("neuron")
    assert refused.returncode == 2 and refused.stderr.count("\n") == 1, refused.stderr
    assert "item 0 (mlp-trn2): Target 'neuron' is not available here" in refused.stderr
    ran = array_task("cpu")
    assert ran.returncode == 0, ran.stderr
    assert (root / "mlp-cpu" / "latest" / "summary.json").is_file()

    result = workbench("collect", str(root), cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    data = json.loads((root / "matrix.json").read_text())
    states = {item["name"]: item["state"] for item in data["items"]}
    assert states == {"mlp-trn2": MISSING, "mlp-cpu": COMPLETE}
