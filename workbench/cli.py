"""`workbench` command line: run the workbook, pin and diff environments, list what exists.

Exit codes: the table EXIT_CODES in workbench.errors, which `workbench --help` lists.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import os
import re
import shlex
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

from workbench import __version__
from workbench.errors import (
    EXIT_BAD_INPUT,
    EXIT_BLOCKING_FINDINGS,
    EXIT_DRIFT,
    EXIT_INCONCLUSIVE,
    EXIT_OK,
    EXIT_REGRESSION,
    BadInput,
    WorkbenchError,
    did_you_mean,
    exit_codes_line,
)
from workbench.params import add_param_option
from workbench.redact import REDACTED, console_line, is_secret_key
from workbench.safe_load import CONFIG_MAX_BYTES, load_yaml, read_bounded
from workbench.workloads import BUILTIN_WORKLOADS, DEFAULT_WORKLOAD

# Each config key and the type its value must have (`only` may also be a list of numbers).
CONFIG_TYPES: dict[str, tuple[type, ...]] = {
    "workload": (str,),
    "target": (str,),
    "only": (str, int, list),
    "out": (str,),
    "parameters": (dict,),
    "show_code": (bool,),
    "cell_timeout": (int,),
    "compile_cache": (str,),
    "script_args": (str, list),  # a script: workload's arguments, as a line or a list of words
}
CONFIG_KEYS = tuple(CONFIG_TYPES)
_TYPE_WORDS = {
    str: "a string",
    int: "a whole number",
    list: "a list",
    dict: "a mapping",
    bool: "true or false",
}


def _load_config(path: Path) -> dict[str, Any]:
    import yaml

    try:
        config = load_yaml(read_bounded(path, "Config", CONFIG_MAX_BYTES), f"Config {path}")
    except yaml.YAMLError as exc:
        raise BadInput(f"Config {path} is not valid YAML: {' '.join(str(exc).split())}") from None
    if config is None:
        return {}
    if not isinstance(config, dict):
        raise BadInput(f"Config {path} must be a mapping of {', '.join(CONFIG_KEYS)}.")
    unknown = sorted(str(k) for k in set(config) - set(CONFIG_KEYS))
    if unknown:
        raise BadInput(
            f"Config {path}: unknown key {unknown[0]!r}; allowed keys: {', '.join(CONFIG_KEYS)}."
        )
    for key, value in config.items():
        allowed = CONFIG_TYPES[key]
        # YAML reads `show_code: yes` as true but `show_code: "no"` as a string; bool is an int.
        wrong_bool = isinstance(value, bool) and bool not in allowed
        if value is None or wrong_bool or not isinstance(value, allowed):
            words = " or ".join(_TYPE_WORDS[t] for t in allowed)
            raise BadInput(f"Config {path}: {key!r} must be {words}, not {value!r:.80}.")
    if any(not isinstance(name, str) for name in config.get("parameters", {})):
        raise BadInput(f"Config {path}: 'parameters' must map names to values.")
    script_args = config.get("script_args")
    if isinstance(script_args, list):
        if not all(isinstance(word, str) for word in script_args):
            raise BadInput(f"Config {path}: 'script_args' must be a string or a list of strings.")
        config["script_args"] = shlex.join(script_args)
    return config


def _only(value: Any) -> list[str]:
    """Notebook numbers from --only or the config; given but naming nothing is a BadInput."""
    if value is None:
        return []
    items = value if isinstance(value, list) else str(value).split(",")
    numbers = [str(item).strip() for item in items if str(item).strip()]
    if not numbers:
        raise BadInput(f"--only {value!r} names no notebook; give numbers such as 00,01.")
    return numbers


def _workload_spec(workload: str, script_args: str, folder: Path | None = None) -> str:
    """The spec the notebooks load: hf: and script: paths made absolute (notebooks run in
    another folder; a script named by a config file is found from that file's `folder`), a
    script's arguments joined to its path."""
    from workbench.workload import SCRIPT_PREFIX
    from workbench.workloads.hf_folder import absolute_spec

    if workload.startswith(SCRIPT_PREFIX):
        from workbench.workloads.script import parse_script_spec, script_spec

        path, given = parse_script_spec(workload)
        return script_spec(str(path), f"{shlex.join(given)} {script_args}".strip(), folder)
    if script_args:
        raise BadInput(f"--script-args applies to a script: workload, not {workload!r}.")
    return absolute_spec(workload)


def _config_folder(config: str | None) -> Path | None:
    """The folder of the config file, where a path it gives is read from."""
    return Path(config).resolve().parent if config else None


def _request(args: argparse.Namespace) -> Any:
    """The RunRequest that `run` and `open` share: options win over the config file."""
    from workbench.params import parse_assignments
    from workbench.runner import DEFAULT_CELL_TIMEOUT_S, RunRequest

    config = _load_config(Path(args.config)) if args.config else {}
    parameters = {**config.get("parameters", {}), **parse_assignments(args.param or [])}
    out = args.out if args.out is not None else config.get("out")
    if out is not None and not out.strip():
        raise BadInput("--out is empty; name a new folder for the run.")
    given_timeout = getattr(args, "cell_timeout", None)
    cell_timeout = given_timeout if given_timeout is not None else config.get("cell_timeout")
    return RunRequest(
        # Notebooks run in another working folder: a relative hf:./folder is made absolute here.
        workload=_workload_spec(
            args.workload or config.get("workload") or DEFAULT_WORKLOAD,
            getattr(args, "script_args", None) or config.get("script_args") or "",
            None if args.workload else _config_folder(args.config),
        ),
        target=args.target or config.get("target") or "auto",
        only=_only(args.only if args.only is not None else config.get("only")),
        out=Path(out) if out is not None else None,
        parameters=parameters,
        show_code=getattr(args, "show_code", False) or config.get("show_code", False),
        cell_timeout=DEFAULT_CELL_TIMEOUT_S if cell_timeout is None else cell_timeout,
        compile_cache=args.compile_cache or config.get("compile_cache") or "",
        export=list(getattr(args, "export", None) or []),
    )


# The runner's last line names the run's index page; a script capturing stdout gets that path
# alone, and everything else the runner says goes to stderr.
_REPORT_LINE = re.compile(r"report: (?P<path>.+) \(exit \d+\)")


def _run_progress(line: str) -> None:
    print(line, file=sys.stderr, flush=True)
    report = _REPORT_LINE.fullmatch(line)
    if report:
        print(report["path"], flush=True)


def cmd_run(args: argparse.Namespace) -> int:
    if args.matrix or args.index is not None:
        return _run_matrix_item(args)
    from workbench.runner import run

    return run(_request(args), progress=_run_progress)


def cmd_open(args: argparse.Namespace) -> int:
    from workbench.workcopy import open_run

    opened = open_run(_request(args))
    print(f"prepared {len(opened.notebooks)} notebook(s) in {opened.folder}")
    print("step through them in JupyterLab (as root, add --allow-root):")
    print(f"  {opened.command}")
    print("results land beside the copies; then write the reports with:")
    print(f"  workbench export {opened.folder}")
    return EXIT_OK


def cmd_export(args: argparse.Namespace) -> int:
    from workbench.workcopy import export_run

    exit_code, index = export_run(Path(args.folder), show_code=args.show_code)
    _run_progress(f"report: {index} (exit {exit_code})")  # as `run` ends: the path on stdout
    return exit_code


def _run_matrix_item(args: argparse.Namespace) -> int:
    if not args.matrix or args.index is None:
        raise BadInput("--matrix and --index go together: the matrix file and the item to run.")
    clashing = [
        flag
        for flag, value in (
            ("--workload", args.workload),
            ("--only", args.only),
            ("--config", args.config),
            ("-p", args.param),
        )
        if value
    ]
    if clashing:
        raise BadInput(f"{clashing[0]} cannot be combined with --matrix: the item sets it.")
    from workbench.fleet import command as fleet_command

    return fleet_command.run_matrix_item(
        args.matrix, args.index, args.target, args.out, args.show_code, args.cell_timeout
    )


def cmd_prewarm(args: argparse.Namespace) -> int:
    from workbench.compile_cache.prewarm import prewarm

    return prewarm(args.workload, args.target, args.compile_cache, args.steps, args.param or [])


def _interpreter(given: str | None) -> Path | None:
    """A virtualenv folder or an interpreter, as rehearse names them; None: this one."""
    if given is None:
        return None
    from workbench.rehearse.environments import interpreter

    return interpreter("python", given)


def _stderr_line(line: str) -> None:
    print(console_line(line), file=sys.stderr, flush=True)


def cmd_env_pin(args: argparse.Namespace) -> int:
    from workbench.environment.manifest import pin

    manifest, lock = pin(
        Path(args.out),
        force=args.force,
        python=_interpreter(args.python),
        hashes=not args.no_hashes,
        log=_stderr_line,
    )
    print(f"pinned: {manifest} and {lock}")
    return EXIT_OK


def cmd_env_restore(args: argparse.Namespace) -> int:
    from workbench.environment.restore import restore

    python = _interpreter(args.python)
    assert python is not None  # required by the parser
    result = restore(Path(args.manifest), python, dry_run=args.dry_run, log=_stderr_line)
    plan = result.plan
    for line in plan.lines():
        print(console_line(line))
    print(console_line(f"checked: {result.driver}"))
    if args.dry_run:
        print(
            f"dry run: {len(plan.install)} to install (each file fetched and its hash "
            f"verified), {len(plan.remove)} to remove, {plan.unchanged} already pinned; "
            "nothing changed"
        )
        return EXIT_OK
    if result.remaining:
        for line in result.remaining:
            print(console_line(f"still differs: {line}"), file=sys.stderr)
        print(f"restore incomplete: {len(result.remaining)} difference(s) remain")
        return EXIT_DRIFT
    print(
        f"restored: {len(plan.install)} installed (hash verified), {len(plan.remove)} removed, "
        f"{plan.unchanged} already pinned; pinned again and diffed: the environment matches "
        f"{args.manifest}"
    )
    return EXIT_OK


def cmd_env_diff(args: argparse.Namespace) -> int:
    from workbench.environment.drift import diff_manifests, import_failures, worst_severity
    from workbench.environment.manifest import load_manifest

    old, new = load_manifest(Path(args.old)), load_manifest(Path(args.new))
    # A companion that fails to import in the new environment is critical, changed or not.
    drifts = import_failures(new) + diff_manifests(old, new)
    for drift in drifts:
        # A hand-edited or foreign manifest may hold secrets or control sequences.
        old_value, new_value = drift.old, drift.new
        if is_secret_key(drift.key.rsplit(".", 1)[-1]):
            old_value = None if drift.old is None else REDACTED
            new_value = None if drift.new is None else REDACTED
        line = f"{drift.severity:8} {drift.key}: {old_value} -> {new_value}  ({drift.reason})"
        print(console_line(line))
    worst = worst_severity(drifts)
    print(f"{len(drifts)} change(s); worst: {worst or 'none'}")
    return EXIT_DRIFT if worst == "critical" else EXIT_OK


def cmd_tables_import_native(args: argparse.Namespace) -> int:
    from workbench.coverage.native_table import import_native, summary_line

    out = Path(args.out) if args.out is not None else None
    print(summary_line(import_native(Path(args.file), release=args.release, out=out)))
    return EXIT_OK


def cmd_tables_save_measured(args: argparse.Namespace) -> int:
    from workbench.coverage.measured_table import save_measured
    from workbench.coverage.native_table import summary_line

    out = Path(args.out) if args.out is not None else None
    print(summary_line(save_measured(Path(args.result), release=args.release, out=out)))
    return EXIT_OK


def cmd_list(args: argparse.Namespace) -> int:
    from workbench.params import RUNNER_PARAMETERS, notebook_parameters
    from workbench.runner import available_notebooks
    from workbench.targets import TARGET_MODULES, target_class

    hf_state = (
        "transformers installed"
        if importlib.util.find_spec("transformers")
        else "needs pip install 'workbench[hf]'"
    )
    print(
        "workloads: " + ", ".join(BUILTIN_WORKLOADS) + ", package.module:factory, "
        f"hf:FOLDER / hf:MODEL_TYPE (a Hugging Face checkpoint or model type; {hf_state}), or "
        "script:train.py (a training script as it is, with --script-args)"
    )
    print("targets:")
    for name in TARGET_MODULES:
        availability = target_class(name).availability()
        state = "available" if availability.available else "not available"
        print(f"  {name:7} {state}: {availability.reason}")
    print("notebooks and their -p parameters:")
    for number, path in available_notebooks().items():
        print(f"  {number} {path.stem}")
        for p in notebook_parameters(path).values():
            if p.name not in RUNNER_PARAMETERS:
                print(f"       {p.name} ({p.type_name}, default {p.default!r}): {p.help}")
    return EXIT_OK


class _Parser(argparse.ArgumentParser):
    """Usage mistakes are bad input like any other: one sentence on stderr and exit 2."""

    def error(self, message: str) -> NoReturn:
        choice = re.search(r"invalid choice: '([^']*)' \(choose from (.*)\)", message)
        if choice:
            names = re.findall(r"'([^']*)'", choice.group(2))
            message = f"{message}{did_you_mean(choice.group(1), names)}"
        sys.stderr.write(f"workbench: error: {message}; see `{self.prog} --help`.\n")
        sys.exit(EXIT_BAD_INPUT)

    def unrecognized(self, extras: list[str]) -> NoReturn:
        """Arguments this (sub)command does not take, with the closest option it does."""
        options = [name for action in self._actions for name in action.option_strings]
        first = extras[0].partition("=")[0]
        hint = did_you_mean(first, options) if first.startswith("-") else ""
        self.error(f"unrecognized arguments: {' '.join(extras)}{hint}")


_RUN_EXAMPLES = """\
examples:
  workbench run                                     every notebook on seed-mlp, target auto
  workbench run --workload tiny-cnn --only 00,01    two notebooks on another built-in
  workbench run --target xla -p batch_size=32 -p steady_steps=50
  workbench run --workload my_models.classifier:make_workload --out reports/classifier

`workbench list` shows the workloads, the targets (and why one is unavailable) and every
-p parameter with its type, default and help.
"""

_OPEN_EXAMPLES = """\
examples:
  workbench open --workload tiny-transformer --target xla -p batch_size=16
  workbench export reports/<the folder open printed>

The folder holds parameterized copies of the notebooks; the templates in notebooks/ stay
untouched. On an instance where you are root, add --allow-root to the printed jupyter command.
"""


def _add_selection(parser: argparse.ArgumentParser) -> None:
    """What to run: the options `run` and `open` share."""
    group = parser.add_argument_group("what to run")
    group.add_argument(
        "--workload",
        metavar="W",
        help=f"built-in name ({', '.join(BUILTIN_WORKLOADS)}), package.module:factory, or "
        f"hf:FOLDER / hf:MODEL_TYPE, or script:train.py (default {DEFAULT_WORKLOAD})",
    )
    group.add_argument(
        "--script-args",
        metavar="ARGS",
        help='the command-line arguments a script: workload runs with, e.g. "--epochs 1"',
    )
    group.add_argument(
        "--target", metavar="T", help="auto, cpu, cuda, xla or neuron (default auto)"
    )
    group.add_argument("--only", metavar="NN,NN", help="notebook numbers, e.g. 00,01 (default all)")
    add_param_option(group, "a notebook parameter (see `workbench list`)")
    group.add_argument("--config", metavar="FILE", help="YAML file with the same settings")
    group.add_argument(
        "--compile-cache",
        metavar="DIR",
        help="compile cache folder shared by runs (~/.cache/workbench/compile-cache; a "
        "subfolder per compiler version); off for none",
    )


def _run_arguments(parser: argparse.ArgumentParser) -> None:
    _add_selection(parser)
    output = parser.add_argument_group("where the results go")
    output.add_argument(
        "--out", metavar="DIR", help="a new run folder (default reports/<time>-<workload>-<target>)"
    )
    output.add_argument("--show-code", action="store_true", help="show code cells in the HTML")
    output.add_argument(
        "--export",
        action="extend",
        type=_export_destinations,
        metavar="DEST",
        help="when the run finishes, export it to mlflow, tensorboard, wandb or junit "
        "(MLflow: $MLFLOW_TRACKING_URI, else reports/mlflow.db; see `workbench export-metrics`)",
    )
    limits = parser.add_argument_group("limits")
    limits.add_argument(
        "--cell-timeout", type=int, metavar="S", help="seconds one cell may run, 1 or more (3600)"
    )
    matrix = parser.add_argument_group("one item of a matrix (Slurm arrays, Kubernetes jobs)")
    matrix.add_argument("--matrix", metavar="FILE", help="matrix file: run one of its items")
    matrix.add_argument(
        "--index",
        help="the matrix item to run: a number, or auto for $SLURM_ARRAY_TASK_ID, "
        "$JOB_COMPLETION_INDEX or $AWS_BATCH_JOB_ARRAY_INDEX (with --matrix, --out is ROOT, "
        "and --target T counts the index over T's items only: one array per target)",
    )


def _prewarm_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--workload", default=DEFAULT_WORKLOAD)
    parser.add_argument("--target", default="auto", help="auto, cpu, cuda, xla or neuron")
    parser.add_argument("--compile-cache", default="", metavar="DIR")
    parser.add_argument("--steps", type=int, default=2, help="steps per configuration (2)")
    add_param_option(parser, "a workload parameter")


def _open_arguments(parser: argparse.ArgumentParser) -> None:
    _add_selection(parser)
    output = parser.add_argument_group("where the copies go")
    output.add_argument(
        "--out", metavar="DIR", help="a new folder (default reports/<time>-<workload>-<target>)"
    )


def _export_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("folder", help="the folder `workbench open` prepared")
    parser.add_argument("--show-code", action="store_true", help="show code cells in the HTML")


def _matrix_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file")
    parser.add_argument("--count", action="store_true", help="print only the number of items")
    parser.add_argument(
        "--target",
        metavar="T",
        help="only the items on target T, numbered as `run --matrix FILE --target T --index` "
        "counts them (every item is still checked)",
    )


def _collect_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("root")
    parser.add_argument(
        "--export",
        action="extend",
        type=_export_destinations,
        metavar="DEST",
        help="also export each item's newest run to mlflow, tensorboard, wandb or junit "
        "(a run exported before is not added again)",
    )


def _export_destinations(value: str) -> list[str]:
    from workbench.export.command import destinations

    return destinations(value)


def _env_pin_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", default="workbench-env.json", help="manifest path")
    parser.add_argument(
        "--force", action="store_true", help="replace an existing manifest and lock at --out"
    )
    parser.add_argument(
        "--python",
        metavar="PY_OR_VENV",
        help="the environment to pin: a virtualenv folder or a python interpreter (default: "
        "the one running the workbook)",
    )
    parser.add_argument(
        "--no-hashes",
        action="store_true",
        help="a plain name==version lock, without fetching each file to hash it (faster; "
        "`env restore` then refuses it)",
    )


def _env_restore_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("manifest", help="the manifest `workbench env pin` wrote")
    parser.add_argument(
        "--python",
        metavar="PY_OR_VENV",
        required=True,
        help="the environment to restore: a virtualenv folder or a python interpreter",
    )
    parser.add_argument(
        "--dry-run",
        action="store_true",
        help="check and print the plan (every file fetched and verified), change nothing",
    )


def _env_diff_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("old")
    parser.add_argument("new")


_TABLES_OUT_HELP = (
    "folder to write into (default $WORKBENCH_OP_TABLES or ~/.cache/workbench/op-tables)"
)


def _import_native_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", help="the markdown file")
    parser.add_argument(
        "--release", help="the Neuron release it is for, where its title does not name one"
    )
    parser.add_argument("--out", metavar="DIR", help=_TABLES_OUT_HELP)


def _save_measured_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("result", help="<run>/02_op_coverage.json (or the run folder)")
    parser.add_argument(
        "--release",
        help="file it under this release (default: the torch-neuronx version it records)",
    )
    parser.add_argument("--out", metavar="DIR", help=_TABLES_OUT_HELP)


def _rehearse_arguments(parser: argparse.ArgumentParser) -> None:
    """The same options as `run` for what runs in both environments, then rehearse's own."""
    _add_selection(parser)
    Deferred("workbench.rehearse.command", "configure_parser")(parser)


def check_run_options(options: list[str]) -> None:
    """Refuse, before any folder or log is made, the options `workbench run` would refuse: as
    this workbench checks them (each environment of a rehearsal checks them again)."""
    from workbench.runner import check_request

    check_request(_request(build_parser("run").parse_args(["run", *options])))


def cmd_rehearse(args: argparse.Namespace) -> int:
    """`rehearse`, given the check of the `run` options it forwards to both environments."""
    return int(Deferred("workbench.rehearse.command", "cmd_rehearse")(args, check_run_options))


def _no_arguments(parser: argparse.ArgumentParser) -> None:
    """A subcommand that takes no arguments of its own."""


@dataclass(frozen=True)
class Deferred:
    """A function of a module that imports torch, imported only when called: `workbench --help`
    and `workbench run --help` answer without loading torch."""

    module: str
    name: str

    def __call__(self, *args: Any) -> Any:
        return getattr(importlib.import_module(self.module), self.name)(*args)


ArgumentAdder = Callable[[argparse.ArgumentParser], None]


@dataclass(frozen=True)
class Command:
    """One subcommand: its name and one-line help, what adds its arguments, what runs it; or,
    for a group such as `env`, the subcommands under it."""

    name: str
    help: str
    add_arguments: ArgumentAdder | Deferred = _no_arguments
    handler: Callable[[argparse.Namespace], int] | Deferred | None = None
    epilog: str | None = None
    examples: bool = False  # the epilog is laid out by hand (examples): keep its line breaks
    subcommands: tuple[Command, ...] = ()

    @property
    def dest(self) -> str:
        """Where argparse records which of this group's subcommands was named."""
        return f"{self.name}_command"


def _in_package(name: str, help: str, package: str, handler: str, **more: Any) -> Command:
    """A command whose arguments (configure_parser) and handler live in
    workbench.<package>.command, imported only when the command is parsed or run."""
    module = f"workbench.{package}.command"
    return Command(
        name, help, Deferred(module, "configure_parser"), Deferred(module, handler), **more
    )


def _judging(
    judged: int, passed: str, failed: str, undecided: tuple[int, str] | None = None
) -> str:
    """The exit codes of a command that judges: 0 (`passed`), bad input, `judged` (`failed`),
    and an `undecided` code with its words where the command has one."""
    codes = [EXIT_OK, EXIT_BAD_INPUT, judged]
    wording = {EXIT_OK: passed, judged: failed}
    if undecided is not None:
        codes.append(undecided[0])
        wording[undecided[0]] = undecided[1]
    return exit_codes_line(codes, wording)


COMMANDS: tuple[Command, ...] = (
    Command(
        "run",
        "execute the notebooks and write HTML reports",
        _run_arguments,
        cmd_run,
        epilog=_RUN_EXAMPLES,
        examples=True,
    ),
    Command(
        "prewarm",
        "fill the compile cache before a scheduled run (neuron_parallel_compile on Trn1)",
        _prewarm_arguments,
        cmd_prewarm,
    ),
    Command(
        "open",
        "prepare parameterized copies of the notebooks to step through in JupyterLab",
        _open_arguments,
        cmd_open,
        epilog=_OPEN_EXAMPLES,
        examples=True,
    ),
    Command(
        "export",
        "write the reports, index and summary of a folder `open` prepared",
        _export_arguments,
        cmd_export,
    ),
    Command(
        "matrix",
        "list a matrix file's items with their index, and check every one",
        _matrix_arguments,
        Deferred("workbench.fleet.command", "cmd_matrix"),
    ),
    Command(
        "collect",
        "one dashboard over a matrix ROOT: each item's latest verdict and its change",
        _collect_arguments,
        Deferred("workbench.fleet.command", "cmd_collect"),
        epilog=_judging(
            EXIT_REGRESSION,
            "no item regressed",
            "an item regressed",
            (EXIT_INCONCLUSIVE, "no item regressed, some timings inconclusive"),
        ),
    ),
    _in_package(
        "scan",
        "find CUDA-specific code in your sources, with the Neuron replacement",
        "scan",
        "cmd_scan",
        epilog=_judging(EXIT_BLOCKING_FINDINGS, "no blocking finding", "blocking findings"),
    ),
    _in_package(
        "compare",
        "judge the newest run against a baseline run or the history of runs",
        "compare",
        "cmd_compare",
        epilog=_judging(
            EXIT_REGRESSION,
            "no regression",
            "a regression (listed on stderr)",
            (EXIT_INCONCLUSIVE, "timings inconclusive (listed on stderr; see --inconclusive)"),
        ),
    ),
    _in_package(
        "export-metrics",
        "export runs to MLflow, TensorBoard, W&B (offline) or a JUnit report for CI",
        "export",
        "cmd_export_metrics",
    ),
    Command(
        "rehearse",
        "run the workbook in a pinned and a candidate environment and say whether to move the pin",
        _rehearse_arguments,
        cmd_rehearse,
        epilog=_judging(EXIT_REGRESSION, "move the pin, or not judged", "hold the pin"),
    ),
    _in_package(
        "plan",
        "will the model fit on a Trainium instance, and which TP/PP/DP layout to use",
        "planning",
        "cmd_plan",
    ),
    Command(
        "env",
        "pin the environment, diff two manifests, or restore a pinned one",
        subcommands=(
            Command(
                "pin",
                "write a manifest and a hash-pinned lock of this or another environment",
                _env_pin_arguments,
                cmd_env_pin,
            ),
            Command(
                "diff",
                "list changes between two manifests, by severity",
                _env_diff_arguments,
                cmd_env_diff,
            ),
            Command(
                "restore",
                "make an environment match a pinned manifest exactly (hash-verified), and prove it",
                _env_restore_arguments,
                cmd_env_restore,
                epilog=exit_codes_line(
                    (EXIT_OK, EXIT_BAD_INPUT, EXIT_DRIFT),
                    {
                        EXIT_OK: "restored and verified (or a dry run)",
                        EXIT_BAD_INPUT: "refused before any change",
                        EXIT_DRIFT: "differences remain after the restore",
                    },
                ),
            ),
        ),
    ),
    Command(
        "tables",
        "TorchNeuron op tables for notebook 02: import the official one, or save a run's",
        subcommands=(
            Command(
                "import-native",
                "read a downloaded torch_api_compatibility.md (torch-neuronx repository) into a "
                "table",
                _import_native_arguments,
                cmd_tables_import_native,
            ),
            Command(
                "save-measured",
                "turn a notebook 02 result measured with target=neuron into a table",
                _save_measured_arguments,
                cmd_tables_save_measured,
            ),
        ),
    ),
    Command("list", "workloads, targets and notebook parameters", handler=cmd_list),
)


def _add_commands(
    parent: argparse.ArgumentParser,
    commands: tuple[Command, ...],
    dest: str,
    named: str | None,
) -> None:
    """`commands` as subcommands of `parent`. A Deferred argument adder runs only for the
    command named on the command line (`named`; None: every one), so that only its module is
    imported."""
    sub = parent.add_subparsers(dest=dest, required=True)
    for command in commands:
        parser = sub.add_parser(
            command.name,
            help=command.help,
            epilog=command.epilog,
            formatter_class=(
                argparse.RawDescriptionHelpFormatter if command.examples else argparse.HelpFormatter
            ),
        )
        if command.subcommands:
            _add_commands(parser, command.subcommands, command.dest, None)
            continue
        if not isinstance(command.add_arguments, Deferred) or named in (None, command.name):
            command.add_arguments(parser)
        parser.set_defaults(func=command.handler)


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The whole command line; with `command`, only that subcommand's torch-importing
    module is loaded to configure it (None configures every one)."""
    parser = _Parser(
        prog="workbench",
        description="Trainium migration workbook: run the notebooks headless, step through "
        "them in JupyterLab, pin environments, compare runs.",
        epilog=exit_codes_line(),
    )
    parser.add_argument("--version", action="version", version=f"workbench {__version__}")
    _add_commands(parser, COMMANDS, "command", command)
    return parser


def _subparser(parser: argparse.ArgumentParser, args: argparse.Namespace) -> _Parser:
    """The (sub)command parser that `args` went through, for its own usage in errors."""
    chosen = parser
    groups = [c.dest for c in COMMANDS if c.subcommands]
    for dest in ("command", *groups):
        name = getattr(args, dest, None)
        actions = [a for a in chosen._actions if isinstance(a, argparse._SubParsersAction)]
        if name is None:
            continue  # another command's subcommand (env pin, tables import-native)
        if not actions:
            break
        chosen = actions[0].choices[name]
    assert isinstance(chosen, _Parser)
    return chosen


def skip_iri_format_parsers() -> None:
    """Keep jsonschema from importing rfc3987_syntax in this process.

    nbformat validates notebooks with jsonschema, whose format module imports rfc3987_syntax when
    it is installed (jupyter-events pulls it in); that import builds about 35 Earley parsers, 1.9
    to 2.2 s of every command's start here (python-jsonschema/jsonschema issue 1428), for the
    "iri" and "iri-reference" formats that no notebook schema uses. A module marked absent makes
    the import raise ImportError, which jsonschema expects: it then leaves those two format
    checkers out. Only the CLI's own process is affected, never a kernel.
    """
    sys.modules.setdefault("rfc3987_syntax", None)  # type: ignore[arg-type]


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    import workbench.execution.fast_exit  # noqa: F401 - a command that loaded torch ends without a pause

    skip_iri_format_parsers()
    named = next((word for word in argv if not word.startswith("-")), "")
    parser = build_parser(named)
    args, extras = parser.parse_known_args(argv)
    if extras:
        _subparser(parser, args).unrecognized(extras)
    try:
        return int(args.func(args))
    except WorkbenchError as exc:
        message = console_line(" ".join(str(exc).split()))
        print(f"workbench: error: {message}", file=sys.stderr)
        return exc.exit_code


def entry() -> None:
    """The console script: `main`, then an exit that does not wait for threads a user's script
    left running (a `script:` workload's non-daemon thread would keep the process alive after
    its report, and a scheduler's step would never end)."""
    code = main()
    stray = [t for t in threading.enumerate() if t is not threading.main_thread() and not t.daemon]
    if stray:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    sys.exit(code)


if __name__ == "__main__":
    entry()
