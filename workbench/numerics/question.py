"""Notebook 03 as the workbook's registry sees it (workbench.questions): the same names in every
question package, so the runner, the scorecard and compare never branch on a notebook's name."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from workbench.numerics.records import (
    NumericsResult,
    NumericsSettings,
    RunResult,
    notebook_verdict,
)
from workbench.numerics.records import (
    result_data as result_data,
)
from workbench.numerics.run import run_numerics
from workbench.results import ResultFile, ResultLead

NOTEBOOK = "03_numerics"
ASKS = (
    "does the target compute what the reference computes, layer by layer, within tolerances "
    "that mean something?"
)
Settings = NumericsSettings
Result = NumericsResult
run = run_numerics
verdict = notebook_verdict


def settings(params: Mapping[str, Any]) -> NumericsSettings:
    """The notebook's settings from its parameters: a value out of range is BadInput."""
    return NumericsSettings.from_params(params)


@dataclass(kw_only=True)
class NumericsData(ResultLead):
    """What 03_numerics.json's readers read: every run against the reference, with its metrics."""

    runs: list[RunResult]


RESULT_FILE = ResultFile(NOTEBOOK, NumericsData)
