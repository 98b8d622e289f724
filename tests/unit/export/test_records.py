"""Run folders read into exportable records, only through the workbook's own readers."""

from __future__ import annotations

import pytest

from tests.fixtures.export_runs import OUTSIDE, write_export_run
from tests.fixtures.run_folders import write_run
from workbench.errors import BadInput
from workbench.export.records import read_run


def test_every_notebook_is_read_with_its_metrics_series_parameters_and_files(tmp_path):
    run = read_run(write_export_run(tmp_path / "run"))
    assert run.key == "run@2026-12-01T10:00:00+00:00"
    assert [n.notebook for n in run.notebooks] == ["01_baseline", "02_op_coverage", OUTSIDE]
    baseline = run.notebooks[0]
    assert len(baseline.found.series["configs/train_eager/phases/steady/measurement/times"]) == 30
    assert baseline.found.metrics["configs/train_eager/throughput"] > 0
    assert [p.name for p in baseline.files] == ["01_baseline.json"]  # no HTML: no notebook ran
    assert baseline.parameters == {}  # save_result wrote no header fields beyond target
    assert {p.name for p in run.files} >= {"index.html", "summary.json"}


def test_a_notebook_outside_the_registry_exports_its_lead_only(tmp_path):
    run = read_run(write_export_run(tmp_path / "run"))
    outside = run.notebooks[-1]
    assert not outside.registered
    assert outside.headline == "custom check"
    assert outside.verdict is not None and outside.verdict.status == "blocker"
    assert outside.found.metrics == {}  # its own field `count` is not part of the lead


def test_a_run_of_an_older_schema_is_refused_with_the_reason_and_left_untouched(tmp_path):
    folder = write_run(tmp_path / "old", started="2026-01-01T00:00:00+00:00", schema=0)
    before = {p.name: p.read_bytes() for p in folder.iterdir() if p.is_file()}
    with pytest.raises(BadInput, match=r"cannot export .*old: .*schema 0.*rerun"):
        read_run(folder)
    assert {p.name: p.read_bytes() for p in folder.iterdir() if p.is_file()} == before


def test_a_folder_that_is_no_run_is_one_sentence(tmp_path):
    with pytest.raises(BadInput, match="no summary.json"):
        read_run(tmp_path)
