"""Notebook 01 as the workbook's registry sees it (workbench.questions): the same names in every
question package, so the runner, the scorecard and compare never branch on a notebook's name."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from workbench.baseline.measure import run_baseline
from workbench.baseline.records import (
    BaselineResult,
    BaselineSettings,
    ConfigResult,
    baseline_verdict,
)
from workbench.baseline.records import (
    result_data as result_data,
)
from workbench.results import ResultFile, ResultLead

NOTEBOOK = "01_baseline"
ASKS = (
    "does a training step and an inference call run, and what do compile, warm-up and steady "
    "state each cost?"
)
Settings = BaselineSettings
Result = BaselineResult
run = run_baseline
verdict = baseline_verdict


def settings(params: Mapping[str, Any]) -> BaselineSettings:
    """The notebook's settings from its parameters: a value out of range is BadInput."""
    return BaselineSettings.from_params(params)


@dataclass(kw_only=True)
class BaselineData(ResultLead):
    """What 01_baseline.json's readers read: every configuration with its raw samples."""

    configs: list[ConfigResult]
    throughput_unit: str


RESULT_FILE = ResultFile(NOTEBOOK, BaselineData)
