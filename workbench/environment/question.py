"""Notebook 00 as the workbook's registry sees it (workbench.questions): the same names in every
question package, so the runner, the scorecard and compare never branch on a notebook's name."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from workbench.environment.manifest import capture_manifest
from workbench.environment.records import environment_verdict
from workbench.environment.records import result_data as result_data
from workbench.results import ResultFile, ResultLead

NOTEBOOK = "00_environment"
ASKS = (
    "what exactly is installed, is it a published Neuron release, and what changed since the pin?"
)
Settings = None  # nothing to tune: the notebook reads the machine
Result = dict  # the manifest, as `workbench env pin` writes it
run = capture_manifest
verdict = environment_verdict


def settings(params: Mapping[str, Any]) -> None:
    """Notebook 00 has no settings to check beyond its parameters' types."""
    return None


@dataclass(kw_only=True)
class EnvironmentData(ResultLead):
    """What 00_environment.json's readers read: the manifest (versions, Neuron stack)."""

    manifest: dict[str, Any]

    @property
    def packages(self) -> dict[str, str]:
        found = self.manifest.get("packages")
        return found if isinstance(found, dict) else {}


RESULT_FILE = ResultFile(NOTEBOOK, EnvironmentData)
