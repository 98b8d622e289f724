"""05_serving.json read back, typed, without the package's torch: compare and the index read
result files through this module (workbench.questions names it)."""

from __future__ import annotations

from dataclasses import dataclass

from workbench.results import ResultFile, ResultLead
from workbench.serving.records import BatchPoint, GapSeries, SloAnswer


@dataclass(kw_only=True)
class ServingData(ResultLead):
    """What 05_serving.json's readers read: every batch point with its raw latency samples, the
    SLO's answer and the host-gap series."""

    points: list[BatchPoint]
    throughput_unit: str
    slo: SloAnswer | None = None
    gaps: GapSeries | None = None


RESULT_FILE = ResultFile("05_serving", ServingData)
