"""Notebook 02 as the workbook's registry sees it (workbench.questions): the same names in every
question package, so the runner, the scorecard and compare never branch on a notebook's name."""

from __future__ import annotations

from dataclasses import dataclass

from workbench.coverage.analyze import analyze_coverage
from workbench.coverage.records import CoverageReport, coverage_verdict
from workbench.coverage.records import result_data as result_data
from workbench.coverage.support import OpVerdict
from workbench.results import ResultFile, ResultLead
from workbench.targets.detect import flavours_from_params

NOTEBOOK = "02_op_coverage"
ASKS = (
    "which ATen ops does the model run, and which does each Neuron flavour lower, fall back on or "
    "reject?"
)
Settings = None  # the flavours to judge are its one setting
Result = CoverageReport
run = analyze_coverage
verdict = coverage_verdict
settings = flavours_from_params  # the Neuron flavours judged: at least one, each known


@dataclass
class OpSupport:
    """One op of 02_op_coverage.json's ops as compare reads it: its verdict per flavour."""

    op: str
    verdicts: dict[str, OpVerdict]


@dataclass(kw_only=True)
class CoverageData(ResultLead):
    """What 02_op_coverage.json's readers read."""

    ops: list[OpSupport]


RESULT_FILE = ResultFile(NOTEBOOK, CoverageData)
