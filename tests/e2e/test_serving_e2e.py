"""Notebook 05 end to end: `workbench run --only 05` in a subprocess on seed-mlp, real kernel,
real Inductor compiles, with small settings and an SLO; its report, index and summary read."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.fixtures.workbench_process import run_workbench
from workbench.serving.records import STORED_SAMPLES

pytestmark = pytest.mark.e2e

SMALL = [
    "-p", "serving_batch_sizes=[1,4]",
    "-p", "latency_slo_ms=50",
    "-p", "window_requests=40",
    "-p", "window_seconds=0.05",
    "-p", "window_budget_s=2",
    "-p", "concurrency=[1,2]",
    "-p", "arrival_requests=40",
    "-p", "load_budget_s=1",
    "-p", "gap_requests=20",
]  # fmt: skip


@pytest.fixture(scope="module")
def serving_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    cwd = tmp_path_factory.mktemp("serving")
    run_workbench(["run", "--only", "05", "--target", "cpu", *SMALL], cwd)
    (run,) = [p for p in (cwd / "reports").iterdir() if not p.is_symlink()]
    return run


def test_the_report_answers_the_slo_with_its_samples(serving_run: Path) -> None:
    record = json.loads((serving_run / "05_serving.json").read_text())
    data = record["data"]
    assert [(p["batch_size"], p["mode"], p["status"]) for p in data["points"]] == [
        (1, "compiled", "ok"),
        (4, "compiled", "ok"),
    ]
    one = data["points"][0]
    assert one["compiles"] >= 1 and one["window_compiles"] == 0  # one compile per shape
    # A request is its input copy, the model and its output read-back, each kept apart.
    for part in ("input_copy", "infer", "output_copy"):
        assert len(one[part]["times"]) == len(one["latency"]["times"])
    assert data["settings"]["window_seconds"] == 0.05
    assert all(w["seconds"] >= 0.05 for w in one["windows"])
    assert data["slo"]["chosen"] in (1, 4) and data["slo"]["throughput"] > 0
    report = data["benchmark_report"]["batch_1_compiled"]
    assert {"latency_ms_p50", "latency_ms_p99", "latency_ms_p100", "throughput"} <= set(report)
    # Every sample counts in the report; the file keeps them all up to its bound (a fast
    # machine measures more than the bound in the same windows), and the page says how many.
    stored = one["latency"]
    assert report["n_samples"] == stored["samples_measured"]
    kept = min(stored["samples_measured"], STORED_SAMPLES)
    assert stored["samples_stored"] == len(stored["times"]) == kept
    assert f"{kept:,} of {stored['samples_measured']:,}" in data["sources"]["stored_samples"]
    assert data["closed_loop"] and data["open_loop"] and len(data["gaps"]["gaps"]) == 20
    assert data["verdict"]["status"] in ("pass", "attention") and data["verdict"]["rule"]
    page = (serving_run / "05_serving.html").read_text()
    assert data["headline"].split(";")[0].replace("'", "&#x27;") in page
    assert "largest batch that meets it" in page and "max of" in page
    assert "samples stored" in page
    assert re.search(r"<img[^>]+data:image/png", page)  # the curves are embedded


def test_the_index_and_summary_carry_the_sixth_notebook(serving_run: Path) -> None:
    summary = json.loads((serving_run / "summary.json").read_text())
    (entry,) = summary["notebooks"]
    assert entry["notebook"] == "05_serving" and entry["status"] == "ok"
    assert entry["verdict"]["status"] in ("pass", "attention")
    assert summary["verdict"]["not_run"][-1] == "04_retuning"
    assert "05_serving" in (serving_run / "index.html").read_text()
