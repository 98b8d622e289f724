"""Files read within bounds: only regular files, never more than the bound, and links refused
where the reader asks (run folders), followed where it does not (a Hugging Face cache snapshot's
config.json is a link to a blob)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from workbench.errors import BadInput
from workbench.safe_load import (
    RESULT_MAX_VALUES,
    load_json,
    read_bounded,
    read_bounded_bytes,
    read_plain_bytes,
)


def test_a_device_a_pipe_or_a_folder_is_refused_without_reading_or_waiting(tmp_path: Path) -> None:
    fifo = tmp_path / "config.json"
    os.mkfifo(fifo)  # no writer: a blocking open or read would wait for ever
    for path in (Path("/dev/zero"), fifo, tmp_path):
        with pytest.raises(BadInput, match="cannot be read: it is not a regular file"):
            read_bounded(path, "File", 1 << 20)
    with pytest.raises(BadInput, match="it is not a regular file"):
        read_bounded_bytes(Path("/dev/zero"), "File", 1 << 20)


def test_links_are_followed_unless_the_reader_refuses_them(tmp_path: Path) -> None:
    blob = tmp_path / "blob"
    blob.write_text('{"n_layer": 2}')
    (tmp_path / "config.json").symlink_to(blob)
    assert load_json(read_bounded(tmp_path / "config.json", "File", 1024), "c") == {"n_layer": 2}
    with pytest.raises(BadInput, match="is a symbolic link; only plain files are read here"):
        read_bounded(tmp_path / "config.json", "File", 1024, follow_links=False)
    assert read_plain_bytes(blob, "File", 1024) == b'{"n_layer": 2}'


def test_a_file_over_the_bound_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "big"
    path.write_bytes(b"x" * 2049)
    with pytest.raises(BadInput, match="over the 0.00195312 MiB this reads"):
        read_bounded(path, "File", 2048)
    assert len(read_bounded(path, "File", 4096)) == 2049


def test_a_result_file_may_hold_a_serving_points_raw_samples_a_config_may_not() -> None:
    """05 keeps every request of its last three 1-second windows: 37,000 samples per series
    for a 77 us call, about 700,000 values over a default run's ten points."""
    text = "[" + ",".join(["7.7e-05"] * 700_000) + "]"
    assert len(load_json(text, "05_serving.json", RESULT_MAX_VALUES)) == 700_000
    with pytest.raises(BadInput, match="more than 200,000 values"):
        load_json(text, "config.json")


@pytest.mark.parametrize(
    "text, refused",
    [
        ('{"a": [1, 2.5, {"b": [1e400]}]}', "number 1e400 is out of range"),
        ('{"a": {"b": [-1E+309]}}', r"number -1E\+309 is out of range"),
        ("[[1, 12345678901234567890]]", "has more than 19 digits"),
        ("[1" + "0" * 400 + ".5]", "is out of range"),
    ],
)
def test_a_number_out_of_range_is_named_wherever_it_sits(text: str, refused: str) -> None:
    with pytest.raises(BadInput, match=refused):
        load_json(text, "f.json")


def test_numbers_in_range_are_read_as_json_reads_them() -> None:
    # The digits after a decimal point are not a whole part: 20 of them are an ordinary sample.
    text = '{"s": [0.00012616025014722254, 9999999999999999999, -1e308, 1e-400], "n": NaN}'
    value = load_json(text, "f.json")
    assert value["s"] == [0.00012616025014722254, 9999999999999999999, -1e308, 0.0]
    assert value["n"] != value["n"]
