"""How far the memory-fit planner can be trusted, and what `workbench plan` costs.

    .venv/bin/python benchmarks/bench_planning.py [--plan-only]

1. Planner vs measurement: every layout the tests run (FSDP2, DTensor TP and ZeRO-1 on gloo at
   2 and 4 ranks, tiny Llama, fp32): each rank's predicted peak over its measured peak (aim:
   within 0.80-1.20), and the rank-by-rank numerics check against one process, including the
   planted wrong sharding, which must fail it.
2. `workbench plan` on the Llama-3-8B-shaped config for trn1.32xlarge, run as a user runs it
   (a fresh process): wall time, aim under 5 s, beside references timed in the same run
   (`python -c pass`, `workbench --help`, `import torch`, and torch with transformers' Llama:
   what any plan of an hf: config must import), so a loaded machine reads as a ratio.
"""

from __future__ import annotations

import resource
import subprocess
import sys
from pathlib import Path
from time import perf_counter

from workbench.planning.sharded import MEMORY_AIM, run_checks

LLAMA_8B = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "hf_configs" / "llama-3-8b"
WORKBENCH = str(Path(sys.executable).parent / "workbench")
REPEATS = 3


def _median_wall(command: list[str]) -> tuple[float, float]:
    """Median wall time and median CPU time (user + system, the process and its children) of
    `command` over REPEATS fresh processes. On a loaded machine the CPU time stays near what an
    idle machine's wall time would be, for a command that runs on one core."""
    walls, cpus = [], []
    for _ in range(REPEATS):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        started = perf_counter()
        subprocess.run(command, capture_output=True, check=True)
        walls.append(perf_counter() - started)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpus.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
    return sorted(walls)[REPEATS // 2], sorted(cpus)[REPEATS // 2]


def main() -> int:
    if "--plan-only" not in sys.argv[1:]:
        check_runs()
    time_plan()
    return 0


def check_runs() -> None:
    runs = run_checks((2, 4))
    print("1. planner per-rank peak vs measured peak (gloo, tiny Llama, fp32)")
    print(f"   method: {runs.method}")
    print(f"   numerics tolerance: {runs.tolerance}")
    print(f"   {'layout':<16}{'kind':<24}{'ratios per rank (predicted / measured)':<44}numerics")
    for check in runs.checks:
        ratios = " ".join(f"{r.ratio:.2f}" for r in check.ranks)
        verdict = (
            "pass"
            if check.numerics_pass
            else (f"FAIL (gradient {check.gradient_error:.1e}, update {check.update_error:.1e})")
        )
        print(f"   {check.layout:<16}{check.kind:<24}{ratios:<44}{verdict}")
    every = [r.ratio for c in runs.checks for r in c.ranks]
    print(
        f"   ratios {min(every):.2f}-{max(every):.2f} over {len(every)} ranks; aim within "
        f"{1 - MEMORY_AIM:.2f}-{1 + MEMORY_AIM:.2f}"
    )
    spread = [r.highest_peak / max(r.measured_peak, 1) for c in runs.checks for r in c.ranks]
    print(f"   a rank's highest step peak over its lowest: up to {max(spread):.2f}x")


def time_plan() -> None:
    print("2. workbench plan on the Llama-3-8B config, trn1.32xlarge, against references")
    print("   timed in this run, each the median of 3 fresh processes; the machine is shared, so")
    print("   the CPU time and the ratio to the imports every hf: plan pays are the figures to")
    print("   compare")
    plan = [
        WORKBENCH,
        "plan",
        "--workload",
        f"hf:{LLAMA_8B}",
        "--instance",
        "trn1.32xlarge",
        "--global-batch",
        "1024",
    ]
    timings = {
        "python -c pass": _median_wall([sys.executable, "-c", "pass"]),
        "workbench --help": _median_wall([WORKBENCH, "--help"]),
        "python -c 'import torch'": _median_wall([sys.executable, "-c", "import torch"]),
        "python -c 'import torch, transformers' + LlamaForCausalLM": _median_wall(
            [sys.executable, "-c", "import torch, transformers; transformers.LlamaForCausalLM"]
        ),
        "workbench plan (Llama-3-8B, trn1.32xlarge)": _median_wall(plan),
    }
    print(f"   {'command':<58}{'wall':>8}{'CPU':>8}")
    for name, (wall, cpu) in timings.items():
        print(f"   {name:<58}{wall:6.2f} s{cpu:6.2f} s")
    floor = timings["python -c 'import torch, transformers' + LlamaForCausalLM"]
    wall, cpu = timings["workbench plan (Llama-3-8B, trn1.32xlarge)"]
    print(
        f"   workbench plan: {wall:.2f} s wall, {cpu:.2f} s CPU (aim < 5 s); "
        f"{wall / floor[0]:.2f} x the wall time of importing torch, transformers and its Llama "
        "in the same run"
    )
    done = subprocess.run(plan, capture_output=True, text=True, check=True)
    print(f"   {done.stdout.splitlines()[0]}")


if __name__ == "__main__":
    sys.exit(main())
