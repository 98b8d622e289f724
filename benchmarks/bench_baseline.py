"""How far the baseline's own numbers can be trusted, on seed-mlp on the CPU.

    .venv/bin/python benchmarks/bench_baseline.py [--ratio-only]

1. The default baseline's wall time, with a cold Inductor cache (a fresh TORCHINDUCTOR_CACHE_DIR
   is set before torch is imported, so compilation is paid in full).
2. `ratio vs torch.utils.benchmark`: the workbench's steady-state median (robust median of the
   steady phase) of the eager training step against Timer.blocked_autorange() of the same step
   function, in the same process. Timer defaults to one thread; it gets torch.get_num_threads()
   so both measure the same thing. Interleaved A B B A A B ... in short blocks (each about
   0.2 s), each A block paired with the B block beside it, so both sides of a pair see the same
   load; the ratio is the median of the pair ratios, printed with their spread (10th-90th
   percentile). Aim: within 0.95-1.05 on a quiet machine, with the pair spread printed.
   Whether the machine was quiet is measured over the interleaved window itself, by the probe
   the baseline's own measurements use (workbench.timing.HostLoadProbe): all CPUs' busy time
   (/proc/stat) less this process's own CPU time and its children's, as a share of the CPUs'
   time. The load average would count this benchmark's own work and the
   compile-heavy baseline just before it. Other processes above 10% mark the ratio LOADED, not
   a quiet-machine measurement; a pair spread wider than 0.10 on a quiet machine marks it
   UNSTEADY. Either replaces the confident line.
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
from workbench.timing import HostLoadProbe, WarmupRule, quantile  # noqa: E402
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


def timer_median(prepared: PreparedStep, threads: int, min_run_time: float = 1.0) -> float:
    timer = benchmark.Timer(stmt="step()", globals={"step": prepared.step}, num_threads=threads)
    return timer.blocked_autorange(min_run_time=min_run_time).median


BLOCKS = 16  # pairs of short blocks
BLOCK_SECONDS = 0.2
SPREAD_LIMIT = 0.10  # 10th-90th percentile of the pair ratios
OTHERS_LIMIT = 0.10  # other processes' CPU time, as a share of wall time x cores


def workbench_block(prepared: PreparedStep, target: Target, steps: int) -> float:
    """One short A block: the baseline's own phases on a warm step (a 4-step warm-up that always
    ends, then `steps` steady samples); its robust steady median."""
    settings = BaselineSettings(
        steady_steps=steps, warmup=WarmupRule(window=4, threshold=0.99, max_steps=4), kinds=(TRAIN,)
    )
    result = measure(prepared, target, settings, log=quiet)
    assert result.steady is not None
    return result.steady.robust_median


def interleaved_ratio(workload: Workload, target: Target, threads: int) -> None:
    prepared = prepare_step(workload, target, TRAIN, EAGER)
    # Size the A blocks to about BLOCK_SECONDS of steady steps, from one rough timing.
    rough = timer_median(prepared, threads, min_run_time=0.2)
    steps = max(10, int(BLOCK_SECONDS / rough))
    pairs = []
    with HostLoadProbe() as probe:
        for block in range(BLOCKS):
            # A B, then B A: neither side always runs first within its pair.
            if block % 2 == 0:
                ours = workbench_block(prepared, target, steps)
                theirs = timer_median(prepared, threads, BLOCK_SECONDS)
            else:
                theirs = timer_median(prepared, threads, BLOCK_SECONDS)
                ours = workbench_block(prepared, target, steps)
            pairs.append(ours / theirs)
    host = probe.result
    assert host is not None and host.other_share is not None, "/proc/stat is not readable"
    share = host.other_share
    ordered = sorted(pairs)
    ratio = statistics.median(pairs)
    low, high = quantile(ordered, 0.1), quantile(ordered, 0.9)
    loaded = share > OTHERS_LIMIT
    unsteady = high - low > SPREAD_LIMIT
    mark = (
        " [LOADED: not a quiet-machine measurement]"
        if loaded
        else " [UNSTEADY: pair spread too wide]"
        if unsteady
        else ""
    )
    print(
        f"ratio vs torch.utils.benchmark{mark}: {ratio:.2f} (eager training step, {BLOCKS} "
        f"interleaved block pairs of ~{BLOCK_SECONDS:g} s, {steps} steps per workbench block; "
        f"pair spread {low:.2f}-{high:.2f} (10th-90th percentile), min {ordered[0]:.2f}, max "
        f"{ordered[-1]:.2f}; other processes {share:.1%} of {host.cores} cpus over "
        f"the {host.wall_seconds:.1f} s window)"
    )
    if loaded:
        print(
            f"  LOADED: other processes used {share * host.cores * host.wall_seconds:.1f} cpu-s, "
            f"{share:.1%} of {host.cores} cpus x {host.wall_seconds:.1f} s (limit "
            f"{OTHERS_LIMIT:.0%}; this process and its children left out), pair spread "
            f"{high - low:.2f}: not a quiet-machine measurement of the workbench; rerun on a "
            "quiet machine"
        )
    elif unsteady:
        print(
            f"  UNSTEADY: pair spread {high - low:.2f} (limit {SPREAD_LIMIT}) although other "
            f"processes used only {share:.1%} of the cpus: the ratio above is not a "
            "steady measurement; rerun it"
        )


def main() -> int:
    workload = load_workload("seed-mlp")
    target = get_target("cpu")
    threads = torch.get_num_threads()
    print(
        f"seed-mlp on cpu, torch {torch.__version__}, {threads} threads, {os.cpu_count()} cpus, "
        f"load average {os.getloadavg()[0]:.2f}"
    )

    if "--ratio-only" in sys.argv:
        interleaved_ratio(workload, target, threads)
        return 0
    started = time.perf_counter()
    result = run_baseline(workload, target, log=quiet)
    wall = time.perf_counter() - started
    print(
        f"default baseline wall time on seed-mlp: {wall:.1f} s (cold Inductor cache; "
        f"{time.perf_counter() - PROCESS_START:.1f} s with imports)"
    )
    print(f"  headline: {result.headline()}")

    interleaved_ratio(workload, target, threads)

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
