"""The question registry: each registered notebook's Question value is where the registry says,
names the same notebook, and the settings the runner checks before a kernel starts are the very
builder the Question declares."""

from __future__ import annotations

import typing

import pytest

from workbench.params import NOTEBOOKS_DIR
from workbench.questions import QUESTIONS, Registered, question, result_file


def _mismatches(entry: Registered) -> list[str]:
    """What a registry row says that its question module does not."""
    found = entry.load()
    wrong = []
    if found.notebook != entry.notebook:
        wrong.append(f"notebook {found.notebook} != {entry.notebook}")
    if entry.result_file() is not found.result_file:
        wrong.append(f"{entry.reader}.RESULT_FILE is not its Question's result_file")
    if entry.light_settings and entry.settings() is not found.settings:
        wrong.append(f"{entry.light_settings} is not its Question's settings")
    returns = typing.get_type_hints(found.run).get("return")
    if (typing.get_origin(returns) or returns) is not found.result:
        wrong.append(f"run returns {returns}, not {found.result}")
    return wrong


@pytest.mark.parametrize("entry", QUESTIONS, ids=lambda e: e.notebook)
def test_every_registered_question_is_what_the_registry_says(entry: Registered) -> None:
    assert _mismatches(entry) == []
    assert (NOTEBOOKS_DIR / f"{entry.notebook}.ipynb").is_file()
    assert question(entry.notebook) is entry
    reader = result_file(entry.notebook)
    assert reader is not None and reader.notebook == entry.notebook


def test_a_row_that_disagrees_with_its_question_is_found() -> None:
    wrong = Registered(
        "02_op_coverage",
        "workbench.baseline.question",
        "workbench.coverage.reader",
        light_settings="workbench.targets.detect:flavours_from_params",
    )
    assert _mismatches(wrong) == [
        "notebook 01_baseline != 02_op_coverage",
        "workbench.coverage.reader.RESULT_FILE is not its Question's result_file",
        "workbench.targets.detect:flavours_from_params is not its Question's settings",
    ]
    assert question("09_unknown") is None and result_file("09_unknown") is None


def test_a_module_without_a_question_or_a_reader_is_refused() -> None:
    with pytest.raises(TypeError, match="workbench.scorecard.QUESTION is not a Question"):
        Registered("09_x", "workbench.scorecard", "workbench.scorecard").load()
    with pytest.raises(TypeError, match="workbench.scorecard.RESULT_FILE is not a ResultFile"):
        Registered("09_x", "workbench.scorecard", "workbench.scorecard").result_file()
