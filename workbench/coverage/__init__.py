"""Notebook 02: which ATen ops does the model run, and which does each Neuron flavour lower, fall
back on or reject?"""

from typing import TYPE_CHECKING

from workbench.lazy_exports import lazy_exports

__all__ = ["CoverageReport", "analyze_coverage"]

if TYPE_CHECKING:
    from workbench.coverage.analyze import analyze_coverage
    from workbench.coverage.records import CoverageReport

__getattr__ = lazy_exports(
    __name__,
    {
        "analyze_coverage": "workbench.coverage.analyze",
        "CoverageReport": "workbench.coverage.records",
    },
)
