"""`workbench export-metrics` and `run --export` into the real things: an MLflow tracking server
started here on 127.0.0.1 with a SQLite backend (and MLflow's file store), read back through
MLflow's client; TensorBoard event files read back through TensorBoard's EventAccumulator; the
JUnit report validated against Jenkins xUnit's junit-10.xsd. No mocks."""

from __future__ import annotations

import hashlib
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
import xmlschema
from mlflow import MlflowClient
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.plugins.hparams import plugin_data_pb2

from tests.fixtures.export_runs import FINDINGS, OUTSIDE, write_export_run
from workbench.export.command import ExportOptions, export

ROOT = Path(__file__).resolve().parents[2]
WORKBENCH = str(Path(sys.executable).with_name("workbench"))
MLFLOW = str(Path(sys.executable).with_name("mlflow"))
SCHEMA = ROOT / "tests" / "fixtures" / "junit" / "junit-10.xsd"
STEADY = "configs/train_eager/phases/steady/measurement/times"
SERVER_START_S = 120


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """`mlflow server` on 127.0.0.1 with a SQLite backend and proxied artifacts, once for the
    module; stopped by its own process group at the end."""
    folder = tmp_path_factory.mktemp("mlflow-server")
    port = _free_port()
    log = open(folder / "server.log", "w")
    process = subprocess.Popen(
        [MLFLOW, "server", "--host", "127.0.0.1", "--port", str(port), "--workers", "1",
         "--backend-store-uri", f"sqlite:///{folder / 'mlflow.db'}",
         "--artifacts-destination", str(folder / "artifacts")],
        stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip
    uri = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + SERVER_START_S
    while True:
        try:
            with urllib.request.urlopen(f"{uri}/health", timeout=2) as answer:
                if answer.status == 200:
                    break
        except OSError:
            pass
        if process.poll() is not None or time.monotonic() > deadline:
            os.killpg(process.pid, signal.SIGTERM)
            pytest.fail(
                f"mlflow server did not start: {(folder / 'server.log').read_text()[-2000:]}"
            )
        time.sleep(0.5)
    yield uri
    # Killed outright: uvicorn's graceful drain takes seconds and the store is thrown away.
    os.killpg(process.pid, signal.SIGKILL)
    process.wait(timeout=30)
    log.close()


@pytest.fixture(scope="module")
def run_folder(tmp_path_factory):
    return write_export_run(tmp_path_factory.mktemp("reports") / "20261201-run")


def _files(folder: Path) -> dict[str, str]:
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def _workbench(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [WORKBENCH, *args], capture_output=True, text=True, timeout=300, env=env, cwd=ROOT
    )


def test_mlflow_server_gets_a_parent_and_a_child_per_notebook_once(server, run_folder):
    done = _workbench("export-metrics", str(run_folder), "--to", "mlflow", "--tracking-uri", server)
    assert done.returncode == 0, done.stderr
    (again,) = export([run_folder], ExportOptions(["mlflow"], tracking_uri=server))
    assert "already exported, nothing added" in again

    client = MlflowClient(tracking_uri=server)
    experiment = client.get_experiment_by_name("workbench")
    runs = client.search_runs([experiment.experiment_id])
    assert len(runs) == 4  # a second export added nothing
    parent = next(r for r in runs if "mlflow.parentRunId" not in r.data.tags)
    children = {r.info.run_name: r for r in runs if r is not parent}
    assert set(children) == {"01_baseline", "02_op_coverage", OUTSIDE}
    assert all(c.data.tags["mlflow.parentRunId"] == parent.info.run_id for c in children.values())
    assert parent.data.tags["workbench.workload"] == "seed-mlp"
    assert parent.data.tags[f"workbench.verdict.{OUTSIDE}"] == "blocker"
    assert parent.data.params == {"workload": "seed-mlp", "target": "cpu"}

    baseline = children["01_baseline"]
    assert baseline.data.tags["workbench.verdict"] == "pass"
    history = client.get_metric_history(baseline.info.run_id, STEADY)
    assert [m.step for m in history] == list(range(1, 31))  # one value per raw step time
    assert baseline.data.metrics["configs/train_eager/throughput"] > 0
    assert {a.path for a in client.list_artifacts(baseline.info.run_id)} == {"01_baseline.json"}
    assert {"summary.json", "index.html"} <= {
        a.path for a in client.list_artifacts(parent.info.run_id)
    }
    outside = children[OUTSIDE]
    assert outside.data.tags["workbench.verdict.reason"] == FINDINGS[0].reason
    assert outside.data.metrics == {}  # outside the registry: its lead only


def test_mlflow_file_store_through_the_same_client(tmp_path, run_folder, monkeypatch):
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")  # MLflow 3 keeps it behind this switch
    uri = (tmp_path / "mlruns").as_uri()
    (line,) = export([run_folder], ExportOptions(["mlflow"], tracking_uri=uri))
    assert line.startswith(f"mlflow: {run_folder.name} exported")
    client = MlflowClient(tracking_uri=uri)
    runs = client.search_runs([client.get_experiment_by_name("workbench").experiment_id])
    baseline = next(r for r in runs if r.info.run_name == "01_baseline")
    assert len(client.get_metric_history(baseline.info.run_id, STEADY)) == 30


def test_tensorboard_events_read_back_with_scalars_histograms_and_hparams(tmp_path, run_folder):
    export([run_folder], ExportOptions(["tensorboard"], logdir=tmp_path))
    events = EventAccumulator(
        str(tmp_path / run_folder.name / "01_baseline"),
        size_guidance={"scalars": 0, "histograms": 0, "tensors": 0},
    )
    events.Reload()
    assert [s.step for s in events.Scalars(STEADY)] == list(range(1, 31))
    assert events.Histograms(f"{STEADY}/histogram")[0].histogram_value.num == 30
    content = events.PluginTagToContent("hparams")["_hparams_/session_start_info"]
    hparams = plugin_data_pb2.HParamsPluginData.FromString(content).session_start_info.hparams
    assert hparams["verdict"].string_value == "pass"
    assert hparams["workload"].string_value == "seed-mlp"
    (again,) = export([run_folder], ExportOptions(["tensorboard"], logdir=tmp_path))
    assert "already there, nothing written" in again


def test_junit_from_the_command_line_is_valid_for_ci(tmp_path, run_folder):
    out = tmp_path / "gate.xml"
    done = _workbench("export-metrics", str(run_folder), "--to", "junit", "--out", str(out))
    assert done.returncode == 0, done.stderr
    xmlschema.XMLSchema(SCHEMA).validate(str(out))
    assert 'failures="2"' in out.read_text()


def test_an_unreachable_tracking_uri_is_one_sentence_and_touches_nothing(run_folder):
    before = _files(run_folder)
    started = time.monotonic()
    closed = f"http://127.0.0.1:{_free_port()}"
    done = _workbench(
        "export-metrics", str(run_folder), "--to", "junit,mlflow", "--tracking-uri", closed
    )
    assert done.returncode == 2
    assert done.stderr.startswith(f"workbench: error: cannot use the MLflow tracking URI {closed}")
    assert len(done.stderr.strip().splitlines()) == 1
    assert time.monotonic() - started < 60  # no minutes of retries
    assert _files(run_folder) == before


def test_run_with_export_writes_the_run_then_exports_it(tmp_path, server):
    reports = tmp_path / "reports"
    env = {**os.environ, "MLFLOW_TRACKING_URI": server}
    out = reports / "env-only"
    done = _workbench("run", "--only", "00", "--out", str(out), "--export", "mlflow,junit", env=env)
    assert done.returncode == 0, done.stderr
    assert "mlflow: env-only exported" in done.stderr
    xmlschema.XMLSchema(SCHEMA).validate(str(out / "junit.xml"))
    client = MlflowClient(tracking_uri=server)
    found = client.search_runs(
        [client.get_experiment_by_name("workbench").experiment_id],
        filter_string="tags.`workbench.notebook` = '00_environment'",
    )
    assert [r.data.tags["workbench.verdict"] for r in found] == ["pass"]


def test_run_with_export_to_an_unreachable_server_refuses_before_running(tmp_path):
    out = tmp_path / "never"
    env = {**os.environ, "MLFLOW_TRACKING_URI": f"http://127.0.0.1:{_free_port()}"}
    done = _workbench("run", "--only", "00", "--out", str(out), "--export", "mlflow", env=env)
    assert done.returncode == 2
    assert "cannot use the MLflow tracking URI" in done.stderr
    assert not out.exists()


def test_a_password_in_the_tracking_uri_reaches_no_console_line(tmp_path, server):
    """MLflow prints "View run NAME at: URL" at each finished run on a server, URL userinfo
    included; the export silences it and says the URI scrubbed. The server ignores the login."""
    password = "hunter2trackerpw"
    uri = server.replace("http://", f"http://bob:{password}@")
    fresh = write_export_run(tmp_path / "fresh-run\x1b]0;title\x07")
    done = _workbench("export-metrics", str(fresh), "--to", "mlflow", "--tracking-uri", uri)
    assert done.returncode == 0, done.stderr
    console = done.stdout + done.stderr
    assert password not in console and "View run" not in console and "\x1b" not in console
    assert "exported" in done.stdout
