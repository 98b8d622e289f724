"""torch._dynamo's own counters, shared by the targets whose compiler is Dynamo-based."""

from __future__ import annotations

from collections import Counter

from workbench.targets.base import CompileCounters


def dynamo_compile_counters() -> CompileCounters:
    """Graphs Dynamo compiled in this process and the seconds it spent, from its counters."""
    from torch._dynamo.utils import counters

    stats = counters.get("stats", Counter())
    graphs = int(stats.get("unique_graphs", 0))
    seconds = _dynamo_compile_seconds()
    return CompileCounters(
        graphs=graphs,
        compile_seconds=seconds,
        source="torch._dynamo.utils.counters['stats'] and compilation_time_metrics",
        extra={
            "calls_captured": int(stats.get("calls_captured", 0)),
            "frames_ok": int(counters.get("frames", Counter()).get("ok", 0)),
            "recompiles": int(sum(counters.get("recompiles", {}).values()))
            if counters.get("recompiles")
            else 0,
            "graph_breaks": int(sum(counters.get("graph_break", Counter()).values())),
            # Inductor's on-disk FX graph cache: hits mean a warm cache, misses a cold one.
            "compiler_cache_hits": int(
                counters.get("inductor", Counter()).get("fxgraph_cache_hit", 0)
            ),
            "compiler_cache_misses": int(
                counters.get("inductor", Counter()).get("fxgraph_cache_miss", 0)
            ),
        },
    )


def _dynamo_compile_seconds() -> float | None:
    """Seconds in Dynamo's whole-frame compile (backend included), summed over frames."""
    from torch._dynamo.utils import compilation_time_metrics

    samples = compilation_time_metrics.get("_compile.compile_inner")
    return float(sum(samples)) if samples else None
