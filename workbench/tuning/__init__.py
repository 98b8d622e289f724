"""Notebook 04: which batch size, accumulation, DataLoader workers and data-parallel width to use
on the target, and what a sample costs there."""

from workbench.tuning.records import RetuneResult, RetuneSettings
from workbench.tuning.retune import run_retuning

__all__ = ["RetuneResult", "RetuneSettings", "run_retuning"]
