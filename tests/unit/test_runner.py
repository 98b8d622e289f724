"""The runner on its own: output-folder rules, `latest`, exit codes and outcomes.

Kernel-backed tests run a tiny notebook of a few lines in real papermill kernels (no torch in the
kernel), so they take seconds; test_run_e2e.py runs the real notebooks through the CLI.
"""

import json
import os
import re
import tempfile
from pathlib import Path

import nbformat
import pytest

import workbench.runner as runner
from tests.fixtures.fresh_python import fresh_python
from workbench.errors import EXIT_INTERRUPTED, EXIT_NOTEBOOK_FAILED, EXIT_OK, BadInput
from workbench.results import save_result
from workbench.runner import (
    RUN_FILES_RESERVE,
    RUN_FILES_RESERVE_BYTES,
    RunRequest,
    prepare_out_dir,
    report_notebook,
    run,
    select_notebooks,
    update_latest,
    write_run_files,
)
from workbench.summary import (
    NotebookOutcome,
    NotebookVerdict,
    RunSummary,
    judge_run,
    read_summary,
)
from workbench.workload import load_workload
from workbench.workloads import BUILTIN_WORKLOADS

TINY_PARAMETERS = """\
workload: str = "seed-mlp"  # the runner passes --workload here
target: str = "auto"  # the runner passes --target here
out_dir: str = "."  # the run folder
fail: bool = False  # raise in the next cell
write_result: bool = True  # save 00_tiny.json
not_answered: bool = False  # say the question has no answer for this workload
"""
TINY_BODY = """\
print("tiny: working")
if not_answered:
    from workbench.errors import NotAnswered

    raise NotAnswered("00_tiny: not answered: the loss cannot be recomputed")
if fail:
    raise ValueError("tiny failed\\n   on purpose")
if write_result:
    from workbench.results import save_result

    save_result(out_dir, "00_tiny", {"headline": f"tiny headline on {target}"})
"""
# Saved on a Neuron DLAMI: the runner must use its own kernelspec, not this missing one.
DLAMI_KERNEL = {"name": "aws_neuron_venv_pytorch", "language": "python", "display_name": "Neuron"}


@pytest.fixture
def notebooks(tmp_path, monkeypatch) -> Path:
    """A notebooks folder holding 00_tiny and an (unrunnable here) 01_other, used by the runner."""
    folder = tmp_path / "notebooks"
    folder.mkdir()
    parameters = nbformat.v4.new_code_cell(TINY_PARAMETERS)
    parameters.metadata["tags"] = ["parameters"]
    tiny = nbformat.v4.new_notebook(cells=[parameters, nbformat.v4.new_code_cell(TINY_BODY)])
    tiny.metadata["kernelspec"] = DLAMI_KERNEL
    nbformat.write(tiny, folder / "00_tiny.ipynb")
    other = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell('target: str = "auto"')])
    other.cells[0].metadata["tags"] = ["parameters"]
    other.metadata["kernelspec"] = DLAMI_KERNEL
    nbformat.write(other, folder / "01_other.ipynb")
    monkeypatch.setattr(runner, "NOTEBOOKS_DIR", folder)
    return folder


def _request(tmp_path: Path, **kwargs) -> RunRequest:
    settings = {"target": "cpu", "only": ["00"], "cell_timeout": 120, **kwargs}
    return RunRequest(reports_root=tmp_path / "reports", **settings)


def _summary(out: Path) -> RunSummary:
    """summary.json read back through the record the runner wrote it from."""
    path = out / "summary.json"
    return read_summary(json.loads(path.read_text()), str(path))


def test_checking_a_run_of_a_builtin_workload_does_not_import_torch():
    # `workbench run` checks everything before a kernel starts, and two
    # seconds of `import torch` there delayed every answer (the kernel imports it anyway).
    script = (
        "import sys\n"
        "from workbench.runner import RunRequest, prepare_run\n"
        "prepared = prepare_run(RunRequest(only=['00', '02'], target='auto'))\n"
        "print(prepared.workload_name, prepared.target, 'torch' in sys.modules)\n"
    )
    assert fresh_python(script).split() == ["seed-mlp", "cpu", "False"]


def test_every_builtin_workload_is_named_by_its_registry_key():
    # The check above names a built-in by its key without loading it: that is only right while
    # every factory's workload carries its key as its name.
    for key in BUILTIN_WORKLOADS:
        assert load_workload(key).name == key


def test_only_picks_notebooks_by_number_once_each_in_order(notebooks):
    assert [p.name for p in select_notebooks([])] == ["00_tiny.ipynb", "01_other.ipynb"]
    assert [p.name for p in select_notebooks(["1", "00", "01"])] == [
        "00_tiny.ipynb",
        "01_other.ipynb",
    ]
    with pytest.raises(BadInput, match=r"--only '7' names no notebook; choose from 00, 01\."):
        select_notebooks(["7"])


def test_the_default_run_folder_is_named_after_time_workload_and_target(tmp_path):
    request = RunRequest(reports_root=tmp_path / "reports")
    out = prepare_out_dir(request, "pkg.models:make big", "cpu")
    assert out.parent == (tmp_path / "reports").resolve() and out.is_dir()
    assert "pkg.models_make_big-cpu" in out.name, "workload (made path-safe) and target"
    assert re.fullmatch(r"[A-Za-z0-9._-]+", out.name)
    assert out.name[:8].isdigit(), "starts with the date, so folders sort by time"
    (reserve,) = out.iterdir()  # the write probe stays as room for summary.json on a full disk
    assert reserve.name == RUN_FILES_RESERVE and reserve.stat().st_size == RUN_FILES_RESERVE_BYTES


def test_an_occupied_or_unwritable_out_is_bad_input_and_loses_nothing(tmp_path):
    earlier = tmp_path / "earlier"
    earlier.mkdir()
    (earlier / "index.html").write_text("earlier report")
    with pytest.raises(BadInput, match="already holds files; choose a new --out"):
        prepare_out_dir(RunRequest(out=earlier), "seed-mlp", "cpu")
    assert [p.name for p in earlier.iterdir()] == ["index.html"]
    assert (earlier / "index.html").read_text() == "earlier report"

    blocker = tmp_path / "a-file"
    blocker.write_text("keep me")
    with pytest.raises(BadInput, match="cannot be used: Not a directory; choose another --out"):
        prepare_out_dir(RunRequest(out=blocker / "run"), "seed-mlp", "cpu")
    assert blocker.read_text() == "keep me"

    empty = tmp_path / "empty"
    empty.mkdir()
    assert prepare_out_dir(RunRequest(out=empty), "seed-mlp", "cpu") == empty.resolve()


def test_latest_is_a_relative_link_replaced_in_one_step(tmp_path):
    reports = tmp_path / "reports"
    first, second = reports / "run-1", reports / "run-2"
    first.mkdir(parents=True)
    second.mkdir()
    (first / "index.html").write_text("first")
    update_latest(reports, first)
    assert os.readlink(reports / "latest") == "run-1"
    update_latest(reports, second)
    assert os.readlink(reports / "latest") == "run-2"
    assert (first / "index.html").read_text() == "first", "the earlier run is untouched"
    assert sorted(p.name for p in reports.iterdir()) == ["latest", "run-1", "run-2"]


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"target": "tpu"}, "Unknown target 'tpu'"),
        ({"parameters": {"out_dir": "/elsewhere"}}, "Parameter 'out_dir' is set by the runner"),
        ({"parameters": {"colour": "blue"}}, "Unknown parameter 'colour'"),
        ({"parameters": {"fail": "perhaps"}}, "Parameter 'fail' (00_tiny) expects bool"),
        ({"workload": "no_such_pkg.mod:make"}, "module 'no_such_pkg' was not found"),
        ({"only": ["9"]}, "--only '9' names no notebook"),
    ],
)
def test_bad_input_is_rejected_before_anything_is_written(notebooks, tmp_path, change, message):
    request = _request(tmp_path)
    for key, value in change.items():
        setattr(request, key, value)
    with pytest.raises(BadInput) as rejected:
        run(request, progress=lambda line: None)
    assert message in str(rejected.value)
    assert not request.reports_root.exists()


def test_a_successful_run_writes_every_file_and_moves_latest(notebooks, tmp_path):
    (notebooks / "01_other.ipynb").unlink()  # 00 is then the whole workbook: a full run
    lines: list[str] = []
    request = _request(tmp_path)
    assert run(request, progress=lines.append) == EXIT_OK
    latest = request.reports_root / "latest"
    out = latest.resolve()
    assert out.parent == request.reports_root.resolve() and out.name.endswith("-seed-mlp-cpu")
    assert {p.name for p in out.iterdir()} == {
        "00_tiny.ipynb", "00_tiny.html", "00_tiny.json", "index.html", "summary.json", "run.log",
    }  # fmt: skip
    summary = _summary(out)
    assert summary.exit_code == EXIT_OK and summary.target == "cpu"
    assert summary.target_requested == "cpu" and summary.workload_spec == "seed-mlp"
    (outcome,) = summary.notebooks
    assert outcome.status == "ok" and outcome.headline == "tiny headline on cpu"
    assert outcome.result == "00_tiny.json" and outcome.unreadable_result is None
    assert "    tiny: working" in lines, "a notebook's printed lines reach the console"
    assert any(line.startswith("[1/1] 00_tiny ok in ") for line in lines)


def test_a_partial_run_says_not_run_and_leaves_latest_where_it_was(notebooks, tmp_path):
    """--only 00 of a workbook of 00 and 01: it succeeds, but 01 was not run, so the run has no
    verdict and reports/latest keeps pointing at the earlier full run."""
    request = _request(tmp_path)
    older = request.reports_root / "older"
    older.mkdir(parents=True)
    update_latest(request.reports_root, older)
    lines: list[str] = []
    assert run(request, progress=lines.append) == EXIT_OK
    assert (request.reports_root / "latest").resolve() == older.resolve()
    assert any("reports/latest was not moved" in line and "01_other" in line for line in lines)
    (out,) = [p for p in request.reports_root.iterdir() if p.name not in ("older", "latest")]
    summary = _summary(out)
    assert summary.not_run == ["01_other"] and summary.verdict is not None
    assert summary.verdict.status == "not run" and summary.verdict.not_run == ["01_other"]
    assert summary.verdict.reasons[0] == "not run: 01_other"
    index = (out / "index.html").read_text()
    assert "NOT RUN" in index and "01_other</td><td>not run" in index
    assert 'href="run.log"' in index, "a headless run wrote run.log, and the index links it"


def test_the_run_verdict_is_the_scorecards_only_when_every_notebook_ran():
    judged = NotebookOutcome("00_a", "ok", 1.0, verdict=NotebookVerdict("pass", "fine"))
    assert judge_run([judged], []).status == "pass"
    unrun = [NotebookOutcome(f"0{i}_x", "not-run", None, "no cell was run") for i in range(1, 8)]
    verdict = judge_run([judged, *unrun], [])
    assert verdict.status == "not run" and verdict.of_the_notebooks_run == "pass"
    assert verdict.reasons == ["not run: 01_x, 02_x, 03_x, 04_x, 05_x and 2 more"]


def _judged_and_indexed(folder: Path) -> tuple[NotebookOutcome, RunSummary, str]:
    """00_tiny's result file read as the runner reads it, then the run's files written."""
    outcome = NotebookOutcome("00_tiny", "ok", 1.0)
    report_notebook(folder / "00_tiny.ipynb", outcome, show_code=False)
    write_run_files(folder, RunSummary(workload="w", target="cpu"), [outcome], {})
    return outcome, _summary(folder), (folder / "index.html").read_text()


def test_a_readable_result_gives_the_index_its_verdict(tmp_path):
    verdict = {"status": "attention", "reason": "noisy", "rule": "r", "findings": []}
    save_result(tmp_path, "00_tiny", {"headline": "h", "verdict": verdict})
    outcome, summary, index = _judged_and_indexed(tmp_path)
    assert outcome.verdict == NotebookVerdict("attention", "noisy")
    assert outcome.unreadable_result is None and summary.notebooks == [outcome]
    assert summary.verdict is not None and summary.verdict.status == "attention"
    assert 'class="v-attention"' in index and "unreadable" not in index


@pytest.mark.parametrize("cause", ["cut short", "over the reader's bound"])
def test_an_unreadable_result_is_named_with_why_never_shown_as_not_judged(
    tmp_path, monkeypatch, cause
):
    if cause == "cut short":
        (tmp_path / "00_tiny.json").write_text('{"schema_version": 1, "data": {"headline": ')
    else:  # the bound that made 05's default file unreadable, made small here
        save_result(tmp_path, "00_tiny", {"headline": "h", "series": list(range(50))})
        monkeypatch.setattr("workbench.results.RESULT_MAX_VALUES", 40)
    outcome, summary, index = _judged_and_indexed(tmp_path)
    assert outcome.verdict is None and outcome.headline is None
    why = outcome.unreadable_result or ""
    assert why.startswith("result file unreadable: ") and "00_tiny.json" in why, why
    assert ("JSON" if cause == "cut short" else "40") in why and "\n" not in why, why
    assert summary.notebooks[0].unreadable_result == why
    assert summary.verdict is not None and summary.verdict.status == "blocker"
    assert summary.verdict.reasons == [f"00_tiny: {why}"]
    assert "not judged" not in index and "result file unreadable: " in index


def test_a_long_headline_is_cut_at_a_word_with_an_ellipsis(tmp_path):
    words = "the plans, with a long tail of detail " * 20
    save_result(tmp_path, "00_tiny", {"headline": words})
    outcome = NotebookOutcome("00_tiny", "ok", 1.0)
    report_notebook(tmp_path / "00_tiny.ipynb", outcome, show_code=False)
    headline = outcome.headline or ""
    assert len(headline) <= 500 and headline.endswith("…")
    assert words.startswith(headline[:-1]) and words[len(headline) - 1] == " ", "cut at a word"
    short = "the plans, with a short tail"
    save_result(tmp_path, "00_tiny", {"headline": short})
    report_notebook(tmp_path / "00_tiny.ipynb", outcome, show_code=False)
    assert outcome.headline == short


def test_a_failing_notebook_exits_1_with_a_one_line_error_and_keeps_latest(notebooks, tmp_path):
    request = _request(tmp_path, parameters={"fail": "true"})
    older = request.reports_root / "older"
    older.mkdir(parents=True)
    update_latest(request.reports_root, older)
    assert run(request, progress=lambda line: None) == EXIT_NOTEBOOK_FAILED
    assert (request.reports_root / "latest").resolve() == older.resolve()
    (out,) = [p for p in request.reports_root.iterdir() if p.name not in ("older", "latest")]
    (outcome,) = _summary(out).notebooks
    assert outcome.status == "failed" and outcome.failed_cell is not None
    assert outcome.error == "ValueError: tiny failed on purpose"
    assert (out / "00_tiny.html").is_file(), "the failed notebook's report is still written"


def test_a_question_not_answered_is_said_with_its_reason_not_counted_as_a_failure(
    notebooks, tmp_path
):
    """Must pass: exit 0, no report of a question not asked, an attention in the run's
    verdict naming why; a failing notebook (above) still exits 1."""
    out = tmp_path / "unanswered"
    request = _request(tmp_path, out=out, parameters={"not_answered": "true"})
    assert run(request, progress=lambda line: None) == EXIT_OK
    summary = _summary(out)
    (outcome,) = summary.notebooks
    assert outcome.status == "not-answered" and outcome.failed_cell is None
    assert outcome.error == "00_tiny: not answered: the loss cannot be recomputed"
    assert not (out / "00_tiny.html").exists()
    assert summary.verdict.of_the_notebooks_run == "attention"
    assert "00_tiny: not answered: the loss cannot be recomputed" in summary.verdict.reasons
    assert "not answered" in (out / "index.html").read_text()


def test_a_notebook_that_saves_no_result_fails_and_out_never_moves_latest(notebooks, tmp_path):
    out = tmp_path / "chosen"
    request = _request(tmp_path, out=out, parameters={"write_result": "false"})
    assert run(request, progress=lambda line: None) == EXIT_NOTEBOOK_FAILED
    (outcome,) = _summary(out).notebooks
    assert outcome.status == "failed"
    assert outcome.error == "the notebook finished without writing 00_tiny.json"

    ok_out = tmp_path / "chosen-ok"
    assert run(_request(tmp_path, out=ok_out), progress=lambda line: None) == EXIT_OK
    assert not (request.reports_root / "latest").exists(), "--out runs never move latest"


def test_an_interrupt_keeps_the_partial_run_and_exits_130(notebooks, tmp_path, monkeypatch):
    def interrupted(*args, **kwargs) -> NotebookOutcome:
        raise KeyboardInterrupt

    monkeypatch.setattr(runner, "_execute", interrupted)
    request = _request(tmp_path, only=["00", "01"])
    assert run(request, progress=lambda line: None) == EXIT_INTERRUPTED
    (out,) = request.reports_root.iterdir()
    summary = _summary(out)
    assert summary.exit_code == EXIT_INTERRUPTED
    assert [n.status for n in summary.notebooks] == ["interrupted"]
    assert (out / "index.html").is_file() and not (request.reports_root / "latest").exists()


KERNEL_LOG_BODY = """\
import os, sys
from ipykernel.kernelapp import IPKernelApp

# What ipykernel's own logger writes (the path of its "KeyboardInterrupt caught in kernel"
# line at shutdown): the kernel process's stderr, not the notebook.
IPKernelApp.instance().log.error("kernel-level line from the kernel app")
if fail:
    os.write(2, b"dying words of the kernel\\n")
    sys.__stderr__.write("dying words of the kernel\\n")
    sys.__stderr__.flush()
    os.kill(os.getpid(), 9)
"""


@pytest.mark.parametrize("dies", [False, True])
def test_the_kernels_own_stderr_goes_to_run_log_not_the_console(
    notebooks: Path, tmp_path: Path, capfd: pytest.CaptureFixture[str], dies: bool
) -> None:
    tiny = nbformat.read(notebooks / "00_tiny.ipynb", as_version=4)
    tiny.cells[1].source = KERNEL_LOG_BODY + TINY_BODY
    nbformat.write(tiny, notebooks / "00_tiny.ipynb")
    lines: list[str] = []
    code = run(_request(tmp_path, parameters={"fail": dies}), progress=lines.append)
    console = capfd.readouterr()
    assert "kernel-level line" not in console.out + console.err + "\n".join(lines)
    out = next((tmp_path / "reports").iterdir())
    log = (out / "run.log").read_text()
    assert "kernel stderr: " in log and "kernel-level line from the kernel app" in log
    status = _summary(out).notebooks[0]
    if dies:
        assert code == EXIT_NOTEBOOK_FAILED and status.status == "kernel-died"
        assert (status.error or "").endswith("its last words: dying words of the kernel"), status
    else:
        assert code == EXIT_OK and status.status == "ok"
    assert not list(Path(tempfile.gettempdir()).glob("workbench-00_tiny-kernel-*.log"))
