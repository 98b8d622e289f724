"""Notebook 01 for a `script:` workload: the script's own loop, timed by its own steps.

The script is run again, watched, on the target; each optimizer step's wall time (the watch
reads the clock at each `optimizer.step`, after the target's synchronize) is split into the
same three phases as every configuration: the first step, a warm-up that ends by the same
adaptive rule (timing.WarmupRule), and a steady state of the same number of steps. The run is
stopped as soon as those steps are in, or earlier when the script's own loop ends.

Where the script calls torch.compile, this run answers the call with the target's compiler for
real, so the first step holds the script's own compile; the compiler's own records (the
target's compile_events) give the compile time beside it. Where that run fails, the loop is
timed again with the call answered by the model, and the report says the compile was not timed
and why.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from workbench.baseline.records import BaselineSettings
from workbench.errors import BadInput
from workbench.targets.base import Target
from workbench.timing import HostLoad, HostLoadProbe, Measurement, format_seconds
from workbench.workload import Workload

# How the first step's extra time is read: it holds everything the script does once.
FIRST_STEP_EXCESS_RULE = (
    "the script's first step minus the robust median of its steady steps (both the watch's "
    "clock at optimizer.step, target synchronized)"
)
COMPILED_NOTE = (
    "the script calls torch.compile at {sites}; it ran with the target's compiler ({compiler}), "
    "so its first step holds the compile: the compiler's own records give {count} compile(s), "
    "{seconds}"
)
NOT_COMPILED_NOTE = (
    "the script calls torch.compile at {sites}, but its compile was not timed: with the "
    "target's compiler the script failed ({why}), so its loop ran eager, the call answered "
    "with the model"
)
OPTIONS_NOTE = (
    "its torch.compile options ({options}) were not passed: the target's compiler takes its own"
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
    compiler: str = ""  # the target's compiler the script's torch.compile ran with
    compiles: int = 0  # compiles the compiler recorded during the loop
    compile_seconds: float | None = None  # their total, where the compiler reports times
    compile_not_timed: str = ""  # why the script's compile was not timed, where it was not
    compile_options: dict[str, dict[str, str]] = field(default_factory=dict)

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
        said += self._compile_sentences()
        return said

    def _compile_sentences(self) -> list[str]:
        if not self.compile_called_at:
            return []
        sites = ", ".join(self.compile_called_at)
        if self.compile_not_timed:
            said = [NOT_COMPILED_NOTE.format(sites=sites, why=self.compile_not_timed)]
        else:
            seconds = (
                f"{format_seconds(self.compile_seconds)} in all"
                if self.compile_seconds is not None
                else "without times"
            )
            said = [
                COMPILED_NOTE.format(
                    sites=sites, compiler=self.compiler, count=self.compiles, seconds=seconds
                )
            ]
        if self.compile_options:
            options = "; ".join(
                f"{site}: " + ", ".join(f"{k}={v}" for k, v in given.items())
                for site, given in self.compile_options.items()
            )
            said.append(OPTIONS_NOTE.format(options=options))
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
    compiles = bool(workload.script_run["compile_called_at"])
    since = time.time()
    not_timed = ""
    try:
        # What else the machine did meanwhile, read as for every measured phase.
        with HostLoadProbe() as load:
            capture, _ = run_script(
                workload.spec,
                target,
                steps=most,
                until=enough_steps(settings),
                compile_on_target=compiles,
            )
    except BadInput as failed:
        if not compiles:
            raise
        # The capture ran this script eager; with the target's compiler it did not.
        not_timed = str(failed).split(": ", 1)[-1].rstrip(".")
        with HostLoadProbe() as load:
            capture, _ = run_script(workload.spec, target, steps=most, until=enough_steps(settings))
    events = target.compile_events(since) if compiles and not not_timed else []
    timed = [e.seconds for e in events if e.seconds is not None]
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
        compiler=target.compile_description if compiles else "",
        compiles=len(events),
        compile_seconds=sum(timed) if timed else None,
        compile_not_timed=not_timed,
        compile_options=dict(capture.compile_options),
    )
