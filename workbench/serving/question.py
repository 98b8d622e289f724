"""Notebook 05's question, as the workbook's registry (workbench.questions) sees it."""

from __future__ import annotations

from dataclasses import dataclass

from workbench.questions import Question
from workbench.results import ResultFile, ResultLead
from workbench.serving.records import (
    BatchPoint,
    GapSeries,
    ServingResult,
    ServingSettings,
    SloAnswer,
    result_data,
    serving_verdict,
)
from workbench.serving.serve import run_serving


@dataclass(kw_only=True)
class ServingData(ResultLead):
    """What 05_serving.json's readers read: every batch point with its raw latency samples, the
    SLO's answer and the host-gap series."""

    points: list[BatchPoint]
    throughput_unit: str
    slo: SloAnswer | None = None
    gaps: GapSeries | None = None


RESULT_FILE = ResultFile("05_serving", ServingData)
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
