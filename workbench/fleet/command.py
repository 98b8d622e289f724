"""`workbench matrix FILE`, `workbench run --matrix FILE --index I` and `workbench collect ROOT`."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from workbench.errors import EXIT_BAD_INPUT, EXIT_OK, BadInput
from workbench.redact import console_line

# Where array engines put the task's index, in the order they are looked up.
INDEX_VARIABLES = ("SLURM_ARRAY_TASK_ID", "JOB_COMPLETION_INDEX", "AWS_BATCH_JOB_ARRAY_INDEX")


def resolve_index(given: str) -> int:
    """An item index: a number, or `auto` for the array engine's own variable."""
    if given == "auto":
        for name in INDEX_VARIABLES:
            if os.environ.get(name, "").strip():
                given = os.environ[name].strip()
                break
        else:
            raise BadInput(
                f"--index auto found none of {', '.join(INDEX_VARIABLES)}; pass the item's "
                "number instead."
            )
    try:
        return int(given)
    except ValueError:
        raise BadInput(f"--index {given!r} is not a number (or auto).") from None


def cmd_matrix(args: argparse.Namespace) -> int:
    from workbench.fleet.matrix import check_matrix, load_matrix

    matrix = load_matrix(args.file)
    chosen = matrix.select(args.target)
    problems = check_matrix(matrix)  # every item, whichever target is listed
    if args.count and not problems:
        print(len(chosen))
        return EXIT_OK
    for position, item in enumerate(chosen):
        only = ",".join(item.only) or "all"
        params = " ".join(f"{k}={v}" for k, v in item.parameters.items())
        print(
            console_line(
                f"{position:3}  {item.name}: {item.workload} on {item.target}, notebooks {only}"
                + (f", {params}" if params else "")
                + (f" (item {item.index} of the file)" if args.target else "")
            )
        )
    for problem in problems:
        print(console_line(f"workbench: error: {problem}"), file=sys.stderr)
    return EXIT_BAD_INPUT if problems else EXIT_OK


def run_matrix_item(
    matrix_file: str,
    index: str,
    target: str | None,
    out: str | None,
    show_code: bool,
    cell_timeout: int | None,
) -> int:
    """Run one item into ROOT; with `target`, the index counts only that target's items (one
    array per target, all writing into the same ROOT)."""
    from workbench.fleet.matrix import check_item, load_matrix
    from workbench.fleet.root import claim
    from workbench.runner import run

    matrix = load_matrix(matrix_file)
    item = matrix.item(resolve_index(index), target)
    check_item(item, str(matrix.path))
    root = Path(out or "reports")
    claim(root, matrix)
    request = item.request(root, show_code, cell_timeout)
    print(
        f"workbench: matrix item {item.index} ({item.name}) -> {root / item.name}",
        file=sys.stderr,
        flush=True,
    )
    return run(request, progress=lambda line: print(line, file=sys.stderr, flush=True))


def cmd_collect(args: argparse.Namespace) -> int:
    from workbench.fleet.collect import collect
    from workbench.fleet.dashboard import dashboard_data, write_dashboard

    root = Path(args.root)
    rows = collect(root)
    page = write_dashboard(rows, root)
    for reason in (reason for row in rows for reason in row.damaged):
        print(console_line(f"skipped: {reason}"), file=sys.stderr)
    for row in rows:
        state = row.verdict if row.verdict else row.state
        print(console_line(f"{row.name}: {state}; {row.change or row.state}"))
    if args.export:
        from workbench.export.command import ExportOptions, export

        finished = [root / row.run for row in rows if row.run]
        for line in export(finished, ExportOptions(list(dict.fromkeys(args.export)))):
            print(console_line(line))
    data = dashboard_data(rows)
    print(console_line(f"fleet verdict: {data['verdict']}; {data['headline']}"))
    print(console_line(f"dashboard: {page}"))
    from workbench.compare.command import exit_code

    return exit_code(any(r.regressions for r in rows), any(r.inconclusive for r in rows))
