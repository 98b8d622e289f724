"""Notebook 01's records: settings, per-phase and per-configuration results, compile payback, and
the shape of 01_baseline.json."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from workbench.checks import Baseline
from workbench.errors import BadInput
from workbench.markup import cut_at_word
from workbench.results import MeasuredOn
from workbench.scorecard import ATTENTION, BLOCKER, Finding, Verdict, judge
from workbench.targets.compiling import CompileCounters, CompileEvent
from workbench.timing import (
    FLUCTUATION_SEVERE,
    HOST_LOAD_RULE,
    OUTLIER_RULE,
    RATIO_INTERVAL_METHOD,
    Measurement,
    WarmupRule,
    format_seconds,
    ratio_of_medians_interval,
    tail_rule,
)
from workbench.torch_messages import MessageGroup

if TYPE_CHECKING:  # script_steps reads BaselineSettings from here; checklist and
    # reference import torch, which the readers of 01_baseline.json (compare, collect) never need
    from workbench.baseline.checklist import Checklist
    from workbench.baseline.reference import ReferenceSummary
    from workbench.baseline.script_steps import ScriptSteps

TRAIN = "train"


INFER = "infer"


EAGER = "eager"


COMPILED = "compiled"


KINDS = (TRAIN, INFER)


MODES = (EAGER, COMPILED)


KIND_LABELS = {TRAIN: "training step", INFER: "inference call"}


PHASE_SETUP = "setup"  # building the model, optimizer and batch


PHASE_COMPILE = "compile"  # target.compile() itself; torch.compile is lazy, so this rarely fails


PHASE_FIRST_CALL = "first_call"


PHASE_WARMUP = "warmup"


PHASE_STEADY = "steady"


PHASE_LOSS = "loss"  # the loss on an inference call's outputs, and reading losses back


# The one compile figure reports give, defined once.
COMPILE_COST_DEFINITION = (
    "compile cost: the compiled first call minus its own steady median, with the compiler's "
    "on-disk cache cold (nothing cached) or warm (graphs reused from an earlier run)"
)
# What a compiled first call includes, said wherever compile times are shown.
COMPILE_CACHE_NOTE = (
    "Dynamo's in-process caches are reset before each compiled configuration; the on-disk "
    "compile cache is the run's folder (the result file's compile_cache), so a run after one "
    "that filled it takes its graphs from the cache: the ledger says which"
)


PHASE_LABELS = {
    PHASE_SETUP: "set-up",
    PHASE_COMPILE: "compile",
    PHASE_FIRST_CALL: "first call",
    PHASE_WARMUP: "warm-up",
    PHASE_STEADY: "steady state",
    PHASE_LOSS: "loss on the outputs",
}


# The tail every table and log line gives: a p99 only where the sample count supports one.
TAIL_QUANTILE = 0.99


@dataclass(frozen=True)
class BaselineSettings:
    steady_steps: int = 30
    warmup: WarmupRule = field(default_factory=WarmupRule)
    kinds: tuple[str, ...] = KINDS
    modes: tuple[str, ...] = MODES

    @classmethod
    def from_params(cls, params: Mapping[str, Any]) -> BaselineSettings:
        """The settings from notebook 01's parameters (warmup_* make the warm-up rule)."""
        default = cls()
        return cls(
            steady_steps=params.get("steady_steps", default.steady_steps),
            warmup=WarmupRule(
                params.get("warmup_window", default.warmup.window),
                params.get("warmup_threshold", default.warmup.threshold),
                params.get("warmup_max_steps", default.warmup.max_steps),
            ),
            kinds=tuple(params.get("kinds", default.kinds)),
            modes=tuple(params.get("modes", default.modes)),
        )

    def __post_init__(self) -> None:
        if self.steady_steps < 3:
            raise BadInput(f"steady_steps {self.steady_steps}: use at least 3 samples.")
        for name, values, allowed in (("kinds", self.kinds, KINDS), ("modes", self.modes, MODES)):
            unknown = [v for v in values if v not in allowed]
            if unknown or not values:
                raise BadInput(f"{name} {list(values)!r}: choose from {', '.join(allowed)}.")


@dataclass
class MemoryUse:
    host_peak_rss: int | None  # bytes
    device_peak_allocated: int | None
    device_peak_reserved: int | None
    # First call only (where compiles happen): the compiler's worker processes, sampled.
    compiler_peak_rss: int | None = None
    compiler_largest_process: str | None = None  # "name: bytes" of the biggest one seen


@dataclass
class CounterDelta:
    """How much the target's compile counters moved during one phase."""

    graphs: int | None
    compile_seconds: float | None
    extra: dict[str, float] = field(default_factory=dict)

    @classmethod
    def between(cls, before: CompileCounters, after: CompileCounters) -> CounterDelta:
        def delta(a: float | None, b: float | None) -> float | None:
            # Dynamo reports no compile time until something compiled: None then means zero.
            return None if a is None and b is None else (b or 0) - (a or 0)

        graphs = delta(before.graphs, after.graphs)
        seconds = delta(before.compile_seconds, after.compile_seconds)
        if seconds is None and graphs == 0:
            seconds = 0.0  # no graph compiled, so no compile time, reported or not
        extra = {
            key: value - before.extra.get(key, 0)
            for key, value in after.extra.items()
            if isinstance(value, (int, float)) and not isinstance(value, bool)
        }
        return cls(None if graphs is None else int(graphs), seconds, extra)

    @property
    def recompiles(self) -> int:
        """Graphs compiled, or recompiles counted, during the phase: the larger of the two."""
        return int(max(self.graphs or 0, self.extra.get("recompiles", 0)))


@dataclass
class PhaseResult:
    phase: str
    first_step: int  # step number (1 = the first call) of this phase's first step
    measurement: Measurement | None  # None when the phase's first step raised
    memory: MemoryUse
    compile: CounterDelta
    converged: bool | None = None  # warm-up only: stability reached before the cap

    @property
    def steps(self) -> int:
        return len(self.measurement.times) if self.measurement else 0


@dataclass
class LedgerEntry:
    """One compile in the ledger: the configuration, phase and step it happened in, and what
    the target's compiler said about it (CompileEvent's fields)."""

    kind: str
    mode: str
    phase: str
    step: int
    graph_id: str
    cause: str
    seconds: float | None
    detail: str = ""
    location: str = ""
    cache: str | None = None
    saved_seconds: float | None = None

    @classmethod
    def of(cls, event: CompileEvent, kind: str, mode: str, phase: str, step: int) -> LedgerEntry:
        return cls(
            kind,
            mode,
            phase,
            step,
            event.graph_id,
            event.cause,
            event.seconds,
            event.detail,
            event.location,
            event.cache,
            event.saved_seconds,
        )

    def sentence(self) -> str:
        """The cause first, then where: what a headline or a verdict reason quotes."""
        text = f"{self.cause} at step {self.step}"
        if self.detail:
            text += f" ({_short(self.detail)})"
        if self.location:
            text += f" in {self.location}"
        return text


def _short(text: str, limit: int = 160) -> str:
    return cut_at_word(" ".join(text.split()), limit)


@dataclass
class StepFailure:
    kind: str
    mode: str
    phase: str
    step: int  # 0 for target.compile() itself
    error: str  # "ExceptionType: message"
    location: str  # innermost frame: file:line in function
    compile_failure: bool = False  # compiled mode failed where eager of the same kind ran
    # The target's name for the failure with its remedy, e.g. the compiler killed for host RAM.
    diagnosis: str = ""

    def summary(self) -> str:
        first_line = self.error.splitlines()[0] if self.error else ""
        where = PHASE_LABELS[self.phase] + (f" step {self.step}" if self.step else "")
        if self.diagnosis:
            return f"{self.kind}/{self.mode} failed in {where}: {self.diagnosis}"
        return f"{self.kind}/{self.mode} failed in {where}: {first_line}"


@dataclass
class ConfigResult:
    kind: str
    mode: str
    batch_size: int
    items_per_step: int  # samples, or tokens for sequence workloads
    phases: list[PhaseResult] = field(default_factory=list)
    losses: list[float] = field(default_factory=list)  # training: one per step, step 1 first
    loss_first: float | None = None
    loss_last: float | None = None
    nonfinite_step: int | None = None  # first step whose loss was NaN or Inf
    failure: StepFailure | None = None
    torch_messages: list[MessageGroup] = field(default_factory=list)  # torch's warnings, grouped
    ledger: list[LedgerEntry] = field(default_factory=list)  # every compile, oldest first

    def phase(self, name: str) -> PhaseResult | None:
        return next((p for p in self.phases if p.phase == name), None)

    @property
    def steady(self) -> Measurement | None:
        phase = self.phase(PHASE_STEADY)
        return phase.measurement if phase and self.failure is None else None

    @property
    def throughput(self) -> float | None:
        """Items per second at the steady-state median."""
        steady = self.steady
        if steady is None or steady.robust_median <= 0:
            return None
        return self.items_per_step / steady.robust_median

    @property
    def steady_recompiles(self) -> int:
        phase = self.phase(PHASE_STEADY)
        return phase.compile.recompiles if phase else 0

    def steady_compiles(self) -> list[LedgerEntry]:
        return [entry for entry in self.ledger if entry.phase == PHASE_STEADY]

    def steady_recompile_sentence(self) -> str:
        """'N recompile(s) during steady state' with the first one's cause, where recorded."""
        text = f"{self.steady_recompiles} recompile(s) during steady state"
        entries = self.steady_compiles()
        if entries:
            return f"{text}, first: {entries[0].sentence()}"
        return f"{text} (the compiler recorded no cause)"

    @property
    def warmup_converged(self) -> bool | None:
        phase = self.phase(PHASE_WARMUP)
        return phase.converged if phase else None

    def phase_of_step(self, step: int) -> str:
        owner = PHASE_FIRST_CALL
        for phase in self.phases:
            if step >= phase.first_step:
                owner = phase.phase
        return owner

    def loaded_phases(self) -> list[PhaseResult]:
        """The phases timed on a loaded machine (a loaded first call inflates the compile cost
        and the payback read from it, as a loaded steady state does the speed-up)."""
        return [p for p in self.phases if p.measurement and p.measurement.loaded]

    def _loaded_words(self, brief: bool) -> str | None:
        """The loaded phase a report names, steady state first (the medians and the speed-up
        come from it), with its machine's state in a sentence or, `brief`, in shares."""
        for phase in reversed(self.loaded_phases()):
            host = phase.measurement.host if phase.measurement else None
            if host is not None:
                state = host.shares() if brief else host.sentence()
                return f"{self.kind}/{self.mode} {PHASE_LABELS[phase.phase]}: {state}"
        return None

    def load_sentence(self) -> str | None:
        """Which phase was loaded and how, for a finding; None when quiet."""
        return self._loaded_words(brief=False)

    def load_brief(self) -> str | None:
        """The same in few words, for a headline that must stay one readable line."""
        return self._loaded_words(brief=True)


# Rounding slack for an interval that collapses onto its estimate (identical samples).
_INTERVAL_SLACK = 1e-9


@dataclass
class CompilePayback:
    """Eager against compiled for one step kind: speed-up with its interval, one-off cost,
    break-even point, and whether the machine was quiet enough for any of it to be claimed."""

    kind: str
    eager_median: float
    compiled_median: float
    speedup: float  # eager robust median / compiled robust median
    speedup_low: float  # the speed-up's 95% interval (interval_method says how)
    speedup_high: float
    # One-off cost of compiled mode: its own first call minus its own steady median, so
    # eager's warm-up noise never moves it.
    compile_cost: float
    break_even_steps: int | None  # None: not repaid, not told from 1, or not claimed
    interval_method: str = RATIO_INTERVAL_METHOD
    compiler_cache: str = "unknown"  # cold, warm, partly warm or unknown, during the first call
    # One brief per configuration timed on a loaded machine (ConfigResult.load_brief).
    host_loaded: list[str] = field(default_factory=list)

    @property
    def cost_words(self) -> str:
        """The compile cost with what it is, said the same way wherever it is shown."""
        cost = format_seconds(self.compile_cost)
        return f"{cost} compile cost (compiler cache {self.compiler_cache})"

    @property
    def interval_holds(self) -> bool:
        """The interval is finite, positive and contains its own estimate; anything else is a
        broken bootstrap, and is never printed."""
        slack = _INTERVAL_SLACK * max(abs(self.speedup), 1.0)
        return (
            0 < self.speedup_low
            and self.speedup_high < math.inf
            and self.speedup_low - slack <= self.speedup <= self.speedup_high + slack
        )

    @property
    def claimed(self) -> bool:
        """Whether a speed-up, its interval and a payback may be stated at all."""
        return not self.host_loaded and self.interval_holds

    @property
    def distinguishable(self) -> bool:
        """The speed-up's interval leaves out 1: compiled is really faster, or really slower."""
        return self.claimed and not self.speedup_low <= 1 <= self.speedup_high

    @property
    def interval_words(self) -> str:
        return f"95% interval {self.speedup_low:.2f}-{self.speedup_high:.2f}x"

    def sentence(self) -> str:
        label = KIND_LABELS[self.kind]
        if self.host_loaded:
            return (
                f"{label}: timed on a loaded machine ({self.host_loaded[0]}), so no speed-up "
                "or compile payback is claimed"
            )
        if not self.interval_holds:
            return (
                f"{label}: the steady samples give no usable interval for the speed-up, so no "
                "speed-up or compile payback is claimed"
            )
        interval = self.interval_words
        if not self.distinguishable:
            return (
                f"{label}: compiled and eager cannot be told apart at this noise "
                f"({self.speedup:.2f}x eager's speed, {interval}), so no payback is estimated"
            )
        if self.speedup < 1:
            tail = (
                f"so its {self.cost_words} is never repaid"
                if self.compile_cost > 0
                else "so it never pays off"
            )
            return (
                f"{label}: compiled is slower ({self.speedup:.2f}x eager's speed, {interval}), "
                f"{tail}"
            )
        if self.compile_cost <= 0:
            return (
                f"{label}: compiled is {self.speedup:.2f}x faster ({interval}) from its first step"
            )
        return (
            f"{label}: its {self.cost_words} is repaid after "
            f"~{_round_steps(self.break_even_steps or 0):,} steps at the measured "
            f"{self.speedup:.2f}x speed-up ({interval})"
        )


def _round_steps(steps: int) -> int:
    """Two significant figures: a break-even point is an estimate, not a count."""
    if steps < 100:
        return steps
    scale = 10 ** (len(str(steps)) - 2)
    return round(steps / scale) * scale


def compile_payback(eager: ConfigResult, compiled: ConfigResult) -> CompilePayback | None:
    """None unless both configurations reached a steady state and compiled has a first call."""
    first = compiled.phase(PHASE_FIRST_CALL)
    if eager.steady is None or compiled.steady is None or first is None:
        return None
    if first.measurement is None:
        return None
    e, c = eager.steady.robust_median, compiled.steady.robust_median
    low, high = ratio_of_medians_interval(tuple(eager.steady.times), tuple(compiled.steady.times))
    loaded = [s for s in (eager.load_brief(), compiled.load_brief()) if s]
    payback = CompilePayback(
        eager.kind,
        e,
        c,
        e / c if c > 0 else math.inf,
        low,
        high,
        first.measurement.total - c,
        None,
        compiler_cache=cache_state(first.compile),
        host_loaded=loaded,
    )
    saving = e - c
    if payback.claimed and low > 1 and saving > 0:
        cost = payback.compile_cost
        payback.break_even_steps = math.ceil(cost / saving) if cost > 0 else 0
    return payback


def cache_state(compile_delta: CounterDelta) -> str:
    """Whether the compiler's on-disk cache was cold or warm during a phase, from its counters."""
    hits = compile_delta.extra.get("compiler_cache_hits", 0)
    misses = compile_delta.extra.get("compiler_cache_misses", 0)
    if hits and misses:
        return "partly warm"
    if hits:
        return "warm"
    if misses:
        return "cold"
    return "unknown"


@dataclass
class BaselineResult(MeasuredOn):
    eager_means: str
    compiled_means: str
    settings: BaselineSettings
    host_memory_source: str
    device_memory_source: str
    compile_counter_source: str
    configs: list[ConfigResult]
    checklist: Checklist
    reference: ReferenceSummary
    throughput_unit: str
    wall_seconds: float
    # A `script:` workload's own loop, timed by its own steps (baseline/script_steps.py).
    script_steps: ScriptSteps | None = None

    def config(self, kind: str, mode: str) -> ConfigResult | None:
        return next((c for c in self.configs if c.kind == kind and c.mode == mode), None)

    @property
    def failures(self) -> list[StepFailure]:
        """Steps that raised, compile failures excluded (those are findings, shown apart)."""
        return [c.failure for c in self.configs if c.failure and not c.failure.compile_failure]

    @property
    def compile_failures(self) -> list[StepFailure]:
        return [c.failure for c in self.configs if c.failure and c.failure.compile_failure]

    def paybacks(self) -> list[CompilePayback]:
        found = []
        for kind in self.settings.kinds:
            eager, compiled = self.config(kind, EAGER), self.config(kind, COMPILED)
            payback = compile_payback(eager, compiled) if eager and compiled else None
            if payback:
                found.append(payback)
        return found

    def headline(self) -> str:
        """One sentence that reads the result, with a caveat when the timings are noisy."""
        parts = [self._kind_sentence(kind) for kind in self.settings.kinds]
        spreads = [c.steady.relative_iqr for c in self.configs if c.steady]
        if spreads and max(spreads) > FLUCTUATION_SEVERE:
            parts.append(
                f"the timings are noisy (steady-state IQR up to {max(spreads):.0%} of the "
                "median), so compare them with care"
            )
        return f"On {self.target['name']}, " + "; ".join(parts) + "."

    def _kind_sentence(self, kind: str) -> str:
        label = KIND_LABELS[kind]
        configs = [c for c in self.configs if c.kind == kind]
        broken = [c.failure for c in configs if c.failure and not c.failure.compile_failure]
        if broken:
            return broken[0].summary()
        payback = next((p for p in self.paybacks() if p.kind == kind), None)
        text = payback.sentence() if payback else ""
        eager = self.config(kind, EAGER)
        if not text and eager and eager.steady and eager.throughput:
            text = (
                f"{label}: eager median {format_seconds(eager.steady.robust_median)} "
                f"({eager.throughput:,.0f} {self.throughput_unit})"
            )
            if eager.load_brief():
                text += f", timed on a loaded machine ({eager.load_brief()})"
        failed_compile = next((c.failure for c in configs if c.failure), None)
        if failed_compile:
            reason = cut_at_word(failed_compile.error.splitlines()[0], 200)
            text = (text + ", but " if text else f"{label}: ") + f"compile failed ({reason})"
        flagged = [c for c in configs if c.steady_recompiles]
        if flagged:
            text += f", with {flagged[0].steady_recompile_sentence()}"
        diverged = next((c for c in configs if c.nonfinite_step), None)
        if diverged:
            # Timings of a step whose loss is NaN are timings of a broken model: this leads.
            phase = PHASE_LABELS[diverged.phase_of_step(diverged.nonfinite_step or 1)]
            text = (
                f"{label} ({diverged.mode}): the loss became NaN or Inf at step "
                f"{diverged.nonfinite_step} ({phase}), so these timings are of a diverged model"
                + (f"; {text}" if text else "")
            )
        return text


BASELINE_RULE = (
    "blocker: a step raised (compiled or eager), a loss became NaN or Inf, or a graph recompiled "
    f"during steady state; attention: a warm-up hit its cap, a steady state's IQR above "
    f"{FLUCTUATION_SEVERE:.0%} of its median, a warm-up or steady state timed on a loaded "
    "machine (no speed-up or payback is claimed from it), or no reference artifact for "
    "notebook 03; pass otherwise"
)


def baseline_verdict(result: BaselineResult) -> Verdict:
    """Notebook 01's verdict, by BASELINE_RULE."""
    findings = []
    for config in result.configs:
        name = f"{KIND_LABELS[config.kind]} ({config.mode})"
        if config.failure is not None:
            findings.append(Finding(BLOCKER, config.failure.summary(), Baseline.STEP))
        if config.nonfinite_step is not None:
            findings.append(
                Finding(
                    BLOCKER,
                    f"{name}: loss becomes NaN/Inf at step {config.nonfinite_step}",
                    Baseline.FINITE,
                )
            )
        if config.steady_recompiles:
            findings.append(
                Finding(
                    BLOCKER,
                    f"{name}: {config.steady_recompile_sentence()}",
                    Baseline.RECOMPILE,
                )
            )
        # Other load explains an unsettled warm-up or a noisy steady state, so it leads.
        if config.load_sentence():
            findings.append(
                Finding(
                    ATTENTION,
                    f"{name}: timed on a loaded machine ({config.load_sentence()}), so no "
                    "speed-up or payback is claimed from it",
                    Baseline.QUIET,
                )
            )
        if config.warmup_converged is False:
            findings.append(
                Finding(ATTENTION, f"{name}: warm-up hit its cap without settling", Baseline.WARMUP)
            )
        if config.steady is not None and config.steady.relative_iqr > FLUCTUATION_SEVERE:
            findings.append(
                Finding(
                    ATTENTION,
                    f"{name}: noisy steady state "
                    f"(IQR {config.steady.relative_iqr:.0%} of the median)",
                    Baseline.STEADY,
                )
            )
    if result.reference.error:
        findings.append(
            Finding(
                ATTENTION,
                f"reference artifact not written: {result.reference.error}",
                Baseline.REFERENCE,
            )
        )
    return judge(
        findings,
        BASELINE_RULE,
        "every step ran, no loss went NaN, nothing recompiled in steady state",
    )


# How one configuration ended, one definition.
ConfigStatus = Literal["ok", "compile failed", "step failed"]


def config_status(config: ConfigResult) -> ConfigStatus:
    if config.failure is None:
        return "ok"
    return "compile failed" if config.failure.compile_failure else "step failed"


def _config_data(config: ConfigResult) -> dict[str, Any]:
    warmup = config.phase(PHASE_WARMUP)
    return {
        **asdict(config),
        "status": config_status(config),
        "throughput": config.throughput,
        "phase_seconds": {
            p.phase: p.measurement.total if p.measurement else None for p in config.phases
        },
        "warmup_steps": warmup.steps if warmup else None,
        "warmup_converged": config.warmup_converged,
        "steady_recompiles": config.steady_recompiles,
        # The median every number above uses, and the raw steady samples it left out.
        "steady_robust_median": config.steady.robust_median if config.steady else None,
        "steady_discarded": config.steady.discarded if config.steady else [],
    }


def result_data(result: BaselineResult) -> dict[str, Any]:
    """Everything the result file keeps; raw samples sit under configs[].phases[].measurement."""
    return {
        "headline": result.headline(),
        "verdict": baseline_verdict(result),
        "target": {
            **result.target,
            "eager_means": result.eager_means,
            "compiled_means": result.compiled_means,
        },
        "workload": result.workload,
        "kinds": list(result.settings.kinds),
        "modes": list(result.settings.modes),
        "settings": asdict(result.settings),
        "throughput_unit": result.throughput_unit,
        "configs": [_config_data(c) for c in result.configs],
        "compile_ledger": [asdict(e) for c in result.configs for e in c.ledger],
        "comparison": [asdict(p) | {"sentence": p.sentence()} for p in result.paybacks()],
        "failures": [asdict(f) for f in result.failures],
        "compile_failures": [asdict(f) for f in result.compile_failures],
        "checklist": asdict(result.checklist),
        "versions": result.checklist.versions,
        "reference": asdict(result.reference),
        "sources": {
            "timing": "time.perf_counter around each step, target synchronized before reading",
            "steady_median": OUTLIER_RULE,
            "speedup_interval": RATIO_INTERVAL_METHOD,
            "host_load": (
                "timing.HostLoadProbe around every timed phase, kept as its "
                f"measurement.host: {HOST_LOAD_RULE}"
            ),
            "tail": tail_rule(),
            "host_memory": result.host_memory_source,
            "compiler_memory": (
                "psutil RSS of this process's child processes (compile workers, the C++ "
                "compiler, neuronx-cc), summed and sampled every 50 ms during the first call: "
                "a lower bound"
            ),
            "device_memory": result.device_memory_source,
            "compile_counters": result.compile_counter_source,
            "compile_caches": COMPILE_CACHE_NOTE,
        },
        "wall_seconds": result.wall_seconds,
        "script_steps": _script_steps_data(result.script_steps),
    }


def _script_steps_data(steps: ScriptSteps | None) -> dict[str, Any] | None:
    if steps is None:
        return None
    return {
        **asdict(steps),
        "first": steps.first,
        "warmup": steps.warmup,
        "steady": steps.steady,
        "steady_robust_median": Measurement(steps.steady).robust_median if steps.steady else None,
        "first_step_excess": steps.first_step_excess,
        "sentences": steps.sentences(),
    }
