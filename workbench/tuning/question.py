"""Notebook 04 as the workbook's registry sees it (workbench.questions): the same names in every
question package, so the runner, the scorecard and compare never branch on a notebook's name."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from workbench.planning.planner import Plan
from workbench.results import ResultFile, ResultLead
from workbench.tuning.cost import CostRow
from workbench.tuning.records import (
    Recommendation,
    RetuneResult,
    RetuneSettings,
    retuning_verdict,
)
from workbench.tuning.records import (
    result_data as result_data,
)
from workbench.tuning.retune import run_retuning

NOTEBOOK = "04_retuning"
ASKS = (
    "which batch size, accumulation, DataLoader workers and data-parallel width to use on the "
    "target, and what does a sample cost there?"
)
Settings = RetuneSettings
Result = RetuneResult
run = run_retuning
verdict = retuning_verdict


def settings(params: Mapping[str, Any]) -> RetuneSettings:
    """The notebook's settings from its parameters: a value out of range is BadInput."""
    return RetuneSettings.from_params(params)


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


RESULT_FILE = ResultFile(NOTEBOOK, RetuningData)
