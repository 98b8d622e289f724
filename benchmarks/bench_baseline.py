"""How far the baseline's own numbers can be trusted, on seed-mlp on the CPU.

    .venv/bin/python benchmarks/bench_baseline.py

1. The default baseline's wall time, with a cold Inductor cache (a fresh TORCHINDUCTOR_CACHE_DIR
   is set before torch is imported, so compilation is paid in full).
2. `ratio vs torch.utils.benchmark`: the steady-state median of the eager training step divided
   by Timer.blocked_autorange() of the same step function, in the same process. Timer defaults to
   one thread; it gets torch.get_num_threads() so both measure the same thing. Measured in pairs
   with alternating order (as the Dynamo harness interleaves runs against load changes); the
   median pair's ratio is printed with every pair's ratio.
3. `ratio of loop elapsed to phases`: the usual smoke test (20 steps, one elapsed) against what
   the phases predict for it: first call + the warm-up steps within those 20 + the remaining
   steps x steady median. Each side gets a fresh model, optimizer and (compiled) a fresh Dynamo
   compile; Inductor's on-disk cache is warm for both (filled by step 1). Paired like 2.
"""

from __future__ import annotations

import atexit
import os
import shutil
import statistics
import sys
import tempfile
import time

PROCESS_START = time.perf_counter()
# Before torch is imported: Inductor reads its cache location once.
CACHE_DIR = tempfile.mkdtemp(prefix="bench-baseline-inductor-")
os.environ["TORCHINDUCTOR_CACHE_DIR"] = CACHE_DIR
atexit.register(shutil.rmtree, CACHE_DIR, ignore_errors=True)

import torch  # noqa: E402
from torch.utils import benchmark  # noqa: E402

from workbench.baseline.measure import PreparedStep, measure, prepare_step, run_baseline  # noqa: E402
from workbench.baseline.records import (  # noqa: E402
    COMPILED,
    EAGER,
    PHASE_FIRST_CALL,
    PHASE_WARMUP,
    TRAIN,
    BaselineSettings,
    ConfigResult,
)
from workbench.targets import get_target  # noqa: E402
from workbench.targets.base import Target  # noqa: E402
from workbench.workload import Workload, load_workload  # noqa: E402

LOOP_STEPS = 20
PAIRS = 5


def quiet(_: str) -> None:
    """Phase lines are the notebook's business; here only the results are printed."""


def predicted_loop_seconds(result: ConfigResult, steps: int) -> float:
    """First call + warm-up steps that fall within `steps` + the rest at the steady median."""
    first = result.phase(PHASE_FIRST_CALL)
    warmup = result.phase(PHASE_WARMUP)
    assert first and first.measurement and warmup and warmup.measurement and result.steady
    within = warmup.measurement.times[: steps - 1]
    remaining = steps - 1 - len(within)
    return first.measurement.total + sum(within) + remaining * result.steady.median


def plain_loop_seconds(workload: Workload, target: Target, mode: str, steps: int) -> float:
    """The smoke test: fresh model and optimizer (and compile), `steps` steps, one elapsed."""
    prepared = prepare_step(workload, target, TRAIN, mode)
    target.synchronize()
    start = time.perf_counter()
    for _ in range(steps):
        prepared.step()
    target.synchronize()
    return time.perf_counter() - start


def phases_prediction(workload: Workload, target: Target, mode: str, steps: int) -> float:
    prepared = prepare_step(workload, target, TRAIN, mode)
    result = measure(prepared, target, BaselineSettings(kinds=(TRAIN,)), log=quiet)
    return predicted_loop_seconds(result, steps)


def steady_median(prepared: PreparedStep, target: Target) -> float:
    """The baseline's steady-state median (default settings) of an already prepared step."""
    result = measure(prepared, target, BaselineSettings(kinds=(TRAIN,)), log=quiet)
    assert result.steady is not None
    return result.steady.median


def timer_median(prepared: PreparedStep, threads: int) -> float:
    timer = benchmark.Timer(stmt="step()", globals={"step": prepared.step}, num_threads=threads)
    return timer.blocked_autorange(min_run_time=1.0).median


def main() -> int:
    workload = load_workload("seed-mlp")
    target = get_target("cpu")
    threads = torch.get_num_threads()
    print(
        f"seed-mlp on cpu, torch {torch.__version__}, {threads} threads, {os.cpu_count()} cpus, "
        f"load average {os.getloadavg()[0]:.2f}"
    )

    started = time.perf_counter()
    result = run_baseline(workload, target, log=quiet)
    wall = time.perf_counter() - started
    print(
        f"default baseline wall time on seed-mlp: {wall:.1f} s (cold Inductor cache; "
        f"{time.perf_counter() - PROCESS_START:.1f} s with imports)"
    )
    print(f"  headline: {result.headline()}")

    prepared = prepare_step(workload, target, TRAIN, EAGER)
    ratios = []
    for pair in range(PAIRS):
        # Alternate the order: this box's speed drifts with what else runs on it.
        if pair % 2 == 0:
            ours = steady_median(prepared, target)
            theirs = timer_median(prepared, threads)
        else:
            theirs = timer_median(prepared, threads)
            ours = steady_median(prepared, target)
        ratios.append((ours / theirs, ours, theirs))
    ratio, ours, theirs = sorted(ratios)[len(ratios) // 2]
    print(
        f"ratio vs torch.utils.benchmark: {ratio:.2f} (eager training step, median of {PAIRS} "
        f"pairs: {', '.join(f'{r:.2f}' for r, _, _ in ratios)}; in the median pair the steady "
        f"median is {ours * 1e6:.0f} us, blocked_autorange's {theirs * 1e6:.0f} us)"
    )

    for mode in (EAGER, COMPILED):
        ratios = []
        for pair in range(PAIRS):
            # Alternate the order, so neither side always inherits the other's warm state.
            if pair % 2 == 0:
                predicted = phases_prediction(workload, target, mode, LOOP_STEPS)
                elapsed = plain_loop_seconds(workload, target, mode, LOOP_STEPS)
            else:
                elapsed = plain_loop_seconds(workload, target, mode, LOOP_STEPS)
                predicted = phases_prediction(workload, target, mode, LOOP_STEPS)
            ratios.append(elapsed / predicted)
        listed = ", ".join(f"{r:.2f}" for r in ratios)
        print(
            f"ratio of loop elapsed to phases: {statistics.median(ratios):.2f} "
            f"({mode}, {LOOP_STEPS}-step loop, median of {PAIRS} pairs: {listed})"
        )
    print(
        f"load average at the end {os.getloadavg()[0]:.2f} (other work on the box skews all this)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
