"""A copy `workbench open` prepared, executed in a real kernel as JupyterLab would run it, then
exported to the reports a headless run leaves."""

from __future__ import annotations

import json
import os
from pathlib import Path

import nbformat
from nbclient import NotebookClient

from workbench.errors import EXIT_OK
from workbench.execution.kernel import private_kernelspec
from workbench.runner import RunRequest
from workbench.workcopy import export_run, open_run


def _execute_as_jupyterlab_would(copy: Path, kernel: str) -> None:
    """Every cell in order, the control panel too (it is skipped only by headless runs)."""
    nb = nbformat.read(copy, as_version=4)
    client = NotebookClient(
        nb,
        kernel_name=kernel,
        resources={"metadata": {"path": str(copy.parent)}},
        skip_cells_with_tag="workbench-never-skipped",
        timeout=600,
    )
    client.execute()
    nbformat.write(nb, copy)


def test_an_executed_copy_exports_to_the_reports_a_headless_run_leaves(tmp_path):
    folder = tmp_path / "work"
    open_run(RunRequest(target="cpu", only=["00"], out=folder))
    with private_kernelspec([os.getcwd()]) as kernel:
        _execute_as_jupyterlab_would(folder / "00_environment.ipynb", kernel)
    assert (folder / "00_environment.json").exists(), "results land beside the copy"

    exit_code, index = export_run(folder)
    assert exit_code == EXIT_OK and index == folder / "index.html"
    summary = json.loads((folder / "summary.json").read_text())
    (entry,) = summary["notebooks"]
    assert entry["status"] == "ok" and entry["html"] == "00_environment.html"
    assert entry["verdict"]["status"] in ("pass", "attention", "blocker")
    assert summary["target"] == "cpu" and summary["exit_code"] == EXIT_OK
    page = (folder / "00_environment.html").read_text()
    result = json.loads((folder / "00_environment.json").read_text())
    assert page.index(result["data"]["verdict"]["status"].upper()) < page.index("What ran")
    assert "set values in the panel" not in page and "Change values here" not in page
    assert entry["notebook"] in (folder / "index.html").read_text()
