"""Batch-size trials, each in its own process: the largest batch that fits, and the sweep.

A trial is one training configuration at one batch size, measured with the baseline's own
protocol (first call, adaptive warm-up, steady state; baseline.run_config) in a child process.
Its outcome is classified in the parent: it fits only when it ran and its peak memory stayed
within the budget less the safety margin; running out of memory (the target's own error texts,
or a SIGKILL, which is what the Linux OOM killer sends), a timeout and any other error all mean
it does not.

One failure is kept apart from running out of memory: the compiler killed for lack of host RAM
(on Neuron, neuronx-cc's F137 or its -9 exit; Target.compiler_host_oom, the reading notebook 01
uses). It says nothing about the device's memory, so it is not "this batch does not fit": the
trial gets its own status and the remedy, and the search stops at that batch instead of
bisecting below it as if it were the device's limit. A larger batch compiles a larger graph,
which needs more host RAM still, and every further trial would pay a compile that may be
killed the same way; the remedy (fewer compiles at once, a larger host) is what moves it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, Final, Literal

from workbench.baseline.records import (
    PHASE_STEADY,
    TRAIN,
    BaselineSettings,
    ConfigResult,
    LedgerEntry,
)
from workbench.errors import BadInput
from workbench.processes import (
    SIGNALLED,
    TIMED_OUT,
    ChildOutcome,
    run_in_child,
)
from workbench.progress import progress_bar
from workbench.targets import get_target
from workbench.targets.base import Target
from workbench.timing import HostPeakRss, Measurement, WarmupRule, format_seconds
from workbench.tuning.noise import (
    COMPARISON_RULE,
    Rated,
    SweepRun,
    fastest_then_cheapest,
    host_load_from,
)
from workbench.tuning.steps import items_per_second, log_line

# Imported where they are used: they load torch, which reading result files back (compare,
# collect, export-metrics) never needs.
if TYPE_CHECKING:
    from workbench.workload import WorkloadSpec


OK: Final = "ok"
OVER_BUDGET: Final = "over budget"  # ran, but its peak memory left less than the safety margin
OOM: Final = "out of memory"
# The compiler was killed for host RAM: neither a fit nor the device's limit (module docstring).
COMPILER_HOST_RAM: Final = "compiler host RAM"
TIMEOUT: Final = "timeout"
ERROR: Final = "error"  # a failure that is not about memory: the model itself broke at this size
CRASHED: Final = "crashed"  # the process died (a signal other than SIGKILL) without reporting
# How one trial ended, one definition.
TrialStatus = Literal[
    "ok", "over budget", "out of memory", "compiler host RAM", "timeout", "error", "crashed"
]

SEARCH = "search"
SWEEP = "sweep"

# Search trials only need to reach the memory peak, which the second step already holds
# (optimizer state appears at the first step): a short fixed warm-up and 3 steady steps, as
# Lightning's batch-size finder runs 3 steps per trial.
SEARCH_STEADY_STEPS = 3
SEARCH_WARMUP = WarmupRule(window=4, threshold=0.1, max_steps=4)
# Sweep trials time the steady state; a shorter window than the baseline's keeps a sweep of a
# dozen sizes quick while still waiting for stable steps.
SWEEP_WARMUP = WarmupRule(window=5, threshold=0.1, max_steps=30)


@dataclass(frozen=True)
class MemoryBudget:
    total_bytes: int
    source: str
    margin: float  # share of `bytes` kept free

    @property
    def usable(self) -> int:
        return int(self.total_bytes * (1 - self.margin))


def resolve_budget(target: Target, budget_gib: float, margin: float) -> MemoryBudget:
    """The parameter when set; else the target's device memory; else, on a target whose memory
    is the host's, the host memory available now."""
    if not 0 <= margin < 1:
        raise BadInput(f"memory_margin {margin} must lie in [0, 1).")
    if budget_gib < 0:
        raise BadInput(f"memory_budget_gib {budget_gib} must be positive, or 0 for automatic.")
    if budget_gib > 0:
        return MemoryBudget(int(budget_gib * 2**30), "parameter memory_budget_gib", margin)
    device = target.device_memory()
    if device is not None:
        return MemoryBudget(device.total_bytes, device.source, margin)
    import psutil  # here: readers of trial records never measure memory

    available = psutil.virtual_memory().available
    return MemoryBudget(
        int(available),
        f"{target.name} has no device memory of its own: host memory available when the "
        "search started (psutil)",
        margin,
    )


@dataclass(frozen=True)
class BatchTrialJob:
    """One training configuration at one batch size, run in a child process."""

    spec: WorkloadSpec
    target: str
    batch_size: int
    mode: str
    steady_steps: int
    warmup: WarmupRule

    def run(self) -> dict[str, Any]:
        from workbench.baseline.measure import run_config

        target = get_target(self.target)
        workload = self.spec.load()
        workload.batch_size = self.batch_size
        settings = BaselineSettings(self.steady_steps, self.warmup, (TRAIN,), (self.mode,))
        host = HostPeakRss()
        config = run_config(workload, target, TRAIN, self.mode, settings, host=host)
        return _payload(config, target, host)


def _payload(config: ConfigResult, target: Target, host: HostPeakRss) -> dict[str, Any]:
    """What the parent needs of a finished configuration, as plain JSON."""
    # Reserved, where the target has it: what the allocator holds is what runs out.
    readings = (
        p.memory.device_peak_reserved or p.memory.device_peak_allocated for p in config.phases
    )
    device = [value for value in readings if value is not None]
    peak: int | None
    if device:
        peak, source = max(device), f"device: {target.peak_memory().source}"
    else:
        rss = [p.memory.host_peak_rss for p in config.phases if p.memory.host_peak_rss]
        peak = max(rss) if rss else None
        source = f"host: peak resident memory of the trial process ({host.source})"
    first = config.phases[0].measurement if config.phases else None
    failure = config.failure
    steady = config.steady
    return {
        "items_per_step": config.items_per_step,
        "steady_times": steady.times if steady else None,
        "steady_host": asdict(steady.host) if steady and steady.host else None,
        "first_call_s": first.total if first else None,
        "warmup_converged": config.warmup_converged,
        "peak_memory_bytes": peak,
        "memory_source": source,
        "error": failure.error if failure else None,
        "location": failure.location if failure else None,
        # Each batch size is a new shape: on Neuron, a compile per trial (the ledger says which).
        "ledger": [asdict(entry) for entry in config.ledger],
    }


@dataclass
class Trial:
    stage: str  # SEARCH or SWEEP
    batch_size: int
    status: TrialStatus
    seconds: float  # whole trial, process start to exit
    steady: Measurement | None = None
    items_per_step: int | None = None
    first_call_s: float | None = None
    warmup_converged: bool | None = None
    peak_memory_bytes: int | None = None
    memory_source: str = ""
    error: str | None = None
    location: str | None = None
    oom_evidence: str | None = None  # the text (or signal) that marked it out of memory
    # COMPILER_HOST_RAM trials: the compiler's failure named, with its remedy (the sentence
    # notebook 01 gives, from Target.compiler_host_oom).
    diagnosis: str | None = None
    exit_code: int | None = None
    output_tail: str = ""  # kept for failed trials only
    compiles: list[LedgerEntry] = field(default_factory=list)  # the trial's compile ledger
    earlier: list[Measurement] = field(default_factory=list)  # noisier attempts set aside
    remeasure_note: str = ""

    @property
    def fits(self) -> bool:
        return self.status == OK

    @property
    def measurement(self) -> Measurement | None:
        return self.steady

    @property
    def compile_seconds(self) -> float | None:
        """Compile time the compiler reported for this trial; None where it reports none."""
        known = [entry.seconds for entry in self.compiles if entry.seconds is not None]
        return sum(known) if known else None

    @property
    def steady_compiles(self) -> list[LedgerEntry]:
        """Compiles during the timed steps: their time is inside the measured throughput."""
        return [entry for entry in self.compiles if entry.phase == PHASE_STEADY]

    def compile_summary(self) -> str:
        """ "2 compile(s), 3.04 s, 1 in steady state": the trial line's and the table's words."""
        if not self.compiles:
            return "no compile recorded"
        seconds = self.compile_seconds
        text = f"{len(self.compiles)} compile(s)"
        text += f", {format_seconds(seconds)}" if seconds is not None else ""
        steady = self.steady_compiles
        return text + (f", {len(steady)} in steady state" if steady else "")

    @property
    def throughput(self) -> float | None:
        return items_per_second(self.items_per_step, self.steady)

    def line(self) -> str:
        """One log line: what the CLI prints per trial."""
        details = []
        if self.peak_memory_bytes is not None:
            details.append(f"peak {self.peak_memory_bytes / 2**20:,.0f} MiB")
        if self.compiles:
            details.append(self.compile_summary())
        if self.diagnosis:
            why: str | None = self.diagnosis
        elif self.error:
            why = self.error.splitlines()[0][:160]
        else:
            why = self.oom_evidence or None
        head = f"{self.stage} batch {self.batch_size}: {self.status}"
        return log_line(head, self.steady, details=details, why=why, seconds=self.seconds)


def classify(
    stage: str, batch_size: int, outcome: ChildOutcome, target: Target, budget: MemoryBudget
) -> Trial:
    """Turn a child's outcome into a trial with a status (see the module docstring)."""
    trial = Trial(stage, batch_size, ERROR, outcome.seconds, exit_code=outcome.exit_code)
    result = outcome.result
    if result is not None:
        trial.items_per_step = result.get("items_per_step")
        times = result.get("steady_times")
        host = host_load_from(result.get("steady_host"))
        trial.steady = Measurement(times, host=host) if times else None
        trial.first_call_s = result.get("first_call_s")
        trial.warmup_converged = result.get("warmup_converged")
        trial.peak_memory_bytes = result.get("peak_memory_bytes")
        trial.memory_source = result.get("memory_source", "")
        trial.error = result.get("error")
        trial.location = result.get("location")
        trial.compiles = [LedgerEntry(**entry) for entry in result.get("ledger", [])]
    if outcome.status == TIMED_OUT:
        trial.status = TIMEOUT
        trial.error = f"still running after {format_seconds(outcome.seconds)}: killed"
    elif trial.error or result is None:
        text = f"{trial.error or ''}\n{outcome.output_tail}"
        # Checked first: a compile killed for host RAM never reached the device.
        diagnosis = target.compiler_host_oom(text)
        evidence = None if diagnosis else target.out_of_memory_evidence(text)
        if (
            diagnosis is None
            and evidence is None
            and outcome.status == SIGNALLED
            and outcome.signal_name == "SIGKILL"
        ):
            evidence = "killed by SIGKILL, the signal of the Linux OOM killer"
        if diagnosis is not None:
            trial.status, trial.diagnosis = COMPILER_HOST_RAM, diagnosis
        elif evidence is not None:
            trial.status, trial.oom_evidence = OOM, evidence
        elif result is None:
            trial.status = CRASHED
            trial.error = (
                f"the process died ({outcome.signal_name or f'exit code {outcome.exit_code}'}) "
                "without reporting"
            )
    elif trial.peak_memory_bytes is not None and trial.peak_memory_bytes > budget.usable:
        trial.status = OVER_BUDGET
    else:
        trial.status = OK
    if not trial.fits:
        trial.output_tail = outcome.output_tail
    return trial


@dataclass
class TrialRunner:
    """Runs batch trials of one workload on one target, each in a fresh child process."""

    spec: WorkloadSpec
    target: Target
    budget: MemoryBudget
    mode: str
    timeout_s: float
    log: Callable[[str], None] = print

    def run(self, stage: str, batch_size: int, steady_steps: int, warmup: WarmupRule) -> Trial:
        job = BatchTrialJob(
            self.spec, self.target.name, batch_size, self.mode, steady_steps, warmup
        )
        outcome = run_in_child(job, self.target.trial_start_method, self.timeout_s)
        trial = classify(stage, batch_size, outcome, self.target, self.budget)
        self.log(trial.line())
        return trial


def trial_bound(low: int, high: int) -> int:
    """Most trials the search may need: ceil(log2(range)) + 2."""
    return math.ceil(math.log2(high - low + 1)) + 2


@dataclass
class SearchResult:
    low: int
    high: int
    bound: int
    trials: list[Trial] = field(default_factory=list)
    largest_fit: int | None = None
    smallest_failure: int | None = None
    stopped: str = ""  # why the search ended, in one sentence
    # The batch whose compile was killed for host RAM, where the search stopped; None otherwise.
    compiler_host_ram: int | None = None


class TrialFailed(RuntimeError):
    """A search trial failed for a reason other than memory (an error in the model or the
    workbook): the search cannot say what fits, so the notebook fails and names it."""

    def __init__(self, trial: Trial) -> None:
        where = f" at {trial.location}" if trial.location else ""
        error = (trial.error or "no error reported").strip().splitlines()[0]
        super().__init__(
            f"batch {trial.batch_size} failed, not for lack of memory: {error}{where}; "
            "the batch search cannot judge memory from a failing step"
        )
        self.trial = trial


class _CompilerOutOfHostRam(Exception):
    """Ends the search at a COMPILER_HOST_RAM trial."""

    def __init__(self, trial: Trial) -> None:
        super().__init__(trial.diagnosis)
        self.trial = trial


def _stop_for_compiler_host_ram(result: SearchResult, trial: Trial) -> None:
    """The search ends at `trial`: what fit before it stays measured, and the reason says the
    limit met is the host's while compiling, not the device's memory (module docstring)."""
    fitted = [t.batch_size for t in result.trials if t.fits]
    failed = [t.batch_size for t in result.trials if not t.fits and t.status != COMPILER_HOST_RAM]
    result.largest_fit = max(fitted, default=None)
    result.smallest_failure = min(failed, default=None)
    result.compiler_host_ram = trial.batch_size
    measured = (
        f"batch {result.largest_fit} is the largest measured to fit (the device's limit is at "
        "least that)"
        if result.largest_fit is not None
        else "no batch size was measured to fit"
    )
    result.stopped = (
        f"the search stopped at batch {trial.batch_size}: {trial.diagnosis}. That is not the "
        f"device's memory limit, and a larger batch compiles a larger graph, so the search "
        f"ends here; {measured}"
    )


def search_largest_batch(
    runner: TrialRunner, low: int, high: int, *, progress_bars: bool = False
) -> SearchResult:
    """Largest batch in [low, high] that fits: the two ends first (does anything fit; does
    everything), then bisection between the largest fit and the smallest failure. That takes
    at most ceil(log2(high - low + 1)) + 2 trials, and every trial is kept. A trial whose
    compile is killed for host RAM ends the search there (module docstring)."""
    if not 1 <= low <= high:
        raise BadInput(f"batch range [{low}, {high}]: need 1 <= min_batch <= max_batch.")
    result = SearchResult(low, high, trial_bound(low, high))
    bar = progress_bar(total=result.bound, desc="largest-batch search", disable=not progress_bars)

    def fits(batch_size: int) -> bool:
        trial = runner.run(SEARCH, batch_size, SEARCH_STEADY_STEPS, SEARCH_WARMUP)
        result.trials.append(trial)
        bar.update()
        if trial.status == COMPILER_HOST_RAM:
            raise _CompilerOutOfHostRam(trial)
        if trial.status in (ERROR, CRASHED) and not any(t.fits for t in result.trials):
            # Nothing ran at all, and not for memory: "no batch size fits" would be a false
            # finding about the model's memory, so the notebook fails and names the error.
            raise TrialFailed(trial)
        return trial.fits

    try:
        if not fits(low):
            result.smallest_failure = low
            result.stopped = f"the smallest batch, {low}, does not fit: nothing in range does"
            return result
        if high == low or fits(high):
            result.largest_fit = high
            result.stopped = (
                f"the largest batch tried, max_batch {high}, fits: raise max_batch to look further"
            )
            return result
        fit, fail = low, high
        while fail - fit > 1:
            middle = (fit + fail) // 2
            if fits(middle):
                fit = middle
            else:
                fail = middle
        result.largest_fit, result.smallest_failure = fit, fail
        result.stopped = f"batch {fit} fits and {fail} does not"
        return result
    except _CompilerOutOfHostRam as stop:
        _stop_for_compiler_host_ram(result, stop.trial)
        return result
    finally:
        bar.total = bar.n  # bisection ends before its bound: the search is complete, not cut
        bar.close()


def power_of_two_sizes(low: int, high: int) -> list[int]:
    sizes, size = [], 1
    while size <= high:
        if size >= low:
            sizes.append(size)
        size *= 2
    return sizes


def sweep_batch_sizes(
    runner: TrialRunner,
    sizes: Sequence[int],
    steady_steps: int,
    sweep: SweepRun | None = None,
) -> list[Trial]:
    """One full trial per batch size, taken again while it is noisy or loaded (`sweep.policy`); a
    size that fails is recorded and the sweep goes on (a compile killed for host RAM too,
    recorded with its remedy)."""
    sweep = sweep or SweepRun()
    trials = []
    for batch_size in progress_bar(sizes, desc="batch-size sweep", disable=not sweep.progress_bars):

        def attempt(batch_size: int = batch_size) -> Trial:
            return runner.run(SWEEP, batch_size, steady_steps, SWEEP_WARMUP)

        first = attempt()
        trials.append(
            sweep.policy.settle(first, attempt, f"sweep batch {batch_size}")
            if first.fits
            else first
        )
    return trials


BATCH_RULE = (
    f"among sizes that fit the memory budget with its margin, {COMPARISON_RULE}; among the "
    "batches indistinguishable from the fastest, the smallest is chosen (memory headroom, and a "
    "smaller global batch and learning-rate change), and the global-batch plan may use up to "
    "the largest of them to need fewer accumulation steps"
)


@dataclass(frozen=True)
class BatchChoice:
    batch_size: int
    throughput: float
    best_batch_size: int
    best_throughput: float
    rule: str
    # Every batch indistinguishable from the fastest (BATCH_RULE), smallest first.
    within_noise: tuple[int, ...] = ()

    @property
    def largest_within_noise(self) -> int:
        return max(self.within_noise, default=self.batch_size)


def choose_batch(trials: Sequence[Trial]) -> BatchChoice | None:
    """BATCH_RULE over the trials that fit; None when none did."""
    rated = [
        Rated(t.batch_size, t.items_per_step, t.steady)
        for t in trials
        if t.fits and t.steady is not None and t.items_per_step
    ]
    pick = fastest_then_cheapest(rated, lambda batch: (batch,))
    if pick is None:
        return None
    return BatchChoice(
        pick.chosen.setting,
        pick.chosen.rate,
        pick.fastest.setting,
        pick.fastest.rate,
        BATCH_RULE,
        tuple(sorted(c.setting for c in pick.tied)),
    )
