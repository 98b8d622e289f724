"""Notebook 05's question, as the workbook's registry (workbench.questions) sees it."""

from __future__ import annotations

from workbench.questions import Question
from workbench.serving.reader import RESULT_FILE
from workbench.serving.records import (
    ServingResult,
    ServingSettings,
    result_data,
    serving_verdict,
)
from workbench.serving.serve import run_serving

QUESTION = Question(
    asks=(
        "what latency at batch 1, which batch under a latency SLO and what throughput there, "
        "how it holds under load, and, for a generating model, time to first token and per "
        "token?"
    ),
    settings=ServingSettings.from_params,
    run=run_serving,
    result=ServingResult,
    verdict=serving_verdict,
    result_data=result_data,
    result_file=RESULT_FILE,
)
