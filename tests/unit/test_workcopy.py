"""`workbench open` and `workbench export`: prepared copies in a run folder, executed in a real
kernel the way JupyterLab runs them (panel cell included), then exported by the runner's code."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import nbformat
import pytest

from workbench.cli import main
from workbench.errors import EXIT_BAD_INPUT, EXIT_NOTEBOOK_FAILED, EXIT_OK, BadInput
from workbench.params import NOTEBOOKS_DIR
from workbench.results import save_result
from workbench.runner import RunRequest
from workbench.scorecard import Verdict
from workbench.workcopy import NOT_RUN, OPENED_FILE, export_run, open_run


def _templates_digest() -> dict[str, str]:
    return {
        path.name: hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(NOTEBOOKS_DIR.iterdir())
    }


def _injected(copy: Path) -> str:
    nb = nbformat.read(copy, as_version=4)
    cells = [c for c in nb.cells if "injected-parameters" in c.metadata.get("tags", [])]
    assert len(cells) == 1
    return cells[0].source


def test_open_writes_parameterized_copies_and_leaves_the_templates_alone(tmp_path):
    before = _templates_digest()
    folder = tmp_path / "work"
    opened = open_run(
        RunRequest(target="cpu", only=["00", "01"], out=folder, parameters={"steady_steps": "5"})
    )
    assert [p.name for p in opened.notebooks] == ["00_environment.ipynb", "01_baseline.ipynb"]
    baseline = _injected(folder / "01_baseline.ipynb")
    assert 'target = "cpu"' in baseline and "steady_steps = 5" in baseline
    assert f'out_dir = "{folder.resolve()}"' in baseline
    assert "progress_bars" not in baseline, "bars stay on for a person watching"
    assert "steady_steps" not in _injected(folder / "00_environment.ipynb")
    nb = nbformat.read(folder / "01_baseline.ipynb", as_version=4)
    assert all(not c.get("outputs") for c in nb.cells if c.cell_type == "code"), "not executed"
    record = json.loads((folder / OPENED_FILE).read_text())
    assert record["target"] == "cpu" and record["workload"] == "seed-mlp"
    assert opened.command.endswith(f"lab {folder.resolve()}")
    assert _templates_digest() == before


def test_open_rejects_bad_input_before_writing_anything(tmp_path):
    folder = tmp_path / "work"
    with pytest.raises(BadInput, match=r"did you mean batch_size\?"):
        open_run(RunRequest(out=folder, only=["01"], parameters={"bach_size": "8"}))
    assert not folder.exists()


def test_open_command_prints_the_jupyter_command_and_allow_root(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["open", "--only", "00", "--target", "cpu", "--out", "w"]) == EXIT_OK
    printed = capsys.readouterr().out
    assert "lab " in printed and "--allow-root" in printed
    assert f"workbench export {tmp_path / 'w'}" in printed


def test_export_tells_an_unrun_copy_from_a_failed_one(tmp_path):
    folder = tmp_path / "work"
    open_run(RunRequest(target="cpu", only=["00", "01"], out=folder))
    copy = folder / "01_baseline.ipynb"
    nb = nbformat.read(copy, as_version=4)
    failing = next(i for i, c in enumerate(nb.cells) if "context.start" in c.source)
    nb.cells[failing].execution_count = 1
    nb.cells[failing].outputs = [
        nbformat.v4.new_output("error", ename="NameError", evalue="name 'x' is not defined")
    ]
    nbformat.write(nb, copy)

    exit_code, _ = export_run(folder)
    assert exit_code == EXIT_NOTEBOOK_FAILED
    summary = json.loads((folder / "summary.json").read_text())
    by_name = {entry["notebook"]: entry for entry in summary["notebooks"]}
    assert by_name["00_environment"]["status"] == NOT_RUN
    failed = by_name["01_baseline"]
    assert failed["status"] == "failed" and failed["failed_cell"] == failing
    assert failed["error"] == "NameError: name 'x' is not defined"
    # 00 was never run, so the run has no verdict; what ran (01 failing) still says blocker.
    assert summary["verdict"]["status"] == "not run"
    assert summary["verdict"]["of_the_notebooks_run"] == "blocker"
    assert "01_baseline: did not finish (failed)" in summary["verdict"]["reasons"]
    assert "not timed" in (folder / "index.html").read_text()


def test_export_of_copies_stepped_through_in_part_says_not_run_and_links_nothing_missing(
    tmp_path,
):
    """Only 00 stepped through (every cell, its result saved); 01 part-way; 02-05 never. No
    verdict is claimed for what did not run, every unrun notebook is named, no run.log link."""
    folder = tmp_path / "work"
    open_run(RunRequest(target="cpu", out=folder))
    for name, share in (("00_environment", 1.0), ("01_baseline", 0.5)):
        copy = folder / f"{name}.ipynb"
        nb = nbformat.read(copy, as_version=4)
        code = [c for c in nb.cells if c.cell_type == "code" and c.source.strip()]
        for count, cell in enumerate(code[: int(len(code) * share)], 1):
            cell.execution_count = count
        nbformat.write(nb, copy)
    verdict = Verdict("pass", "environment recorded", "test rule")
    save_result(folder, "00_environment", {"headline": "stack recorded", "verdict": verdict})

    export_run(folder)
    summary = json.loads((folder / "summary.json").read_text())
    by_name = {entry["notebook"]: entry for entry in summary["notebooks"]}
    assert by_name["00_environment"]["status"] == "ok"
    assert by_name["00_environment"]["verdict"]["status"] == "pass"
    partly = by_name["01_baseline"]
    assert partly["status"] == NOT_RUN and partly["verdict"] is None
    assert partly["error"].endswith("cells were run") and not partly["error"].startswith("0 ")
    assert summary["verdict"]["status"] == "not run"
    assert summary["verdict"]["reasons"][0] == (
        "not run: 01_baseline, 02_op_coverage, 03_numerics, 04_retuning, 05_serving"
    )
    index = (folder / "index.html").read_text()
    assert "BLOCKER" not in index and "NOT RUN" in index
    assert 'href="run.log"' not in index and not (folder / "run.log").exists()
    assert not (folder / "02_op_coverage.html").exists(), "no report for a copy never run"


def test_export_bad_folders_are_bad_input(tmp_path, capsys):
    assert main(["export", str(tmp_path / "missing")]) == EXIT_BAD_INPUT
    assert "is not a folder" in capsys.readouterr().err
    assert main(["export", str(tmp_path)]) == EXIT_BAD_INPUT
    assert "holds no notebook copies" in capsys.readouterr().err


URL_PASSWORD = "s3cret-Pw-9041"


def test_open_keeps_a_url_password_out_of_every_file_but_the_owner_only_copy(tmp_path):
    """The kernel runs the copy's parameters cell, so that cell holds the value as given; every
    other file `open` writes, and the copy's own metadata, hold it scrubbed."""
    folder = tmp_path / "work"
    manifest = f"https://alice:{URL_PASSWORD}@example.com/env.json"
    open_run(RunRequest(target="cpu", only=["00", "01"], out=folder,
                        parameters={"pinned_manifest": manifest}))  # fmt: skip
    holding = [p.name for p in folder.rglob("*") if p.is_file() and URL_PASSWORD in p.read_text()]
    assert holding == ["00_environment.ipynb"]
    copy = folder / "00_environment.ipynb"
    assert copy.stat().st_mode & 0o777 == 0o600
    assert manifest in _injected(copy), "the copy still runs with the real value"
    nb = nbformat.read(copy, as_version=4)
    assert "[redacted]" in nb.metadata.papermill.parameters["pinned_manifest"]
    assert (
        "[redacted]"
        in json.loads((folder / OPENED_FILE).read_text())["parameters"]["pinned_manifest"]
    )
    # A copy whose parameters hold no secret is written as any other file of the run.
    umask = os.umask(0)
    os.umask(umask)
    assert (folder / "01_baseline.ipynb").stat().st_mode & 0o777 == 0o666 & ~umask


def _step_through(copy: Path, timing: object) -> None:
    nb = nbformat.read(copy, as_version=4)
    for count, cell in enumerate((c for c in nb.cells if c.cell_type == "code"), 1):
        cell.execution_count = count
        cell.metadata["execution"] = timing
    nbformat.write(nb, copy)


def _files(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in folder.iterdir()}


@pytest.mark.parametrize(
    ("timing", "result", "sentence"),
    [
        ({"shell.execute_reply": 5}, None,
         "cells[1].metadata.execution.shell.execute_reply must be a string"),
        ("late", None, "cells[1].metadata.execution must be a mapping"),
        ({}, {"verdict": ["pass"]}, "data.verdict must be a mapping or null"),
        ({}, {"headline": {"a": 1}}, "data.headline must be a string or null"),
    ],
)  # fmt: skip
def test_export_of_a_copy_with_a_field_of_the_wrong_type_is_one_sentence(
    tmp_path, capsys, timing, result, sentence
):
    folder = tmp_path / "work"
    open_run(RunRequest(target="cpu", only=["00"], out=folder))
    _step_through(folder / "00_environment.ipynb", timing)
    if result is not None:
        save_result(folder, "00_environment", result)
    before = _files(folder)
    assert main(["export", str(folder)]) == EXIT_BAD_INPUT
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and sentence in err[0], err
    assert _files(folder) == before, "nothing is written"


def test_export_reads_well_typed_cell_timings(tmp_path):
    folder = tmp_path / "work"
    open_run(RunRequest(target="cpu", only=["00"], out=folder))
    timing = {
        "iopub.execute_input": "2026-11-01T10:00:00.000Z",
        "shell.execute_reply": "2026-11-01T10:00:01.500Z",
    }
    _step_through(folder / "00_environment.ipynb", timing)
    save_result(folder, "00_environment", {"headline": "stack recorded"})
    exit_code, _ = export_run(folder)
    assert exit_code == EXIT_OK
    summary = json.loads((folder / "summary.json").read_text())
    code_cells = sum(
        1 for c in nbformat.read(folder / "00_environment.ipynb", as_version=4).cells
        if c.cell_type == "code"
    )  # fmt: skip
    assert summary["seconds"] == pytest.approx(1.5 * code_cells)
