"""Notebook 04's question, as the workbook's registry (workbench.questions) sees it."""

from __future__ import annotations

from workbench.questions import Question
from workbench.tuning.reader import RESULT_FILE
from workbench.tuning.records import (
    RetuneResult,
    RetuneSettings,
    result_data,
    retuning_verdict,
)
from workbench.tuning.retune import run_retuning

QUESTION = Question(
    asks=(
        "which batch size, accumulation, DataLoader workers and data-parallel width to use on "
        "the target, and what does a sample cost there?"
    ),
    settings=RetuneSettings.from_params,
    run=run_retuning,
    result=RetuneResult,
    verdict=retuning_verdict,
    result_data=result_data,
    result_file=RESULT_FILE,
)
