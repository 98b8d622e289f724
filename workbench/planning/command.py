"""`workbench plan`: will the model fit, and how to lay it out, answered without a kernel."""

from __future__ import annotations

import argparse
import json
from typing import Any

from workbench.errors import EXIT_OK, BadInput, did_you_mean
from workbench.params import add_param_option
from workbench.planning.instances import DEFAULT_INSTANCE, HERE, INSTANCES
from workbench.planning.layouts import PRECISIONS
from workbench.planning.lines import plan_lines
from workbench.planning.planner import MODES, make_plan, plan_data
from workbench.workloads import DEFAULT_WORKLOAD

# Where the workload's -p parameters are declared (every notebook that loads the workload
# declares the same ones; 01 is the first).
DECLARED_IN = "01_baseline"


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
    add_param_option(
        parser, "a workload parameter, as `run` takes it (hf_config, num_classes, ...)"
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


def planned_workload(spec: str, pairs: list[str]) -> tuple[Any, str]:
    """What to plan from `--workload` and `-p`: the spec and its hf_config for an hf: config, or
    the workload built with the parameters given, as `run` builds it."""
    from workbench.params import (
        NOTEBOOKS_DIR,
        WORKLOAD_PARAMETERS,
        coerce,
        notebook_parameters,
        parse_assignments,
    )
    from workbench.workload import HF_PREFIX, WorkloadSpec

    given = parse_assignments(pairs)
    for name in given:
        if name not in WORKLOAD_PARAMETERS:
            raise BadInput(
                f"Parameter {name!r}{did_you_mean(name, WORKLOAD_PARAMETERS)} is not one plan "
                f"takes: it takes the workload's, {', '.join(WORKLOAD_PARAMETERS)}."
            )
    declared = notebook_parameters(NOTEBOOKS_DIR / f"{DECLARED_IN}.ipynb")
    values = {name: coerce(declared[name], value) for name, value in given.items()}
    if spec.startswith(HF_PREFIX):
        sized = sorted(set(values) - {"hf_config"})
        if sized:
            raise BadInput(
                f"For an hf: config, plan takes -p hf_config (and --seq-len for the sequence "
                f"length); {sized[0]} does not change the model it sizes."
            )
        return spec, values.get("hf_config", "")
    if values.get("hf_config"):
        raise BadInput(f"-p hf_config applies to hf: workloads, not {spec!r}.")
    if not values:
        return spec, ""
    return WorkloadSpec.from_params({**values, "workload": spec}).load(), ""


def cmd_plan(args: argparse.Namespace) -> int:
    workload, hf_config = planned_workload(args.workload, args.param or [])
    plan = make_plan(
        workload,
        args.instance,
        instances=args.instances,
        global_batch=args.global_batch,
        seq_len=args.seq_len,
        precision=args.precision or "",
        micro_batch=args.micro_batch,
        mode=args.mode or "",
        hf_config=hf_config,
    )
    if args.json:
        print(json.dumps(plan_data(plan), indent=2, allow_nan=False))
        return EXIT_OK
    for line in plan_lines(plan, every=args.all):
        print(line)
    return EXIT_OK
