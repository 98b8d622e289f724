"""`workbench compare`: runs judged against runs, from their result files only.

Two runs: the second against the first (a migration: today's stack against Trn1; an SDK upgrade:
pinned against candidate). More runs, or a folder of runs: the newest against the history before
it (a nightly schedule). A regression is a timing beyond its gate, noise and run-to-run
variation (see compare.timing), an op that newly falls back, a numerics run that newly fails, or a
notebook verdict that became a blocker. A notebook that ran on one side only is named, never
passed over in silence.
"""

from typing import TYPE_CHECKING

from workbench.lazy_exports import lazy_exports

__all__ = ["Comparison", "Gates", "compare_runs"]

if TYPE_CHECKING:
    from workbench.compare.judge import Comparison, Gates, compare_runs

# Judging imports every notebook's reader, which the CLI's option parsing and `--help` must not
# wait for.
__getattr__ = lazy_exports(
    __name__, {name: "workbench.compare.judge" for name in ("Comparison", "Gates", "compare_runs")}
)
