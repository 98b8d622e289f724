"""Notebook 05 as the workbook's registry sees it (workbench.questions): the same names in every
question package, so the runner, the scorecard and compare never branch on a notebook's name."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from workbench.results import ResultFile, ResultLead
from workbench.serving.records import (
    BatchPoint,
    GapSeries,
    ServingResult,
    ServingSettings,
    SloAnswer,
    serving_verdict,
)
from workbench.serving.records import (
    result_data as result_data,
)
from workbench.serving.serve import run_serving

NOTEBOOK = "05_serving"
ASKS = (
    "what latency at batch 1, which batch under a latency SLO and what throughput there, how "
    "it holds under load, and, for a generating model, time to first token and per token?"
)
Settings = ServingSettings
Result = ServingResult
run = run_serving
verdict = serving_verdict


def settings(params: Mapping[str, Any]) -> ServingSettings:
    """The notebook's settings from its parameters: a value out of range is BadInput."""
    return ServingSettings.from_params(params)


@dataclass(kw_only=True)
class ServingData(ResultLead):
    """What 05_serving.json's readers read: every batch point with its raw latency samples, the
    SLO's answer and the host-gap series."""

    points: list[BatchPoint]
    throughput_unit: str
    slo: SloAnswer | None = None
    gaps: GapSeries | None = None


RESULT_FILE = ResultFile(NOTEBOOK, ServingData)
