"""`workbench` command line: run the workbook, pin and diff environments, list what exists.

Exit codes: 0 success; 1 a notebook failed (its report is still written); 2 bad input, rejected
before anything ran; 3 critical environment drift (`env diff`); 4 blocking findings (`scan`);
5 a regression (`compare`); 130 interrupted.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any, NoReturn

import yaml

from workbench.compare import command as compare_command
from workbench.errors import EXIT_BAD_INPUT, EXIT_DRIFT, EXIT_OK, BadInput, WorkbenchError
from workbench.fleet import command as fleet_command
from workbench.redact import scrub_text
from workbench.scan import command as scan_command
from workbench.terminal import strip_control
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
    try:
        config = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
        raise BadInput(f"Config {path} cannot be read: {reason}.") from None
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


def cmd_run(args: argparse.Namespace) -> int:
    if args.matrix or args.index is not None:
        return _run_matrix_item(args)
    from workbench.params import parse_assignments
    from workbench.runner import DEFAULT_CELL_TIMEOUT_S, RunRequest, run

    config = _load_config(Path(args.config)) if args.config else {}
    parameters = {**config.get("parameters", {}), **parse_assignments(args.param or [])}
    out = args.out if args.out is not None else config.get("out")
    if out is not None and not out.strip():
        raise BadInput("--out is empty; name a new folder for the run.")
    cell_timeout = (
        args.cell_timeout if args.cell_timeout is not None else config.get("cell_timeout")
    )
    request = RunRequest(
        workload=args.workload or config.get("workload") or DEFAULT_WORKLOAD,
        target=args.target or config.get("target") or "auto",
        only=_only(args.only if args.only is not None else config.get("only")),
        out=Path(out) if out is not None else None,
        parameters=parameters,
        show_code=args.show_code or config.get("show_code", False),
        cell_timeout=DEFAULT_CELL_TIMEOUT_S if cell_timeout is None else cell_timeout,
        compile_cache=args.compile_cache or config.get("compile_cache") or "",
    )
    return run(request, progress=lambda line: print(line, file=sys.stderr, flush=True))


def _run_matrix_item(args: argparse.Namespace) -> int:
    if not args.matrix or args.index is None:
        raise BadInput("--matrix and --index go together: the matrix file and the item to run.")
    clashing = [
        flag
        for flag, value in (
            ("--workload", args.workload),
            ("--target", args.target),
            ("--only", args.only),
            ("--config", args.config),
            ("-p", args.param),
        )
        if value
    ]
    if clashing:
        raise BadInput(f"{clashing[0]} cannot be combined with --matrix: the item sets it.")
    return fleet_command.run_matrix_item(
        args.matrix, args.index, args.out, args.show_code, args.cell_timeout
    )


def cmd_prewarm(args: argparse.Namespace) -> int:
    from workbench.prewarm import prewarm

    return prewarm(args.workload, args.target, args.compile_cache, args.steps, args.param)


def cmd_env_pin(args: argparse.Namespace) -> int:
    from workbench.environment.manifest import pin

    manifest, lock = pin(Path(args.out), force=args.force)
    print(f"pinned: {manifest} and {lock}")
    return EXIT_OK


def cmd_env_diff(args: argparse.Namespace) -> int:
    from workbench.environment.drift import diff_manifests, import_failures, worst_severity
    from workbench.environment.manifest import load_manifest

    old, new = load_manifest(Path(args.old)), load_manifest(Path(args.new))
    # A companion that fails to import in the new environment is critical, changed or not.
    drifts = import_failures(new) + diff_manifests(old, new)
    for drift in drifts:
        # A hand-edited or foreign manifest may hold secrets or control sequences.
        line = f"{drift.severity:8} {drift.key}: {drift.old} -> {drift.new}  ({drift.reason})"
        print(scrub_text(strip_control(line)))
    worst = worst_severity(drifts)
    print(f"{len(drifts)} change(s); worst: {worst or 'none'}")
    return EXIT_DRIFT if worst == "critical" else EXIT_OK


def cmd_list(args: argparse.Namespace) -> int:
    from workbench.params import notebook_parameters
    from workbench.runner import RUNNER_PARAMETERS, available_notebooks
    from workbench.targets import TARGET_MODULES, target_class

    print("workloads: " + ", ".join(BUILTIN_WORKLOADS) + ", or package.module:factory")
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
        sys.stderr.write(f"workbench: error: {message}; see `{self.prog} --help`.\n")
        sys.exit(EXIT_BAD_INPUT)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="workbench",
        description="Trainium migration workbook: run the notebooks headless, pin environments.",
        epilog="exit codes: 0 ok, 1 a notebook failed, 2 bad input, 3 critical drift, "
        "4 blocking scan findings, 5 regression (compare), 130 interrupted",
    )
    sub = parser.add_subparsers(dest="command", required=True)

    run_p = sub.add_parser("run", help="execute the notebooks and write HTML reports")
    run_p.add_argument(
        "--workload", help=f"built-in name or package.module:factory ({DEFAULT_WORKLOAD})"
    )
    run_p.add_argument("--target", help="auto, cpu, cuda, xla or neuron (auto)")
    run_p.add_argument("--only", help="comma-separated notebook numbers, e.g. 00,01")
    run_p.add_argument("--out", help="run folder (default reports/<time>-<workload>-<target>)")
    run_p.add_argument(
        "-p", "--param", action="append", metavar="KEY=VALUE", help="notebook parameter"
    )
    run_p.add_argument("--config", help="YAML file with the same settings and 'parameters:'")
    run_p.add_argument("--show-code", action="store_true", help="show code cells in the HTML")
    run_p.add_argument(
        "--cell-timeout", type=int, help="seconds one cell may run, 1 or more (3600)"
    )
    run_p.add_argument(
        "--compile-cache",
        metavar="DIR",
        help="compile cache folder shared by runs (~/.cache/workbench/compile-cache; a "
        "subfolder per compiler version); off for none",
    )
    run_p.add_argument("--matrix", help="matrix file: run one of its items (with --index)")
    run_p.add_argument(
        "--index",
        help="the matrix item to run: a number, or auto for $SLURM_ARRAY_TASK_ID, "
        "$JOB_COMPLETION_INDEX or $AWS_BATCH_JOB_ARRAY_INDEX (with --matrix, --out is ROOT)",
    )
    run_p.set_defaults(func=cmd_run)

    prewarm_p = sub.add_parser(
        "prewarm",
        help="fill the compile cache before a scheduled run (neuron_parallel_compile on Trn1)",
    )
    prewarm_p.add_argument("--workload", default=DEFAULT_WORKLOAD)
    prewarm_p.add_argument("--target", default="auto", help="auto, cpu, cuda, xla or neuron")
    prewarm_p.add_argument("--compile-cache", default="", metavar="DIR")
    prewarm_p.add_argument("--steps", type=int, default=2, help="steps per configuration (2)")
    prewarm_p.add_argument("-p", "--param", action="append", default=[], metavar="KEY=VALUE")
    prewarm_p.set_defaults(func=cmd_prewarm)

    matrix_p = sub.add_parser(
        "matrix", help="list a matrix file's items with their index, and check every one"
    )
    matrix_p.add_argument("file")
    matrix_p.add_argument("--count", action="store_true", help="print only the number of items")
    matrix_p.set_defaults(func=fleet_command.cmd_matrix)

    collect_p = sub.add_parser(
        "collect",
        help="one dashboard over a matrix ROOT: each item's latest verdict and its change",
        epilog="exit codes: 0 no item regressed, 2 bad input, 5 an item regressed",
    )
    collect_p.add_argument("root")
    collect_p.set_defaults(func=fleet_command.cmd_collect)

    env_p = sub.add_parser("env", help="pin the environment or diff two manifests")
    env_sub = env_p.add_subparsers(dest="env_command", required=True)
    pin_p = env_sub.add_parser("pin", help="write a manifest and a requirements-style lock")
    pin_p.add_argument("--out", default="workbench-env.json", help="manifest path")
    pin_p.add_argument(
        "--force", action="store_true", help="replace an existing manifest and lock at --out"
    )
    pin_p.set_defaults(func=cmd_env_pin)
    diff_p = env_sub.add_parser("diff", help="list changes between two manifests, by severity")
    diff_p.add_argument("old")
    diff_p.add_argument("new")
    diff_p.set_defaults(func=cmd_env_diff)

    scan_p = sub.add_parser(
        "scan",
        help="find CUDA-specific code in your sources, with the Neuron replacement",
        epilog="exit codes: 0 no blocking finding, 2 bad input, 4 blocking findings",
    )
    scan_command.configure_parser(scan_p)
    scan_p.set_defaults(func=scan_command.cmd_scan)

    compare_p = sub.add_parser(
        "compare",
        help="judge the newest run against a baseline run or the history of runs",
        epilog="exit codes: 0 no regression, 2 bad input, 5 a regression (listed on stderr)",
    )
    compare_command.configure_parser(compare_p)
    compare_p.set_defaults(func=compare_command.cmd_compare)

    list_p = sub.add_parser("list", help="workloads, targets and notebook parameters")
    list_p.set_defaults(func=cmd_list)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except WorkbenchError as exc:
        message = scrub_text(" ".join(strip_control(str(exc)).split()))
        print(f"workbench: error: {message}", file=sys.stderr)
        return exc.exit_code


if __name__ == "__main__":
    sys.exit(main())
