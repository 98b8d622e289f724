"""`workbench compare --remeasure`: the baseline's and the newest run's notebook-01 workloads timed
again on this machine now, interleaved in pairs, so whatever else the machine is doing lands on
both sides alike. This is how asv (`asv continuous`) and Conbench-style CI gates judge on shared
runners: a recorded timing taken under load cannot be judged against one taken without, but two
workloads timed turn about, on the same machine at the same time, can.

Each configuration (step kind and mode) both runs measured is rebuilt from each run's own
parameters (its workload spec and settings, read from 01_baseline.json), warmed, then timed in
REMEASURE_PAIRS pairs: in each pair one block of steps of each side, the order alternating
(baseline first, then newest first: ABBA), each block about BLOCK_SECONDS long (at least
MIN_BLOCK_STEPS steps) and timed by its median step. The change is the median of the pairs'
ratios; it counts when it is beyond the step-time gate and a two-sided sign test on the pairs
is below the comparison's p-value (a pair is one coin toss: slower or faster, however loaded the
machine was during it).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from time import perf_counter
from typing import TYPE_CHECKING, Any

from workbench.baseline.reader import RESULT_FILE as BASELINE_FILE
from workbench.compare.records import (
    IMPROVEMENT,
    NOISE,
    REGRESSION,
    WITHIN_GATE,
    Change,
    ChangeStatus,
    Gates,
    RunInfo,
)
from workbench.compare.runs import load_run
from workbench.compare.stats import median
from workbench.compare.timing import configs_of
from workbench.errors import BadInput
from workbench.params import NOTEBOOKS_DIR, coerce, notebook_parameters
from workbench.results import load_result
from workbench.safe_load import shown
from workbench.targets import get_target
from workbench.targets.base import Target
from workbench.targets.registry import TARGET_NAMES
from workbench.timing import HostLoadProbe
from workbench.workloads import BUILTIN_WORKLOADS, DEFAULT_WORKLOAD

# Imported where they are used: they load torch, which reading result files back (compare,
# collect, export-metrics) never needs.
if TYPE_CHECKING:
    from workbench.baseline.measure import PreparedStep


REMEASURE_PAIRS = 20
BLOCK_SECONDS = 0.03
MIN_BLOCK_STEPS = 3
WARMUP_STEPS = 3
REMEASURE_RULE = (
    f"both runs' workloads rebuilt from their 01_baseline.json parameters and timed again on "
    f"this machine now, interleaved: {REMEASURE_PAIRS} pairs of one block of steps per side "
    f"(about {BLOCK_SECONDS * 1e3:g} ms and at least {MIN_BLOCK_STEPS} steps each, timed by "
    f"the median step, order alternating), after {WARMUP_STEPS} warm-up "
    "steps; a change counts beyond the step-time gate with a two-sided sign test on the pairs "
    "below the p-value (asv continuous and Conbench-style paired re-measuring)"
)


@dataclass
class PairedTiming:
    """One configuration timed turn about: each side's per-step time in each pair."""

    kind: str
    mode: str
    base: list[float]
    new: list[float]
    steps_per_block: int

    @property
    def ratios(self) -> list[float]:
        return [n / b for n, b in zip(self.new, self.base, strict=True) if b > 0]


def sign_test(ratios: list[float]) -> float:
    """Two-sided exact sign test of pair ratios against no change (ties dropped)."""
    above = sum(r > 1 for r in ratios)
    below = sum(r < 1 for r in ratios)
    n = above + below
    if n == 0:
        return 1.0
    fewer = min(above, below)
    tail = sum(math.comb(n, k) for k in range(fewer + 1)) / 2**n
    return min(1.0, 2 * tail)


def _parameters(run: RunInfo, named: str | None, option: str) -> tuple[dict[str, Any], str]:
    """A run's notebook-01 parameters, read as data, and the target it ran on.

    A run folder is shared between teammates and kept as a CI artefact: nothing in it may make
    this command run code. Its parameters go through the one typed parser of `-p` values
    (params.coerce: "false" is not true); its workload is rebuilt only where it is a built-in
    name, any other (a module, a script, an hf: folder) only when the command line names it
    again (`named`); a saved trust in a model folder's code is never honoured."""
    path = Path(run.path) / f"{BASELINE_FILE.notebook}.json"
    if not path.is_file():
        raise BadInput(f"--remeasure needs {path}: run {run.label} has no notebook-01 result.")
    record = load_result(path)
    saved = record.get("parameters")
    declared = notebook_parameters(NOTEBOOKS_DIR / f"{BASELINE_FILE.notebook}.ipynb")
    params = {
        name: coerce(declared[name], value)
        for name, value in (saved.items() if isinstance(saved, dict) else [])
        if name in declared
    }
    params["trust_remote_code"] = False
    if named:
        params["workload"] = named
    elif params.get("workload", DEFAULT_WORKLOAD) not in BUILTIN_WORKLOADS:
        raise BadInput(
            f"--remeasure rebuilds {run.label}'s workload {shown(params.get('workload'))} only "
            f"when the command line names it ({option} SPEC): a run folder is data, never code "
            "to run."
        )
    target = (record.get("target") or {}).get("name") or run.target
    if not isinstance(target, str) or target not in TARGET_NAMES:
        raise BadInput(f"--remeasure: run {run.label} names no known target ({shown(target)}).")
    return params, target


def _configs(run: RunInfo) -> set[tuple[str, str]]:
    return set(configs_of(load_run(Path(run.path))))


def _block(step: Callable[[], Any], target: Target, steps: int) -> float:
    """The median per-step seconds of `steps` steps, each synchronized: a step the scheduler
    preempted is one of many, not a share of the block's mean."""
    times = []
    for _ in range(steps):
        start = perf_counter()
        out = step()
        target.synchronize()
        times.append(perf_counter() - start)
        del out
    return median(times)


def time_in_pairs(
    base: PreparedStep, new: PreparedStep, target: Target, pairs: int = REMEASURE_PAIRS
) -> PairedTiming:
    """`pairs` pairs of blocks, the order alternating; each block sized from the warm-up to
    about BLOCK_SECONDS on its faster side, the same step count on both sides."""
    warm = [_block(side.step, target, WARMUP_STEPS) for side in (base, new)]
    steps = max(MIN_BLOCK_STEPS, math.ceil(BLOCK_SECONDS / max(min(warm), 1e-9)))
    base_times, new_times = [], []
    for index in range(pairs):
        if index % 2 == 0:
            b = _block(base.step, target, steps)
            n = _block(new.step, target, steps)
        else:
            n = _block(new.step, target, steps)
            b = _block(base.step, target, steps)
        base_times.append(b)
        new_times.append(n)
    return PairedTiming(base.kind, base.mode, base_times, new_times, steps)


def judge_pairs(timing: PairedTiming, gates: Gates, load_words: str) -> Change:
    """The remeasured change: median pair ratio against the gate, then the sign test."""
    ratios = timing.ratios
    ratio = median(ratios)
    p_value = sign_test(ratios)
    status: ChangeStatus
    if abs(ratio - 1) < gates.step_time:
        status = WITHIN_GATE
    elif p_value >= gates.p_value:
        status = NOISE
    else:
        status = REGRESSION if ratio > 1 else IMPROVEMENT
    slower = sum(r > 1 for r in ratios)
    note = (
        f"remeasured here, interleaved: {len(ratios)} pairs of {timing.steps_per_block} step(s) "
        f"per side, the newest slower in {slower} of them; {load_words}"
    )
    return Change("timing", f"{timing.kind}/{timing.mode} steady median (remeasured)",
                  median(timing.base), median(timing.new), status, "s", ratio, p_value,
                  gates.step_time, note)  # fmt: skip


def remeasure(
    base_run: RunInfo,
    new_run: RunInfo,
    gates: Gates,
    log: Callable[[str], None] = print,
    named: tuple[str | None, str | None] = (None, None),
) -> list[Change]:
    """Every configuration both runs measured, timed again here in pairs, one Change each;
    `named` are the workloads the command line names for each side (see _parameters)."""
    from workbench.baseline.measure import prepare_step
    from workbench.workload import WorkloadSpec

    base_params, base_target = _parameters(base_run, named[0], "--baseline-workload")
    new_params, new_target = _parameters(new_run, named[1], "--candidate-workload")
    if base_target != new_target:
        raise BadInput(
            f"--remeasure times both workloads on one target: {base_run.label} ran on "
            f"{base_target}, {new_run.label} on {new_target}."
        )
    target = get_target(new_target)
    base_workload = WorkloadSpec.from_params(base_params).load()
    new_workload = WorkloadSpec.from_params(new_params).load()
    changes = []
    for kind, mode in sorted(_configs(base_run) & _configs(new_run)):
        base_step = prepare_step(base_workload, target, kind, mode)
        new_step = prepare_step(new_workload, target, kind, mode)
        log(
            f"remeasuring {kind}/{mode}: {REMEASURE_PAIRS} interleaved pairs, {base_run.label} "
            f"against {new_run.label}"
        )
        probe = HostLoadProbe()
        with probe:
            timing = time_in_pairs(base_step, new_step, target)
        host = probe.result
        words = f"machine: {host.sentence()}" if host is not None else "machine: not read"
        changes.append(judge_pairs(timing, gates, words))
    return changes
