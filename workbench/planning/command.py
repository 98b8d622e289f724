"""`workbench plan`: will the model fit, and how to lay it out, answered without a kernel."""

from __future__ import annotations

import argparse
import json

from workbench.errors import EXIT_OK
from workbench.planning.instances import DEFAULT_INSTANCE, HERE, INSTANCES
from workbench.planning.layouts import PRECISIONS
from workbench.planning.lines import plan_lines
from workbench.planning.planner import MODES, make_plan, plan_data
from workbench.workloads import DEFAULT_WORKLOAD


def configure_parser(parser: argparse.ArgumentParser) -> None:
    """The arguments of `workbench plan`."""
    parser.add_argument(
        "--workload",
        default=DEFAULT_WORKLOAD,
        metavar="W",
        help="built-in name, package.module:factory, or hf:FOLDER (a folder with a config.json; "
        f"no weights needed) / hf:MODEL_TYPE (default {DEFAULT_WORKLOAD})",
    )
    parser.add_argument(
        "--instance",
        default=DEFAULT_INSTANCE,
        metavar="TYPE",
        help=f"{', '.join(INSTANCES)}, or {HERE} for this machine (default {DEFAULT_INSTANCE})",
    )
    parser.add_argument("--instances", type=int, default=1, help="instances of that type (1)")
    parser.add_argument("--global-batch", type=int, help="samples per optimizer step to plan for")
    parser.add_argument("--seq-len", type=int, help="tokens per sample (hf: configs; 4096)")
    parser.add_argument("--micro-batch", type=int, default=0, help="per-rank micro-batch to use")
    parser.add_argument(
        "--precision",
        choices=list(PRECISIONS),
        help="parameter/state/activation precision (hf: bf16-mixed, served bf16; workloads: fp32)",
    )
    parser.add_argument("--mode", choices=MODES, help="training, or inference (inf2's default)")
    parser.add_argument("--all", action="store_true", help="list every layout, not the best few")
    parser.add_argument(
        "--json",
        action="store_true",
        help="write the plan as one JSON record on stdout (the shape 04_retuning.json keeps "
        'under "plan"), nothing else',
    )


def cmd_plan(args: argparse.Namespace) -> int:
    plan = make_plan(
        args.workload,
        args.instance,
        instances=args.instances,
        global_batch=args.global_batch,
        seq_len=args.seq_len,
        precision=args.precision or "",
        micro_batch=args.micro_batch,
        mode=args.mode or "",
    )
    if args.json:
        print(json.dumps(plan_data(plan), indent=2, allow_nan=False))
        return EXIT_OK
    for line in plan_lines(plan, every=args.all):
        print(line)
    return EXIT_OK
