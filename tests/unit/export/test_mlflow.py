"""What the MLflow export says about a run without a server: its description and the link to it."""

from __future__ import annotations

from tests.fixtures.export_runs import OUTSIDE, write_export_run
from workbench.export.records import read_run
from workbench.export.to_mlflow import notebook_description, run_description, run_page


def test_the_link_opens_the_machine_learning_layout_without_credentials():
    page = run_page("https://bob:s3cret@mlflow.example.com:8443/base/", "7", "abc")
    assert page == (
        "https://mlflow.example.com:8443/base/#/experiments/7/runs/abc"
        "?workflowType=machine_learning"
    )
    assert run_page("sqlite:///tmp/mlflow.db", "7", "abc") is None  # no UI to link to
    assert run_page("file:///tmp/mlruns", "7", "abc") is None


def test_the_description_says_what_ran_with_each_notebooks_outcome(tmp_path):
    run = read_run(write_export_run(tmp_path / "run"))
    text = run_description(run)
    assert text.startswith("workbench run of **seed-mlp** on **cpu**, started 2026-12-01T10:00")
    assert "- 01_baseline: ok in 1.0 s, pass: " in text
    assert f"- {OUTSIDE}: ok, blocker: custom check" in text
    assert notebook_description(run.notebooks[-1]).startswith(f"{OUTSIDE}: ok.\n\ncustom check")
