"""Notebook 03's question, as the workbook's registry (workbench.questions) sees it."""

from __future__ import annotations

from workbench.numerics.reader import RESULT_FILE
from workbench.numerics.records import (
    NumericsResult,
    NumericsSettings,
    notebook_verdict,
    result_data,
)
from workbench.numerics.run import run_numerics
from workbench.questions import Question

QUESTION = Question(
    asks=(
        "does the target compute what the reference computes, layer by layer, within "
        "tolerances that mean something?"
    ),
    settings=NumericsSettings.from_params,
    run=run_numerics,
    result=NumericsResult,
    verdict=notebook_verdict,
    result_data=result_data,
    result_file=RESULT_FILE,
)
