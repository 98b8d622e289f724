"""How many trials the largest-batch search needs, and how long the default retuning takes.

    .venv/bin/python benchmarks/bench_retuning.py

1. Trials against a known limit: a workload whose forward raises MemoryError above a batch size
   L runs real trials (each a child process, as in the notebook) over the notebook's default
   range [1, 1024]. Beside it, the trials PyTorch Lightning's BatchSizeFinder would need for the
   same limit with its documented defaults (mode "power", init_val 2, max_trials 25; and mode
   "binsearch"), replayed from its documented procedure on the same fits/does-not-fit answers,
   with the batch each one ends on.
2. Wall time of `workbench run --only 04` with the defaults on seed-mlp.
"""

from __future__ import annotations

import os
import sys
import tempfile
import textwrap
from collections.abc import Callable
from pathlib import Path

from notebook_wall_time import notebook_wall_seconds

from workbench.targets.cpu import CpuTarget
from workbench.tuning.records import RetuneSettings
from workbench.tuning.trials import MemoryBudget, TrialRunner, search_largest_batch
from workbench.workload import WorkloadSpec

REPO = Path(__file__).resolve().parent.parent
LIMITS = (48, 100, 646)
# The tests' classifier (Linear(8, 3) on seeded features, SGD on cross-entropy) with a memory
# limit: the trial subprocesses import it from tests.fixtures, the repository root on their path.
OOM_WORKLOAD = """
from tests.fixtures.user_workloads import LinearHead, classifier_workload

LIMIT = {limit}


class OomAbove(LinearHead):
    def forward(self, x):
        if x.shape[0] > LIMIT:
            raise MemoryError(f"cannot allocate activations for batch {{x.shape[0]}}")
        return self.lin(x)


def make():
    return classifier_workload(OomAbove, "oom-above-{limit}", batch_size=8)
"""


def lightning_power(fits: Callable[[int], bool], init_val: int = 2, max_trials: int = 25):
    """BatchSizeFinder mode="power": double after a success; after a failure halve and stop
    if any earlier trial succeeded."""
    size, trials, succeeded = init_val, 0, False
    while trials < max_trials:
        trials += 1
        if fits(size):
            succeeded = True
            size *= 2
        else:
            size //= 2
            if succeeded or size < 1:
                break
    return trials, size


def lightning_binsearch(fits: Callable[[int], bool], init_val: int = 2, max_trials: int = 25):
    """BatchSizeFinder mode="binsearch": double until the first failure, then bisect between the
    last success and the first failure until they are adjacent."""
    size, low, high, trials = init_val, 1, None, 0
    while trials < max_trials:
        trials += 1
        if fits(size):
            low = size
            if high is not None and high - low <= 1:
                break
            size = size * 2 if high is None else (low + high) // 2
        else:
            high = size
            if high - low <= 1:
                break
            size = (low + high) // 2
    return trials, low


def main() -> None:
    defaults = RetuneSettings()
    low, high = defaults.min_batch, defaults.max_batch
    print(f"largest-batch search over the default range [{low}, {high}], real trials on cpu")
    with tempfile.TemporaryDirectory() as folder:
        sys.path[:0] = [folder, str(REPO)]  # trials run in child processes: both paths
        os.environ["PYTHONPATH"] = os.pathsep.join(
            filter(None, [folder, str(REPO), os.environ.get("PYTHONPATH")])
        )
        for limit in LIMITS:
            module = f"wb_bench_oom_{limit}"
            Path(folder, f"{module}.py").write_text(
                textwrap.dedent(OOM_WORKLOAD.format(limit=limit))
            )
            runner = TrialRunner(
                WorkloadSpec(f"{module}:make"),
                CpuTarget(),
                MemoryBudget(64 * 2**30, "benchmark: no budget, only the MemoryError", 0.0),
                "eager",
                120.0,
                log=lambda line: None,
            )
            result = search_largest_batch(runner, low, high)

            def fits(batch: int, limit: int = limit) -> bool:
                return batch <= limit

            power_trials, power_found = lightning_power(fits)
            bin_trials, bin_found = lightning_binsearch(fits)
            print(
                f"limit {limit}: workbench search {len(result.trials)} trials "
                f"(bound {result.bound}) -> {result.largest_fit}; "
                f"Lightning power {power_trials} trials -> {power_found}; "
                f"Lightning binsearch {bin_trials} trials -> {bin_found}"
            )
    elapsed = notebook_wall_seconds("04")
    load = os.getloadavg()[0]
    print(f"default retuning notebook on seed-mlp: {elapsed:.1f} s wall (load {load:.2f})")


if __name__ == "__main__":
    main()
