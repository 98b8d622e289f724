"""Notebook 03's question, as the workbook's registry (workbench.questions) sees it."""

from __future__ import annotations

from dataclasses import dataclass

from workbench.numerics.records import (
    NumericsResult,
    NumericsSettings,
    RunResult,
    notebook_verdict,
    result_data,
)
from workbench.numerics.run import run_numerics
from workbench.questions import Question
from workbench.results import ResultFile, ResultLead


@dataclass(kw_only=True)
class NumericsData(ResultLead):
    """What 03_numerics.json's readers read: every run against the reference, with its metrics."""

    runs: list[RunResult]


RESULT_FILE = ResultFile("03_numerics", NumericsData)
QUESTION = Question(
    asks=(
        "does the target compute what the reference computes, layer by layer, within "
        "tolerances that mean something?"
    ),
    settings=NumericsSettings.from_params,
    run=run_numerics,
    result=NumericsResult,
    verdict=notebook_verdict,
    result_data=result_data,
    result_file=RESULT_FILE,
)
