"""What notebook 01 shows of a baseline result, and the data its result file keeps."""

from __future__ import annotations

from typing import Any

from IPython.display import display

from workbench import markup as show
from workbench.baseline.records import (
    COMPILE_CACHE_NOTE,
    COMPILE_COST_DEFINITION,
    COMPILED,
    EAGER,
    KIND_LABELS,
    PHASE_FIRST_CALL,
    PHASE_LABELS,
    PHASE_STEADY,
    PHASE_WARMUP,
    TAIL_QUANTILE,
    BaselineResult,
    CompilePayback,
    ConfigResult,
    LedgerEntry,
    PhaseResult,
    baseline_verdict,
    config_status,
)
from workbench.errors import WorkbenchError
from workbench.timing import (
    HOST_LOAD_RULE,
    OUTLIER_RULE,
    RATIO_INTERVAL_METHOD,
    Measurement,
    format_seconds,
    samples_for_percentile,
)


def _rate(value: float | None, unit: str) -> str:
    return "n/a" if value is None else f"{value:,.0f} {unit}"


def _left_out(steady: Any) -> str:
    """Which steady samples the robust median left out (steps numbered within the phase)."""
    if steady is None or not steady.discarded:
        return "none"
    shown = ", ".join(f"#{i + 1} ({format_seconds(steady.times[i])})" for i in steady.discarded[:5])
    more = len(steady.discarded) - 5
    return shown + (f" and {more} more" if more > 0 else "")


def _machine(measurement: Measurement | None) -> str:
    """The machine's state while a phase was timed (threads, other load, steal)."""
    host = measurement.host if measurement else None
    return host.sentence() if host is not None else "n/a"


def _tail(measurement: Measurement | None) -> str:
    """'p99 1.2 ms' where the samples support a p99, else 'max of 30 1.2 ms'."""
    if measurement is None:
        return "n/a"
    label, value = measurement.tail(TAIL_QUANTILE)
    return f"{label}: {format_seconds(value)}"


def _step(config: ConfigResult) -> str:
    return f"{KIND_LABELS[config.kind]}, {config.mode}"


def _timing_row(config: ConfigResult, unit: str) -> dict[str, Any]:
    first = config.phase(PHASE_FIRST_CALL)
    warmup = config.phase(PHASE_WARMUP)
    steady = config.steady
    warmup_text = "n/a"
    if warmup and warmup.measurement:
        states = {True: "converged", False: "hit the cap", None: "ended by the failure"}
        warmup_text = f"{warmup.steps} steps, {states[warmup.converged]}"
    return {
        "step": _step(config),
        "status": config_status(config),
        "first call": show.seconds_cell(
            first.measurement.total if first and first.measurement else None
        ),
        "warm-up": warmup_text,
        "steady median": show.seconds_cell(steady.robust_median if steady else None),
        "IQR": f"{steady.relative_iqr:.0%}" if steady else "n/a",
        "tail": _tail(steady),
        "throughput": _rate(config.throughput, unit),
        "machine (steady state)": _machine(steady),
    }


def _cost_row(config: ConfigResult, payback: CompilePayback | None) -> dict[str, Any]:
    first = config.phase(PHASE_FIRST_CALL)
    steady_phase = config.phase(PHASE_STEADY)
    cost = payback if config.mode == COMPILED else None
    return {
        "step": _step(config),
        "graphs compiled": sum(p.compile.graphs or 0 for p in config.phases),
        # One compile figure everywhere: the compiled first call minus its steady median.
        "compile cost": show.seconds_cell(cost.compile_cost) if cost else "n/a",
        "compiler cache": cost.compiler_cache if cost else "n/a",
        "compiler workers peak": show.mib_cell(first.memory.compiler_peak_rss if first else None),
        "host peak (steady)": show.mib_cell(
            steady_phase.memory.host_peak_rss if steady_phase else None
        ),
        "steady recompiles": config.steady_recompiles,
        "steady samples left out": _left_out(config.steady),
        "loss first / last": "n/a"
        if config.loss_first is None
        else f"{config.loss_first:.4g} / {config.loss_last:.4g}",
    }


def headline(result: BaselineResult) -> None:
    """The sentence that reads the result, then the numbers it rests on, in two tables narrow
    enough for the report's page: time per configuration, then compile and memory."""
    # The report opens with this headline, read from the result file: here for the live view.
    banner = show.banner(result.headline(), show.VERDICT_BANNER[baseline_verdict(result).status])
    display(banner, metadata=show.LIVE_ONLY)
    paybacks = {p.kind: p for p in result.paybacks()}
    steps = result.settings.steady_steps
    display(
        show.table(
            [_timing_row(c, result.throughput_unit) for c in result.configs],
            caption=(
                f"{result.workload['name']}, batch {result.workload['batch_size']}, steady state "
                f"of {steps} steps (median: the robust median; tail: p99 only from "
                f"{samples_for_percentile(TAIL_QUANTILE)} samples, as MLPerf LoadGen's "
                "early-stopping estimate, else the maximum); the whole "
                f"baseline took {format_seconds(result.wall_seconds)}"
            ),
        )
    )
    display(
        show.table(
            [_cost_row(c, paybacks.get(c.kind)) for c in result.configs],
            caption=f"Compile and memory ({COMPILE_COST_DEFINITION})",
        )
    )
    display(
        show.key_values(
            {
                "eager means": result.eager_means,
                "compiled means": result.compiled_means,
                "timing": "time.perf_counter around each step; the target is synchronized "
                "before every clock read",
                "steady median": OUTLIER_RULE,
                "machine": HOST_LOAD_RULE,
                "host memory": result.host_memory_source,
                "device memory": result.device_memory_source,
                "compile counters": result.compile_counter_source,
                "compile caches": COMPILE_CACHE_NOTE,
            },
            caption="Where the numbers come from",
        )
    )


def _phase_time_row(config: ConfigResult, phase: PhaseResult) -> dict[str, Any]:
    m = phase.measurement
    return {
        "configuration": f"{config.kind}/{config.mode}",
        "phase": PHASE_LABELS[phase.phase],
        "steps": phase.steps,
        "total": show.seconds_cell(m.total if m else None),
        "median": show.seconds_cell(m.robust_median if m else None),
        "min": show.seconds_cell(m.min if m else None),
        "max": show.seconds_cell(m.max if m else None),
        "machine": _machine(m),
    }


def _phase_cost_row(config: ConfigResult, phase: PhaseResult) -> dict[str, Any]:
    return {
        "configuration": f"{config.kind}/{config.mode}",
        "phase": PHASE_LABELS[phase.phase],
        "host peak RSS": show.mib_cell(phase.memory.host_peak_rss),
        "device peak allocated": show.mib_cell(phase.memory.device_peak_allocated),
        "device peak reserved": show.mib_cell(phase.memory.device_peak_reserved),
        "graphs compiled": "n/a" if phase.compile.graphs is None else phase.compile.graphs,
        # A part of the first call, not the compile cost: the compiler's own counter.
        "time in compiler": show.seconds_cell(phase.compile.compile_seconds),
        "compiler workers peak": show.mib_cell(phase.memory.compiler_peak_rss),
    }


def phase_table(result: BaselineResult) -> None:
    """Every phase of every configuration: time and the machine's load, then memory and
    compile activity (two tables, so each fits the page)."""
    phases = [(c, p) for c in result.configs for p in c.phases]
    script_loop(result)
    display(
        show.table(
            [_phase_time_row(c, p) for c, p in phases],
            caption="Time per phase (median: the robust median; the compiler's workers count as "
            "the run's own work in each load reading)",
        )
    )
    display(
        show.table(
            [_phase_cost_row(c, p) for c, p in phases],
            caption="Memory and compiles per phase (peaks reset at each phase start; time in "
            "compiler is the compiler's own counter, a part of the first call, not the compile "
            "cost)",
        )
    )


def script_loop(result: BaselineResult) -> None:
    """A `script:` workload's own loop beside the measured configurations: its first step,
    warm-up and steady state as the script ran them (nothing for other workloads)."""
    steps = result.script_steps
    if steps is None:
        return
    rows = [
        {
            "phase": PHASE_LABELS[phase],
            "steps": len(times),
            "total": show.seconds_cell(sum(times) if times else None),
            "median": show.seconds_cell(Measurement(times).robust_median if times else None),
            "min": show.seconds_cell(min(times) if times else None),
            "max": show.seconds_cell(max(times) if times else None),
        }
        for phase, times in (
            (PHASE_FIRST_CALL, [steps.first]),
            (PHASE_WARMUP, steps.warmup),
            (PHASE_STEADY, steps.steady),
        )
    ]
    display(
        show.table(
            rows,
            caption="The script's own loop: each optimizer step's wall time, read by the watch at "
            "optimizer.step (target synchronized), split by the same warm-up rule",
        )
    )
    display(show.banner("; ".join(steps.sentences()) + "."))


def comparison(result: BaselineResult) -> None:
    """Eager against compiled per step kind: speed, one-off cost, break-even, memory. A
    comparison timed on a loaded machine, or without a usable interval, states no speed-up."""
    rows = []
    for payback in result.paybacks():
        eager = result.config(payback.kind, EAGER)
        compiled = result.config(payback.kind, COMPILED)
        assert eager is not None and compiled is not None
        rows.append(
            {
                "step": KIND_LABELS[payback.kind],
                "throughput eager / compiled": (
                    f"{_rate(eager.throughput, result.throughput_unit)} / "
                    f"{_rate(compiled.throughput, result.throughput_unit)}"
                ),
                "speed-up": _speedup(payback),
                "95% interval": _interval(payback),
                "compile cost": (
                    f"{show.seconds_cell(payback.compile_cost)} ({payback.compiler_cache})"
                ),
                "break-even": _break_even(payback),
                "host peak, steady eager / compiled": (
                    f"{show.mib_cell(_steady_memory(eager).host_peak_rss)} / "
                    f"{show.mib_cell(_steady_memory(compiled).host_peak_rss)}"
                ),
                "compiled first-call host peak": show.mib_cell(
                    compiled.phases[0].memory.host_peak_rss if compiled.phases else None
                ),
            }
        )
    for payback in result.paybacks():
        if not payback.claimed:
            display(show.banner(payback.sentence(), "warn"))
    if rows:
        caption = (
            f"Before and after compile ({COMPILE_COST_DEFINITION}, compiler cache in brackets; "
            f"interval: {RATIO_INTERVAL_METHOD})"
        )
        display(show.table(rows, caption=caption))
    else:
        display(show.banner("No step kind has both an eager and a compiled steady state.", "info"))


def _not_claimed(payback: CompilePayback) -> str:
    if payback.host_loaded:
        return "not claimed (loaded machine)"
    return "not claimed (no usable interval)"


def _speedup(payback: CompilePayback) -> str:
    return f"{payback.speedup:.2f}x" if payback.claimed else _not_claimed(payback)


def _interval(payback: CompilePayback) -> str:
    if not payback.claimed:
        return "n/a"
    return f"{payback.speedup_low:.2f}-{payback.speedup_high:.2f}x"


def _break_even(payback: CompilePayback) -> str:
    if not payback.claimed:
        return _not_claimed(payback)
    if payback.break_even_steps is not None:
        return f"{payback.break_even_steps:,} steps"
    return "never" if payback.distinguishable else "not estimated (speed-up not told from 1)"


def _steady_memory(config: ConfigResult) -> Any:
    phase = config.phase(PHASE_STEADY)
    assert phase is not None
    return phase.memory


def checklist(result: BaselineResult) -> None:
    """The pre-migration checklist, read from the model and this run."""
    found = result.checklist
    shapes = "; ".join(f"{i['dtype']} {i['shape']}" for i in found.inputs)
    if found.graph_changes_with_shape is None:
        shape_answer = f"unknown ({found.graph_note})"
    else:
        sizes = " and ".join(str(g.batch_size) for g in found.graphs)
        answer = "YES" if found.graph_changes_with_shape else "no"
        shape_answer = f"{answer}: captured graphs at batch {sizes} compared"
    breaks = [r for g in found.graphs[:1] for r in g.break_reasons]
    custom = (
        "; ".join(f"{ns}: {', '.join(ops)}" for ns, ops in found.custom_ops.items())
        if found.custom_ops
        else "none found"
    )
    before_after = [
        f"{KIND_LABELS[p.kind]} {p.speedup:.2f}x ({p.interval_words})"
        if p.claimed
        else f"{KIND_LABELS[p.kind]} {_not_claimed(p)}"
        for p in result.paybacks()
    ] or ["not measured (needs eager and compiled results)"]
    display(
        show.key_values(
            {
                **{f"version: {k}": v for k, v in found.versions.items()},
                "inputs": shapes,
                "targets": f"{found.targets['dtype']} {found.targets['shape']}",
                "graph changes with input shape": shape_answer,
                "graph breaks": f"{len(breaks)}" + (f" ({'; '.join(breaks)})" if breaks else ""),
                "custom op namespaces": custom,
                "custom op capture": found.custom_ops_note,
                "compiled speed-up (steady state)": ", ".join(before_after),
            },
            caption="Pre-migration checklist",
        )
    )


def _config_problems(result: BaselineResult, config: ConfigResult) -> list[tuple[str, str]]:
    """One configuration's problems, each a sentence and its banner kind."""
    name = f"{config.kind}/{config.mode}"
    messages: list[tuple[str, str]] = []
    if config.nonfinite_step:
        phase = PHASE_LABELS[config.phase_of_step(config.nonfinite_step)]
        text = f"{name}: the loss became NaN or Inf at step {config.nonfinite_step} ({phase})."
        messages.append((text, "fail"))
    if config.steady_recompiles:
        text = (
            f"{name}: {config.steady_recompiles} recompile(s) during steady state. Steady state "
            "must compile nothing: on Neuron each recompile costs minutes."
        )
        messages.append((text, "fail"))
    if config.warmup_converged is False:
        cap = result.settings.warmup.max_steps
        text = f"{name}: warm-up stopped at its cap of {cap} steps; the step time never settled."
        messages.append((text, "warn"))
    if config.load_sentence():
        text = (
            f"{config.load_sentence()}. Timed on a loaded machine: no speed-up or payback "
            "is claimed from it; rerun on a quiet machine."
        )
        messages.append((text, "warn"))
    steady = config.steady
    if steady and steady.has_warnings:
        messages.append((f"{name} steady state: {'; '.join(steady.warnings)}.", "warn"))
    return messages


def problems(result: BaselineResult) -> None:
    """Failures and warnings, each in one sentence; a clean run says so."""
    messages: list[tuple[str, str]] = [
        (f"{failure.summary()} (at {failure.location})", "fail") for failure in result.failures
    ]
    for failure in result.compile_failures:
        text = (
            f"{failure.kind}: compile failed on {result.target['name']}, eager results are "
            f"still reported. Reason: {failure.error} (at {failure.location})"
        )
        messages.append((text, "warn"))
    for config in result.configs:
        messages += _config_problems(result, config)
    if result.reference.error:
        messages.append((f"reference artifact not written: {result.reference.error}", "warn"))
    if not messages:
        messages.append(("No step raised, no loss went NaN, nothing recompiled.", "ok"))
    for text, kind in messages:
        display(show.banner(text, kind))
    grouped = [
        [f"{config.kind}/{config.mode}", group.count, group.source, group.message]
        for config in result.configs
        for group in config.torch_messages
    ] + [
        [f"graph capture, batch {graph.batch_size}", group.count, group.source, group.message]
        for graph in result.checklist.graphs
        for group in graph.torch_messages
    ]
    if grouped:
        display(
            show.table(
                grouped,
                headers=["during", "times", "from", "message (first line)"],
                caption="Torch's warnings, grouped (graph breaks and recompiles are read above)",
            )
        )


def raise_on_step_failure(result: BaselineResult) -> None:
    """Fail the notebook (after its result is saved) when any step raised."""
    if result.failures:
        # A failure's own text often ends in a full stop; the sentence adds its own.
        listed = "; ".join(f.summary().rstrip(".") for f in result.failures)
        raise WorkbenchError(
            f"{len(result.failures)} configuration(s) failed: {listed}. The report above shows "
            "every configuration; fix the step and run notebook 01 again."
        )


def ledger_row(entry: LedgerEntry) -> dict[str, Any]:
    """One compile as a table row: the same columns wherever a ledger is shown (01, 04)."""
    return {
        "phase": PHASE_LABELS[entry.phase],
        "step": entry.step,
        "graph": entry.graph_id,
        "compile time": show.seconds_cell(entry.seconds),
        "cause": entry.cause,
        "detail": entry.detail or "",
        "user code": entry.location or "",
        "cache": entry.cache or "n/a",
        "saved by the cache": show.seconds_cell(entry.saved_seconds)
        if entry.cache == "hit"
        else "",
    }


def compile_ledger(result: BaselineResult, cache: Any = None) -> None:
    """Every compile with its phase, step, time and cause; then what the compile cache did.

    `cache` is the run's CompileCache (context.RunContext.compile_cache), None when unknown.
    """
    rows = [
        {"configuration": f"{entry.kind}/{entry.mode}", **ledger_row(entry)}
        for config in result.configs
        for entry in config.ledger
    ]
    if rows:
        display(show.table(rows, caption="Compile ledger: every compile, in order"))
    else:
        display(show.banner("The compiler recorded no compile in any phase.", "info"))
    if cache is None:
        return
    display(show.banner(cache.sentence, "ok" if cache.in_use else "warn"))
    counters = cache.counters
    if counters is not None:
        saved = (
            show.seconds_cell(counters.saved_seconds)
            if counters.saved_seconds is not None
            else "n/a"
        )
        hits = "not counted" if counters.hits is None else counters.hits
        facts = {"hits": hits, "misses": counters.misses, "compile time saved": saved}
        facts |= dict(counters.extra)
        facts["counted by"] = counters.source
        display(show.key_values(facts, caption="Compile cache, this notebook's process"))
    if cache.miss_explanation():
        display(show.banner(cache.miss_explanation(), "warn"))
