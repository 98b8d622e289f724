"""Notebook 01: does a training step and an inference call run, and what do compile, warm-up and
steady state each cost?"""

from workbench.baseline.measure import run_baseline
from workbench.baseline.records import BaselineResult, BaselineSettings
from workbench.baseline.reference import BASELINE_REFERENCE_FILE

__all__ = ["BASELINE_REFERENCE_FILE", "BaselineResult", "BaselineSettings", "run_baseline"]
