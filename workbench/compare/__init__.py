"""`workbench compare`: runs judged against runs, from their result files only.

Two runs: the second against the first (a migration: today's stack against Trn1; an SDK upgrade:
pinned against candidate). More runs, or a folder of runs: the newest against the history before
it (a nightly schedule). A regression is a timing beyond its gate, noise and run-to-run
variation (see compare.timing), an op that newly falls back, a numerics run that newly fails, or a
notebook verdict that became a blocker. A notebook that ran on one side only is named, never
passed over in silence.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__all__ = ["Comparison", "Gates", "compare_runs"]

if TYPE_CHECKING:
    from workbench.compare.judge import Comparison, Gates, compare_runs


def __getattr__(name: str) -> Any:
    """compare_runs and its records on first use: judging imports every notebook's reader
    (torch among them), which the CLI's option parsing and `--help` must not wait for."""
    if name in __all__:
        from workbench.compare import judge

        return getattr(judge, name)
    raise AttributeError(f"module 'workbench.compare' has no attribute {name!r}")
