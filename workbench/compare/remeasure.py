"""`workbench compare --remeasure`: the baseline's and the newest run's notebook-01 workloads timed
again on this machine now, interleaved in pairs, so whatever else the machine is doing lands on
both sides alike. This is how asv (`asv continuous`) and Conbench-style CI gates judge on shared
runners: a recorded timing taken under load cannot be judged against one taken without, but two
workloads timed turn about, on the same machine at the same time, can.

Each configuration (step kind and mode) both runs measured is rebuilt from each run's own
parameters (its workload spec and settings, read from 01_baseline.json), warmed, then timed in
pairs: in each pair one block of steps of each side, the order alternating (ABBA), each block
about BLOCK_SECONDS long (at least MIN_BLOCK_STEPS steps) and timed by its fastest steps (the
10th percentile, as the recorded steady best). The
change is the median of the pairs' ratios, and the pairs go on until it is decided (a sequential
test, as Pinpoint adds repeats while its answer is "unknown"): at each look (LOOKS pairs), a
distribution-free confidence interval for the median ratio (the sign test's order statistics),
at the comparison's p-value shared out over the looks (Bonferroni), says
- a regression (or improvement): the median beyond the step-time gate and the interval clear of 1;
- within the gate: the interval inside the gate on both sides;
- otherwise more pairs, until the time budget per configuration is spent: then inconclusive,
  with the interval reached.
On a loaded machine (read during the warm-up) both sides run with one thread: with as many
threads as cores beside other busy processes, OpenMP's barriers wait on preempted threads and a
step took 30-70x longer, a noise no test settles; the note says so. The verdict replaces the
recorded steady best, median and throughput of that configuration.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from time import perf_counter
from typing import TYPE_CHECKING, Any

from workbench.baseline.reader import RESULT_FILE as BASELINE_FILE
from workbench.compare import stats
from workbench.compare.noise import low_quantile
from workbench.compare.records import (
    IMPROVEMENT,
    INCONCLUSIVE,
    REGRESSION,
    REMEASURED,
    WITHIN_GATE,
    Change,
    ChangeStatus,
    Gates,
    RunInfo,
)
from workbench.compare.runs import load_run
from workbench.compare.stats import median, median_interval
from workbench.compare.timing import REMEASURED_METRICS, configs_of
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


# Pair counts at which the interval is read: spaced out, so the p-value shared among them stays
# usable, and enough of them that an easy answer stops early.
LOOKS = (8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256)
BLOCK_SECONDS = 0.05
MIN_BLOCK_STEPS = 3
WARMUP_STEPS = 3
BUDGET_SECONDS = 60.0  # per configuration; --remeasure-seconds
REMEASURE_RULE = (
    "`--remeasure` rebuilds both runs' workloads from their 01_baseline.json parameters and "
    "times them again on this machine now, interleaved: pairs of one block of steps per side "
    f"(about {BLOCK_SECONDS * 1e3:g} ms and at least {MIN_BLOCK_STEPS} steps each, timed by "
    f"their fastest steps, order alternating), after {WARMUP_STEPS} warm-up steps, until the "
    "median pair ratio is decided: beyond the step-time gate with its confidence interval (the "
    "sign test's order statistics, the p-value shared over the looks at "
    f"{', '.join(map(str, LOOKS))} pairs) clear of 1, or that interval inside the gate; "
    f"inconclusive when the time budget ({BUDGET_SECONDS:g} s per configuration by default) "
    "ends first. Its verdict replaces the recorded steady best, median and throughput"
)


@dataclass
class PairedTiming:
    """One configuration timed turn about: each side's per-step time in each pair."""

    kind: str
    mode: str
    base: list[float]
    new: list[float]
    steps_per_block: int
    threads: int
    seconds: float = 0.0
    interval: tuple[float, float] | None = None

    @property
    def ratios(self) -> list[float]:
        return [n / b for n, b in zip(self.new, self.base, strict=True) if b > 0]


def sign_test(ratios: list[float]) -> float:
    """Two-sided exact sign test of pair ratios against no change (ties dropped)."""
    return stats.sign_test(ratios)


def decide(
    ratios: list[float], gates: Gates
) -> tuple[ChangeStatus | None, tuple[float, float] | None]:
    """The verdict the pairs so far support (None: not yet), and the median ratio's interval at
    the p-value shared over the looks."""
    interval = median_interval(ratios, 1 - gates.p_value / len(LOOKS))
    if interval is None:
        return None, None
    low, high = interval
    ratio = median(ratios)
    upper, lower = 1 + gates.step_time, 1 / (1 + gates.step_time)
    if low > 1 and ratio >= upper:
        return REGRESSION, interval
    if high < 1 and ratio <= lower:
        return IMPROVEMENT, interval
    if lower < low and high < upper:
        return WITHIN_GATE, interval
    return None, interval


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
    """The block's best-of-steps time (noise.low_quantile of its `steps` steps, each
    synchronized): a step the scheduler preempted is one of many, and the block reads the steps
    other load spared, as the recorded steady best does. Beside two busy loops, blocks timed by
    their median left an identical pair undecided after 128 pairs; by their fastest steps the
    ratios are tight enough to decide."""
    times = []
    for _ in range(steps):
        start = perf_counter()
        out = step()
        target.synchronize()
        times.append(perf_counter() - start)
        del out
    return low_quantile(times)


def time_in_pairs(
    base: PreparedStep,
    new: PreparedStep,
    target: Target,
    gates: Gates,
    budget_s: float = BUDGET_SECONDS,
) -> tuple[PairedTiming, ChangeStatus | None]:
    """Pairs of blocks, the order alternating, until decide() answers or the budget is spent;
    each block sized from the warm-up to about BLOCK_SECONDS on its faster side, the same step
    count on both sides."""
    started = perf_counter()
    warm = [_block(side.step, target, WARMUP_STEPS) for side in (base, new)]
    steps = max(MIN_BLOCK_STEPS, math.ceil(BLOCK_SECONDS / max(min(warm), 1e-9)))
    timing = PairedTiming(base.kind, base.mode, [], [], steps, torch_threads())
    status: ChangeStatus | None = None
    while len(timing.base) < LOOKS[-1]:
        if len(timing.base) % 2 == 0:
            timing.base.append(_block(base.step, target, steps))
            timing.new.append(_block(new.step, target, steps))
        else:
            timing.new.append(_block(new.step, target, steps))
            timing.base.append(_block(base.step, target, steps))
        if len(timing.base) in LOOKS:
            status, timing.interval = decide(timing.ratios, gates)
            if status is not None or perf_counter() - started > budget_s:
                break
    timing.seconds = perf_counter() - started
    return timing, status


def torch_threads() -> int:
    import torch

    return torch.get_num_threads()


def judge_pairs(
    timing: PairedTiming, status: ChangeStatus | None, gates: Gates, load_words: str
) -> Change:
    """The remeasured change: decided, or inconclusive with the interval the budget reached."""
    ratios = timing.ratios
    ratio = median(ratios)
    slower = sum(r > 1 for r in ratios)
    interval = (
        f"{timing.interval[0]:.3f} to {timing.interval[1]:.3f}" if timing.interval else "none yet"
    )
    note = (
        f"remeasured here, interleaved: {len(ratios)} pairs of {timing.steps_per_block} step(s) "
        f"per side in {timing.seconds:.0f} s, {timing.threads} thread(s), the newest slower in "
        f"{slower} of them; median ratio's interval {interval}; {load_words}"
    )
    if status is None:
        status = INCONCLUSIVE
        note += (
            "; the time budget ended before the pairs decided: raise --remeasure-seconds, or "
            "remeasure on a quieter runner"
        )
    return Change("timing", f"{timing.kind}/{timing.mode} steady median (remeasured)",
                  median(timing.base), median(timing.new), status, "s", ratio,
                  sign_test(ratios), gates.step_time, note)  # fmt: skip


def remeasure(
    base_run: RunInfo,
    new_run: RunInfo,
    gates: Gates,
    log: Callable[[str], None] = print,
    named: tuple[str | None, str | None] = (None, None),
    budget_s: float = BUDGET_SECONDS,
) -> list[Change]:
    """Every configuration both runs measured, timed again here in pairs, one Change each;
    `named` are the workloads the command line names for each side (see _parameters)."""
    import torch

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
    threads = torch.get_num_threads()
    changes = []
    try:
        for kind, mode in sorted(_configs(base_run) & _configs(new_run)):
            base_step = prepare_step(base_workload, target, kind, mode)
            new_step = prepare_step(new_workload, target, kind, mode)
            one_thread_when_loaded(base_step, target, threads)
            log(
                f"remeasuring {kind}/{mode}: interleaved pairs until decided (at most "
                f"{budget_s:g} s), {base_run.label} against {new_run.label}"
            )
            probe = HostLoadProbe()
            with probe:
                timing, status = time_in_pairs(base_step, new_step, target, gates, budget_s)
            host = probe.result
            words = f"machine: {host.sentence()}" if host is not None else "machine: not read"
            change = judge_pairs(timing, status, gates, words)
            log(f"  {change.status}: {len(timing.ratios)} pairs, median ratio {change.ratio:.3f}")
            changes.append(change)
    finally:
        torch.set_num_threads(threads)
    return changes


def one_thread_when_loaded(step: PreparedStep, target: Target, threads: int) -> None:
    """One thread for both sides where other processes are busy now (see the module's note)."""
    import torch

    torch.set_num_threads(threads)
    probe = HostLoadProbe()
    with probe:
        _block(step.step, target, WARMUP_STEPS)
    if probe.result is not None and probe.result.loaded:
        torch.set_num_threads(1)


def replace_recorded(changes: list[Change], remeasured: list[Change]) -> None:
    """The remeasured verdict stands for the recorded metrics it timed again: their status says
    so and points at it."""
    for new in remeasured:
        config = new.name.split(" ", 1)[0]
        for change in changes:
            if change.area != "timing" or not change.name.startswith(f"{config} "):
                continue
            if change.name.split(" ", 1)[1] in REMEASURED_METRICS:
                change.note = (
                    f"recorded: {change.status}; replaced by '{new.name}': {new.status}"
                    + (f"; {change.note}" if change.note else "")
                )
                change.status = REMEASURED
