"""`workbench prewarm`: fill the run's compile cache before a scheduled run.

On a Trn1 (target xla), neuron_parallel_compile runs the workload's steps once in
graph-extraction mode and compiles every graph it saw, in parallel, into the same
version-stamped cache folder `workbench run` uses, so the scheduled run finds them compiled. The
steps are the ones notebook 01 runs (training step and inference call, eager and compiled);
where the target has no such tool, one sentence says so and nothing is run.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from typing import Any

from workbench.compile_cache.cache import stamped_folder
from workbench.errors import EXIT_NOTEBOOK_FAILED, EXIT_OK, BadInput
from workbench.targets import resolve_target_name, target_class
from workbench.targets.caching import PrewarmCommand

DEFAULT_STEPS = 2  # graphs repeat from the second step on; two steps see every one of them


def step_command(workload: str, target: str, steps: int, params: dict[str, str]) -> list[str]:
    """The command that runs the workload's graphs in a process of its own."""
    argv = [sys.executable, "-m", "workbench.compile_cache.prewarm", "--workload", workload]
    argv += ["--target", target, "--steps", str(steps)]
    for name, value in params.items():
        argv += ["-p", f"{name}={value}"]
    return argv


def checked_params(pairs: list[str]) -> dict[str, Any]:
    """`-p` pairs checked against notebook 01's parameters cell, as `workbench run` checks them."""
    from workbench.params import NOTEBOOKS_DIR, notebook_parameters, parse_assignments, validate

    declared = {"01_baseline": notebook_parameters(NOTEBOOKS_DIR / "01_baseline.ipynb")}
    return validate(parse_assignments(pairs), declared)["01_baseline"]


def prewarm(workload: str, target: str, compile_cache: str, steps: int, pairs: list[str]) -> int:
    """Run the target's pre-compile tool over the workload's steps; the exit code."""
    if steps < 1:
        raise BadInput(f"--steps {steps}: run at least 1 step so the graphs are seen.")
    checked_params(pairs)
    params = dict(pair.partition("=")[::2] for pair in pairs)
    name, _ = resolve_target_name(target)
    cls = target_class(name)
    folder = stamped_folder(compile_cache, cls.compiler_versions())
    plan = cls.prewarm_command(step_command(workload, name, steps, params), str(folder))
    if not isinstance(plan, PrewarmCommand):
        print(f"workbench prewarm: {plan}.", file=sys.stderr)
        return EXIT_NOTEBOOK_FAILED
    print(f"workbench prewarm: {plan.description}", file=sys.stderr, flush=True)
    done = subprocess.run(plan.argv, env={**os.environ, **plan.env}, check=False)
    if done.returncode != 0:
        print(
            f"workbench prewarm: {plan.argv[0]} exited with {done.returncode}; the graphs it "
            "did not compile will compile in the scheduled run (see its output above).",
            file=sys.stderr,
        )
        return EXIT_NOTEBOOK_FAILED
    return EXIT_OK


def run_steps(workload_spec: str, target_name: str, steps: int, params: dict[str, Any]) -> None:
    """Every step kind and mode notebook 01 measures, `steps` times each, synchronized: under
    neuron_parallel_compile this records the graphs a run will need."""
    from workbench.baseline.measure import prepare_step
    from workbench.baseline.records import KINDS, MODES
    from workbench.targets import get_target
    from workbench.workload import WorkloadSpec

    workload = WorkloadSpec.from_params({**params, "workload": workload_spec}).load()
    target = get_target(target_name)
    for kind in KINDS:
        for mode in MODES:
            prepared = prepare_step(workload, target, kind, mode)
            for _ in range(steps):
                prepared.step()
                target.synchronize()
            print(f"prewarm step: {kind}/{mode} ran {steps} step(s)", flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m workbench.compile_cache.prewarm")
    parser.add_argument("--workload", required=True)
    parser.add_argument("--target", required=True)
    parser.add_argument("--steps", type=int, default=DEFAULT_STEPS)
    parser.add_argument("-p", "--param", action="append", default=[])
    args = parser.parse_args(argv)
    run_steps(args.workload, args.target, args.steps, checked_params(args.param))
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
