"""The workbook's questions, registered once: notebook stem -> the package that answers it.

Every question package has a `question` module with the same names (QuestionModule below): the
notebook's stem, what it asks, `settings` (builds, and so checks, its settings from parameters),
`run`, `Result`, `verdict`, `result_data` (writes the result file's data) and RESULT_FILE (reads
it back, typed). The runner checks settings, and compare and the index read result files, by
iterating this registry; none of them branches on a notebook's name.

Imported on first use, not here: the question modules import torch, which `--help` and a run of
notebook 00 alone never need.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, cast

from workbench.results import ResultFile


@dataclass(frozen=True)
class Question:
    """One notebook of the workbook: where its question module is, and where the function that
    builds (so checks) its settings from parameters is. The latter is named apart because the
    runner checks settings before any kernel starts, where importing torch for a run of notebook
    00 or 02 alone would cost seconds; it is the question module's own `settings`."""

    notebook: str
    module: str
    settings: str  # "module:function"

    def load(self) -> QuestionModule:
        return cast(QuestionModule, importlib.import_module(self.module))

    def check_settings(self, params: Mapping[str, Any]) -> object:
        module, function = self.settings.split(":")
        build: Callable[[Mapping[str, Any]], object] = getattr(
            importlib.import_module(module), function
        )
        return build(params)


QUESTIONS = (
    Question(
        "00_environment",
        "workbench.environment.question",
        "workbench.environment.question:settings",
    ),
    Question("01_baseline", "workbench.baseline.question", "workbench.baseline.question:settings"),
    Question(
        "02_op_coverage",
        "workbench.coverage.question",
        "workbench.targets.detect:flavours_from_params",
    ),
    Question("03_numerics", "workbench.numerics.question", "workbench.numerics.question:settings"),
    Question("04_retuning", "workbench.tuning.question", "workbench.tuning.question:settings"),
    Question("05_serving", "workbench.serving.question", "workbench.serving.question:settings"),
)
_BY_NOTEBOOK = {q.notebook: q for q in QUESTIONS}


class QuestionModule(Protocol):
    NOTEBOOK: str
    ASKS: str
    RESULT_FILE: ResultFile[Any]

    def settings(self, params: Mapping[str, Any]) -> object: ...


def question(notebook: str) -> Question | None:
    """The registered question of a notebook stem; None for a notebook outside the workbook."""
    return _BY_NOTEBOOK.get(notebook)


def result_file(notebook: str) -> ResultFile[Any] | None:
    """The reader of a notebook's result file (imports its question module)."""
    found = question(notebook)
    return None if found is None else found.load().RESULT_FILE


if TYPE_CHECKING:  # mypy checks that every registered module has the protocol's names
    from workbench.baseline import question as _baseline
    from workbench.coverage import question as _coverage
    from workbench.environment import question as _environment
    from workbench.numerics import question as _numerics
    from workbench.serving import question as _serving
    from workbench.tuning import question as _tuning

    _CHECKED_00: QuestionModule = _environment
    _CHECKED_01: QuestionModule = _baseline
    _CHECKED_02: QuestionModule = _coverage
    _CHECKED_03: QuestionModule = _numerics
    _CHECKED_04: QuestionModule = _tuning
    _CHECKED_05: QuestionModule = _serving
