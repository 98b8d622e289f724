"""Notebook 01's question, as the workbook's registry (workbench.questions) sees it."""

from __future__ import annotations

from dataclasses import dataclass

from workbench.baseline.measure import run_baseline
from workbench.baseline.records import (
    BaselineResult,
    BaselineSettings,
    ConfigResult,
    baseline_verdict,
    result_data,
)
from workbench.questions import Question
from workbench.results import ResultFile, ResultLead


@dataclass(kw_only=True)
class BaselineData(ResultLead):
    """What 01_baseline.json's readers read: every configuration with its raw samples."""

    configs: list[ConfigResult]
    throughput_unit: str


RESULT_FILE = ResultFile("01_baseline", BaselineData)
QUESTION = Question(
    asks=(
        "does a training step and an inference call run, and what do compile, warm-up and "
        "steady state each cost?"
    ),
    settings=BaselineSettings.from_params,
    run=run_baseline,
    result=BaselineResult,
    verdict=baseline_verdict,
    result_data=result_data,
    result_file=RESULT_FILE,
)
