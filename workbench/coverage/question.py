"""Notebook 02's question, as the workbook's registry (workbench.questions) sees it."""

from __future__ import annotations

from dataclasses import dataclass

from workbench.coverage.analyze import analyze_coverage
from workbench.coverage.records import CoverageReport, coverage_verdict, result_data
from workbench.coverage.support import OpVerdict
from workbench.questions import Question
from workbench.results import ResultFile, ResultLead
from workbench.targets.detect import flavours_from_params


@dataclass
class OpSupport:
    """One op of 02_op_coverage.json's ops as compare reads it: its verdict per flavour."""

    op: str
    verdicts: dict[str, OpVerdict]


@dataclass(kw_only=True)
class CoverageData(ResultLead):
    """What 02_op_coverage.json's readers read."""

    ops: list[OpSupport]


RESULT_FILE = ResultFile("02_op_coverage", CoverageData)
QUESTION = Question(
    asks=(
        "which ATen ops does the model run, and which does each Neuron flavour lower, fall back "
        "on or reject?"
    ),
    settings=flavours_from_params,  # the Neuron flavours judged: at least one, each known
    run=analyze_coverage,
    result=CoverageReport,
    verdict=coverage_verdict,
    result_data=result_data,
    result_file=RESULT_FILE,
)
