"""04_retuning.json read back, typed, without the package's torch: compare and the index read
result files through this module (workbench.questions names it)."""

from __future__ import annotations

from dataclasses import dataclass, field

from workbench.planning.planner import Plan
from workbench.results import ResultFile, ResultLead
from workbench.tuning.cost import CostRow
from workbench.tuning.records import Recommendation


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
