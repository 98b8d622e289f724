"""torch._dynamo's own counters, shared by the targets whose compiler is Dynamo-based."""

from __future__ import annotations

import os
import sys
from collections import Counter
from typing import Any

from workbench.targets.caching import CacheCounters
from workbench.targets.compiling import (
    CAUSE_BACKWARD,
    CAUSE_FIRST,
    CAUSE_GRAPH_BREAK,
    CAUSE_GUARD,
    CAUSE_NEW_SHAPE,
    CompileCounters,
    CompileEvent,
)


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


# Guard failures that say an input's shape changed (Dynamo's own wording in recompile reasons).
_SHAPE_GUARD_WORDS = ("size mismatch", "stride mismatch", "dimensionality", "rank", "dim mismatch")
_RESUME_PREFIX = "torch_dynamo_resume_in_"


def dynamo_compile_events(since: float) -> list[CompileEvent]:
    """Dynamo's per-compile records (torch._dynamo.utils.get_compilation_metrics) from `since`
    on, each with its cause: a recompile carries the guard that failed, a frame Dynamo resumes
    after a graph break carries the break's reason and the user line where it happened."""
    from torch._dynamo.utils import get_compilation_metrics

    events: list[CompileEvent] = []
    last_break_reason = ""
    for record in get_compilation_metrics():
        reasons = sorted(getattr(record, "restart_reasons", None) or ())
        if reasons:
            last_break_reason = reasons[0].splitlines()[0]
        started = _started_at(record)
        if started is None or started < since:
            continue
        events.append(_event(record, last_break_reason))
    return events


def _started_at(record: Any) -> float | None:
    if getattr(record, "start_time_us", None) is not None:
        return float(record.start_time_us) / 1e6
    start = getattr(record, "start_time", None)
    return float(start) if start is not None else None


def _event(record: Any, last_break_reason: str) -> CompileEvent:
    seconds = _duration_seconds(record)
    name = str(record.co_name or "")
    where = _user_location(record.co_filename, record.co_firstlineno, name)
    graph_id = str(record.compile_id)
    detail = ""
    if record.is_forward is False:
        cause, graph_id = CAUSE_BACKWARD, f"{graph_id} backward"
    elif record.recompile_reason:
        detail = " ".join(str(record.recompile_reason).split())
        shape = any(word in detail for word in _SHAPE_GUARD_WORDS)
        cause = CAUSE_NEW_SHAPE if shape else CAUSE_GUARD
    elif name.startswith(_RESUME_PREFIX):
        # Dynamo names the frame it resumes after a break `..._resume_in_<fn>_at_<line>`, and
        # that code object starts at the user line that broke the graph.
        cause, detail = CAUSE_GRAPH_BREAK, last_break_reason
        function = name[len(_RESUME_PREFIX) :].rsplit("_at_", 1)[0]
        where = _user_location(record.co_filename, record.co_firstlineno, function)
    else:
        cause = CAUSE_FIRST
        if record.num_graph_breaks:
            detail = f"{record.num_graph_breaks} graph break(s) in this frame"
    hits, misses = _cache_lookups(record)
    cache = "miss" if misses else "hit" if hits else None
    saved = None
    if cache == "hit":
        stored = _stored_seconds(record)
        saved = _saved_seconds(stored, seconds)
        if stored and seconds is not None and seconds > stored / 2:
            found = (
                f"found in the cache, yet this compile took {seconds:.1f} s against the "
                f"{stored:.1f} s its cached graphs took to compile"
            )
            detail = f"{detail}; {found}" if detail else found
    return CompileEvent(
        started_at=_started_at(record) or 0.0,
        seconds=seconds,
        graph_id=graph_id,
        cause=cause,
        detail=detail,
        location=where,
        cache=cache,
        saved_seconds=saved,
    )


def _duration_seconds(record: Any) -> float | None:
    return record.duration_us / 1e6 if record.duration_us is not None else None


def _stored_seconds(record: Any) -> float | None:
    """What the cached graphs a compile loaded took to compile when they were stored: Inductor
    adds each hit's recorded compile time to this field of the frame's record."""
    stored = getattr(record, "distributed_ephemeral_timeout_us", None)
    return stored / 1e6 if stored else None


def _saved_seconds(stored: float | None, seconds: float | None) -> float | None:
    """Compile time a cache hit saved, measured: the stored compile time less what this compile
    took (never below 0). A hit can still redo part of its work (for a torch installed at another
    path, for one), so the stored time alone would claim a saving that did not happen; this
    compile's time also holds Dynamo's trace, so the figure is a lower bound."""
    if stored is None or seconds is None:
        return None
    return max(0.0, stored - seconds)


def _user_location(filename: str | None, line: int | None, function: str) -> str:
    """file:line in function, for user code only: a compiled nn.Module's frame is torch's own
    wrapper around forward, which tells the reader nothing."""
    import torch

    if not filename or filename.startswith(os.path.dirname(torch.__file__)):
        return ""
    return f"{filename}:{line} in {function}"


def _cache_lookups(record: Any) -> tuple[int, int]:
    """On-disk cache hits and misses one compile made (FX graph and AOT autograd caches); the
    fields a torch release lacks count as none."""
    hits = misses = 0
    for prefix in ("inductor_fx_local_cache", "aotautograd_local_cache"):
        hits += getattr(record, f"{prefix}_hit_count", None) or 0
        misses += getattr(record, f"{prefix}_miss_count", None) or 0
    return hits, misses


def use_inductor_cache(folder: str | None, extra_env: dict[str, str] | None = None) -> str:
    """Inductor's FX-graph, AOT-autograd and autotune caches under `folder` (None: off). Set
    through the environment, so compile workers and trial processes inherit the same cache,
    and without importing Inductor (two seconds) in a notebook that may never compile."""
    enabled = folder is not None
    if enabled:
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = os.path.join(str(folder), "inductor")
        for name, value in (extra_env or {}).items():
            os.environ[name] = os.path.join(str(folder), value)
    for name in _CACHE_SWITCHES:
        # These variables force the setting when the config module loads: only "off" sets one.
        if enabled:
            os.environ.pop(name, None)
        else:
            os.environ[name] = "0"
    # A config module loaded already has read its variables: set it directly.
    for module, setting in _CACHE_SETTINGS:
        if module in sys.modules:
            setattr(sys.modules[module], setting, enabled)
    if not enabled:
        return "Inductor's FX-graph and AOT-autograd caches are off"
    return (
        "Inductor's FX-graph, AOT-autograd and autotune caches in "
        f"{os.environ['TORCHINDUCTOR_CACHE_DIR']}"
    )


_CACHE_SWITCHES = ("TORCHINDUCTOR_FX_GRAPH_CACHE", "TORCHINDUCTOR_AUTOGRAD_CACHE")
_CACHE_SETTINGS = (
    ("torch._inductor.config", "fx_graph_cache"),
    ("torch._inductor.config", "autotune_local_cache"),
    ("torch._functorch.config", "enable_autograd_cache"),
)


def inductor_cache_counters() -> CacheCounters:
    """Inductor's own cache counters, and the compile time its hits saved (each hit's stored
    compile time less what the compile that loaded it took, as in the ledger)."""
    from torch._dynamo.utils import counters, get_compilation_metrics

    inductor, aot = counters.get("inductor", Counter()), counters.get("aot_autograd", Counter())
    saved = 0.0
    for record in get_compilation_metrics():
        hits, misses = _cache_lookups(record)
        if hits and not misses:
            saved += _saved_seconds(_stored_seconds(record), _duration_seconds(record)) or 0.0
    return CacheCounters(
        hits=int(inductor.get("fxgraph_cache_hit", 0)),
        misses=int(inductor.get("fxgraph_cache_miss", 0)),
        saved_seconds=saved,
        source=(
            "torch._dynamo.utils.counters['inductor'] fxgraph_cache_hit/miss and "
            "['aot_autograd'] autograd_cache_hit/miss; saved time: each hit's stored compile "
            "time less what its compile took"
        ),
        extra={
            "fxgraph_cache_bypass": int(inductor.get("fxgraph_cache_bypass", 0)),
            "autograd_cache_hit": int(aot.get("autograd_cache_hit", 0)),
            "autograd_cache_miss": int(aot.get("autograd_cache_miss", 0)),
        },
    )
