"""A run as TensorBoard event files, written by torch.utils.tensorboard's SummaryWriter.

Layout: `<logdir>/<run folder name>/<notebook>/`, so `tensorboard --logdir <logdir>` lists every
exported run and notebook as TensorBoard runs. Each notebook gets its scalar metrics (step 0),
its per-step series as scalars (one per step, step 1 first) and as histograms (the spread of step
times), and one hparams entry: its parameters, workload, target and every verdict, with the
verdict's rank (0 pass, 1 attention, 2 blocker) as the metric the hparams table sorts by.
"""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from workbench.errors import BadInput
from workbench.export.flatten import safe_key
from workbench.export.records import NotebookRecord, RunRecord
from workbench.export.safety import component, inside
from workbench.redact import tracker_text
from workbench.scorecard import STATUSES

VERDICT_RANK = "verdict_rank"


@dataclass
class TensorBoardExport:
    folder: Path
    created: bool  # False: the run was already there, nothing was written


def default_logdir(run_folder: Path) -> Path:
    """reports/tensorboard beside the runs: one log dir for every run exported from reports/."""
    return run_folder.resolve().parent / "tensorboard"


def export_run(run: RunRecord, logdir: Path) -> TensorBoardExport:
    """Write `run`'s event files under `logdir` unless a folder for it is there already; the
    files are written aside and moved in whole, so a cut-short export leaves nothing half."""
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError:
        raise BadInput(
            "writing TensorBoard event files needs the tensorboard package, which is not "
            "installed here: pip install 'workbench[export]'."
        ) from None
    # One plain name each (never `..` or a path): nothing is written outside the log dir.
    target = inside(logdir / component(run.label), logdir)
    if target.exists():
        return TensorBoardExport(target, False)
    try:
        logdir.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=logdir))
    except OSError as exc:
        raise BadInput(
            f"cannot write TensorBoard files in {logdir}: {exc.strerror or exc}; "
            "choose another --logdir."
        ) from None
    try:
        walltime = _seconds(run.started_at)
        for notebook in run.notebooks:
            folder = inside(staging / component(notebook.notebook), staging)
            writer = SummaryWriter(log_dir=str(folder))
            try:
                _write_notebook(writer, run, notebook, walltime)
            finally:
                writer.close()
        staging.rename(target)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return TensorBoardExport(target, True)


def _write_notebook(writer: Any, run: RunRecord, notebook: NotebookRecord, walltime: float) -> None:
    found = notebook.found
    for key, value in sorted(found.metrics.items()):
        writer.add_scalar(key, value, 0, walltime=walltime)
    for key, values in sorted(found.series.items()):
        for step, value in enumerate(values, 1):
            writer.add_scalar(key, value, step, walltime=walltime)
        if len(values) > 1:
            writer.add_histogram(f"{key}/histogram", _tensor(values), 0, walltime=walltime)
    hparams: dict[str, Any] = {"workload": _hparam(run.workload), "target": _hparam(run.target)}
    hparams.update({safe_key(k): _hparam(v) for k, v in notebook.parameters.items()})
    for path, verdict in found.verdicts.items():
        hparams[f"verdict/{path}" if path != "verdict" else "verdict"] = verdict.status
    if notebook.verdict is None:
        hparams["verdict"] = "none"
    rank = float(STATUSES.index(notebook.verdict.status)) if notebook.verdict else float("nan")
    # run_name "." keeps the hparams entry in the notebook's own folder (the default is a new
    # subfolder named by the clock, which TensorBoard would list as one more run).
    writer.add_hparams(hparams, {VERDICT_RANK: rank}, run_name=".")


def _hparam(value: Any) -> Any:
    """A parameter as the hparams plugin takes it: a number, a bool or a string."""
    if isinstance(value, (bool, int, float)):
        return value
    if isinstance(value, (list, tuple)):
        return tracker_text(",".join(str(v) for v in value))
    return tracker_text(str(value))


def _tensor(values: list[float]) -> Any:
    import torch

    return torch.tensor(values, dtype=torch.float64)


def _seconds(started_at: str) -> float:
    try:
        return datetime.fromisoformat(started_at).timestamp()
    except ValueError:
        return datetime.now().timestamp()
