"""decode: result-file data back into the dataclasses that wrote it."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Literal

import pytest

from workbench.decode import DecodeError, decode
from workbench.results import _jsonable
from workbench.timing import HostLoad, Measurement


@dataclass
class Inner:
    kind: Literal["a", "b"]
    values: tuple[float, float] | None = None


@dataclass
class Outer:
    name: str
    count: int
    inner: list[Inner]
    by_key: dict[str, Inner] = field(default_factory=dict)
    error: float | None = None
    flag: bool = False


def test_a_written_record_reads_back_equal_with_derived_fields_rebuilt() -> None:
    record = Outer("x", 3, [Inner("a", (1.0, 2.0))], {"k": Inner("b")}, math.inf, True)
    assert decode(Outer, _jsonable(record), "f.json") == record
    measurement = Measurement([0.3, 0.1, 0.2], HostLoad(2, 2, 1.0, 0.1, None, 0.5, False))
    back = decode(Measurement, _jsonable(measurement), "f.json")
    assert back == measurement and back.median == 0.2  # init=False statistics recomputed


def test_unknown_keys_are_ignored_and_defaults_fill_missing_ones() -> None:
    data = {"name": "x", "count": 1, "inner": [], "derived": 5, "error": "nan"}
    read = decode(Outer, data, "f.json")
    assert read.by_key == {} and read.flag is False and math.isnan(read.error)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"name": "x", "inner": []}, "f.json: data has no field 'count', which Outer needs."),
        (
            {"name": "x", "count": "3", "inner": []},
            "f.json: data.count is '3'; expected an integer.",
        ),
        (
            {"name": "x", "count": 1, "inner": [{"kind": "c"}]},
            "f.json: data.inner[0].kind is 'c'; expected one of 'a', 'b'.",
        ),
        (
            {"name": "x", "count": 1, "inner": [], "by_key": {"k": {"kind": "a", "values": [1]}}},
            "f.json: data.by_key.k.values has 1 items; expected 2.",
        ),
        (
            {"name": "x", "count": True, "inner": []},
            "f.json: data.count is True; expected an integer.",
        ),
        (["not", "an", "object"], "f.json: data is"),
    ],
)
def test_a_wrong_field_is_one_sentence_naming_its_path(data, message) -> None:
    with pytest.raises(DecodeError) as raised:
        decode(Outer, data, "f.json", root="data")
    assert str(raised.value).startswith(message)


def test_asdict_of_a_frozen_record_round_trips() -> None:
    assert decode(Inner, asdict(Inner("b", (0.5, 1.5))), "f.json") == Inner("b", (0.5, 1.5))
