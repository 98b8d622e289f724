"""A run as a Weights & Biases run, written offline by W&B's own client (`mode="offline"`): no
network, no account; `wandb sync <dir>/wandb/offline-run-*` uploads it later (air-gapped
machines, CI without credentials).

One W&B run per workbook run, named by its folder and grouped by workload. Its config holds the
workload, target, start time and each notebook's effective parameters (`01_baseline.batch_size`);
its notes say what ran (MLflow's description, the same words); its tags name the workload, target
and verdict. Its summary holds every scalar metric and verdict under `<notebook>/<key>`, with the
headline numbers and verdict ranks also under `headline/`. Its history holds the per-step series
along W&B's custom x-axis `step`, and each sweep along its own axis (`batch_size`, `streams`,
`rate`, ...), declared with `define_metric` so W&B draws every one against its axis.

A run's W&B id is derived from its key (real folder name and start time), so a second export
finds the first one's folder and writes nothing, and `wandb sync` of both lands on one W&B run;
an export cut short removes its folder, so the next one writes the run whole.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from workbench.errors import BadInput
from workbench.export.records import VERDICT_RANK, RunRecord
from workbench.export.to_mlflow import run_description
from workbench.redact import scrub_text
from workbench.safe_load import not_a_link

DEFAULT_PROJECT = "workbench"
STEP = "step"  # the x-axis of every per-step series


@dataclass
class WandbExport:
    folder: Path  # the offline run's folder, the one `wandb sync` takes
    run_id: str
    created: bool  # False: the run was already there, nothing was written


def default_dir(run_folder: Path) -> Path:
    """reports/ beside the runs: W&B writes its offline runs in reports/wandb/."""
    return run_folder.resolve().parent


def run_id(run: RunRecord) -> str:
    """A W&B run id (letters and digits) that is the same every time the run is exported."""
    return hashlib.sha256(run.key.encode()).hexdigest()[:16]


def check_installed() -> None:
    try:
        import wandb  # noqa: F401
    except ImportError:
        raise BadInput(
            "exporting to W&B needs its client, which is not installed here: "
            "pip install 'workbench[export]'."
        ) from None


def existing(directory: Path, identifier: str) -> Path | None:
    """The offline run folder W&B wrote for this id before, if any."""
    found = sorted((directory / "wandb").glob(f"offline-run-*-{identifier}"))
    return found[0] if found else None


@contextlib.contextmanager
def _offline() -> Iterator[None]:
    """W&B reads its mode and a few switches from the environment as well as from init's
    arguments; offline and silent here whatever the shell says, and put back after."""
    settings = {"WANDB_MODE": "offline", "WANDB_SILENT": "true"}
    saved = {key: os.environ.get(key) for key in settings}
    os.environ.update(settings)
    level = logging.getLogger("wandb").level
    try:
        yield
    finally:
        logging.getLogger("wandb").setLevel(level)
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def export_run(run: RunRecord, directory: Path, project: str = DEFAULT_PROJECT) -> WandbExport:
    """Write `run` as an offline W&B run under `directory`/wandb unless it is there already."""
    check_installed()
    import wandb

    identifier = run_id(run)
    not_a_link(directory / "wandb", "W&B's folder")
    before = existing(directory, identifier)
    if before is not None:
        return WandbExport(before, identifier, False)
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise BadInput(
            f"cannot write W&B files in {directory}: {exc.strerror or exc}; choose another "
            "--wandb-dir."
        ) from None
    settings = wandb.Settings(
        silent=True,
        console="off",
        x_disable_stats=True,  # the machine exporting is not the machine that measured
        x_disable_machine_info=True,
        x_save_requirements=False,
        disable_git=True,
        save_code=False,
    )
    try:
        with _offline():
            session = wandb.init(
                project=project,
                dir=str(directory),
                mode="offline",
                id=identifier,
                name=scrub_text(run.label),
                group=run.workload,
                job_type="workbench",
                tags=_tags(run),
                notes=scrub_text(run_description(run)),
                config=_config(run),
                settings=settings,
            )
            try:
                _write(session, run)
            finally:
                session.finish()
    except BaseException:
        # An export cut short leaves no folder behind: the next one writes the run whole
        # rather than finding a half and calling it done.
        partial = existing(directory, identifier)
        if partial is not None:
            shutil.rmtree(partial, ignore_errors=True)
        raise
    folder = existing(directory, identifier)
    if folder is None:
        raise BadInput(f"W&B wrote no offline run for {run.label} in {directory / 'wandb'}.")
    return WandbExport(folder, identifier, True)


def _tags(run: RunRecord) -> list[str]:
    # W&B's tags are short labels (at most 64 characters each).
    words = (f"workload:{run.workload}", f"target:{run.target}", f"verdict:{run.verdict}")
    return [scrub_text(word)[:64] for word in words]


def _config(run: RunRecord) -> dict[str, Any]:
    config: dict[str, Any] = {
        "workload": run.workload,
        "target": run.target,
        "started_at": run.started_at,
        "seconds": run.seconds,
        "run_folder": str(run.path),
        "run_key": run.key,
        **{f"version/{k}": v for k, v in run.versions.items()},
    }
    for notebook in run.notebooks:
        config[notebook.notebook] = {k: _value(v) for k, v in notebook.parameters.items()}
    return config


def _value(value: Any) -> Any:
    if isinstance(value, str):
        return scrub_text(value)
    if isinstance(value, (list, tuple)):
        return [_value(v) for v in value]
    return value


def _write(session: Any, run: RunRecord) -> None:
    summary: dict[str, Any] = {"verdict": run.verdict or "none"}
    if run.verdict_rank is not None:
        summary[VERDICT_RANK] = run.verdict_rank
    summary.update({f"headline/{k}": v for k, v in run.headline.items()})
    session.define_metric(STEP)
    longest = 0
    sweeps: list[tuple[str, str, int, float]] = []
    for notebook in run.notebooks:
        name = notebook.notebook
        found = notebook.found
        summary[f"{name}/status"] = notebook.status
        summary.update({f"{name}/{k}": v for k, v in found.metrics.items()})
        for path, verdict in found.verdicts.items():
            summary[f"{name}/{path}"] = verdict.status
        for key, values in found.series.items():
            session.define_metric(f"{name}/{key}", step_metric=STEP)
            longest = max(longest, len(values))
        for key, sweep in found.sweeps.items():
            session.define_metric(sweep.axis)
            session.define_metric(f"{name}/{key}", step_metric=sweep.axis)
            sweeps += [(f"{name}/{key}", sweep.axis, at, v) for at, v in sweep.points.items()]
    # History rows: step by step for the series, then one row per sweep point; W&B's own
    # `_step` only counts rows, each chart takes its x from the axis it was declared with.
    for step in range(1, longest + 1):
        row: dict[str, Any] = {STEP: step}
        for notebook in run.notebooks:
            for key, values in notebook.found.series.items():
                if step <= len(values):
                    row[f"{notebook.notebook}/{key}"] = values[step - 1]
        session.log(row)
    for key, axis, at, value in sorted(sweeps):
        session.log({axis: at, key: value})
    session.summary.update(summary)
