"""Notebook 02's question, as the workbook's registry (workbench.questions) sees it."""

from __future__ import annotations

from workbench.coverage.analyze import analyze_coverage
from workbench.coverage.reader import RESULT_FILE
from workbench.coverage.records import CoverageReport, coverage_verdict, result_data
from workbench.questions import Question
from workbench.targets.detect import flavours_from_params

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
