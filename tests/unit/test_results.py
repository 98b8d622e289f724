"""Result files: schema-versioned, atomic, and honest about NaN."""

import json
import math

import pytest
import torch

from workbench.results import SCHEMA_VERSION, load_result, save_result, write_json_atomic


def test_save_and_load_round_trip(tmp_path):
    path = save_result(
        tmp_path,
        "01_baseline",
        {"loss": [1.0, math.nan, math.inf], "t": torch.tensor(2.5)},
        target={"name": "cpu"},
    )
    record = load_result(path)
    assert record["schema_version"] == SCHEMA_VERSION
    assert record["notebook"] == "01_baseline" and record["target"] == {"name": "cpu"}
    assert record["data"]["loss"] == [1.0, "nan", "inf"]
    assert record["data"]["t"] == 2.5
    json.loads(path.read_text())  # strict JSON: no bare NaN


def test_failed_write_keeps_the_previous_file(tmp_path):
    path = tmp_path / "r.json"
    write_json_atomic(path, {"good": 1})
    with pytest.raises(TypeError):
        write_json_atomic(path, {"bad": object()})
    assert json.loads(path.read_text()) == {"good": 1}
    assert [p.name for p in tmp_path.iterdir()] == ["r.json"], "no temp file left behind"


def test_newer_schema_is_refused(tmp_path):
    path = tmp_path / "r.json"
    path.write_text(json.dumps({"schema_version": SCHEMA_VERSION + 1, "data": {}}))
    with pytest.raises(ValueError, match="reads up to"):
        load_result(path)
