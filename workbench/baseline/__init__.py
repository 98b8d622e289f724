"""Notebook 01: does a training step and an inference call run, and what do compile, warm-up and
steady state each cost?"""

from typing import TYPE_CHECKING

from workbench.lazy_exports import lazy_exports

__all__ = ["BASELINE_REFERENCE_FILE", "BaselineResult", "BaselineSettings", "run_baseline"]

if TYPE_CHECKING:
    from workbench.baseline.measure import run_baseline
    from workbench.baseline.records import BaselineResult, BaselineSettings
    from workbench.baseline.reference import BASELINE_REFERENCE_FILE

__getattr__ = lazy_exports(
    __name__,
    {
        "run_baseline": "workbench.baseline.measure",
        "BaselineResult": "workbench.baseline.records",
        "BaselineSettings": "workbench.baseline.records",
        "BASELINE_REFERENCE_FILE": "workbench.baseline.reference",
    },
)
