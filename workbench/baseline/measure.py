"""Baseline: what a training step and an inference call cost on a target, eager and compiled.

Each configuration (step kind x mode) is timed in three phases, with the target synchronized
before every clock read: the first call (tracing and compilation land here), an adaptive warm-up
that ends when the recent steps are stable, and a steady state of at least N samples. Every phase
keeps its raw per-step times, its compile-counter change and its memory peaks, so a report or a
later comparison can re-derive each number.
"""

from __future__ import annotations

import math
import time
from bisect import bisect_right
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from time import perf_counter
from typing import Any

import torch

from workbench.baseline.checklist import collect_checklist
from workbench.baseline.records import (
    COMPILED,
    EAGER,
    INFER,
    PHASE_COMPILE,
    PHASE_FIRST_CALL,
    PHASE_LABELS,
    PHASE_LOSS,
    PHASE_SETUP,
    PHASE_STEADY,
    PHASE_WARMUP,
    TAIL_QUANTILE,
    TRAIN,
    BaselineResult,
    BaselineSettings,
    ConfigResult,
    CounterDelta,
    LedgerEntry,
    MemoryUse,
    PhaseResult,
    StepFailure,
)
from workbench.baseline.reference import write_reference
from workbench.baseline.script_steps import time_script
from workbench.errors import describe_error
from workbench.progress import progress_bar
from workbench.targets.base import Target
from workbench.targets.compiling import CompileFailed
from workbench.timing import (
    ChildPeakRss,
    HostLoadProbe,
    HostPeakRss,
    Measurement,
    format_seconds,
)
from workbench.torch_messages import grouped_torch_messages
from workbench.workload import Workload, batch_size_of


@dataclass
class PreparedStep:
    """One configuration ready to run: `step()` runs one training step or inference call."""

    kind: str
    mode: str
    step: Callable[[], Any]  # returns the loss (training) or the outputs (inference)
    batch_size: int
    items_per_step: int
    targets: torch.Tensor  # of the fixed batch, for the loss on inference outputs
    loss_fn: Callable[[Any, torch.Tensor], torch.Tensor]  # (outputs, targets) -> loss


def prepare_step(workload: Workload, target: Target, kind: str, mode: str) -> PreparedStep:
    """A fresh seeded model (and optimizer) on the target, the fixed batch, and the step.

    Compiled mode compiles the model with the target's compiler; the loss and the optimizer step
    stay eager, which is how training scripts usually apply torch.compile. Dynamo's in-process
    caches are reset first, so every compiled configuration pays its own compile (on-disk compiler
    caches are used as found).
    """
    model = workload.build_model(target.device)
    model.train(kind == TRAIN)
    inputs, targets = workload.batch(target.device)
    forward: Callable[..., Any] = model
    if mode == COMPILED:
        forward = target.compile_fresh(model)
    batch_size = batch_size_of(inputs, workload.batch_dim)

    if kind == TRAIN:
        optimizer = workload.make_optimizer(model)

        def step() -> Any:
            optimizer.zero_grad(set_to_none=True)
            loss = workload.compute_loss(workload.forward(forward, inputs), targets)
            loss.backward()
            optimizer.step()
            return loss.detach()

    else:
        # no_grad rather than inference_mode: outputs stay ordinary tensors that autograd can
        # use later, and Dynamo guards on the mode, so mixing the two would compile twice.
        def step() -> Any:
            with torch.no_grad():
                return workload.forward(forward, inputs)

    items = batch_size * workload.items_per_sample()
    return PreparedStep(kind, mode, step, batch_size, items, targets, workload.compute_loss)


@dataclass
class _PhaseSteps:
    """One phase's steps as they ran: times (s), losses, wall-clock starts, what raised."""

    times: list[float] = field(default_factory=list)
    losses: list[torch.Tensor] = field(default_factory=list)
    starts: list[float] = field(default_factory=list)
    failure: BaseException | None = None


class _ConfigRunner:
    """Runs one configuration's phases and fills its ConfigResult."""

    def __init__(
        self,
        prepared: PreparedStep,
        target: Target,
        host: HostPeakRss,
        log: Callable[[str], None],
        progress_bars: bool,
    ) -> None:
        self.prepared = prepared
        self.target = target
        self.host = host
        self.log = log
        self.progress_bars = progress_bars
        self.result = ConfigResult(
            prepared.kind, prepared.mode, prepared.batch_size, prepared.items_per_step
        )
        self.next_step = 1
        # Inference keeps only the first and the latest output (for their losses).
        self.first_output: Any = None
        self.last_output: Any = None
        self._loss_step = 0  # the step whose output the loss is being computed on

    @property
    def name(self) -> str:
        return f"{self.prepared.kind}/{self.prepared.mode}"

    def run(self, settings: BaselineSettings) -> ConfigResult:
        self.target.synchronize()
        phases = (
            (PHASE_FIRST_CALL, 1, None),
            (PHASE_WARMUP, settings.warmup.max_steps, settings.warmup.is_steady),
            (PHASE_STEADY, settings.steady_steps, None),
        )
        current = PHASE_FIRST_CALL
        try:
            for current, max_steps, stop in phases:
                if not self._phase(current, max_steps, stop):
                    break
            current = PHASE_LOSS
            self._losses()
        except Exception as exc:
            # Outside a step: the loss on inference outputs, or the target's own reads around
            # the steps (memory, compile counters). Either fails this configuration only.
            if self.result.failure is None:  # a step that raised earlier is the first cause
                step = self._loss_step if current == PHASE_LOSS else self.next_step
                self._fail(current, step, exc)
        return self.result

    def _fail(self, phase: str, step: int, exc: BaseException) -> None:
        error = describe_error(exc)
        self.result.failure = StepFailure(
            self.prepared.kind,
            self.prepared.mode,
            phase,
            step,
            error.text,
            error.location,
            diagnosis=self.target.compiler_host_oom(error.text) or "",
        )
        self.log(self.result.failure.summary())

    def _losses(self) -> None:
        losses = self.result.losses
        if self.prepared.kind == INFER:
            self._inference_losses()
        elif losses:
            self.result.loss_first, self.result.loss_last = losses[0], losses[-1]
            bad = (step for step, loss in enumerate(losses, 1) if not math.isfinite(loss))
            self.result.nonfinite_step = next(bad, None)

    def _phase(
        self, phase: str, max_steps: int, stop: Callable[[list[float]], bool] | None
    ) -> bool:
        """Run one phase; False when a step raised (the failure is recorded)."""
        first_step = self.next_step
        self.host.reset()
        self.target.reset_peak_memory()
        before = self.target.compile_counters()
        # Wall-clock step starts place each compile the target reports at its step.
        phase_started = time.time()
        # The first call is where compiles happen: sample the compiler's worker processes there
        # only, so no sampling thread competes with the timed warm-up and steady steps.
        workers = ChildPeakRss() if phase == PHASE_FIRST_CALL else None
        # What else the machine did while the steps ran; the compiler's worker processes are
        # this process's children, which the probe counts as the measurement's own work.
        load = HostLoadProbe()
        with workers or nullcontext(), load:
            steps = self._steps(phase, max_steps, stop)
        times = steps.times
        record = PhaseResult(
            phase,
            first_step,
            Measurement(times, host=load.result) if times else None,
            self._memory(workers),
            CounterDelta.between(before, self.target.compile_counters()),
            converged=bool(stop(times)) if stop and steps.failure is None else None,
        )
        self.result.phases.append(record)
        self._ledger(phase, first_step, phase_started, steps.starts)
        # Read back after the phase, so host transfers never land inside a timed step.
        self.result.losses.extend(float(loss) for loss in steps.losses)
        if steps.failure is not None:
            self._fail(phase, self.next_step, steps.failure)
            return False
        self.log(f"{self.name}: {_phase_line(record)}")
        if phase == PHASE_STEADY and self.result.steady_compiles():
            self.log(
                f"{self.name}: steady-state compile: {self.result.steady_compiles()[0].sentence()}"
            )
        return True

    def _steps(
        self, phase: str, max_steps: int, stop: Callable[[list[float]], bool] | None
    ) -> _PhaseSteps:
        """The phase's timed steps, until `max_steps`, `stop` or a step that raises."""
        steps = _PhaseSteps()
        bar = progress_bar(
            total=max_steps,
            desc=f"{self.name} {PHASE_LABELS[phase]}",
            leave=False,
            disable=not self.progress_bars,
        )
        try:
            while len(steps.times) < max_steps and not (stop and stop(steps.times)):
                steps.starts.append(time.time())
                start = perf_counter()
                value = self.prepared.step()
                self.target.synchronize()
                steps.times.append(perf_counter() - start)
                self._keep(value, steps.losses)
                self.next_step += 1
                bar.update()
        except Exception as exc:  # recorded with phase and step; the other configurations go on
            steps.failure = exc
        finally:
            if steps.failure is None:  # a warm-up that converged early is complete, not cut short
                bar.total = bar.n
            bar.close()
        return steps

    def _memory(self, workers: ChildPeakRss | None) -> MemoryUse:
        """The phase's peak memory: host, device, and the compiler's largest worker process."""
        device = self.target.peak_memory()
        memory = MemoryUse(self.host.peak(), device.peak_allocated, device.peak_reserved)
        if workers is not None and workers.largest[1]:
            memory.compiler_peak_rss = workers.peak
            name, rss = workers.largest
            memory.compiler_largest_process = f"{name}: {rss / 2**20:.0f} MiB"
        return memory

    def _ledger(
        self, phase: str, first_step: int, started: float, step_starts: list[float]
    ) -> None:
        """The phase's compiles in the ledger, each at the step during which it started."""
        for event in self.target.compile_events(started):
            index = max(bisect_right(step_starts, event.started_at) - 1, 0)
            step = first_step + index
            kind, mode = self.prepared.kind, self.prepared.mode
            self.result.ledger.append(LedgerEntry.of(event, kind, mode, phase, step))

    def _keep(self, value: Any, losses: list[torch.Tensor]) -> None:
        """Training keeps every (scalar) loss; inference only its first and latest output, so
        large outputs never pile up in memory during a phase."""
        if self.prepared.kind == TRAIN:
            losses.append(value)
        else:
            if self.first_output is None:
                self.first_output = value
            self.last_output = value

    def _inference_losses(self) -> None:
        """Loss on the first and the last output: weights and batch are fixed, so a NaN missing
        from the first output can only come later through nondeterminism, and shows in the last."""
        if self.first_output is None or self.last_output is None:
            return
        last_step = self.next_step - 1
        loss_fn, targets = self.prepared.loss_fn, self.prepared.targets
        self._loss_step = 1
        first = float(loss_fn(self.first_output, targets))
        self._loss_step = last_step
        last = float(loss_fn(self.last_output, targets)) if last_step > 1 else first
        self.result.loss_first, self.result.loss_last = first, last
        if not math.isfinite(first):
            self.result.nonfinite_step = 1
        elif not math.isfinite(last):
            self.result.nonfinite_step = last_step


def _phase_line(phase: PhaseResult) -> str:
    """One log line per phase: what a headless run shows while it works."""
    m = phase.measurement
    assert m is not None
    text = f"{PHASE_LABELS[phase.phase]} {len(m.times)} step(s) in {format_seconds(m.total)}"
    if phase.phase == PHASE_WARMUP:
        text += ", converged" if phase.converged else ", stopped at the cap without converging"
    if phase.phase == PHASE_STEADY:
        # The robust median, as in every table and comparison of the report.
        tail_label, tail = m.tail(TAIL_QUANTILE)
        text += (
            f", median {format_seconds(m.robust_median)}, IQR {m.relative_iqr:.0%} of median, "
            f"{tail_label} {format_seconds(tail)}"
        )
        if phase.compile.recompiles:
            text += f", {phase.compile.recompiles} RECOMPILE(S) DURING STEADY STATE"
    if phase.compile.graphs:
        text += f", {phase.compile.graphs} graph(s) compiled"
    if m.host is not None:
        text += f"; {m.host.sentence()}"
    return text


def run_config(
    workload: Workload,
    target: Target,
    kind: str,
    mode: str,
    settings: BaselineSettings,
    *,
    host: HostPeakRss | None = None,
    log: Callable[[str], None] = print,
    progress_bars: bool = False,
) -> ConfigResult:
    """One configuration, start to finish; a raising step ends it with a recorded failure.
    Torch's warnings meanwhile (Dynamo's graph breaks and recompiles) are kept grouped."""
    with grouped_torch_messages() as messages:
        try:
            prepared = prepare_step(workload, target, kind, mode)
        except Exception as exc:
            result = _setup_failure(workload, target, kind, mode, exc, log)
        else:
            result = measure(
                prepared, target, settings, host=host, log=log, progress_bars=progress_bars
            )
    result.torch_messages = messages
    return result


def _setup_failure(
    workload: Workload,
    target: Target,
    kind: str,
    mode: str,
    exc: Exception,
    log: Callable[[str], None],
) -> ConfigResult:
    """A configuration that never got to its first step: its setup or its compile raised."""
    compile_failed = isinstance(exc, CompileFailed)
    # A compile failure is told by what the compiler raised, not by the wrapper.
    error = describe_error((exc.__cause__ or exc) if compile_failed else exc)
    batch_size = workload.batch_size
    result = ConfigResult(kind, mode, batch_size, batch_size * workload.items_per_sample())
    result.failure = failure = StepFailure(
        kind,
        mode,
        PHASE_COMPILE if compile_failed else PHASE_SETUP,
        0,
        error.text,
        error.location,
        compile_failed,
        diagnosis=target.compiler_host_oom(error.text) or "",
    )
    log(failure.summary())
    return result


def measure(
    prepared: PreparedStep,
    target: Target,
    settings: BaselineSettings,
    *,
    host: HostPeakRss | None = None,
    log: Callable[[str], None] = print,
    progress_bars: bool = False,
) -> ConfigResult:
    """First call, warm-up and steady state of an already prepared step."""
    runner = _ConfigRunner(prepared, target, host or HostPeakRss(), log, progress_bars)
    return runner.run(settings)


def _step_failure_is_compile_failure(eager: ConfigResult | None, compiled: ConfigResult) -> bool:
    """A compiled run that fails before its first call completes, where eager ran that call."""
    failure = compiled.failure
    eager_first_call = eager.phase(PHASE_FIRST_CALL) if eager is not None else None
    return (
        failure is not None
        and failure.phase == PHASE_FIRST_CALL
        and eager_first_call is not None
        and eager_first_call.measurement is not None
    )


def run_baseline(
    workload: Workload,
    target: Target,
    settings: BaselineSettings | None = None,
    *,
    reference_path: Path | None = None,
    log: Callable[[str], None] = print,
    progress_bars: bool = False,
) -> BaselineResult:
    """Every selected (kind, mode) configuration, then the pre-migration checklist, then, for a
    `script:` workload, the script's own loop (script_steps.py).

    A failing configuration never stops the others. `reference_path` receives the reference
    artifact (torch.save); `log` gets one line per phase; `progress_bars` adds tqdm bars for
    interactive use.
    """
    settings = settings or BaselineSettings()
    started = perf_counter()
    host = HostPeakRss()
    reference = write_reference(workload, target, reference_path)
    configs: list[ConfigResult] = []
    for kind in settings.kinds:
        eager: ConfigResult | None = None
        for mode in settings.modes:
            result = run_config(
                workload,
                target,
                kind,
                mode,
                settings,
                host=host,
                log=log,
                progress_bars=progress_bars,
            )
            if mode == EAGER:
                eager = result
            elif result.failure and _step_failure_is_compile_failure(eager, result):
                result.failure.compile_failure = True
            configs.append(result)
    checklist = collect_checklist(workload, target)
    script_steps = time_script(workload, target, settings)
    return BaselineResult(
        workload=workload.describe(),
        target=target.describe(),
        eager_means=target.eager_description,
        compiled_means=target.compile_description,
        settings=settings,
        host_memory_source=host.source,
        device_memory_source=target.peak_memory().source,
        compile_counter_source=target.compile_counters().source,
        configs=configs,
        checklist=checklist,
        reference=reference,
        throughput_unit=workload.throughput_unit,
        wall_seconds=perf_counter() - started,
        script_steps=script_steps,
    )
