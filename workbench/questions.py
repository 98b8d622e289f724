"""The workbook's questions: each notebook's question as one typed value, and their registry.

Every question package declares one `QUESTION = Question(...)` in its `question` module: what
the notebook asks, how its settings are built (and so checked) from parameters, the function
that answers it and its result type, its verdict rule, what its result file holds
(`result_data`) and how that file is read back, typed (`result_file`). mypy checks each of them
against the function or type given where the value is declared, so a question cannot lack one
or name a wrong one.

The registry below names each question module without importing it: the question modules import
torch, which `--help` and a run of notebook 00 or 02 alone never need. Each row names too the
reader module that holds the question's `RESULT_FILE` without that torch, so compare, collect
and the index read result files without loading it. The runner checks settings, and compare and
the index read result files, by iterating this registry; none of them branches on a notebook's
name.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, ParamSpec, TypeVar

from workbench.results import ResultFile, ResultLead
from workbench.scorecard import Verdict

S = TypeVar("S")  # the settings a notebook's parameters build
R = TypeVar("R")  # what the notebook's run returns
D = TypeVar("D", bound=ResultLead)  # its result file's data, read back
RunArgs = ParamSpec("RunArgs")
VerdictArgs = ParamSpec("VerdictArgs")
DataArgs = ParamSpec("DataArgs")


@dataclass(frozen=True)
class Question(Generic[S, RunArgs, R, VerdictArgs, DataArgs, D]):
    """One notebook's question as the rest of the workbook sees it."""

    asks: str
    settings: Callable[[Mapping[str, Any]], S]  # a value out of range is BadInput
    run: Callable[RunArgs, R]
    result: type[R]
    verdict: Callable[VerdictArgs, Verdict]  # the notebook's scorecard rule
    result_data: Callable[DataArgs, dict[str, Any]]  # the result file's data
    result_file: ResultFile[D]  # reads that file back into the package's record

    @property
    def notebook(self) -> str:
        """The notebook's stem, which names its result file too."""
        return self.result_file.notebook


@dataclass(frozen=True)
class Registered:
    """Where a notebook's question is, found without importing it."""

    notebook: str
    module: str  # the question module holding QUESTION
    reader: str  # the module holding RESULT_FILE, QUESTION.result_file, importable without torch
    # "module:function" where QUESTION.settings can be imported without its question module's
    # torch, so a run's settings are checked before any kernel starts; "" where they cannot.
    light_settings: str = ""
    # The question trains on the workload's own loss (its trajectory, its trials): a workload
    # whose loss stands in for one that cannot be recomputed leaves it not answered.
    needs_the_loss: bool = False
    # The question varies the batch size (its sweep and search): a workload whose batch has one
    # size only leaves it not answered.
    varies_the_batch: bool = False

    def load(self) -> Question[Any, ..., Any, ..., ..., Any]:
        found = getattr(importlib.import_module(self.module), "QUESTION", None)
        if not isinstance(found, Question):
            raise TypeError(f"{self.module}.QUESTION is not a Question")
        return found

    def result_file(self) -> ResultFile[Any]:
        found = getattr(importlib.import_module(self.reader), "RESULT_FILE", None)
        if not isinstance(found, ResultFile):
            raise TypeError(f"{self.reader}.RESULT_FILE is not a ResultFile")
        return found

    def settings(self) -> Callable[[Mapping[str, Any]], object]:
        if not self.light_settings:
            return self.load().settings
        module, function = self.light_settings.split(":")
        build: Callable[[Mapping[str, Any]], object] = getattr(
            importlib.import_module(module), function
        )
        return build

    def check_settings(self, params: Mapping[str, Any]) -> object:
        """The notebook's settings from `params`, built as the notebook builds them."""
        return self.settings()(params)


QUESTIONS = (
    Registered("00_environment", "workbench.environment.question", "workbench.environment.reader"),
    Registered("01_baseline", "workbench.baseline.question", "workbench.baseline.reader"),
    Registered(
        "02_op_coverage",
        "workbench.coverage.question",
        "workbench.coverage.reader",
        light_settings="workbench.targets.detect:flavours_from_params",
    ),
    Registered(
        "03_numerics",
        "workbench.numerics.question",
        "workbench.numerics.reader",
        needs_the_loss=True,
    ),
    Registered(
        "04_retuning",
        "workbench.tuning.question",
        "workbench.tuning.reader",
        needs_the_loss=True,
        varies_the_batch=True,
    ),
    Registered("05_serving", "workbench.serving.question", "workbench.serving.reader"),
)
_BY_NOTEBOOK = {q.notebook: q for q in QUESTIONS}


def question(notebook: str) -> Registered | None:
    """The registered question of a notebook stem; None for a notebook outside the workbook."""
    return _BY_NOTEBOOK.get(notebook)


def result_file(notebook: str) -> ResultFile[Any] | None:
    """The reader of a notebook's result file (imports its reader module, not its question's)."""
    found = question(notebook)
    return None if found is None else found.result_file()
