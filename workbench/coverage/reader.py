"""02_op_coverage.json read back, typed, without the package's torch: compare and the index read
result files through this module (workbench.questions names it)."""

from __future__ import annotations

from dataclasses import dataclass

from workbench.coverage.support import OpVerdict
from workbench.results import ResultFile, ResultLead


@dataclass
class OpSupport:
    """One op of 02_op_coverage.json's ops as compare reads it: its verdict per flavour."""

    op: str
    verdicts: dict[str, OpVerdict]


@dataclass(kw_only=True)
class CoverageData(ResultLead):
    """What 02_op_coverage.json's readers read."""

    ops: list[OpSupport]


RESULT_FILE = ResultFile("02_op_coverage", CoverageData)
