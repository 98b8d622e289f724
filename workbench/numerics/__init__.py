"""Notebook 03: does the target compute what the reference computes, layer by layer, within
tolerances that mean something?"""

from typing import TYPE_CHECKING

from workbench.lazy_exports import lazy_exports

__all__ = [
    "NumericsResult",
    "NumericsSettings",
    "VerdictRule",
    "baseline_artifact_path",
    "run_numerics",
]

if TYPE_CHECKING:
    from workbench.numerics.batch import baseline_artifact_path
    from workbench.numerics.metrics import VerdictRule
    from workbench.numerics.records import NumericsResult, NumericsSettings
    from workbench.numerics.run import run_numerics

__getattr__ = lazy_exports(
    __name__,
    {
        "baseline_artifact_path": "workbench.numerics.batch",
        "VerdictRule": "workbench.numerics.metrics",
        "NumericsResult": "workbench.numerics.records",
        "NumericsSettings": "workbench.numerics.records",
        "run_numerics": "workbench.numerics.run",
    },
)
