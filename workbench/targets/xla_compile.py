"""How the XLA target compiles and counts its compiles: torch_xla's CompileTime and
ExecuteTime metrics, and a ledger entry per compiled graph, each matched with torch_xla's own
analysis of it (graph hash, cause, user line; xla_analysis.py) and merged with the records of
Dynamo, which compile() puts in front of XLA (reference: neuron.md 2.4, xla_cpu.md 2.4).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from workbench.targets.base import Target
from workbench.targets.compiling import CAUSE_NEW_XLA_GRAPH, CompileCounters, CompileEvent
from workbench.targets.dynamo_counters import dynamo_compile_events
from workbench.targets.xla_analysis import AnalysisFile, CompileAnalysis
from workbench.targets.xla_ops import HOST_READ_OP

_NS_PER_SECOND = 1e9


class XlaCompiling(Target):
    """Lazy tracing compiles every step; compile() adds Dynamo capture in front of it."""

    eager_description = (
        "lazy tracing: ops are recorded, not run; each step up to torch_xla.sync() becomes one "
        "HLO graph, compiled on first sight of its shape and taken from the graph cache after"
    )
    compile_description = (
        "lazy tracing: every step up to torch_xla.sync() is already traced into one HLO graph "
        "and compiled (cached by graph hash, recompiled for each new graph or shape); "
        "compile() adds Dynamo capture with torch.compile(backend='openxla')"
    )
    # torch_xla's analyses of this process's compiles, opened before anything is traced.
    _analysis: AnalysisFile

    def compile(self, fn: Callable) -> Callable:
        return torch.compile(fn, backend="openxla")

    def compile_counters(self) -> CompileCounters:
        import torch_xla.debug.metrics as met

        compile_time = met.metric_data("CompileTime")
        execute_time = met.metric_data("ExecuteTime")
        # metric_data is None until the metric has a sample: nothing compiled or run yet.
        extra: dict[str, Any] = {
            "uncached_compiles": met.counter_value("UncachedCompile") or 0,
            "cached_compiles": met.counter_value("CachedCompile") or 0,
            "executions": int(execute_time[0]) if execute_time else 0,
            "execute_seconds": execute_time[1] / _NS_PER_SECOND if execute_time else 0.0,
        }
        host_reads = met.counter_value(HOST_READ_OP)
        if host_reads:
            extra["host_value_reads"] = host_reads
        return CompileCounters(
            graphs=int(compile_time[0]) if compile_time else 0,
            compile_seconds=compile_time[1] / _NS_PER_SECOND if compile_time else 0.0,
            source=(
                "torch_xla.debug.metrics CompileTime/ExecuteTime (ns) and UncachedCompile/"
                "CachedCompile counters, since process start or the last start_fallback_tracking"
            ),
            extra=extra,
        )

    def compile_events(self, since: float) -> list[CompileEvent]:
        import torch_xla.debug.metrics as met

        # CompileTime keeps one (end time in epoch seconds, nanoseconds) sample per compile.
        # torch_xla compiles a traced graph only when its hash is not in the computation cache,
        # so every sample is a graph (or shape) it had not seen in this process.
        data = met.metric_data("CompileTime")
        samples = list(data[2]) if data else []
        # torch_xla writes one analysis per compile, in the same order as the samples. The
        # samples restart when the metrics are cleared and the file does not, so the two are
        # matched from the newest end.
        analyses = self._analysis.analyses()
        newest: list[CompileAnalysis | None] = list(analyses[-len(samples) :] if samples else [])
        matched = [None] * (len(samples) - len(newest)) + newest
        events = []
        earlier: dict[str, str] = {}  # user location -> the graph hash last compiled there
        for number, ((ended, nanoseconds), analysis) in enumerate(
            zip(samples, matched, strict=True), 1
        ):
            seconds = nanoseconds / _NS_PER_SECOND
            event = _xla_compile_event(number, ended - seconds, seconds, analysis, earlier)
            if event.started_at >= since:
                events.append(event)
        # compile() captures with Dynamo first (backend openxla): its guard failures and graph
        # breaks are the causes of the XLA graphs that follow them.
        return sorted(events + dynamo_compile_events(since), key=lambda e: e.started_at)


def _xla_compile_event(
    number: int,
    started_at: float,
    seconds: float,
    analysis: CompileAnalysis | None,
    earlier: dict[str, str],
) -> CompileEvent:
    """One CompileTime sample, with torch_xla's analysis of it where there is one. `earlier`
    maps each user location to the hash last compiled there, so a second graph cut at the same
    line says what it replaced."""
    if analysis is None or not analysis.graph_hash:
        detail = (
            "the traced graph's hash was not in torch_xla's computation cache (UncachedCompile)"
        )
        return CompileEvent(
            started_at, seconds, f"xla compile {number}", CAUSE_NEW_XLA_GRAPH, detail
        )
    frame = analysis.user_frame()
    location = frame.label() if frame else ""
    detail = (
        f"graph {analysis.graph_hash[:12]} not in the computation cache; torch_xla: "
        f"{analysis.cause or 'no cause given'}"
    )
    previous = earlier.get(location) if location else None
    if previous and previous != analysis.graph_hash:
        detail += (
            f"; this place compiled graph {previous[:12]} before, so the traced graph changed "
            "(a new input shape, or different ops)"
        )
    if location:
        earlier[location] = analysis.graph_hash
    return CompileEvent(
        started_at,
        seconds,
        f"xla {analysis.graph_hash[:16]}",
        CAUSE_NEW_XLA_GRAPH,
        detail,
        location,
    )
