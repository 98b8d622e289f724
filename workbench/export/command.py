"""`workbench export-metrics RUN... --to mlflow|tensorboard|wandb|junit`, and the same export for
a run that just finished (`workbench run --export`, `workbench collect --export`).

Every run named is read first (records.read_run), and the tracker is reached before anything is
written, so bad input is one sentence and exit 2 with nothing exported and nothing in the run
folders changed (a JUnit file is written into the run folder only when asked for by default).
"""

from __future__ import annotations

import argparse
import importlib.util
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from workbench.errors import EXIT_OK, BadInput
from workbench.redact import console_line, scrub_text

MLFLOW: Final = "mlflow"
TENSORBOARD: Final = "tensorboard"
WANDB: Final = "wandb"
JUNIT: Final = "junit"
DESTINATIONS = (MLFLOW, TENSORBOARD, WANDB, JUNIT)


@dataclass
class ExportOptions:
    destinations: list[str]
    tracking_uri: str = ""  # "": $MLFLOW_TRACKING_URI, else a SQLite store beside the run
    experiment: str = "workbench"
    logdir: Path | None = None  # None: <runs' parent>/tensorboard
    wandb_dir: Path | None = None  # None: <runs' parent>, W&B writing into its wandb/ folder
    junit_out: Path | None = None  # None: <run>/junit.xml for each run


def destinations(value: str) -> list[str]:
    """`--to mlflow,junit` (or repeated): the destinations named, each checked."""
    names = [part.strip() for part in value.split(",") if part.strip()]
    for name in names:
        if name not in DESTINATIONS:
            raise argparse.ArgumentTypeError(
                f"{name!r} is not a destination; choose from {', '.join(DESTINATIONS)}"
            )
    if not names:
        raise argparse.ArgumentTypeError(f"name a destination: {', '.join(DESTINATIONS)}")
    return names


def add_destination_options(parser: argparse.ArgumentParser, flag: str) -> None:
    """The options every exporting command shares; `flag` is --to or --export."""
    group = parser.add_argument_group("export to a tracker (needs pip install 'workbench[export]')")
    group.add_argument(
        flag,
        dest="export",
        action="extend",
        type=destinations,
        metavar="DEST",
        help=f"{', '.join(DESTINATIONS)} (comma-separated or repeated)",
    )
    group.add_argument(
        "--tracking-uri",
        metavar="URI",
        default="",
        help="MLflow tracking URI (default $MLFLOW_TRACKING_URI, else sqlite:///<reports>/mlflow.db)",
    )
    group.add_argument(
        "--experiment", default="workbench", help="MLflow experiment (default workbench)"
    )
    group.add_argument(
        "--logdir", metavar="DIR", help="TensorBoard log dir (default <reports>/tensorboard)"
    )
    group.add_argument(
        "--wandb-dir",
        metavar="DIR",
        help="where W&B writes its offline runs, in DIR/wandb (default <reports>)",
    )


def configure_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "runs", nargs="+", metavar="RUN", help="run folders (each holds summary.json)"
    )
    add_destination_options(parser, "--to")
    parser.add_argument(
        "--out",
        metavar="FILE",
        help="JUnit file for all the runs named (default: junit.xml inside each run folder)",
    )


def options_from(args: argparse.Namespace) -> ExportOptions:
    chosen = list(dict.fromkeys(args.export or []))
    if not chosen:
        raise BadInput(f"name where to export with --to: {', '.join(DESTINATIONS)}.")
    return ExportOptions(
        chosen,
        tracking_uri=args.tracking_uri,
        experiment=args.experiment,
        logdir=Path(args.logdir) if args.logdir else None,
        junit_out=Path(args.out) if getattr(args, "out", None) else None,
        wandb_dir=Path(args.wandb_dir) if getattr(args, "wandb_dir", None) else None,
    )


def cmd_export_metrics(args: argparse.Namespace) -> int:
    lines = export(args.runs, options_from(args))
    for line in lines:
        print(console_line(line))
    return EXIT_OK


def check_destinations(options: ExportOptions, where: Path) -> None:
    """Fail before anything runs or is written: the packages are there, the tracker answers."""
    if MLFLOW in options.destinations:
        from workbench.export.to_mlflow import connect, default_tracking_uri

        connect(options.tracking_uri or default_tracking_uri(where), options.experiment)
    if TENSORBOARD in options.destinations:
        if importlib.util.find_spec("tensorboard") is None:  # torch.utils.tensorboard needs it
            raise BadInput(
                "writing TensorBoard event files needs the tensorboard package, which is not "
                "installed here: pip install 'workbench[export]'."
            )
    if WANDB in options.destinations:
        from workbench.export.to_wandb import check_installed

        check_installed()


def export(folders: Sequence[str | Path], options: ExportOptions) -> list[str]:
    """Export every run folder to every destination; one line per thing done, for the console.
    All folders are read, and the tracker reached, before anything is written."""
    from workbench.export.records import read_run

    runs = [read_run(folder) for folder in folders]
    lines: list[str] = []
    if MLFLOW in options.destinations:
        from workbench.export.to_mlflow import connect, default_tracking_uri, export_run, run_page

        for run in runs:
            uri = options.tracking_uri or default_tracking_uri(run.path)
            client, experiment_id = connect(uri, options.experiment)
            done = export_run(client, experiment_id, run)
            state = "exported" if done.created else "already exported, nothing added"
            page = run_page(uri, experiment_id, done.run_id)
            lines.append(
                f"mlflow: {run.label} {state}: run {done.run_id} in experiment "
                f"{options.experiment!r} at {scrub_text(uri)}" + (f"; open {page}" if page else "")
            )
    if TENSORBOARD in options.destinations:
        from workbench.export.to_tensorboard import default_logdir
        from workbench.export.to_tensorboard import export_run as write_events

        for run in runs:
            written = write_events(run, options.logdir or default_logdir(run.path))
            state = "written" if written.created else "already there, nothing written"
            lines.append(f"tensorboard: {run.label} {state}: {written.folder}")
    if WANDB in options.destinations:
        from workbench.export.to_wandb import default_dir
        from workbench.export.to_wandb import export_run as write_wandb

        for run in runs:
            offline = write_wandb(run, options.wandb_dir or default_dir(run.path))
            state = "written offline" if offline.created else "already there, nothing written"
            lines.append(f"wandb: {run.label} {state}: {offline.folder} (upload: wandb sync)")
    if JUNIT in options.destinations:
        from workbench.export.to_junit import DEFAULT_NAME, write_junit

        if options.junit_out is not None:
            lines.append(f"junit: {write_junit(runs, options.junit_out)}")
        else:
            lines += [f"junit: {write_junit([run], run.path / DEFAULT_NAME)}" for run in runs]
    return lines


def export_finished(folder: Path, options: ExportOptions, progress: Callable[[str], None]) -> bool:
    """Export a run that just finished; False (and the reason on `progress`) where it failed:
    the run itself is complete, and `workbench export-metrics` can export it later."""
    try:
        for line in export([folder], options):
            progress(console_line(line))  # a run's name can carry a token or control sequences
    except BadInput as exc:
        progress(
            console_line(
                f"workbench: error: export failed: {exc} The run is complete; export it later "
                f"with `workbench export-metrics {folder} --to {','.join(options.destinations)}`."
            )
        )
        return False
    return True
