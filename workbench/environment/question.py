"""Notebook 00's question, as the workbook's registry (workbench.questions) sees it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from workbench.environment.manifest import capture_manifest
from workbench.environment.reader import RESULT_FILE
from workbench.environment.records import environment_verdict, result_data
from workbench.questions import Question


def no_settings(params: Mapping[str, Any]) -> None:
    """Notebook 00 reads the machine: nothing to check beyond its parameters' types."""
    return None


QUESTION = Question(
    asks=(
        "what exactly is installed, is it a published Neuron release, and what changed since "
        "the pin?"
    ),
    settings=no_settings,
    run=capture_manifest,
    result=dict,  # the manifest, as `workbench env pin` writes it
    verdict=environment_verdict,
    result_data=result_data,
    result_file=RESULT_FILE,
)
