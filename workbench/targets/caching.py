"""The compile-cache group of the target interface: which versions a compiled artifact depends
on, where the on-disk compile caches live, their hit and miss counters, and how to fill them
ahead of a scheduled run (pre-warming).

The defaults are those of a target without an on-disk cache or an ahead-of-time compile tool.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar


@dataclass
class CacheCounters:
    """The compile cache's own hit and miss counters since process start."""

    hits: int | None  # None where the cache counts only what it stored
    misses: int
    saved_seconds: float | None  # compile time the hits saved, where the cache records it
    source: str
    extra: dict[str, int] = field(default_factory=dict)  # e.g. failures to read an entry


@dataclass(frozen=True)
class PrewarmCommand:
    """A pre-compile command and the environment it needs on top of the current one."""

    argv: list[str]
    env: dict[str, str]
    description: str


class CompileCaching:
    """The on-disk compile caches and their pre-warming."""

    name: ClassVar[str]

    @classmethod
    def compiler_versions(cls) -> dict[str, str]:
        """The versions a compiled artifact depends on: a cache written under other versions is
        not reused (its folder is stamped with them)."""
        import torch

        return {"torch": torch.__version__}

    @classmethod
    def prewarm_command(cls, step: list[str], cache_folder: str) -> PrewarmCommand | str:
        """How to fill `cache_folder` (this run's stamped folder) ahead of a scheduled run by
        running `step` (a command that runs the workload's graphs) through the target's
        ahead-of-time compile tool; or the sentence that says why that cannot be done here."""
        return (
            f"target {cls.name} has no ahead-of-time compile tool: its compile cache fills on "
            "the first run and serves the runs after it"
        )

    def use_compile_cache(self, folder: str | None) -> str:
        """Point the target's on-disk compile caches at `folder` (None: turn them off) before
        anything compiles; returns one sentence naming what was pointed where."""
        return f"{self.name}: no on-disk compile cache"

    def cache_counters(self) -> CacheCounters | None:
        """The on-disk compile cache's own hit/miss counters; None where it keeps none."""
        return None
