"""00_environment.json read back, typed, without the package's torch: compare and the index
read result files through this module (workbench.questions names it)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from workbench.results import ResultFile, ResultLead


@dataclass(kw_only=True)
class EnvironmentData(ResultLead):
    """What 00_environment.json's readers read: the manifest (versions, Neuron stack)."""

    manifest: dict[str, Any]

    @property
    def packages(self) -> dict[str, str]:
        found = self.manifest.get("packages")
        return found if isinstance(found, dict) else {}


RESULT_FILE = ResultFile("00_environment", EnvironmentData)
