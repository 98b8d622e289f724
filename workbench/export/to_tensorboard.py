"""A run as TensorBoard event files, written by torch.utils.tensorboard's SummaryWriter.

Layout: `<logdir>/<run folder name>/<notebook>/`, so `tensorboard --logdir <logdir>` lists every
exported run and notebook as TensorBoard runs. A chart's x-axis is what the measurement varies
along: its per-step series (step times, losses) are scalars at their step (step 1 first) and
histograms (the spread of step times); its sweeps are scalars at their batch size, stream count,
offered rate or sequence length (the tag names the axis: `points/eager/by_batch_size/throughput`).
A number measured once (a setting, a count) is not drawn as a chart of one dot: the notebook's
headline numbers (records.HEADLINE_KEYS) and verdict rank are the metrics of its one hparams
entry, beside its effective parameters, workload, target and every verdict; every other number is
in MLflow, W&B and the result file.
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
from workbench.export.records import VERDICT_RANK, NotebookRecord, RunRecord
from workbench.export.safety import component, inside
from workbench.redact import tracker_text
from workbench.safe_load import not_a_link


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
    # One plain name each (never `..` or a path): nothing is written outside the log dir, and
    # neither it nor the run's folder in it may be a link planted there.
    not_a_link(logdir, "The TensorBoard log dir")
    target = inside(not_a_link(logdir / component(run.label), "The run's log folder"), logdir)
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
        for notebook in run.notebooks:
            walltime = _seconds(notebook.end)
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
    for key, values in sorted(found.series.items()):
        for step, value in enumerate(values, 1):
            writer.add_scalar(key, value, step, walltime=walltime)
        if len(values) > 1:
            writer.add_histogram(f"{key}/histogram", _tensor(values), 0, walltime=walltime)
    for key, sweep in sorted(found.sweeps.items()):
        for at, value in sorted(sweep.points.items()):
            writer.add_scalar(key, value, at, walltime=walltime)
    hparams: dict[str, Any] = {"workload": _hparam(run.workload), "target": _hparam(run.target)}
    hparams.update({safe_key(k): _hparam(v) for k, v in notebook.parameters.items()})
    for path, verdict in found.verdicts.items():
        hparams[f"verdict/{path}" if path != "verdict" else "verdict"] = verdict.status
    if notebook.verdict is None:
        hparams["verdict"] = "none"
    rank = notebook.verdict_rank
    metrics = {VERDICT_RANK: float("nan") if rank is None else rank}
    metrics.update((f"headline/{k}", v) for k, v in sorted(notebook.headline_metrics.items()))
    # run_name "." keeps the hparams entry in the notebook's own folder (the default is a new
    # subfolder named by the clock, which TensorBoard would list as one more run).
    writer.add_hparams(hparams, metrics, run_name=".")


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


def _seconds(moment: float | None) -> float:
    return datetime.now().timestamp() if moment is None else moment
