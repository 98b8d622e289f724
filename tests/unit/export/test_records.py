"""Run folders read into exportable records, only through the workbook's own readers."""

from __future__ import annotations

from datetime import datetime

import pytest

from tests.fixtures.export_runs import OUTSIDE, write_export_run
from tests.fixtures.run_folders import write_run
from workbench.errors import BadInput
from workbench.export.records import effective_parameters, read_run


def test_every_notebook_is_read_with_its_metrics_series_parameters_and_files(tmp_path):
    run = read_run(write_export_run(tmp_path / "run"))
    assert run.key == "run@2026-12-01T10:00:00+00:00"
    assert [n.notebook for n in run.notebooks] == ["01_baseline", "02_op_coverage", OUTSIDE]
    baseline = run.notebooks[0]
    config = "configs/train_eager/batch_size_64"
    assert len(baseline.found.series[f"{config}/phases/steady/measurement/times"]) == 30
    assert baseline.found.metrics[f"{config}/throughput"] > 0
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


def test_a_link_to_a_run_is_read_as_the_run_it_points_at(tmp_path):
    folder = write_export_run(tmp_path / "20261201-run")
    (tmp_path / "latest").symlink_to(folder.name)
    through_link, direct = read_run(tmp_path / "latest"), read_run(folder)
    assert (through_link.label, through_link.key) == (direct.label, direct.key)
    assert through_link.label == "20261201-run"


def test_times_are_the_runs_own_and_notebooks_follow_one_another(tmp_path):
    run = read_run(write_export_run(tmp_path / "run"))
    start = datetime.fromisoformat("2026-12-01T10:00:00+00:00").timestamp()
    assert run.start == start
    # No run time in this summary: its notebooks' times, 1 s each, the third one untimed.
    assert run.seconds == 2.0
    assert run.end == start + 2.0
    assert [(n.start, n.end) for n in run.notebooks] == [
        (start, start + 1),
        (start + 1, start + 2),
        (start + 2, start + 2),
    ]


def test_parameters_left_at_the_workloads_default_take_the_value_in_effect():
    workload = {"batch_size": 64, "task": "classification", "sequence_length": None}
    given = {"batch_size": 0, "task": "", "sequence_length": 0, "steps": 0, "out_dir": "/x"}
    assert effective_parameters(given, workload, "cpu") == {
        "batch_size": 64,
        "task": "classification",
        "sequence_length": 0,  # the workload has none: the given value stands
        "steps": 0,  # not a workload field: as given
    }
    chosen = {"batch_size": 32, "target": "auto"}
    assert effective_parameters(chosen, workload, "cpu") == {"batch_size": 32, "target": "cpu"}


def test_the_run_carries_each_notebooks_headline_numbers_and_verdict_rank(tmp_path):
    run = read_run(write_export_run(tmp_path / "run"))
    headline = run.headline
    assert headline["01_baseline/verdict_rank"] == 0.0
    assert headline[f"{OUTSIDE}/verdict_rank"] == 2.0
    assert headline["01_baseline/configs/train_eager/batch_size_64/throughput"] > 0
    assert not any("first_call" in key for key in headline)  # not a headline number
    assert run.verdict_rank == 0.0  # summary.json's verdict, written before OUTSIDE was added


def test_a_notebook_name_from_summary_json_is_one_key_part_in_the_parents_metrics(tmp_path):
    run = read_run(write_export_run(tmp_path / "run"))
    run.notebooks[-1].notebook = "../../escaped"
    assert "_.._.._escaped/verdict_rank" in run.headline
    assert not [key for key in run.headline if key.startswith(".") or "/../" in key]
