"""Notebook 01's question, as the workbook's registry (workbench.questions) sees it."""

from __future__ import annotations

from workbench.baseline.measure import run_baseline
from workbench.baseline.reader import RESULT_FILE
from workbench.baseline.records import (
    BaselineResult,
    BaselineSettings,
    baseline_verdict,
    result_data,
)
from workbench.questions import Question

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
