"""Hugging Face checkpoints as they come (tiny GPT-2, BERT and Llama saved with save_pretrained)
through notebooks 01, 02 and 03 with the real command line, papermill and kernels, and rebuilt
from its spec in a child process as 04's trials and ranks rebuild it."""

from __future__ import annotations

import json
import os
import pickle
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fixtures import REPO_ROOT
from tests.fixtures.hf_checkpoints import save_tiny_checkpoints
from tests.fixtures.workbench_process import run_workbench
from workbench.coverage.records import SEEN_REFERENCE
from workbench.coverage.risks import INT64, INT64_RANGE
from workbench.report import network_references
from workbench.workload import WorkloadSpec

pytest.importorskip("transformers", reason="transformers is the hf extra")

REPO = REPO_ROOT


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return save_tiny_checkpoints(tmp_path_factory.mktemp("hf"))


E2E_SETTINGS = [
    "-p", "batch_size=2",
    "-p", "sequence_length=16",
    "-p", "steady_steps=5",
    "-p", "warmup_window=4",
    "-p", "warmup_max_steps=15",
    "-p", "steps=5",
    "-p", "validation_batches=2",
    "-p", 'precisions=["fp32", "bf16-autocast"]',
    # The convergence study and the informative fp16 run are numerics' own tests' business:
    # here one short seed each keeps three checkpoints' 03 within CI's time.
    "-p", "informative_precisions=[]",
    "-p", "convergence_seeds=1",
    "-p", "convergence_steps=4",
]  # fmt: skip
# GPT-2 goes through torch.compile in 01 and 03; BERT and Llama run eager to keep CI short.
E2E_MODELS = {
    "gpt2": ["-p", 'kinds=["train"]', "-p", 'compiled_precisions=["fp32"]'],
    "bert": ["-p", 'modes=["eager"]', "-p", "compiled_precisions=[]"],
    "llama": ["-p", 'modes=["eager"]', "-p", "compiled_precisions=[]"],
}


@pytest.mark.parametrize("name", list(E2E_MODELS))
def test_an_hf_checkpoint_runs_through_01_02_03(name, checkpoints, tmp_path) -> None:
    run_workbench(
        [
            "run",
            "--only",
            "01,02,03",
            "--workload",
            f"hf:{checkpoints[name]}",
            "--out",
            "run",
            *E2E_SETTINGS,
            *E2E_MODELS[name],
        ],
        tmp_path,
        timeout=900,
    )
    run = tmp_path / "run"
    summary = json.loads((run / "summary.json").read_text())
    assert [n["status"] for n in summary["notebooks"]] == ["ok"] * 3

    baseline = json.loads((run / "01_baseline.json").read_text())["data"]
    train = [c for c in baseline["configs"] if c["kind"] == "train"]
    assert train and all(c["status"] == "ok" and c["nonfinite_step"] is None for c in train)
    assert all(c["loss_last"] < c["loss_first"] for c in train), "the model learns"

    coverage = json.loads((run / "02_op_coverage.json").read_text())["data"]
    ops = {row["op"]: row for row in coverage["ops"]}
    # Forward, backward and optimizer ops of the model as it comes.
    assert "forward" in ops["aten::embedding"]["calls"]
    assert "backward" in ops["aten::embedding_dense_backward"]["calls"]
    assert any("optimizer" in row["calls"] for row in ops.values())
    assert ops["aten::embedding"]["first_site"]["text"].startswith("transformers/models/")
    assert not [f for f in coverage["flags"] if f["kind"] in (INT64, INT64_RANGE)]
    # Shifted labels (sequence - 1) follow the sequence: no data-dependent shapes; the library
    # is not the user's code, so its CUDA branches are no blocking scan finding.
    assert coverage["shape_stability"]["stable"], coverage["shape_stability"]["sentence"]
    assert coverage["scan"]["blocking"] == 0

    numerics = json.loads((run / "03_numerics.json").read_text())["data"]
    runs = {r["run"]["label"]: r for r in numerics["runs"]}
    fp32 = runs["cpu fp32 eager"]
    # The fp32 eager run is the reference's own computation: it must match it exactly.
    assert fp32["verdict"]["status"] == "pass", fp32["verdict"]
    assert fp32["trajectory_deviation"] == 0.0
    assert {o["metrics"]["name"] for o in fp32["outputs"]} == {"loss", "logits"}
    assert all(o["verdict"]["passed"] for o in fp32["outputs"])
    # GPT-2's and BERT's configs carry dropout, which 03 turns off so the runs compute the
    # same thing; Llama's attention dropout is 0 and it has no Dropout module.
    assert bool(numerics["dropout_disabled"]) == (name != "llama"), numerics["dropout_disabled"]

    # 02's report: counts say what they count, ops are grouped by verdict with the evidence
    # once, and the op-by-op table stays folded.
    page = (run / "02_op_coverage.html").read_text()
    total = len([row for row in coverage["ops"] if SEEN_REFERENCE in row["seen_in"]])
    assert re.search(rf"\b{total} ops \([\d,]+ calls\)", page), total
    assert "Ops grouped by verdict, evidence once per group" in page
    assert "<details><summary>Every op, phase by phase" in page
    for page in ("01_baseline.html", "02_op_coverage.html", "03_numerics.html", "index.html"):
        html = (run / page).read_text()
        assert not network_references(html), page


def test_the_spec_recreates_the_same_workload_in_a_child_process(checkpoints) -> None:
    """04's trials and data-parallel ranks rebuild the workload from its spec in a child."""
    spec = WorkloadSpec(f"hf:{checkpoints['llama']}", batch_size=2, sequence_length=8)
    here = spec.load().describe()["initial_state_sha256"]
    code = (
        "import pickle, sys; spec = pickle.loads(bytes.fromhex(sys.argv[1])); "
        "print(spec.load().describe()['initial_state_sha256'])"
    )
    child = subprocess.run(
        [sys.executable, "-c", code, pickle.dumps(spec).hex()],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        timeout=300,
    )
    assert child.returncode == 0, child.stderr
    assert child.stdout.strip() == here
