"""Notebook 03: does the target compute what the reference computes, layer by layer, within
tolerances that mean something?"""

from workbench.numerics.compare import baseline_artifact_path, run_numerics
from workbench.numerics.metrics import VerdictRule
from workbench.numerics.records import NumericsResult, NumericsSettings

__all__ = [
    "NumericsResult",
    "NumericsSettings",
    "VerdictRule",
    "baseline_artifact_path",
    "run_numerics",
]
