"""Notebook 03 as a user runs it (`workbench run --only 03`): real papermill, kernel and nbconvert;
the run's files carry no secret planted in its environment."""

import json
import re

from tests.fixtures.workbench_process import run_workbench

# Planted in the run's environment; neither may reach any file of the run.
SECRET_KEY = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYzzNUMERICS"
SECRET_PASSWORD = "s3cr3tNumericsPassw0rd"


def test_notebook_03_runs_end_to_end_and_keeps_secrets_out(tmp_path):
    """`workbench run --only 03` as a user runs it: real papermill, kernel and nbconvert."""
    secrets = {
        "NEURON_CC_FLAGS": f"--auto-cast=none --cache_dir=s3://ci:{SECRET_PASSWORD}@bucket/c",
        "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
    }
    out = tmp_path / "run"
    run_workbench(
        ["run", "--only", "03", "--out", str(out)]
        + ["-p", "precisions=[fp32, bf16-autocast]", "-p", "compiled_precisions=[]"]
        + ["-p", "steps=2", "-p", "convergence_steps=4"],
        tmp_path,
        **secrets,
    )
    record = json.loads((out / "03_numerics.json").read_text())
    data = record["data"]
    assert data["headline"].startswith("Acceptance: all 2 runs pass every gate judged")
    assert "device fidelity on cpu: trivially true for 2 eager" in data["headline"]
    gates = data["acceptance"]["gates"]
    assert [g["gate"] for g in gates][:2] == ["liveness", "R-ratio"]
    assert all(g["source"] for g in gates) and data["acceptance"]["first_failure"] is None
    for run in data["runs"]:
        outcomes = {g["gate"]: g["status"] for g in run["acceptance"]["gates"]}
        assert outcomes["R-ratio"] == outcomes["top-1 agreement"] == "pass", outcomes
        # seed-mlp fits random labels: its held-out loss cannot fall, so there is no target.
        convergence = run["acceptance"]["convergence"]
        assert outcomes["convergence parity"] == "not judged"
        assert "no quality to reach" in convergence["note"]
        assert len(convergence["baseline_losses"]) == 10  # twice the 5 runs, dropout on
    assert [r["run"]["label"] for r in data["runs"]][0] == "cpu fp32 eager"
    assert data["numerics_settings"]["neuronx_cc"]["auto_cast"] == "none"
    html = (out / "03_numerics.html").read_text()
    assert "What to do" in html and "first divergence" in html
    text = re.sub(r"<[^>]+>", " ", html)
    # The report's acceptance section says the same as the result file: gates, R, convergence.
    assert "Acceptance: all 2 runs pass every gate judged" in text
    assert "AWS neuron-framework-equivalence skill" in text and "MLPerf Training RCP" in text
    assert "R-ratio per layer (execution order) and output" in text
    assert "Steps to reach the target held-out loss" in text
    assert "Device fidelity rule: A tensor passes" in html and "Precision cost: a layer" in html
    assert data["verdict"]["status"] == "pass", data["verdict"]
    assert data["validation"]["runs"]
    for path in out.rglob("*"):
        if path.is_file():
            text = path.read_text(errors="ignore")
            assert SECRET_PASSWORD not in text and SECRET_KEY not in text, path.name
