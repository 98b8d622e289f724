"""Notebook 02: which ATen ops does the model run, and which does each Neuron flavour lower, fall
back on or reject?"""

from workbench.coverage.analyze import analyze_coverage
from workbench.coverage.records import CoverageReport

__all__ = ["CoverageReport", "analyze_coverage"]
