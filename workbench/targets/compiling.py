"""The compiling group of the target interface: what compile() means on a target, and what its
compiler reports about the graphs it compiled (counters, and the per-compile ledger).

Every target compiles; the defaults are those of a compiler that keeps no records.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar


class CompileFailed(RuntimeError):
    """A target's compile() raised; the original exception is the cause."""


@dataclass
class CompileCounters:
    """What the target's compiler reports: graphs compiled and time spent compiling."""

    graphs: int | None
    compile_seconds: float | None
    source: str
    extra: dict[str, Any] = field(default_factory=dict)


# Why a graph was compiled: the ledger's cause vocabulary, shared by every target.
CAUSE_FIRST = "first compile"
CAUSE_NEW_SHAPE = "new input shape"
CAUSE_GUARD = "guard failure"
CAUSE_GRAPH_BREAK = "graph break"
CAUSE_NEW_XLA_GRAPH = "new XLA graph hash"
CAUSE_BACKWARD = "backward graph (first backward of a compiled forward)"


@dataclass
class CompileEvent:
    """One compile the target's compiler reported, as its own records describe it."""

    started_at: float  # seconds since the epoch, to place the compile at a step
    seconds: float | None  # wall time of the compile, where the compiler reports it
    graph_id: str  # the compiler's own name for the graph (Dynamo compile id, XLA graph hash)
    cause: str  # one of the CAUSE_* values
    detail: str = ""  # the failing guard, the graph break's reason, the changed shape
    location: str = ""  # user code: file:line in function, where the compiler names it
    cache: str | None = None  # "hit" or "miss" in the on-disk compile cache; None: unknown
    # Compile time a cache hit saved: the cache's record of the stored compile less this one.
    saved_seconds: float | None = None


class Compiling(ABC):
    """compile() and the compiler's own account of what it compiled."""

    name: ClassVar[str]
    # Plain-words description of what "compiled" means on this target (shown in reports).
    compile_description: ClassVar[str]
    # And what "eager" means: on a lazy-tensor target eager steps are traced and compiled too,
    # which is why reports show compile counts for eager phases as well.
    eager_description: ClassVar[str] = "ops run one at a time as Python calls them; no compiler"

    @abstractmethod
    def compile(self, fn: Callable) -> Callable:
        """Return the compiled form of `fn` (a module or function) as this target defines it."""

    def compile_fresh(self, fn: Callable) -> Callable:
        """`compile(fn)` after resetting Dynamo's in-process caches, so each configuration or
        shape pays its own compile (on-disk compiler caches are used as found); what compile()
        raised comes back as CompileFailed, with the original as its cause."""
        import torch  # only a caller that compiles pays for torch here

        torch._dynamo.reset()
        try:
            return self.compile(fn)
        except Exception as exc:
            raise CompileFailed(str(exc)) from exc

    def compile_counters(self) -> CompileCounters:
        return CompileCounters(None, None, f"{self.name}: no compile counters")

    def compile_events(self, since: float) -> list[CompileEvent]:
        """Compiles that started at or after `since` (epoch seconds), oldest first; empty where
        the target's compiler keeps no per-compile record."""
        return []
