"""Trn1's software path for real: the whole workbook on torch-xla 2.9 with PJRT_DEVICE=CPU.

Runs only in the torch-xla virtualenv (`make test-xla`); elsewhere it skips. XLA:CPU exercises the
same torch-xla front end as Trn1's torch-neuronx (lazy tracing, HLO lowering, aten fallbacks,
recompiles), not neuronx-cc or the Neuron runtime; the reports must say exactly that.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.fixtures import REPO_ROOT
from tests.fixtures.workbench_process import run_workbench

pytest.importorskip("torch_xla")

pytestmark = [pytest.mark.xla, pytest.mark.e2e]

REPO = REPO_ROOT


@pytest.fixture(scope="module")
def xla_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("xla") / "run"
    run_workbench(
        # Notebook 05's budgets (its own parameters) bound its sweep and load levels here.
        [
            "run",
            "--target",
            "xla",
            "--out",
            str(out),
            "-p",
            "window_seconds=0.2",
            "-p",
            "window_budget_s=2",
            "-p",
            "load_budget_s=1",
        ],  # fmt: skip
        REPO,
        timeout=1200,
        PJRT_DEVICE="CPU",
    )
    return out


def data(run: Path, notebook: str) -> dict:
    record = json.loads((run / f"{notebook}.json").read_text())
    assert record["target"]["name"] == "xla"
    return record["data"]


def test_every_notebook_completes_and_says_what_xla_cpu_validates(xla_run: Path) -> None:
    summary = json.loads((xla_run / "summary.json").read_text())
    assert [n["status"] for n in summary["notebooks"]] == ["ok"] * 6
    assert summary["target"] == "xla"
    for page in ["index.html", *(f"{n['notebook']}.html" for n in summary["notebooks"])]:
        text = (xla_run / page).read_text()
        assert "XLA:CPU" in text and "not a Trainium validation" in text, page
        assert "neuronx-cc" in text, f"{page} must say what is not validated"


def test_baseline_reports_xla_compile_counts_and_no_steady_recompiles(xla_run: Path) -> None:
    baseline = data(xla_run, "01_baseline")
    train_eager = next(
        c for c in baseline["configs"] if c["kind"] == "train" and c["mode"] == "eager"
    )
    first_call = next(p for p in train_eager["phases"] if p["phase"] == "first_call")
    assert first_call["compile"]["graphs"] >= 1, "the lazy path compiles the first step's graph"
    assert "CompileTime" in baseline["sources"]["compile_counters"]
    assert all(c["steady_recompiles"] == 0 for c in baseline["configs"] if c["status"] == "ok")
    assert "lazy tracing" in baseline["target"]["eager_means"]
    # The ledger: every first call compiles at least one new XLA graph, placed at step 1.
    ledger = baseline["compile_ledger"]
    for config in ("train", "infer"):
        first = [e for e in ledger if e["kind"] == config and e["phase"] == "first_call"]
        xla = [e for e in first if e["cause"] == "new XLA graph hash"]
        assert xla and all(e["step"] == 1 and e["seconds"] > 0 for e in xla)
    # Each XLA graph is named by torch_xla's own hash, with torch_xla's cause.
    xla_graphs = [e for e in ledger if e["cause"] == "new XLA graph hash"]
    assert all(re.fullmatch(r"xla [0-9a-f]{16}", e["graph_id"]) for e in xla_graphs), xla_graphs
    assert all("torch_xla: " in e["detail"] for e in xla_graphs)
    # Compiled mode captures with Dynamo (openxla): its first compile is in the ledger too.
    assert any(e["mode"] == "compiled" and e["cause"] == "first compile" for e in ledger)


def test_coverage_is_measured_on_xla(xla_run: Path) -> None:
    coverage = data(xla_run, "02_op_coverage")
    assert coverage["coverage"]["xla"]["basis"].startswith("measured on xla")
    assert coverage["coverage"]["xla"]["distinct"]["supported"] > 0
    # What the measured step compiled, each graph by torch_xla's hash and cause.
    compiles = coverage["measurement"]["compiles"]
    assert compiles and all(re.fullmatch(r"xla [0-9a-f]{16}", e["graph_id"]) for e in compiles)
    page = (xla_run / "02_op_coverage.html").read_text()
    assert "compiled during the measured training step" in page


def test_numerics_compares_xla_fp32_and_bf16_autocast(xla_run: Path) -> None:
    runs = {r["run"]["label"]: r for r in data(xla_run, "03_numerics")["runs"]}
    assert runs["xla fp32 eager"]["verdict"]["status"] == "pass", runs["xla fp32 eager"]["verdict"]
    assert runs["xla bf16-autocast eager"]["run"]["autocast"]
    assert runs["xla bf16-autocast eager"]["status"] == "ok"


def test_retuning_sweeps_batches_and_skips_collectives_with_the_reason(xla_run: Path) -> None:
    retuning = data(xla_run, "04_retuning")
    assert retuning["search"]["trials"] and all(
        t["status"] == "ok" for t in retuning["sweep"]["trials"]
    )
    assert "XLA:CPU cannot run multi-process collectives" in retuning["skipped"]["scaling"]


def test_serving_measures_each_shape_and_the_runtimes_execution_time(xla_run: Path) -> None:
    serving = data(xla_run, "05_serving")
    points = [p for p in serving["points"] if p["status"] == "ok"]
    assert points and all(p["compiles"] >= 1 for p in points), "one XLA graph per batch shape"
    assert all(p["window_compiles"] == 0 for p in points)
    gaps = serving["gaps"]
    # torch_xla's ExecuteTime gives each call's device time: the host's share is apart.
    assert gaps["device_seconds"] and len(gaps["device_seconds"]) == len(gaps["calls"])
    assert all(0 < d <= c for d, c in zip(gaps["device_seconds"], gaps["calls"], strict=True))
    assert serving["closed_loop"] and serving["open_loop"]
