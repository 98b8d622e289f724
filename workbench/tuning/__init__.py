"""Notebook 04: which batch size, accumulation, DataLoader workers and data-parallel width to use
on the target, and what a sample costs there."""

from typing import TYPE_CHECKING

from workbench.lazy_exports import lazy_exports

__all__ = ["RetuneResult", "RetuneSettings", "run_retuning"]

if TYPE_CHECKING:
    from workbench.tuning.records import RetuneResult, RetuneSettings
    from workbench.tuning.retune import run_retuning

__getattr__ = lazy_exports(
    __name__,
    {
        "RetuneResult": "workbench.tuning.records",
        "RetuneSettings": "workbench.tuning.records",
        "run_retuning": "workbench.tuning.retune",
    },
)
