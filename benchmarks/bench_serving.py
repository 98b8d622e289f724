"""How far notebook 05's numbers can be trusted, and what its measuring costs, on the CPU.

    .venv/bin/python benchmarks/bench_serving.py

1. `timer vs torch.utils.benchmark`: notebook 05's inference timer (measure_windows over
   ServedCall.request: synchronized perf_counter readings per request, windows until stable)
   against Timer.blocked_autorange() of the same batch-1 call, compiled with Inductor, in the
   same process. Timer gets torch.get_num_threads() (its default is one thread). Interleaved
   A B B A A B ..., each A paired with the B beside it; the ratio is the median of the pair
   ratios of medians, printed with the pairs' 10th-90th percentile spread. Aim: within
   0.95-1.05 on a quiet machine. Other processes' share of the CPU over the interleaved window
   is printed beside it (above 10%: LOADED, not a quiet-machine number).
2. `overhead`: the whole notebook part (run_serving with its defaults but smaller budgets and
   0.2 s windows: the batch sweep, SLO, closed and open loop, host gaps) on seed-mlp and on
   tiny-transformer:
   its wall time against the time its measured calls took (every timed call, and each load
   level's window from first arrival to last completion). Aim: at most 1.5x.
"""

from __future__ import annotations

import statistics
import time

import psutil
import torch
from torch.utils import benchmark

from workbench.serving import ServingSettings, run_serving
from workbench.serving.calls import build_serving_model, prepare_call
from workbench.serving.records import COMPILED
from workbench.serving.windows import measure_windows
from workbench.targets import get_target
from workbench.timing import quantile
from workbench.workload import load_workload

PAIRS = 12
QUIET_OTHER_SHARE = 0.10


def _other_share(start_cpu: float, start_own: float, wall: float) -> float:
    busy = sum(psutil.cpu_times()) - psutil.cpu_times().idle - psutil.cpu_times().iowait
    own = sum(psutil.Process().cpu_times()[:2])
    cores = psutil.cpu_count() or 1
    return max(0.0, (busy - start_cpu) - (own - start_own)) / (wall * cores)


def timer_ratio() -> None:
    target = get_target("cpu")
    workload = load_workload("seed-mlp")
    model = build_serving_model(workload, target)
    served = prepare_call(workload, target, model, 1, COMPILED)
    served.timed()  # the compile
    timer = benchmark.Timer(
        stmt="served.call()", globals={"served": served}, num_threads=torch.get_num_threads()
    )

    def ours() -> float:
        run = measure_windows(
            served.request, requests=160, tolerance=0.10, budget_s=1.0, quantile=0.99,
            min_window_s=0.0,
        )  # fmt: skip
        return statistics.median(run.latency_samples())

    def theirs() -> float:
        return float(timer.blocked_autorange(min_run_time=0.2).median)

    times = psutil.cpu_times()
    start_cpu, start_own = (
        sum(times) - times.idle - times.iowait,
        sum(psutil.Process().cpu_times()[:2]),
    )
    start = time.perf_counter()
    ratios = []
    for index in range(PAIRS):
        if index % 2 == 0:
            a, b = ours(), theirs()
        else:
            b, a = theirs(), ours()
        ratios.append(a / b)
    other = _other_share(start_cpu, start_own, time.perf_counter() - start)
    ratios.sort()
    ratio = statistics.median(ratios)
    low, high = quantile(ratios, 0.1), quantile(ratios, 0.9)
    state = "LOADED" if other > QUIET_OTHER_SHARE else "quiet"
    print(
        f"timer vs torch.utils.benchmark (seed-mlp, batch 1, compiled, {PAIRS} pairs): median "
        f"ratio {ratio:.3f} (pairs 10th-90th percentile {low:.3f}-{high:.3f}; aim 0.95-1.05); "
        f"machine {state}: other processes {other:.0%} of the CPU"
    )


def overhead(name: str) -> None:
    settings = ServingSettings(
        window_seconds=0.2, window_budget_s=3.0, load_budget_s=1.0, gap_requests=100
    )
    workload = load_workload(name)
    target = get_target("cpu")
    start = time.perf_counter()
    result = run_serving(workload, target, settings, log=lambda _: None)
    wall = time.perf_counter() - start
    print(
        f"overhead {name}: whole notebook part {wall:.1f} s, measured calls "
        f"{result.measured_seconds:.1f} s: {wall / result.measured_seconds:.2f}x (aim <= 1.5x), "
        f"{len(result.points)} batch sizes"
    )


def main() -> None:
    timer_ratio()
    for name in ("seed-mlp", "tiny-transformer"):
        overhead(name)


if __name__ == "__main__":
    main()
