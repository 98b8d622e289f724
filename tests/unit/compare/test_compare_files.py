"""The files `workbench compare` and `workbench collect` read are checked before they are judged:
a field of the wrong type anywhere is one sentence naming the file and the field, a result file
outside the run folder is refused, and a folder scan skips a damaged run with a warning."""

from __future__ import annotations

import copy
import json
import os
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures.run_folders import write_run
from workbench.baseline.reader import RESULT_FILE as BASELINE_FILE
from workbench.cli import main
from workbench.compare import compare_runs
from workbench.compare.runs import UnreadableRun, load_run
from workbench.errors import EXIT_BAD_INPUT, EXIT_OK, EXIT_REGRESSION, BadInput
from workbench.safe_load import EachValue, NonFinite, Required, check_fields

# (a document, its shape, the sentence check_fields gives, or None when it fits)
SHAPE_CASES = [
    ({"times": [0.1, 2]}, {"times": [float]}, None),
    ({"times": [0.1, "x"]}, {"times": [float]}, "f.json: times must be a list of numbers."),
    ({"times": [True]}, {"times": [float]}, "f.json: times must be a list of numbers."),
    ({"n": 3}, {"n": int}, None),
    ({"n": 3.5}, {"n": int}, "f.json: n must be a whole number."),
    ({"v": None}, {"v": ({"status": str}, None)}, None),
    ({"v": 7}, {"v": ({"status": str}, None)}, "f.json: v must be a mapping or null."),
    ({"a": [{"b": {"c": 1}}]}, {"a": [{"b": {"c": str}}]}, "f.json: a[0].b.c must be a string."),
    ({"other": [1]}, {"v": str}, None),  # keys not declared are not read, so not checked
    ({}, {"v": Required(str)}, "f.json: v is missing; it must be a string."),
    ({"m": {"x": {"s": "ok"}}}, {"m": EachValue({"s": str})}, None),
    ({"m": {"x": {"s": 1}}}, {"m": EachValue({"s": str})}, "f.json: m.x.s must be a string."),
    ({"e": "nan"}, {"e": (float, NonFinite)}, None),
    ({"e": "x"}, {"e": (float, NonFinite)}, "f.json: e must be a number or 'nan', 'inf' or "
     "'-inf'."),
    ([1], {"a": str}, "f.json: the whole file must be a mapping."),
]  # fmt: skip


@pytest.mark.parametrize(("value", "shape", "sentence"), SHAPE_CASES)
def test_check_fields_names_the_file_and_the_field(value: Any, shape: Any, sentence: str) -> None:
    if sentence is None:
        check_fields(value, shape, "f.json")
    else:
        with pytest.raises(BadInput) as raised:
            check_fields(value, shape, "f.json")
        assert str(raised.value) == sentence


def _leaves(value: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[tuple[Any, ...], Any]]:
    yield path, value
    if isinstance(value, dict):
        for key, child in value.items():
            yield from _leaves(child, (*path, key))
    elif isinstance(value, list):
        for index, child in enumerate(value[:3]):
            yield from _leaves(child, (*path, index))


def _set(document: Any, path: tuple[Any, ...], value: Any) -> None:
    for step in path[:-1]:
        document = document[step]
    document[path[-1]] = value


WRONG_VALUES = ("x", 7, None, {"a": 1}, [1])


def test_every_field_of_the_wrong_type_is_one_sentence_or_compared(tmp_path: Path) -> None:
    """Each field of a real run folder (written by the workbook's own writers) set to each wrong
    type, a fixed-seed sample of 300 of the ~1,000 mutations: compare either judges the
    runs or says BadInput; never another exception."""
    base = write_run(tmp_path / "base", started="2026-11-01T02:00:00", seed=1)
    good = write_run(tmp_path / "good", started="2026-11-02T02:00:00", seed=2)
    mutations = []
    for file in sorted(good.glob("*.json")):
        document = json.loads(file.read_text())
        for path, value in _leaves(document):
            if path:
                mutations += [
                    (file, document, path, wrong)
                    for wrong in WRONG_VALUES
                    if type(wrong) is not type(value)
                ]
    assert len(mutations) > 500
    crashes, refused = [], 0
    for file, document, path, wrong in random.Random(7).sample(mutations, 300):
        mutated = copy.deepcopy(document)
        _set(mutated, path, wrong)
        file.write_text(json.dumps(mutated))
        try:
            compare_runs([base, good])
        except BadInput as exc:
            refused += 1
            assert file.name in str(exc)
        except Exception as exc:  # noqa: BLE001 - any other exception is the defect looked for
            crashes.append(f"{file.name} {path} = {wrong!r}: {type(exc).__name__}: {exc}")
        file.write_text(json.dumps(document))
    assert crashes == []
    assert refused > 0, "a sample with wrong types that compare reads must refuse some"


def _damage(run: Path) -> None:
    """A hand edit: the first notebook's verdict becomes a number."""
    summary = json.loads((run / "summary.json").read_text())
    summary["notebooks"][0]["verdict"] = 7
    (run / "summary.json").write_text(json.dumps(summary))


@pytest.mark.parametrize(("slowdown", "exit_code"), [(1.0, EXIT_OK), (2.5, EXIT_REGRESSION)])
def test_a_scan_skips_a_damaged_run_with_a_warning_and_judges_the_others(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], slowdown: float, exit_code: int
) -> None:
    reports = tmp_path / "reports"
    write_run(reports / "night1", started="2026-11-01", seed=1)
    write_run(reports / "night2", started="2026-11-02", seed=2, step=0.010 * slowdown)
    damaged = write_run(reports / "night3", started="2026-11-03", seed=3)
    _damage(damaged)
    assert main(["compare", str(reports), "--out", str(tmp_path / "cmp")]) == exit_code
    captured = capsys.readouterr()
    warnings = [line for line in captured.err.splitlines() if line.startswith("skipped: ")]
    assert warnings == [
        f"skipped: {damaged / 'summary.json'}: notebooks[0].verdict is 7; expected an object"
    ]
    assert "night2 against night1" in captured.out
    # Named directly, the same run is one sentence and exit 2.
    assert main(["compare", str(reports / "night1"), str(damaged)]) == EXIT_BAD_INPUT
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "notebooks[0].verdict is 7; expected an object" in err[0]


def test_a_damaged_result_file_names_its_field(tmp_path: Path) -> None:
    run = write_run(tmp_path / "run", started="2026-11-01")
    record = json.loads((run / "01_baseline.json").read_text())
    record["data"]["configs"][0]["phases"][1]["measurement"]["times"] = "fast"
    (run / "01_baseline.json").write_text(json.dumps(record))
    with pytest.raises(UnreadableRun) as raised:
        load_run(run)
    assert str(raised.value) == (
        f"{run / '01_baseline.json'}: data.configs[0].phases[1].measurement.times is 'fast'; "
        "expected a list"
    )


def _name_result(run: Path, name: str) -> None:
    summary = json.loads((run / "summary.json").read_text())
    summary["notebooks"][0]["result"] = name
    (run / "summary.json").write_text(json.dumps(summary))


@pytest.mark.parametrize("name", ["/etc/passwd", "../x", "..", "sub/01_baseline.json", "a\\b"])
def test_a_result_named_outside_the_run_folder_is_refused(tmp_path: Path, name: str) -> None:
    run = write_run(tmp_path / "run", started="2026-11-01")
    (tmp_path / "x").write_text((run / "01_baseline.json").read_text())
    _name_result(run, name)
    with pytest.raises(UnreadableRun, match="which is not a file name inside the run folder"):
        load_run(run)


def test_a_result_symlink_is_refused_whether_it_leads_out_or_stays_inside(tmp_path: Path) -> None:
    """No link is followed (exports upload what these files hold); the plain file reads."""
    run = write_run(tmp_path / "run", started="2026-11-01")
    (tmp_path / "outside.json").write_text((run / "01_baseline.json").read_text())
    os.symlink(tmp_path / "outside.json", run / "out.json")
    os.symlink(run / "01_baseline.json", run / "in.json")
    _name_result(run, "out.json")
    with pytest.raises(UnreadableRun, match="not a file name inside the run folder"):
        load_run(run)
    _name_result(run, "in.json")
    with pytest.raises(UnreadableRun, match="in.json is a symbolic link; only plain files"):
        load_run(run)
    _name_result(run, "01_baseline.json")
    assert load_run(run).result(BASELINE_FILE) is not None


def test_collect_warns_of_a_damaged_run_and_shows_the_item(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "root"
    write_run(root / "mlp" / "r1", started="2026-11-01", seed=1)
    _damage(write_run(root / "mlp" / "r2", started="2026-11-02", seed=2))
    (root / "mlp" / "r3").mkdir()  # still running: listed as incomplete, no warning
    assert main(["collect", str(root)]) == EXIT_OK
    captured = capsys.readouterr()
    assert captured.err.splitlines() == [
        f"skipped: {root / 'mlp' / 'r2' / 'summary.json'}: notebooks[0].verdict is 7; "
        "expected an object"
    ]
    assert "mlp: pass; first run: nothing to compare with yet" in captured.out


def test_a_compare_link_planted_in_the_newest_run_is_refused(tmp_path: Path, capsys) -> None:
    """Must refuse: the newest run folder's compare/ is a link to another place (a teammate's
    folder, a CI artefact): compare writes nothing there and says why; without the link it
    writes compare/ in the run (must-pass)."""
    base = write_run(tmp_path / "base", started="2026-11-01", seed=1)
    new = write_run(tmp_path / "new", started="2026-11-02", seed=1)
    outside = tmp_path / "outside"
    outside.mkdir()
    (new / "compare").symlink_to(outside, target_is_directory=True)
    assert main(["compare", str(base), str(new)]) == EXIT_BAD_INPUT
    assert "compare folder" in capsys.readouterr().err and not list(outside.iterdir())
    (new / "compare").unlink()
    assert main(["compare", str(base), str(new)]) in (EXIT_OK, EXIT_REGRESSION)
    assert (new / "compare" / "compare.html").is_file()
