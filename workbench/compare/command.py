"""`workbench compare BASE NEW [more runs...] [--out DIR]`: options, console lines, exit code."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from workbench.compare.records import Gates
from workbench.errors import EXIT_INCONCLUSIVE, EXIT_OK, EXIT_REGRESSION, BadInput
from workbench.redact import console_line

GATES = Gates()  # the defaults every gate option shows and uses
INCONCLUSIVE_EXITS = ("report", "fail", "pass")


def configure_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "runs",
        nargs="+",
        metavar="RUN",
        help="run folders, baseline first (or a folder of runs such as reports/: the newest is "
        "judged against the history before it)",
    )
    parser.add_argument(
        "--out",
        help="folder for compare.html and compare.json "
        "(default: a compare/ folder inside the newest run)",
    )
    parser.add_argument(
        "--allow-different-workloads",
        action="store_true",
        help="compare runs of different workloads anyway",
    )
    parser.add_argument(
        "--step-gate",
        type=float,
        default=GATES.step_time,
        help="relative change in steady-state time or throughput that counts "
        f"({GATES.step_time:.2f})",
    )
    parser.add_argument(
        "--compile-gate",
        type=float,
        default=GATES.compile_time,
        help=f"relative change in first-call (compile) time that counts ({GATES.compile_time:.2f})",
    )
    parser.add_argument(
        "--memory-gate",
        type=float,
        default=GATES.memory,
        help=f"relative change in peak memory that counts ({GATES.memory:.2f})",
    )
    parser.add_argument(
        "--remeasure",
        action="store_true",
        help="also time the baseline's and the newest run's notebook-01 workloads again on this "
        "machine now, interleaved in pairs until the change is decided (a sequential test, asv "
        "continuous style): its verdict replaces the recorded one",
    )
    for side, which in (("baseline", "the baseline's"), ("candidate", "the newest run's")):
        parser.add_argument(
            f"--{side}-workload",
            metavar="SPEC",
            default=None,
            help=f"with --remeasure: {which} workload, named again (a run folder is data: only "
            "a built-in workload name saved in it is rebuilt without this)",
        )
    parser.add_argument(
        "--remeasure-seconds",
        type=float,
        default=None,
        metavar="S",
        help="with --remeasure: the most time spent on one configuration before its pairs, "
        "still undecided, read inconclusive (60)",
    )
    parser.add_argument(
        "--inconclusive",
        choices=INCONCLUSIVE_EXITS,
        default="report",
        help="what a timing no measured noise level can judge does to the exit code: report "
        "(exit 6, the default), fail (exit 5, as a regression) or pass (exit 0)",
    )
    parser.add_argument(
        "--p-value",
        type=float,
        default=GATES.p_value,
        help=f"significance the rank test must reach ({GATES.p_value:.2f})",
    )


def cmd_compare(args: argparse.Namespace) -> int:
    from workbench.compare import compare_runs
    from workbench.compare.records import CHANGED, IMPROVEMENT, INCONCLUSIVE, REGRESSION
    from workbench.compare.report import write_comparison
    from workbench.safe_load import not_a_link

    for name in ("step_gate", "compile_gate", "memory_gate"):
        if not 0 <= getattr(args, name) < 1:
            raise BadInput(
                f"--{name.replace('_', '-')} {getattr(args, name)}: use a fraction in [0, 1)."
            )
    if not 0 < args.p_value < 1:
        raise BadInput(f"--p-value {args.p_value}: use a probability between 0 and 1.")
    gates = Gates(args.step_gate, args.compile_gate, args.memory_gate, args.p_value)
    comparison = compare_runs(args.runs, gates, args.allow_different_workloads)
    if args.remeasure:
        from workbench.compare.remeasure import BUDGET_SECONDS, remeasure, replace_recorded

        budget = BUDGET_SECONDS if args.remeasure_seconds is None else args.remeasure_seconds
        if budget <= 0:
            raise BadInput(f"--remeasure-seconds {budget:g}: give a positive number of seconds.")
        remeasured = remeasure(
            comparison.runs[-2], comparison.runs[-1], gates,
            log=lambda line: print(console_line(line), file=sys.stderr),
            named=(args.baseline_workload, args.candidate_workload), budget_s=budget,
        )  # fmt: skip
        replace_recorded(comparison.changes, remeasured)
        comparison.changes += remeasured
    elif args.baseline_workload or args.candidate_workload or args.remeasure_seconds:
        raise BadInput(
            "--baseline-workload, --candidate-workload and --remeasure-seconds apply to "
            "--remeasure only."
        )
    out = (
        Path(args.out)
        if args.out
        else not_a_link(Path(comparison.runs[-1].path) / "compare", "The compare folder")
    )
    if out.exists() and not out.is_dir():
        raise BadInput(f"--out {out} is a file; name a folder for compare.html.")
    for skipped in comparison.skipped:
        print(console_line(f"skipped: {skipped}"), file=sys.stderr)
    for change in comparison.changes:
        if change.status in (IMPROVEMENT, CHANGED):
            print(console_line(change.line()))
        elif change.status in (REGRESSION, INCONCLUSIVE):
            print(console_line(change.line()), file=sys.stderr)
    try:
        page = write_comparison(comparison, out)
    except OSError as exc:
        raise BadInput(f"cannot write the comparison to {out}: {exc.strerror or exc}.") from None
    print(console_line(comparison.headline()))
    print(console_line(f"report: {page}"))
    return exit_code(bool(comparison.regressions), bool(comparison.inconclusive), args.inconclusive)


def exit_code(regressed: bool, inconclusive: bool, policy: str = "report") -> int:
    """5 on a regression; on timings nothing could judge, 6, or 5 or 0 as `policy` asks."""
    if regressed:
        return EXIT_REGRESSION
    if inconclusive:
        return {"report": EXIT_INCONCLUSIVE, "fail": EXIT_REGRESSION, "pass": EXIT_OK}[policy]
    return EXIT_OK
