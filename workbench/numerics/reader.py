"""03_numerics.json read back, typed, without the package's torch: compare and the index read
result files through this module (workbench.questions names it)."""

from __future__ import annotations

from dataclasses import dataclass

from workbench.numerics.records import RunResult
from workbench.results import ResultFile, ResultLead


@dataclass(kw_only=True)
class NumericsData(ResultLead):
    """What 03_numerics.json's readers read: every run against the reference, with its metrics."""

    runs: list[RunResult]


RESULT_FILE = ResultFile("03_numerics", NumericsData)
