"""What op capture costs, and how long a whole coverage answer takes, on the CPU.

    .venv/bin/python benchmarks/bench_coverage.py

1. `capture overhead`: the wall time of one training step captured at dispatch level (every ATen
   op with dtypes, shapes, call sites) divided by the same work without the capture: a fresh
   seeded model, optimizer and batch, then one forward, backward and optimizer step (a first
   step: the optimizer creates its state). Measured in pairs in alternating order against load
   changes; the median pair is printed with every pair. For scale, the capture is also divided
   by the median of a warm, steady eager step.
2. `time to a full coverage answer`: `workbench run --only 02` on seed-mlp, wall time from
   process start to exit (kernel start, capture, verdicts, report export included), the median
   of 3 runs, with the time of a fresh `import torch` beside it for scale.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time

import torch
from notebook_wall_time import notebook_wall_seconds

from workbench.coverage.capture import capture_training_step
from workbench.timing import Measurement
from workbench.workload import Workload, load_workload

PAIRS = 5
ANSWERS = 3
PLAIN_STEPS = 30


def plain_first_step_seconds(workload: Workload) -> float:
    """What capture_training_step does, without the capture mode."""
    start = time.perf_counter()
    model = workload.build_model()
    model.train()
    optimizer = workload.make_optimizer(model)
    inputs, targets = workload.batch()
    optimizer.zero_grad(set_to_none=True)
    workload.loss_fn(model(*inputs), targets).backward()
    optimizer.step()
    return time.perf_counter() - start


def steady_step_median(workload: Workload) -> float:
    model = workload.build_model()
    optimizer = workload.make_optimizer(model)
    inputs, targets = workload.batch()
    times = []
    for _ in range(PLAIN_STEPS + 5):
        start = time.perf_counter()
        loss = workload.loss_fn(model(*inputs), targets)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        times.append(time.perf_counter() - start)
    return Measurement(times[5:]).median  # the first steps allocate and warm caches


def import_torch_seconds() -> float:
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", "import torch"], check=True)
    return time.perf_counter() - start


def capture_seconds(workload: Workload) -> float:
    start = time.perf_counter()
    capture_training_step(workload)
    return time.perf_counter() - start


def overhead(name: str) -> None:
    workload = load_workload(name)
    capture_seconds(workload)  # first capture pays one-off imports and dispatcher warm-up
    plain_first_step_seconds(workload)
    ratios, captures = [], []
    for pair in range(PAIRS):
        if pair % 2:
            captured, plain = capture_seconds(workload), plain_first_step_seconds(workload)
        else:
            plain, captured = plain_first_step_seconds(workload), capture_seconds(workload)
        ratios.append(captured / plain)
        captures.append(captured)
    shown = ", ".join(f"{r:.2f}" for r in ratios)
    steady = steady_step_median(workload)
    print(
        f"capture overhead on {name}: {statistics.median(ratios):.2f}x the same step uncaptured "
        f"(median of {PAIRS} pairs: {shown}; aim at most 3x); "
        f"{statistics.median(captures) / steady:.1f}x a warm steady eager step"
    )


def main() -> None:
    print(
        f"torch {torch.__version__}, {torch.get_num_threads()} threads, {os.cpu_count()} cpus, "
        f"load average {os.getloadavg()[0]:.2f}"
    )
    for name in ("seed-mlp", "tiny-transformer"):
        overhead(name)
    answers = [notebook_wall_seconds("02") for _ in range(ANSWERS)]
    # The kernel imports torch, whose cost moves from day to day on a shared machine: printed
    # beside the answer for scale.
    torch_import = statistics.median(import_torch_seconds() for _ in range(3))
    print(
        f"time to a full coverage answer for seed-mlp on cpu: {statistics.median(answers):.1f} s "
        f"(median of {ANSWERS}: {', '.join(f'{a:.1f}' for a in answers)}; aim at most 8 s; "
        f"a fresh `import torch` takes {torch_import:.1f} s here, median of 3)"
    )
    print(f"load average at the end {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
