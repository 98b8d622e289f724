"""Notebook 03 as a user runs it (`workbench run --only 03`): real papermill, kernel and nbconvert;
the run's files carry no secret planted in its environment."""

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.fixtures import REPO_ROOT

REPO = REPO_ROOT
WORKBENCH = str(Path(sys.executable).parent / "workbench")
# Planted in the run's environment; neither may reach any file of the run.
SECRET_KEY = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYzzNUMERICS"
SECRET_PASSWORD = "s3cr3tNumericsPassw0rd"


def test_notebook_03_runs_end_to_end_and_keeps_secrets_out(tmp_path):
    """`workbench run --only 03` as a user runs it: real papermill, kernel and nbconvert."""
    env = {
        **os.environ,
        "NEURON_CC_FLAGS": f"--auto-cast=none --cache_dir=s3://ci:{SECRET_PASSWORD}@bucket/c",
        "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
        "PYTHONPATH": str(REPO),
    }
    out = tmp_path / "run"
    completed = subprocess.run(
        [WORKBENCH, "run", "--only", "03", "--out", str(out)]
        + ["-p", "precisions=[fp32, bf16-autocast]", "-p", "compiled_precisions=[]"]
        + ["-p", "steps=2"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    record = json.loads((out / "03_numerics.json").read_text())
    data = record["data"]
    assert data["headline"].startswith("device fidelity on cpu: trivially true for 2 eager")
    assert [r["run"]["label"] for r in data["runs"]][0] == "cpu fp32 eager"
    assert data["numerics_settings"]["neuronx_cc"]["auto_cast"] == "none"
    html = (out / "03_numerics.html").read_text()
    assert "What to do" in html and "first divergence" in html
    assert "Device fidelity rule: A tensor passes" in html and "Precision cost: a layer" in html
    assert data["verdict"]["status"] == "pass", data["verdict"]
    assert data["validation"]["runs"]
    for path in out.rglob("*"):
        if path.is_file():
            text = path.read_text(errors="ignore")
            assert SECRET_PASSWORD not in text and SECRET_KEY not in text, path.name
