"""Importing TorchNeuron's API compatibility table, and the native verdicts it gives.

The fixture tests/fixtures/torch_api_compatibility.md follows the documented columns of
docs/torch_api_compatibility.md (torch-neuronx repository) because no copy of the real file can
be obtained here: an API column, a support column (Y / CPU_FALLBACK / N) and a limitations column
naming the ATen op and dtypes of a fallback, one table per namespace. These tests prove the
parser against that documented shape, not against a real release's file.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from pathlib import Path

import pytest

from tests.fixtures import REPO_ROOT
from workbench.cli import main
from workbench.coverage.native_table import (
    ApiRow,
    NativeTable,
    OpEntry,
    aten_name,
    load_native_tables,
    write_table,
)
from workbench.coverage.support import (
    FALLS_BACK,
    NO_NATIVE_TABLE,
    NO_NATIVE_TABLE_WHY,
    SUPPORTED,
    UNKNOWN,
    TargetReading,
    load_tables,
    native_table_note,
    verdict,
)
from workbench.targets.detect import FLAVOUR_NATIVE

FIXTURE = REPO_ROOT / "tests" / "fixtures" / "torch_api_compatibility.md"


@pytest.fixture
def tables_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "op-tables"
    monkeypatch.setenv("WORKBENCH_OP_TABLES", str(folder))
    return folder


def _import(capsys: pytest.CaptureFixture, *args: str) -> tuple[int, str, str]:
    code = main(["tables", "import-native", *args])
    out, err = capsys.readouterr()
    return code, out, err


def _only_file(folder: Path) -> dict:
    (path,) = folder.iterdir()
    return json.loads(path.read_text(encoding="utf-8"))


def test_import_writes_a_versioned_table_with_its_source_and_rows(
    tables_dir: Path, capsys: pytest.CaptureFixture
) -> None:
    code, out, _ = _import(capsys, str(FIXTURE))
    assert code == 0
    (path,) = tables_dir.iterdir()
    assert out.strip() == (
        f"wrote {path}: release 2.29.0, 6 supported, 3 cpu_fallback, 1 unsupported "
        "(3 API row(s) name no ATen op and were kept apart)"
    )
    table = json.loads(path.read_text(encoding="utf-8"))
    assert table["release"] == "2.29.0"  # from the title
    assert table["source_file"] == "torch_api_compatibility.md"
    assert table["source_sha256"] == hashlib.sha256(FIXTURE.read_bytes()).hexdigest()
    assert table["imported_on"][:4].isdigit()
    ops = {entry["op"]: entry for entry in table["ops"]}
    # torch.add and torch.Tensor.relu key as coverage keys ops: the ATen name, every overload.
    assert ops["aten::add"]["status"] == "supported"
    assert ops["aten::relu"]["rows"][0]["api"] == "torch.Tensor.relu"
    # Unqualified names take the namespace of their heading.
    assert ops["aten::gelu"]["rows"][0] == {
        "api": "gelu",
        "support": "Y",
        "notes": "Native",
        "section": "torch.nn.functional",
    }
    assert ops["aten::item"]["kind"] == "host-only"
    # A CPU_FALLBACK row is filed under the ATen op its limitations name, with the dtypes.
    assert ops["aten::sort.stable"]["status"] == "cpu_fallback"
    assert ops["aten::sort.stable"]["dtypes"] == ["float64", "int64"]
    assert "aten::sort" not in ops
    assert ops["aten::_linalg_eigh"]["dtypes"] == ["float32", "float64"]
    assert ops["aten::quantize_per_tensor"]["status"] == "unsupported"
    unmapped = {row["api"] for row in table["unmapped"]}
    assert unmapped == {"torch.nn.Linear", "torch.distributed.all_reduce", "torch.backends.cudnn"}


def test_api_names_map_to_aten_names() -> None:
    assert aten_name("torch.Tensor.add_") == "aten::add_"
    assert aten_name("torch.linalg.eigh") == "aten::linalg_eigh"
    assert aten_name("torch.special.erf()") == "aten::special_erf"
    assert aten_name("Tensor.abs", "torch.Tensor") == "aten::abs"
    assert aten_name("torch.nn.Linear") is None
    assert aten_name("torch.distributed.all_reduce") is None


def test_release_option_files_a_table_whose_title_names_none(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    untitled = tmp_path / "compat.md"
    untitled.write_text("\n".join(FIXTURE.read_text().splitlines()[9:]))
    code, _, err = _import(capsys, str(untitled), "--out", str(tmp_path / "t"))
    assert code == 2 and "--release" in err
    assert not (tmp_path / "t").exists()
    code, out, _ = _import(capsys, str(untitled), "--out", str(tmp_path / "t"), "--release", "2.30")
    assert code == 0 and "release 2.30," in out
    assert _only_file(tmp_path / "t")["release"] == "2.30"


def test_a_release_or_version_line_names_the_release(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    body = "\n".join(FIXTURE.read_text().splitlines()[9:])
    source = tmp_path / "compat.md"
    source.write_text(f"# PyTorch API compatibility\n\n**Release:** 2.31.0\n\n{body}")
    assert _import(capsys, str(source), "--out", str(tmp_path / "t"))[0] == 0
    assert _only_file(tmp_path / "t")["release"] == "2.31.0"


@pytest.mark.parametrize(
    ("content", "phrase"),
    [
        ("| Name | Value |\n|---|---|\n| torch.add | Y |\n", "'Name', 'Value'"),
        ("", "holds no markdown table"),
        ("# Release 2.29.0\n\nno tables at all\n", "holds no markdown table"),
        ("| API | Support |\n|---|---|\n| torch.add | maybe |\n", "values found: maybe"),
    ],
    ids=["unrecognised columns", "empty", "no table", "no known support value"],
)
def test_a_file_it_cannot_read_is_refused_in_one_sentence_and_the_earlier_table_stays(
    tmp_path: Path, capsys: pytest.CaptureFixture, content: str, phrase: str
) -> None:
    out_dir = tmp_path / "tables"
    assert _import(capsys, str(FIXTURE), "--out", str(out_dir))[0] == 0
    before = {p.name: p.read_bytes() for p in out_dir.iterdir()}
    bad = tmp_path / "other.md"
    bad.write_text(content)
    code, out, err = _import(capsys, str(bad), "--out", str(out_dir), "--release", "2.30.0")
    lines = err.strip().splitlines()
    assert code == 2 and out == ""
    assert len(lines) == 1 and lines[0].startswith("workbench: error: other.md ")
    assert phrase in lines[0]
    assert lines[0].count(". ") == 0 and lines[0].endswith(".")
    assert {p.name: p.read_bytes() for p in out_dir.iterdir()} == before


def test_the_columns_refusal_names_what_it_expects(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    bad = tmp_path / "other.md"
    bad.write_text("| Function name | State |\n|---|---|\n| torch.add | Y |\n")
    code, _, err = _import(capsys, str(bad), "--release", "1")
    assert code == 2
    assert "'Function name', 'State'" in err
    assert "an API column ('api' or 'api name' or 'torch api')" in err
    assert "a support column ('support' or 'supported' or 'support status')" in err


def test_header_names_match_in_any_case_and_spelling(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    source = tmp_path / "compat.md"
    source.write_text(
        "| **PyTorch API** | Support Status | Limitations / Notes |\n"
        "|---|---|---|\n"
        "| `torch.mul` | Y (Native) | |\n"
        "| `torch.histc` | CPU_FALLBACK | `aten::histc` for bfloat16 |\n"
    )
    code, out, _ = _import(capsys, str(source), "--out", str(tmp_path / "t"), "--release", "2.29")
    assert code == 0
    ops = {e["op"]: e for e in _only_file(tmp_path / "t")["ops"]}
    assert ops["aten::mul"]["kind"] == "native"
    assert ops["aten::histc"]["dtypes"] == ["bfloat16"]


def test_native_verdicts_come_from_the_imported_table(
    tables_dir: Path, capsys: pytest.CaptureFixture
) -> None:
    assert load_tables()[FLAVOUR_NATIVE] == []
    assert _import(capsys, str(FIXTURE))[0] == 0
    native = load_tables()[FLAVOUR_NATIVE]
    assert len(native) == 1
    citation = (
        f"TorchNeuron op table, release 2.29.0, from torch_api_compatibility.md, {native[0].date}"
    )
    assert native[0].date.startswith("imported 20")

    add = verdict("aten::add.Tensor", FLAVOUR_NATIVE, native, None)
    assert (add.status, add.measured) == (SUPPORTED, False)
    assert add.evidence == [f"TorchNeuron runs it on the NeuronCore (torch.add: Y) ({citation})"]
    sort = verdict("aten::sort.stable", FLAVOUR_NATIVE, native, None)
    assert sort.status == FALLS_BACK
    assert sort.evidence[0].startswith(
        "TorchNeuron runs it through its CPU fallback (for float64, int64; torch.sort: "
    )
    assert sort.evidence[0].endswith(f"({citation})")
    quantize = verdict("aten::quantize_per_tensor", FLAVOUR_NATIVE, native, None)
    assert quantize.status == FALLS_BACK
    assert quantize.evidence[0].startswith("TorchNeuron does not support it")
    cumsum = verdict("aten::cumsum", FLAVOUR_NATIVE, native, None)
    assert (cumsum.status, cumsum.evidence) == (UNKNOWN, ["no table names this op"])


def test_a_measurement_beats_the_imported_table(
    tables_dir: Path, capsys: pytest.CaptureFixture
) -> None:
    assert _import(capsys, str(FIXTURE))[0] == 0
    native = load_tables()[FLAVOUR_NATIVE]
    measured = TargetReading(
        target="neuron",
        flavour=FLAVOUR_NATIVE,
        statement="measured here",
        executed=Counter({"aten::addmm": 2, "aten::sort.stable": 1}),
        fallbacks=Counter({"aten::addmm": 2}),
        fallback_source="torch_neuronx.get_fallback_ops()",
    )
    addmm = verdict("aten::addmm", FLAVOUR_NATIVE, native, measured)
    assert (addmm.status, addmm.measured) == (FALLS_BACK, True)
    assert addmm.evidence[0].endswith("; this overrides the table's verdict (supported)")
    assert addmm.evidence[1].startswith("TorchNeuron runs it on the NeuronCore")
    sort = verdict("aten::sort.stable", FLAVOUR_NATIVE, native, measured)
    assert (sort.status, sort.measured) == (SUPPORTED, True)


def test_no_table_keeps_the_no_table_verdict_and_says_how_to_import(tables_dir: Path) -> None:
    native = load_tables()[FLAVOUR_NATIVE]
    addmm = verdict("aten::addmm", FLAVOUR_NATIVE, native, None)
    assert (addmm.status, addmm.evidence) == (UNKNOWN, [NO_NATIVE_TABLE])
    note = native_table_note(native)
    assert note.startswith(NO_NATIVE_TABLE_WHY)
    assert "workbench tables import-native FILE" in note and str(tables_dir) in note


def _table(release: str, imported_on: str, sha: str) -> NativeTable:
    row = ApiRow("torch.add", "Y", "", "torch")
    return NativeTable(
        release=release,
        source="torch_api_compatibility.md",
        source_file="torch_api_compatibility.md",
        source_sha256=sha * 64,
        imported_on=imported_on,
        method="test",
        ops={"aten::add": OpEntry("aten::add", "supported", [], "native", [row])},
    )


def test_the_newest_release_wins_then_the_latest_import(tables_dir: Path) -> None:
    write_table(_table("2.9.0", "2026-01-01T00:00:00+00:00", "a"))
    write_table(_table("2.29.0", "2026-01-01T00:00:00+00:00", "b"))
    write_table(_table("2.29.0", "2026-02-01T00:00:00+00:00", "c"))
    (tables_dir / "notes.json").write_text('{"not": "a table"}')
    tables = load_native_tables()
    assert [(t.release, t.source_sha256[0]) for t in tables] == [
        ("2.29.0", "c"),
        ("2.29.0", "b"),
        ("2.9.0", "a"),
    ]
    note = native_table_note(load_tables()[FLAVOUR_NATIVE])
    assert note.startswith("TorchNeuron table release 2.29.0 from torch_api_compatibility.md, ")
    assert "imported 2026-02-01" in note
