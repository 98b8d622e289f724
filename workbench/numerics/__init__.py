"""Notebook 03: does the target compute what the reference computes, layer by layer, within
tolerances that mean something?"""

from workbench.numerics.batch import baseline_artifact_path
from workbench.numerics.metrics import VerdictRule
from workbench.numerics.records import NumericsResult, NumericsSettings
from workbench.numerics.run import run_numerics

__all__ = [
    "NumericsResult",
    "NumericsSettings",
    "VerdictRule",
    "baseline_artifact_path",
    "run_numerics",
]
