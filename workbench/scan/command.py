"""`workbench scan PATH...`: the command's options and exit code."""

from __future__ import annotations

import argparse

from workbench.errors import EXIT_BLOCKING_FINDINGS, EXIT_OK
from workbench.scan import scan_paths
from workbench.scan.report import format_finding
from workbench.scan.rules import FLAVOURS


def configure_parser(parser: argparse.ArgumentParser) -> None:
    """The arguments of `workbench scan`."""
    parser.add_argument("paths", nargs="+", metavar="PATH", help="files or folders to scan")
    parser.add_argument(
        "--flavour",
        action="append",
        choices=FLAVOURS,
        help="Neuron path you migrate to (repeatable; default both: native and xla)",
    )


def cmd_scan(args: argparse.Namespace) -> int:
    report = scan_paths(args.paths, args.flavour or FLAVOURS)
    for finding in report.findings:
        print(format_finding(finding))
    for problem in report.unreadable:
        print(f"not scanned: {problem}")
    print(report.sentence())
    return EXIT_BLOCKING_FINDINGS if report.blocking else EXIT_OK
