"""A run into MLflow, through MLflow's own client: one parent run per workbook run, one child run
per notebook (MLflow's `mlflow.parentRunId` tag nests them).

Parent: the run's common parameters (their effective values) as params, its verdicts and
headline numbers as metrics (`<notebook>/<key>`, `<notebook>/verdict_rank`), its verdict,
workload, target and versions as tags, a description of what ran (`mlflow.note.content`), its
index, summary and log as artifacts. Child: the notebook's effective parameters as params, every
verdict as a tag, every scalar metric, every per-step series as a metric history (one value per
step, step 1 first), every sweep as a metric history along its axis (the step is the batch size
or load level), its HTML report and result file as artifacts. Start and end times are the run's
and each notebook's own (records.py). A run is found again by its key tag (real folder name and
start time), so exporting it twice, or through reports/latest, adds nothing; an export cut short
is deleted and written again.
"""

from __future__ import annotations

import contextlib
import logging
import os
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from workbench.errors import BadInput
from workbench.export.flatten import safe_key
from workbench.export.records import VERDICT_RANK, NotebookRecord, RunRecord
from workbench.export.safety import check_local_store, mlflow_bounds, scrubbed_copies
from workbench.redact import console_line, scrub_text, tracker_text

if TYPE_CHECKING:
    from mlflow import MlflowClient

DEFAULT_EXPERIMENT = "workbench"
KEY_TAG = "workbench.run_key"
COMPLETE_TAG = "workbench.export_complete"
PARENT_TAG = "mlflow.parentRunId"  # MLflow's own tag for a nested run
NOTE_TAG = "mlflow.note.content"  # MLflow's own tag for a run's description (markdown)
# MLflow 3's UI opens an experiment in its GenAI layout unless the experiment's kind says
# otherwise; its UI reads `mlflow.experimentKind` (ExperimentKind in its web app:
# "custom_model_development" is the classic machine-learning layout of runs, metrics and charts).
KIND_TAG = "mlflow.experimentKind"
KIND = "custom_model_development"
# MLflow 3.17's UI takes its layout from the page address (`workflowType`, its WorkflowType
# context) before its remembered choice, which starts as GenAI: the link the export prints asks
# for the machine-learning layout.
LAYOUT_QUERY = "workflowType=machine_learning"
# MLflow's limits (mlflow.utils.validation): values are cut to fit rather than refused.
PARAM_MAX = 6000
TAG_MAX = 8000
METRICS_PER_BATCH = 1000
TAGS_PER_BATCH = 100
# How long the reachability check waits: MLflow's client otherwise retries an unreachable server
# for minutes (MLFLOW_HTTP_REQUEST_MAX_RETRIES, 7 with backoff) before it says anything.
PROBE_TIMEOUT_S = 10


@dataclass
class MlflowExport:
    run_id: str
    experiment_id: str
    created: bool  # False: the run was already there, nothing was added
    children: int


def default_tracking_uri(run_folder: Path) -> str:
    """$MLFLOW_TRACKING_URI where set (MLflow's own convention), else a SQLite store beside
    the run folder: reports/mlflow.db holds every run exported from reports/."""
    given = os.environ.get("MLFLOW_TRACKING_URI", "").strip()
    if given:
        return given
    return f"sqlite:///{(run_folder.resolve().parent / 'mlflow.db').as_posix()}"


def run_page(tracking_uri: str, experiment_id: str, run_id: str) -> str | None:
    """The run's page in a tracking server's UI, in its machine-learning layout; None for a
    store without a UI (SQLite, a file store). No user name or password is kept in it."""
    parts = urllib.parse.urlsplit(tracking_uri)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return None
    host = parts.hostname if parts.port is None else f"{parts.hostname}:{parts.port}"
    base = urllib.parse.urlunsplit((parts.scheme, host, parts.path.rstrip("/"), "", ""))
    return f"{base}/#/experiments/{experiment_id}/runs/{run_id}?{LAYOUT_QUERY}"


def _artifact_location(tracking_uri: str) -> str | None:
    """For a local SQLite store, artifacts beside the database (MLflow's default is ./mlruns in
    whatever folder the command ran from); a server or a file store decides for itself."""
    prefix = "sqlite:///"
    if not tracking_uri.startswith(prefix):
        return None
    database = Path(tracking_uri[len(prefix) :])
    return (database.parent / "mlartifacts").resolve().as_uri()


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return console_line(scrub_text(text[0] if text else type(exc).__name__))[:300]


def _store_refused(what: str, exc: BaseException, then: str) -> BadInput:
    """What failed, the store's own first line (scrubbed), and what to do: one sentence."""
    return BadInput(f"{what}: {_one_line(exc)}; {then}")


@contextlib.contextmanager
def _quiet_mlflow() -> Iterator[None]:
    """MLflow and alembic log every schema migration of a new SQLite store at INFO; the
    command's own lines say what happened."""
    loggers = [logging.getLogger(name) for name in ("mlflow", "alembic")]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.WARNING)
    try:
        yield
    finally:
        for logger, level in zip(loggers, levels, strict=True):
            logger.setLevel(level)


def _no_retries() -> contextlib.AbstractContextManager[None]:
    """MLflow's client reads these at each request: the check fails fast, the export after it
    keeps MLflow's retries."""
    return mlflow_bounds(
        MLFLOW_HTTP_REQUEST_MAX_RETRIES="0", MLFLOW_HTTP_REQUEST_TIMEOUT=str(PROBE_TIMEOUT_S)
    )


def connect(tracking_uri: str, experiment: str = DEFAULT_EXPERIMENT) -> tuple[MlflowClient, str]:
    """A client on `tracking_uri` and the experiment's id (created where missing); an
    unreachable or unusable store is BadInput, said in one sentence, within seconds."""
    try:
        from mlflow import MlflowClient
    except ImportError:
        raise BadInput(
            "exporting to MLflow needs its client, which is not installed here: "
            "pip install 'workbench[export]'."
        ) from None
    shown = console_line(scrub_text(tracking_uri))
    check_local_store(tracking_uri)
    with _quiet_mlflow(), mlflow_bounds():
        try:
            client = MlflowClient(tracking_uri=tracking_uri)
            with _no_retries():
                found = client.get_experiment_by_name(experiment)
            if found is not None:
                if KIND_TAG not in found.tags:  # a kind someone chose is theirs to keep
                    client.set_experiment_tag(found.experiment_id, KIND_TAG, KIND)
                return client, found.experiment_id
            return client, client.create_experiment(
                experiment,
                artifact_location=_artifact_location(tracking_uri),
                tags={KIND_TAG: KIND},
            )
        except Exception as exc:  # MLflow raises its own, requests', sqlalchemy's or OSError
            fix = "check that the server is up and the URI is right (--tracking-uri or "
            fix += "$MLFLOW_TRACKING_URI)."
            raise _store_refused(f"cannot use the MLflow tracking URI {shown}", exc, fix) from None


def export_run(client: MlflowClient, experiment_id: str, run: RunRecord) -> MlflowExport:
    """Write `run` into the experiment unless it is already there, complete. A store that stops
    answering or refuses a write is BadInput, one sentence, within the bounded timeouts and
    retries of safety.mlflow_bounds (a dead server: about 20 s, not minutes)."""
    try:
        with mlflow_bounds():
            return _export_run(client, experiment_id, run)
    except BadInput:
        raise
    except Exception as exc:  # MLflow raises its own, requests', sqlalchemy's or OSError
        what = f"exporting {console_line(run.label)} to MLflow failed partway"
        then = "an export cut short is replaced whole when it is run again."
        raise _store_refused(what, exc, then) from None


def _export_run(client: MlflowClient, experiment_id: str, run: RunRecord) -> MlflowExport:
    from mlflow.entities import Metric

    with _quiet_mlflow():
        # The key as the tag stores it (tracker_text), so the search finds it again; quotes and
        # backslashes would end MLflow's filter string.
        key = tracker_text(run.key).replace("'", "_").replace("\\", "_")[:TAG_MAX]
        previous = client.search_runs(
            [experiment_id], filter_string=f"tags.`{KEY_TAG}` = '{key}'", max_results=10
        )
        for found in previous:
            if found.data.tags.get(COMPLETE_TAG) == "true":
                return MlflowExport(found.info.run_id, experiment_id, False, 0)
            _delete_with_children(client, experiment_id, found.info.run_id)
        started = _millis(run.start)
        ended = _millis(run.end) if run.end is not None else started
        parent = client.create_run(
            experiment_id,
            start_time=started,
            tags=_parent_tags(run, key),
            run_name=tracker_text(run.label),
        )
        parent_id = parent.info.run_id
        params = {**run.parameters, "workload": run.workload, "target": run.target}
        metrics = [Metric(k, v, ended, 0) for k, v in sorted(run.headline.items())]
        if run.verdict_rank is not None:
            metrics.append(Metric(VERDICT_RANK, run.verdict_rank, ended, 0))
        _log(client, parent_id, _params(params), metrics)
        with scrubbed_copies(run.files) as copies:
            for copy in copies:
                client.log_artifact(parent_id, str(copy))
        for notebook in run.notebooks:
            _export_notebook(client, experiment_id, run, notebook, parent_id)
        client.set_tag(parent_id, COMPLETE_TAG, "true")
        client.set_terminated(
            parent_id, "FINISHED" if run.exit_code == 0 else "FAILED", end_time=ended
        )
    return MlflowExport(parent_id, experiment_id, True, len(run.notebooks))


def _log(client: MlflowClient, run_id: str, params: list[Any], metrics: list[Any]) -> None:
    """Params and metrics in batches of MLflow's sizes."""
    for start in range(0, len(params), TAGS_PER_BATCH):
        client.log_batch(run_id, params=params[start : start + TAGS_PER_BATCH])
    for start in range(0, len(metrics), METRICS_PER_BATCH):
        client.log_batch(run_id, metrics=metrics[start : start + METRICS_PER_BATCH])


def _delete_with_children(client: MlflowClient, experiment_id: str, run_id: str) -> None:
    """An export cut short (a server gone mid-way) is replaced whole, never topped up."""
    children = client.search_runs(
        [experiment_id], filter_string=f"tags.`{PARENT_TAG}` = '{run_id}'"
    )
    for child in children:
        client.delete_run(child.info.run_id)
    client.delete_run(run_id)


def _export_notebook(
    client: MlflowClient,
    experiment_id: str,
    run: RunRecord,
    notebook: NotebookRecord,
    parent_id: str,
) -> None:
    from mlflow.entities import Metric

    started = _millis(notebook.start)
    ended = _millis(notebook.end) if notebook.end is not None else started
    child = client.create_run(
        experiment_id,
        start_time=started,
        tags={PARENT_TAG: parent_id, **_notebook_tags(run, notebook)},
        run_name=tracker_text(notebook.notebook),
    )
    child_id = child.info.run_id
    found = notebook.found
    metrics = [Metric(key, value, ended, 0) for key, value in sorted(found.metrics.items())]
    for key, values in sorted(found.series.items()):
        metrics += [Metric(key, value, ended, step) for step, value in enumerate(values, 1)]
    for key, sweep in sorted(found.sweeps.items()):
        metrics += [Metric(key, value, ended, at) for at, value in sorted(sweep.points.items())]
    _log(client, child_id, _params(notebook.parameters), metrics)
    with scrubbed_copies(notebook.files) as copies:
        for copy in copies:
            client.log_artifact(child_id, str(copy))
    client.set_terminated(
        child_id, "FINISHED" if notebook.status == "ok" else "FAILED", end_time=ended
    )


def _parent_tags(run: RunRecord, key: str) -> dict[str, str]:
    tags = {
        KEY_TAG: key,
        "workbench.run_folder": str(run.path),
        "workbench.workload": run.workload,
        "workbench.target": run.target,
        "workbench.verdict": run.verdict or "none",
        "workbench.verdict.reasons": "; ".join(run.reasons),
        "workbench.exit_code": str(run.exit_code),
        "mlflow.source.name": "workbench",
        NOTE_TAG: run_description(run),
    }
    for notebook in run.notebooks:
        verdict = notebook.verdict.status if notebook.verdict else notebook.status
        tags[f"workbench.verdict.{safe_key(notebook.notebook)}"] = verdict
    tags.update({f"version.{safe_key(k)}": v for k, v in run.versions.items()})
    return _cut_tags(tags)


def _notebook_tags(run: RunRecord, notebook: NotebookRecord) -> dict[str, str]:
    tags = {
        KEY_TAG: f"{run.key.replace(chr(39), '_')}/{notebook.notebook}",
        "workbench.notebook": notebook.notebook,
        "workbench.status": notebook.status,
        "workbench.headline": notebook.headline or "",
        "workbench.workload": run.workload,
        "workbench.target": run.target,
        NOTE_TAG: notebook_description(notebook),
    }
    for path, verdict in notebook.found.verdicts.items():
        name = "workbench.verdict" if path == "verdict" else f"workbench.verdict.{path}"
        tags[name] = verdict.status
        tags[f"{name}.reason"] = verdict.reason
        tags[f"{name}.rule"] = verdict.rule
    if notebook.verdict is None:
        tags["workbench.verdict"] = "none"
    tags.update({f"version.{safe_key(k)}": v for k, v in notebook.versions.items()})
    return _cut_tags(tags)


def run_description(run: RunRecord) -> str:
    """What ran, as the run's description (MLflow shows it as markdown on the run's page)."""
    took = f", {run.seconds:.0f} s" if run.seconds is not None else ""
    lines = [
        f"workbench run of **{run.workload}** on **{run.target}**, started {run.started_at}"
        f"{took}: verdict **{run.verdict or 'none'}**.",
        "",
    ]
    for notebook in run.notebooks:
        verdict = notebook.verdict.status if notebook.verdict else "no verdict"
        took = f" in {notebook.seconds:.1f} s" if notebook.seconds is not None else ""
        lines.append(
            f"- {notebook.notebook}: {notebook.status}{took}, {verdict}: "
            f"{notebook.headline or 'no headline'}"
        )
    lines += ["", f"Run folder: {run.path}"]
    return "\n".join(lines)


def notebook_description(notebook: NotebookRecord) -> str:
    took = f" in {notebook.seconds:.1f} s" if notebook.seconds is not None else ""
    lines = [f"{notebook.notebook}: {notebook.status}{took}.", "", notebook.headline or ""]
    if notebook.verdict is not None:
        verdict = notebook.verdict
        lines += ["", f"Verdict **{verdict.status}**: {verdict.reason}", f"Rule: {verdict.rule}"]
    return "\n".join(lines).strip()


def _cut_tags(tags: dict[str, str]) -> dict[str, str]:
    return {safe_key(k): tracker_text(str(v))[:TAG_MAX] for k, v in tags.items()}


def _params(values: dict[str, Any]) -> list[Any]:
    from mlflow.entities import Param

    return [
        Param(safe_key(str(k)), tracker_text(_shown(v))[:PARAM_MAX])
        for k, v in sorted(values.items())
    ]


def _shown(value: Any) -> str:
    if isinstance(value, (list, tuple)):
        return ",".join(str(v) for v in value)
    return str(value)


def _millis(seconds: float | None) -> int:
    """Epoch seconds in milliseconds, MLflow's clock (now, where a hand-edited summary's start
    time cannot be read)."""
    moment = datetime.now(timezone.utc).timestamp() if seconds is None else seconds
    return int(moment * 1000)
