"""Notebook 01 for a `script:` workload: the script's own loop, timed by its own steps.

The script is run again, watched, on the target; each optimizer step's wall time (the watch
reads the clock at each `optimizer.step`, after the target's synchronize) is split into the
same three phases as every configuration: the first step, a warm-up that ends by the same
adaptive rule (timing.WarmupRule), and a steady state of the same number of steps. The run is
stopped as soon as those steps are in, or earlier when the script's own loop ends.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from workbench.baseline.records import BaselineSettings
from workbench.targets.base import Target
from workbench.timing import HostLoad, HostLoadProbe, Measurement, format_seconds
from workbench.workload import Workload

# How the first step's extra time is read: it holds everything the script does once.
FIRST_STEP_EXCESS_RULE = (
    "the script's first step minus the robust median of its steady steps (both the watch's "
    "clock at optimizer.step, target synchronized)"
)
# The watch answers a script's torch.compile with the model (see workloads/script.py), so the
# script's own loop runs eager: its first-step excess holds no compile on the target.
COMPILE_NOTE = (
    "the script calls torch.compile at {sites}; the watch answers that call with the model "
    "itself, so the script's loop ran eager and its first-step excess holds no compile; the "
    "compile on the target is the compiled configurations' first call"
)


@dataclass
class ScriptSteps:
    """The script's own steps, split into the baseline's phases (seconds per step)."""

    step_seconds: list[float]
    warmup_steps: int  # steps after the first that the warm-up rule took
    warmup_converged: bool | None  # None: the script ended before the rule could settle
    steady_steps_asked: int
    stopped_by_workbook: bool  # False: the script's own loop ended first
    compile_called_at: list[str] = field(default_factory=list)
    host: HostLoad | None = None  # the machine's state while the script's loop ran

    @property
    def first(self) -> float:
        return self.step_seconds[0]

    @property
    def warmup(self) -> list[float]:
        return self.step_seconds[1 : 1 + self.warmup_steps]

    @property
    def steady(self) -> list[float]:
        return self.step_seconds[1 + self.warmup_steps :]

    @property
    def first_step_excess(self) -> float | None:
        """FIRST_STEP_EXCESS_RULE; None without steady steps."""
        if not self.steady:
            return None
        return self.first - Measurement(self.steady).robust_median

    def sentences(self) -> list[str]:
        """What the split says, each with where it comes from."""
        said = [
            f"{len(self.step_seconds)} optimizer step(s) of the script's own loop: first "
            f"{format_seconds(self.first)}, warm-up {self.warmup_steps} step(s)"
            + (
                ""
                if self.warmup_converged is None
                else " (settled)"
                if self.warmup_converged
                else " (hit its cap without settling)"
            )
            + f", steady {len(self.steady)} of the {self.steady_steps_asked} asked"
        ]
        if self.host is not None and self.host.loaded:
            said.append(f"timed on a loaded machine ({self.host.shares()})")
        if not self.stopped_by_workbook:
            said.append(
                "the script's own loop ended before the workbook stopped it, so its phases hold "
                "only the steps it ran"
            )
        excess = self.first_step_excess
        if excess is not None:
            said.append(f"first-step excess {format_seconds(excess)} ({FIRST_STEP_EXCESS_RULE})")
        if self.compile_called_at:
            said.append(COMPILE_NOTE.format(sites=", ".join(self.compile_called_at)))
        return said


def split_steps(seconds: list[float], settings: BaselineSettings) -> tuple[int, bool | None]:
    """(warm-up steps, converged) for the step times after the first, by the warm-up rule the
    measured configurations use: it ends at the first count whose recent steps are steady, or
    at its cap; converged is None while neither is reached."""
    after_first = seconds[1:]
    rule = settings.warmup
    for count in range(1, min(len(after_first), rule.max_steps) + 1):
        if rule.is_steady(after_first[:count]):
            return count, True
    if len(after_first) >= rule.max_steps:
        return rule.max_steps, False
    return len(after_first), None


def enough_steps(settings: BaselineSettings) -> Callable[[list[float]], bool]:
    """The watch's stop rule: the first step, the warm-up and the steady steps are in. It
    judges only the newest step each time (the same test split_steps makes at that count), so
    the time it takes, which the next step's clock includes, stays small."""
    rule = settings.warmup
    warmup: int | None = None

    def done(seconds: list[float]) -> bool:
        nonlocal warmup
        after_first = seconds[1:]
        if warmup is None:
            if after_first and (rule.is_steady(after_first) or len(after_first) >= rule.max_steps):
                warmup = len(after_first)
            return False
        return len(after_first) - warmup >= settings.steady_steps

    return done


def time_script(
    workload: Workload, target: Target, settings: BaselineSettings
) -> ScriptSteps | None:
    """The script's own loop on `target`, for a `script:` workload; None for any other."""
    if workload.script_run is None:
        return None
    # Imported here: the script workload module pulls in the device redirection, which no
    # other workload needs.
    from workbench.workloads.script import run_script

    most = 1 + settings.warmup.max_steps + settings.steady_steps
    # What else the machine did meanwhile, read as for every measured phase.
    with HostLoadProbe() as load:
        capture, _ = run_script(workload.spec, target, steps=most, until=enough_steps(settings))
    seconds = capture.step_seconds()
    warmup, converged = split_steps(seconds, settings)
    if not capture.stopped and converged is None:
        # Its loop ended mid-warm-up: the steps it ran after the first count as warm-up.
        warmup = len(seconds) - 1
    return ScriptSteps(
        step_seconds=seconds,
        warmup_steps=warmup,
        warmup_converged=converged,
        steady_steps_asked=settings.steady_steps,
        stopped_by_workbook=capture.stopped,
        compile_called_at=list(capture.compile_calls),
        host=load.result,
    )
