"""What an export reads, writes and sends, whatever a run folder holds: real symbolic links to
files outside the run and to /proc/self/environ, notebook names that climb out of the log dir,
text a JUnit file or a tracker cannot hold, a store that cannot be written, and a tracking server
that accepts a connection and never answers (a local socket, no mock)."""

from __future__ import annotations

import json
import os
import socket
import threading
import time
from pathlib import Path
from xml.etree import ElementTree

import pytest

from tests.fixtures.export_runs import write_export_run
from workbench.errors import BadInput
from workbench.export import safety
from workbench.export.records import read_run
from workbench.export.to_junit import junit_xml, write_junit
from workbench.redact import REDACTED

SECRET = "s3cr3t-exporter-value-4242"


@pytest.fixture
def run_folder(tmp_path: Path) -> Path:
    return write_export_run(tmp_path / "reports" / "20261201-run")


def test_run_files_that_are_links_are_never_read(run_folder: Path, tmp_path: Path) -> None:
    outside = tmp_path / "outside.log"
    outside.write_text(f"TOKEN={SECRET}\n")
    (run_folder / "run.log").symlink_to(outside)
    (run_folder / "index.html").unlink()
    (run_folder / "index.html").symlink_to("/proc/self/environ")
    run = read_run(run_folder)
    assert [p.name for p in run.files] == ["summary.json"]  # the plain one only


def test_a_summary_or_result_that_is_a_link_makes_the_run_unreadable(
    run_folder: Path, tmp_path: Path
) -> None:
    result = run_folder / "01_baseline.json"
    result.rename(run_folder / "copy.json")
    result.symlink_to("copy.json")  # a link that stays inside the folder is still a link
    with pytest.raises(BadInput, match="01_baseline.json is a symbolic link; only plain files"):
        read_run(run_folder)
    result.unlink()
    (run_folder / "copy.json").rename(result)
    summary = run_folder / "summary.json"
    summary.rename(tmp_path / "summary.json")
    summary.symlink_to(tmp_path / "summary.json")
    with pytest.raises(BadInput, match="summary.json is a symbolic link"):
        read_run(run_folder)
    summary.unlink()
    (tmp_path / "summary.json").rename(summary)
    read_run(run_folder)  # the same files, plain, read


def test_uploaded_copies_are_scrubbed_and_a_swapped_in_link_is_refused(
    run_folder: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("EXPORTER_API_TOKEN", SECRET)
    log = run_folder / "run.log"
    log.write_text(f"line one\nenv EXPORTER_API_TOKEN={SECRET} curl -u bob:pw12345 x\n")
    with safety.scrubbed_copies([log]) as (copy,):
        text = copy.read_text()
    assert SECRET not in text and "pw12345" not in text and REDACTED in text
    assert "line one" in text and copy.name == "run.log"
    log.unlink()
    log.symlink_to("/proc/self/environ")  # swapped in after the folder was read
    with pytest.raises(BadInput, match="symbolic link"), safety.scrubbed_copies([log]):
        pass


def test_names_from_a_run_become_one_plain_component() -> None:
    assert safety.component("../../x") == "_.._.._x"
    assert safety.component("..") == "_.."
    assert safety.component(".hidden") == "_.hidden"
    assert safety.component("a/b\\c\x1b[2J") == "a_b_c_2J"
    assert safety.component("01_baseline") == "01_baseline"  # an ordinary name is kept


def test_a_path_outside_its_destination_is_refused(tmp_path: Path) -> None:
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "up").symlink_to(tmp_path)
    assert safety.inside(tmp_path / "logs" / "run", tmp_path / "logs")
    for escaping in (tmp_path / "logs" / ".." / "x", tmp_path / "logs" / "up" / "x"):
        with pytest.raises(BadInput, match="would be written outside"):
            safety.inside(escaping, tmp_path / "logs")


def test_tensorboard_never_writes_outside_its_log_dir(run_folder: Path, tmp_path: Path) -> None:
    pytest.importorskip("tensorboard")
    from workbench.export.to_tensorboard import export_run

    summary = json.loads((run_folder / "summary.json").read_text())
    summary["notebooks"][-1]["notebook"] = "../../escaped"
    summary["notebooks"][-1].pop("result")
    (run_folder / "summary.json").write_text(json.dumps(summary))
    logdir = tmp_path / "deep" / "tensorboard"
    written = export_run(read_run(run_folder), logdir)
    assert {p.name for p in written.folder.iterdir()} == {
        "01_baseline",
        "02_op_coverage",
        "_.._.._escaped",
    }
    assert not list(tmp_path.rglob("escaped"))  # nothing named so anywhere, inside or out


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("started_at", "2026-12-01T10:00:00\x01+00:00"),
        ("workload", "seed-mlp\ufffe\ud800\x1b[31m"),
        ("workload", f"hf:/data/https://bob:{SECRET}@host/ckpt"),
    ],
)
def test_junit_is_well_formed_and_scrubbed_for_any_text(
    run_folder: Path, tmp_path: Path, field: str, value: str
) -> None:
    run = read_run(run_folder)
    setattr(run, field, value)
    run.notebooks[0].headline = "headline \ufffe with \x0b a form feed \ud83d"
    document = junit_xml([run])
    ElementTree.fromstring(document)
    assert SECRET not in document
    out = write_junit([run], tmp_path / "junit.xml")
    ElementTree.parse(out)  # and as written to disk, in UTF-8


def test_a_read_only_sqlite_store_is_one_sentence_at_once(tmp_path: Path) -> None:
    store = tmp_path / "store"
    store.mkdir()
    safety.check_local_store(f"sqlite:///{store / 'mlflow.db'}")  # writable: nothing said
    store.chmod(0o500)
    try:
        if os.access(store, os.W_OK):
            pytest.skip("running as root: a read-only folder is still writable")
        with pytest.raises(BadInput, match="is read-only; choose a store that can be written"):
            safety.check_local_store(f"sqlite:///{store / 'mlflow.db'}")
    finally:
        store.chmod(0o700)


def test_a_store_on_a_read_only_file_system_is_one_sentence_at_once() -> None:
    if os.access("/proc/sys", os.W_OK):
        pytest.skip("/proc/sys is writable here")
    with pytest.raises(BadInput, match="/proc/sys is read-only"):
        safety.check_local_store("sqlite:////proc/sys/store/mlflow.db")


def test_mlflow_reads_the_bounds_and_prints_no_urls_inside_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The names are MLflow's own (mlflow.environment_variables), read at each request by
    mlflow/utils/rest_utils.py; a value the user set is kept."""
    environment = pytest.importorskip("mlflow.environment_variables")
    for name in (
        "MLFLOW_HTTP_REQUEST_TIMEOUT",
        "MLFLOW_HTTP_REQUEST_MAX_RETRIES",
        "MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT",
    ):
        monkeypatch.delenv(name, raising=False)
    with safety.mlflow_bounds():
        assert environment.MLFLOW_HTTP_REQUEST_TIMEOUT.get() == safety.REQUEST_TIMEOUT_S
        assert environment.MLFLOW_HTTP_REQUEST_MAX_RETRIES.get() == safety.REQUEST_RETRIES
        assert environment.MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT.get() is True
    assert environment.MLFLOW_HTTP_REQUEST_TIMEOUT.get() == 120  # MLflow's default, restored
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "3")
    with safety.mlflow_bounds():
        assert environment.MLFLOW_HTTP_REQUEST_TIMEOUT.get() == 3


@pytest.fixture
def silent_server():
    """A local socket that accepts connections and never answers, as a tracking server that
    hangs after the reachability check does."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    accepted: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        listener.settimeout(0.2)
        while not stop.is_set():
            try:
                accepted.append(listener.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    stop.set()
    thread.join(timeout=5)
    for connection in accepted:
        connection.close()
    listener.close()


def test_a_server_that_stops_answering_is_one_sentence_within_the_timeout(
    run_folder: Path, silent_server: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The export after a successful check: every request times out. The timeout is set to 1 s
    here (a user's own setting is kept), so the bound is 1 s per try, two tries."""
    mlflow = pytest.importorskip("mlflow")
    from workbench.export.to_mlflow import export_run

    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "1")
    client = mlflow.MlflowClient(tracking_uri=silent_server)
    started = time.monotonic()
    with pytest.raises(BadInput) as failed:
        export_run(client, "0", read_run(run_folder))
    assert time.monotonic() - started < 15
    message = str(failed.value)
    assert message.startswith("exporting 20261201-run to MLflow failed partway: ")
    assert "\n" not in message


def test_the_lines_an_export_after_a_run_prints_are_scrubbed(tmp_path: Path) -> None:
    from workbench.export.command import ExportOptions, export_finished

    token = "ghp_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"
    folder = write_export_run(tmp_path / f"run-{token}-\x1b]0;title\x07")
    lines: list[str] = []
    assert export_finished(folder, ExportOptions(["junit"]), lines.append)
    said = "\n".join(lines)
    assert said.startswith("junit: ") and "junit.xml" in said
    assert token not in said and "\x1b" not in said and "\x07" not in said


@pytest.mark.parametrize("planted", ["tensorboard", "tensorboard/20261201-run", "wandb"])
def test_a_planted_link_where_an_export_writes_by_default_is_refused(
    run_folder: Path, tmp_path: Path, planted: str
) -> None:
    """Must refuse: reports/tensorboard (or the run's folder in it) and reports/wandb that are
    links to another place; nothing is written there. A real folder is written (the test
    above)."""
    outside = tmp_path / "outside"
    outside.mkdir()
    link = run_folder.parent / planted
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(outside, target_is_directory=True)
    if planted.startswith("tensorboard"):
        pytest.importorskip("tensorboard")
        from workbench.export.to_tensorboard import export_run

        with pytest.raises(BadInput, match="is a symbolic link"):
            export_run(read_run(run_folder), run_folder.parent / "tensorboard")
    else:
        pytest.importorskip("wandb")
        from workbench.export.to_wandb import export_run as export_wandb

        with pytest.raises(BadInput, match="W&B's folder .* is a symbolic link"):
            export_wandb(read_run(run_folder), run_folder.parent)
    assert not list(outside.iterdir())
