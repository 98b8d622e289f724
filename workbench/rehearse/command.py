"""`workbench rehearse --pinned PY_OR_VENV --candidate PY_OR_VENV [run options]`: the flow a team
runs before it moves a pinned SDK release.

Both interpreters are checked first (each must run the workbench), then the same workload and
notebooks run in the pinned environment and then in the candidate, one after the other so
neither times the other's load, each as `<python> -m workbench.cli run` into its own folder.
`compare_runs` judges the candidate against the pinned run (the environment diff of notebook 00
beside each change), and rehearse.html says what changed in the stack, speed, numerics and op
coverage, and whether to move the pin.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from collections.abc import Callable
from dataclasses import replace
from datetime import datetime
from pathlib import Path

from workbench.errors import EXIT_OK, EXIT_REGRESSION, BadInput
from workbench.redact import console_line
from workbench.rehearse.environments import CURRENT, ROLLBACK, Environment, resolve
from workbench.rehearse.verdict import HOLD, PinVerdict, judge_pin

LOG_TAIL_LINES = 3


def configure_parser(parser: argparse.ArgumentParser) -> None:
    """rehearse's own options; the run options (what to run) are run's, added by the CLI."""
    group = parser.add_argument_group("the two environments")
    group.add_argument(
        "--pinned",
        required=True,
        metavar="PY_OR_VENV",
        help="the environment in use now: a virtualenv folder or a python interpreter",
    )
    group.add_argument(
        "--candidate",
        required=True,
        metavar="PY_OR_VENV",
        help="the environment to move to (a newer torch, torch-neuronx or Neuron SDK)",
    )
    group.add_argument(
        "--reverse",
        action="store_true",
        help="a rollback rehearsal: the candidate (the environment in use now, after an "
        "upgrade) runs first and the pinned one is judged against it, so going back is checked "
        "with the same notebooks as going forward",
    )
    output = parser.add_argument_group("where the results go")
    output.add_argument(
        "--out",
        metavar="DIR",
        help="a new folder for both runs and rehearse.html (default reports/rehearse-<time>)",
    )
    output.add_argument(
        "--cell-timeout", type=int, metavar="S", help="seconds one cell may run (3600)"
    )


def run_options(args: argparse.Namespace) -> list[str]:
    """The run options given, passed on unchanged to both runs."""
    forwarded: list[str] = []
    for flag, value in (
        ("--workload", args.workload),
        ("--target", args.target),
        ("--only", args.only),
        ("--config", args.config),
        ("--compile-cache", args.compile_cache),
        ("--cell-timeout", args.cell_timeout),
    ):
        if value is not None:
            forwarded += [flag, str(value)]
    for pair in args.param or []:
        forwarded += ["-p", pair]
    return forwarded


def _out_folder(given: str | None) -> Path:
    out = (
        Path(given)
        if given
        else Path("reports") / datetime.now().strftime("rehearse-%Y%m%d-%H%M%S")
    )
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise BadInput(f"--out {out} already holds files; choose a new folder for the rehearsal.")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise BadInput(f"--out {out} cannot be created: {exc.strerror or exc}.") from None
    return out


def run_in(environment: Environment, options: list[str], out: Path) -> tuple[Path, int, str]:
    """One run of the workbook in `environment`: its folder, exit code and log's last lines."""
    folder = out / environment.role
    log = out / f"{environment.role}.log"
    command = [str(environment.python), "-m", "workbench.cli", "run", "--out", str(folder)]
    print(f"rehearse: {environment.role} ({environment.python}, torch {environment.torch}) ...",
          file=sys.stderr, flush=True)  # fmt: skip
    with open(log, "w", encoding="utf-8") as handle:
        done = subprocess.run(
            [*command, *options], stdout=handle, stderr=subprocess.STDOUT, check=False
        )
    lines = [line for line in log.read_text(encoding="utf-8").splitlines() if line.strip()]
    tail = console_line(" / ".join(lines[-LOG_TAIL_LINES:]))
    print(f"rehearse: {environment.role} exit {done.returncode}: {folder}", file=sys.stderr)
    return folder, done.returncode, tail


def cmd_rehearse(args: argparse.Namespace, check_run_options: Callable[[list[str]], None]) -> int:
    """Both runs and the verdict; `check_run_options` refuses the forwarded `run` options
    first, as the command line that hands it over checks them."""
    from workbench.compare import compare_runs
    from workbench.compare.report import write_comparison
    from workbench.rehearse.report import write_rehearsal

    pinned = resolve("pinned", args.pinned)
    candidate = resolve("candidate", args.candidate)
    base, moving = pinned, candidate
    if args.reverse:
        base, moving = replace(candidate, role=CURRENT), replace(pinned, role=ROLLBACK)
    options = run_options(args)
    check_run_options(options)
    out = _out_folder(args.out)
    base_run, base_exit, base_tail = run_in(base, options, out)
    if not (base_run / "summary.json").exists():
        raise BadInput(
            f"the {base.role} environment's run did not finish (exit {base_exit}: {base_tail}); "
            f"nothing to rehearse against (log: {out / f'{base.role}.log'})."
        )
    moving_run, moving_exit, moving_tail = run_in(moving, options, out)
    comparison = None
    if (moving_run / "summary.json").exists():
        comparison = compare_runs([base_run, moving_run])
        write_comparison(comparison, out / "compare")
    verdict: PinVerdict = judge_pin(comparison, moving_exit, moving_tail)
    page = write_rehearsal(out, (base, moving), comparison, verdict)
    said = f"{verdict.decision}: {'; '.join(verdict.reasons)}"
    if args.reverse:
        said = f"rollback rehearsal (moving back to the pinned environment): {said}"
    print(console_line(said))
    print(console_line(f"report: {page}"))
    return EXIT_REGRESSION if verdict.decision == HOLD else EXIT_OK
