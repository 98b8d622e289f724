"""Notebook 04's question, as the workbook's registry (workbench.questions) sees it."""

from __future__ import annotations

from dataclasses import dataclass, field

from workbench.planning.planner import Plan
from workbench.questions import Question
from workbench.results import ResultFile, ResultLead
from workbench.tuning.cost import CostRow
from workbench.tuning.records import (
    Recommendation,
    RetuneResult,
    RetuneSettings,
    result_data,
    retuning_verdict,
)
from workbench.tuning.retune import run_retuning


@dataclass
class StoredCost:
    """04_retuning.json's cost as compare reads it: the measured rows and what they price."""

    unit: str
    items: int
    rows: list[CostRow] = field(default_factory=list)


@dataclass(kw_only=True)
class RetuningData(ResultLead):
    """What 04_retuning.json's readers read: the recommendation and its cost."""

    recommendation: Recommendation
    cost: StoredCost | None
    plan: Plan | None = None  # absent from files written before the planner


RESULT_FILE = ResultFile("04_retuning", RetuningData)
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
