"""`workbench export-metrics` and `run --export` into the real things: an MLflow tracking server
started here on 127.0.0.1 with a SQLite backend (and a SQLite store and MLflow's file store
without a server), read back through MLflow's client; TensorBoard event files read back through
TensorBoard's EventAccumulator; W&B's offline run read back from the file its client wrote; the
JUnit report validated against Jenkins xUnit's junit-10.xsd. No mocks."""

from __future__ import annotations

import hashlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from datetime import datetime
from pathlib import Path

import pytest
import xmlschema
from mlflow import MlflowClient
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.plugins.hparams import plugin_data_pb2

from tests.fixtures.export_runs import FINDINGS, OUTSIDE, write_export_run
from tests.fixtures.wandb_files import read_offline_run
from workbench.export.command import ExportOptions, export
from workbench.export.flatten import Sweep
from workbench.export.records import read_run
from workbench.export.to_wandb import export_run as write_wandb

ROOT = Path(__file__).resolve().parents[2]
WORKBENCH = str(Path(sys.executable).with_name("workbench"))
MLFLOW = str(Path(sys.executable).with_name("mlflow"))
SCHEMA = ROOT / "tests" / "fixtures" / "junit" / "junit-10.xsd"
CONFIG = "configs/train_eager/batch_size_64"  # 01's training configuration, by name and batch
STEADY = f"{CONFIG}/phases/steady/measurement/times"
STARTED = "2026-12-01T10:00:00+00:00"
RUN_SECONDS = 217.0  # the run's wall time as summary.json records it
# A key part that is a bare list position: what a chart across runs cannot follow.
POSITION = re.compile(r"(^|/)\d+(/|$)")
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
    """write_export_run's run with what the runner and notebooks record about time and
    parameters (the run's 217 s; 01 and 02 left batch_size at 0, the workload's 64), and
    reports/latest pointing at it."""
    folder = write_export_run(tmp_path_factory.mktemp("reports") / "20261201-run", started=STARTED)
    summary = json.loads((folder / "summary.json").read_text())
    (folder / "summary.json").write_text(json.dumps({**summary, "seconds": RUN_SECONDS}))
    for notebook in ("01_baseline", "02_op_coverage"):
        path = folder / f"{notebook}.json"
        result = json.loads(path.read_text())
        result["workload"] = {"name": "seed-mlp", "batch_size": 64, "task": "classification"}
        result["parameters"] = {"workload": "seed-mlp", "batch_size": 0, "out_dir": str(folder)}
        path.write_text(json.dumps(result))
    (folder.parent / "latest").symlink_to(folder.name)
    return folder


def _millis(iso: str) -> int:
    return int(datetime.fromisoformat(iso).timestamp() * 1000)


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
    # the link it prints opens MLflow's machine-learning layout, not its GenAI one
    assert f"; open {server}/#/experiments/" in done.stdout
    assert done.stdout.rstrip().endswith("?workflowType=machine_learning")
    # reports/latest, the path the README points at, is the same run: nothing is added
    (again,) = export(
        [run_folder.parent / "latest"], ExportOptions(["mlflow"], tracking_uri=server)
    )
    assert again.startswith(f"mlflow: {run_folder.name} already exported, nothing added")

    client = MlflowClient(tracking_uri=server)
    experiment = client.get_experiment_by_name("workbench")
    assert experiment.tags["mlflow.experimentKind"] == "custom_model_development"  # not GenAI
    runs = client.search_runs([experiment.experiment_id])
    assert len(runs) == 4  # a second export added nothing
    parent = next(r for r in runs if "mlflow.parentRunId" not in r.data.tags)
    children = {r.info.run_name: r for r in runs if r is not parent}
    assert parent.info.run_name == run_folder.name
    assert set(children) == {"01_baseline", "02_op_coverage", OUTSIDE}
    assert all(c.data.tags["mlflow.parentRunId"] == parent.info.run_id for c in children.values())
    assert parent.data.tags["workbench.workload"] == "seed-mlp"
    assert parent.data.tags[f"workbench.verdict.{OUTSIDE}"] == "blocker"
    # the run's own times: summary.json's start and its 217 s; notebooks one after another
    start = _millis(STARTED)
    assert (parent.info.start_time, parent.info.end_time) == (start, start + 217_000)
    baseline, coverage = children["01_baseline"], children["02_op_coverage"]
    assert (baseline.info.start_time, baseline.info.end_time) == (start, start + 1000)
    assert (coverage.info.start_time, coverage.info.end_time) == (start + 1000, start + 2000)
    # the effective batch size, the notebook's parameters without where it wrote
    assert parent.data.params == {"workload": "seed-mlp", "target": "cpu", "batch_size": "64"}
    assert baseline.data.params == {"workload": "seed-mlp", "batch_size": "64"}
    # the parent holds the verdicts and headline numbers, and says what ran
    assert parent.data.metrics["01_baseline/verdict_rank"] == 0.0
    assert parent.data.metrics[f"{OUTSIDE}/verdict_rank"] == 2.0
    assert parent.data.metrics[f"01_baseline/{CONFIG}/throughput"] > 0
    note = parent.data.tags["mlflow.note.content"]
    assert "seed-mlp" in note and "cpu" in note and f"- {OUTSIDE}: ok" in note
    assert children[OUTSIDE].data.tags["mlflow.note.content"].startswith(f"{OUTSIDE}: ok")

    assert baseline.data.tags["workbench.verdict"] == "pass"
    history = client.get_metric_history(baseline.info.run_id, STEADY)
    assert [m.step for m in history] == list(range(1, 31))  # one value per raw step time
    assert baseline.data.metrics[f"{CONFIG}/throughput"] > 0
    keys = [k for run in runs for k in run.data.metrics]
    assert keys and not [k for k in keys if POSITION.search(k)]  # names, never list positions
    assert {a.path for a in client.list_artifacts(baseline.info.run_id)} == {"01_baseline.json"}
    assert {"summary.json", "index.html"} <= {
        a.path for a in client.list_artifacts(parent.info.run_id)
    }
    outside = children[OUTSIDE]
    assert outside.data.tags["workbench.verdict.reason"] == FINDINGS[0].reason
    assert outside.data.metrics == {}  # outside the registry: its lead only


def test_mlflow_sqlite_store_through_reports_latest_names_the_real_run(tmp_path, run_folder):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    (first,) = export([run_folder.parent / "latest"], ExportOptions(["mlflow"], tracking_uri=uri))
    (second,) = export([run_folder], ExportOptions(["mlflow"], tracking_uri=uri))
    assert first.startswith(f"mlflow: {run_folder.name} exported")
    assert "already exported, nothing added" in second
    client = MlflowClient(tracking_uri=uri)
    runs = client.search_runs([client.get_experiment_by_name("workbench").experiment_id])
    assert len(runs) == 4
    assert "latest" not in {r.info.run_name for r in runs}
    parent = next(r for r in runs if "mlflow.parentRunId" not in r.data.tags)
    assert parent.info.end_time - parent.info.start_time == 217_000


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
    # a number measured once is no chart: a configuration's throughput sits at its batch size
    tags = events.Tags()["scalars"]
    assert "configs/train_eager/by_batch_size/throughput" not in tags  # one batch size: no curve
    assert f"{CONFIG}/phases/steady/first_step" not in tags
    assert f"headline/{CONFIG}/throughput" in tags  # the hparams entry's metric
    content = events.PluginTagToContent("hparams")["_hparams_/session_start_info"]
    hparams = plugin_data_pb2.HParamsPluginData.FromString(content).session_start_info.hparams
    assert hparams["verdict"].string_value == "pass"
    assert hparams["workload"].string_value == "seed-mlp"
    (again,) = export([run_folder], ExportOptions(["tensorboard"], logdir=tmp_path))
    assert "already there, nothing written" in again


def test_wandb_offline_run_read_back_from_the_file_it_wrote(tmp_path, run_folder, monkeypatch):
    """W&B's own client in offline mode, whatever the shell says (WANDB_MODE=online here); the
    run is read back from its run-<id>.wandb with W&B's own record messages."""
    monkeypatch.setenv("WANDB_MODE", "online")
    (line,) = export([run_folder], ExportOptions(["wandb"], wandb_dir=tmp_path))
    assert line.startswith(f"wandb: {run_folder.name} written offline")
    (again,) = export([run_folder.parent / "latest"], ExportOptions(["wandb"], wandb_dir=tmp_path))
    assert "already there, nothing written" in again
    (folder,) = (tmp_path / "wandb").glob("offline-run-*")
    run = read_offline_run(folder)
    assert (run.name, run.group) == (run_folder.name, "seed-mlp")
    assert {"workload:seed-mlp", "target:cpu", "verdict:pass"} <= set(run.tags)
    assert f"- {OUTSIDE}: ok" in run.notes
    assert run.config["01_baseline"] == {"workload": "seed-mlp", "batch_size": 64}
    assert run.config["started_at"] == STARTED
    assert run.summary["headline/01_baseline/verdict_rank"] == 0.0
    assert run.summary[f"01_baseline/{CONFIG}/throughput"] > 0
    assert run.summary[f"{OUTSIDE}/verdict"] == "blocker"
    key = f"01_baseline/{STEADY}"
    assert run.axes[key] == "step"
    assert [row["step"] for row in run.history if key in row] == list(range(1, 31))
    # a sweep is drawn along its own axis (this run has none: one batch size; one is added)
    record = read_run(run_folder)
    sweep = Sweep("batch_size", {1: 90.0, 8: 600.0})
    record.notebooks[0].found.sweeps["points/eager/by_batch_size/throughput"] = sweep
    swept = read_offline_run(write_wandb(record, tmp_path / "swept").folder)
    key = "01_baseline/points/eager/by_batch_size/throughput"
    assert swept.axes[key] == "batch_size"
    assert [(r["batch_size"], r[key]) for r in swept.history if key in r] == [(1, 90.0), (8, 600.0)]


def test_a_wandb_export_cut_short_leaves_nothing_and_the_next_writes_it_whole(
    tmp_path, run_folder, monkeypatch
):
    from workbench.export import to_wandb

    def cut(session, run):
        session.log({"step": 1})
        raise KeyboardInterrupt  # the export stopped mid-way

    with monkeypatch.context() as patched:
        patched.setattr(to_wandb, "_write", cut)
        with pytest.raises(KeyboardInterrupt):
            export([run_folder], ExportOptions(["wandb"], wandb_dir=tmp_path))
    assert not list((tmp_path / "wandb").glob("offline-run-*"))
    (line,) = export([run_folder], ExportOptions(["wandb"], wandb_dir=tmp_path))
    assert "written offline" in line


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
    assert done.stdout == f"{out / 'index.html'}\n"  # the report path alone; the rest on stderr
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
