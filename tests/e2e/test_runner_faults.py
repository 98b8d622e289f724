"""The runner under faults: write failures, half-written notebooks, collisions, cut-off cells.

The end-to-end versions (a real run on a full tmpfs, a killed kernel, a cell timeout) are in
tests/e2e/test_run_e2e.py; tests/e2e/HARDENING.md lists every case.
"""

from __future__ import annotations

import logging
from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_notebook, new_output

from workbench import runner
from workbench.errors import BadInput
from workbench.results import save_result
from workbench.runner import RunRequest, prepare_out_dir
from workbench.summary import NotebookOutcome


def _executed(out: Path, stem: str, started_cells: int = 2) -> Path:
    """A notebook as papermill leaves it: cells stamped as they start, an output each."""
    nb = new_notebook()
    for index in range(4):
        cell = new_code_cell(f"step_{index}()")
        cell.metadata["papermill"] = {"status": "pending", "start_time": None}
        if index < started_cells:
            cell.metadata["papermill"] = {"status": "completed", "start_time": "2026-12-02T12:00"}
            cell.outputs = [new_output("stream", name="stdout", text=f"ran {index}\n")]
        nb.cells.append(cell)
    path = runner._partial_path(out, stem)
    nbformat.write(nb, path)
    return path


def _finish(out: Path, outcome: NotebookOutcome) -> NotebookOutcome:
    runner._finish_outputs(Path(f"notebooks/{outcome.notebook}.ipynb"), out, outcome, False)
    return outcome


def test_two_runs_in_the_same_second_get_their_own_folders(tmp_path):
    request = RunRequest(reports_root=tmp_path / "reports")
    first = prepare_out_dir(request, "seed-mlp", "cpu")
    second = prepare_out_dir(request, "seed-mlp", "cpu")
    assert first != second and first.is_dir() and second.is_dir()


def _claim_each(folders, barrier, results):
    for folder in folders:
        barrier.wait()
        try:
            prepare_out_dir(RunRequest(out=folder), "w", "cpu")
            results.put((str(folder), "claimed"))
        except BadInput:
            results.put((str(folder), "refused"))


def test_two_processes_given_the_same_out_at_once_never_both_get_it(tmp_path):
    """Real processes released together at each folder: exactly one of them claims it."""
    import multiprocessing

    context = multiprocessing.get_context("fork")
    folders = [tmp_path / f"out{i}" for i in range(100)]
    barrier, results = context.Barrier(2), context.Queue()
    racers = [context.Process(target=_claim_each, args=(folders, barrier, results)) for _ in "ab"]
    for racer in racers:
        racer.start()
    outcomes: dict[str, list[str]] = {}
    for _ in range(2 * len(folders)):
        folder, outcome = results.get(timeout=60)
        outcomes.setdefault(folder, []).append(outcome)
    for racer in racers:
        racer.join(timeout=60)
    assert all(sorted(o) == ["claimed", "refused"] for o in outcomes.values()), outcomes


def test_a_taken_folder_name_is_never_reused(tmp_path, monkeypatch):
    suffixes = iter(["aaaaaa", "aaaaaa", "bbbbbb"])
    monkeypatch.setattr(runner.secrets, "token_hex", lambda n: next(suffixes))
    request = RunRequest(reports_root=tmp_path)
    first = prepare_out_dir(request, "w", "cpu")
    (first / "index.html").write_text("earlier run")
    second = prepare_out_dir(request, "w", "cpu")
    assert second != first and second.name.endswith("-bbbbbb-w-cpu")
    assert (first / "index.html").read_text() == "earlier run"


def test_a_workload_name_too_long_for_a_file_name_still_gets_a_folder(tmp_path):
    out = prepare_out_dir(RunRequest(reports_root=tmp_path), "m" * 400 + "/../x", "cpu")
    assert out.is_dir() and out.parent == tmp_path and len(out.name) < 255


def test_out_that_is_a_file_is_bad_input(tmp_path):
    (tmp_path / "f").write_text("keep")
    with pytest.raises(BadInput, match="is a file, not a folder"):
        prepare_out_dir(RunRequest(out=tmp_path / "f"), "w", "cpu")
    assert (tmp_path / "f").read_text() == "keep"


def test_a_report_that_cannot_be_written_is_the_notebooks_status(tmp_path):
    _executed(tmp_path, "01_baseline")
    save_result(tmp_path, "01_baseline", {"headline": "fine"})
    (tmp_path / "01_baseline.html").mkdir()  # the page cannot replace a folder
    outcome = _finish(tmp_path, NotebookOutcome("01_baseline", "ok", 1.0))
    assert outcome.status == "report-failed" and outcome.html is None
    assert "report not written" in outcome.error
    assert (tmp_path / "01_baseline.ipynb").is_file(), "the notebook itself is kept"


def test_a_failed_notebook_keeps_its_status_when_its_report_also_fails(tmp_path):
    _executed(tmp_path, "01_baseline")
    (tmp_path / "01_baseline.html").mkdir()
    outcome = _finish(tmp_path, NotebookOutcome("01_baseline", "failed", 1.0, "ValueError: x", 1))
    assert outcome.status == "failed"
    assert outcome.error.startswith("ValueError: x; report not written")


def test_a_half_written_notebook_never_reaches_its_final_name(tmp_path):
    partial = _executed(tmp_path, "00_environment")
    partial.write_text(partial.read_text()[:500])  # what a full disk leaves mid-save
    outcome = _finish(tmp_path, NotebookOutcome("00_environment", "ok", 1.0))
    assert outcome.status == "failed"
    assert "executed notebook was not saved (its copy is cut short)" in outcome.error
    assert not (tmp_path / "00_environment.ipynb").exists()
    assert not partial.exists(), "papermill's unscrubbed copy never stays behind"


def test_a_complete_notebook_is_moved_to_its_final_name(tmp_path):
    _executed(tmp_path, "00_environment")
    save_result(tmp_path, "00_environment", {"headline": "ok"})
    outcome = _finish(tmp_path, NotebookOutcome("00_environment", "ok", 1.0))
    assert outcome.status == "ok" and outcome.html == "00_environment.html"
    assert not runner._partial_path(tmp_path, "00_environment").exists()
    nbformat.read(str(tmp_path / "00_environment.ipynb"), as_version=4)  # whole JSON


@pytest.mark.parametrize("status", ["timeout", "kernel-died"])
def test_the_cell_that_was_cut_off_is_named(tmp_path, status):
    _executed(tmp_path, "01_baseline", started_cells=3)
    outcome = _finish(tmp_path, NotebookOutcome("01_baseline", status, 1.0, "cut off"))
    assert outcome.failed_cell == 2


def test_the_run_log_survives_a_full_disk_quietly(capsys):
    handler = runner._RunLogHandler(Path("/dev/full"))  # every write fails with ENOSPC
    logger = logging.getLogger("workbench-test-full-disk")
    logger.addHandler(handler)
    try:
        for line in range(3):
            logger.warning("cell output %d", line)
    finally:
        logger.removeHandler(handler)
        handler.close()
    assert handler.failure and "No space left on device" in handler.failure
    assert "Traceback" not in capsys.readouterr().err
