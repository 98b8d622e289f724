"""01_baseline.json read back, typed, without the package's torch: compare and the index read
result files through this module (workbench.questions names it)."""

from __future__ import annotations

from dataclasses import dataclass

from workbench.baseline.records import ConfigResult
from workbench.results import ResultFile, ResultLead


@dataclass(kw_only=True)
class BaselineData(ResultLead):
    """What 01_baseline.json's readers read: every configuration with its raw samples."""

    configs: list[ConfigResult]
    throughput_unit: str


RESULT_FILE = ResultFile("01_baseline", BaselineData)
