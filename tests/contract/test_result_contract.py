"""The contract between each notebook's result file and its readers, on files the real writers
wrote: every metric compare knows must be comparable, in a run written now and in the committed
files written by this schema version (tests/contract/schema_1/), which stand for the nightly
history a team compares against.

A field renamed in a writer's dataclass (ConfigResult.items_per_step, say) renames it for every
reader at once, so a fresh pair of runs still compares; the committed files keep the old name,
and reading them fails here until SCHEMA_VERSION is bumped and the old files are read on purpose.
Without this, the rename turned throughput into "not comparable" in every nightly run, silently.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import asdict
from pathlib import Path

import pytest

from tests.fixtures.real_runs import write_real_run
from workbench.compare import compare_runs
from workbench.compare.coverage import coverage_changes
from workbench.compare.numerics import numerics_runs
from workbench.compare.records import NOT_COMPARABLE, ONE_SIDE, Change
from workbench.compare.retuning import KNOBS, cost_row, retuning_changes
from workbench.compare.runs import Run, load_run
from workbench.compare.serving import GAP_NAME, THROUGHPUT, points_of
from workbench.compare.timing import METRICS, STEADY_MAX, STEADY_P99, configs_of
from workbench.questions import QUESTIONS
from workbench.results import SCHEMA_VERSION
from workbench.summary import read_summary

SAMPLES = Path(__file__).parent / f"schema_{SCHEMA_VERSION}"
# The CPU target measures no device memory: the one metric a CPU run cannot make comparable.
NOT_MEASURED_ON_CPU = {"peak device memory"}


@pytest.fixture(scope="module")
def fresh(tmp_path_factory) -> Path:
    return write_real_run(tmp_path_factory.mktemp("contract") / "fresh", "2026-12-05T09:00:00")


@pytest.fixture(scope="module")
def fresh_copy(fresh: Path) -> Path:
    """The same run under another name: compare counts a run named twice once."""
    return Path(shutil.copytree(fresh, fresh.parent / "fresh-copy"))


@pytest.fixture(scope="module")
def history(tmp_path_factory) -> Path:
    """The committed run, copied (compare never writes into a run, but a test should not rely
    on that for files under version control)."""
    folder = tmp_path_factory.mktemp("contract") / "history"
    shutil.copytree(SAMPLES, folder)
    return folder


def _timing_names(run: Run) -> set[str]:
    names = set()
    for kind, mode in configs_of(run):
        for metric in METRICS:
            if metric.name not in NOT_MEASURED_ON_CPU and metric is not STEADY_P99:
                names.add(f"{kind}/{mode} {metric.name}")
    return names


def _comparable(changes: list[Change], area: str) -> dict[str, Change]:
    return {c.name: c for c in changes if c.area == area and c.status != NOT_COMPARABLE}


@pytest.mark.parametrize("baseline", ["history", "fresh_copy"])
def test_every_metric_compare_knows_is_comparable(request, fresh: Path, baseline: str) -> None:
    """The committed history against a run written now, and a run against itself: both sides
    read through the notebooks' own readers, and no metric compare knows falls out."""
    comparison = compare_runs([request.getfixturevalue(baseline), fresh])
    newest = load_run(fresh)
    timing = _comparable(comparison.changes, "timing")
    expected = _timing_names(newest)
    # The tail is a p99 where the runs have the samples for one, else their slowest step.
    tails = {name.replace(STEADY_MAX.name, STEADY_P99.name) for name in expected}
    assert expected <= set(timing) or tails <= set(timing), sorted(expected - set(timing))
    assert len(configs_of(newest)) == 2  # training step and inference call, eager
    # Notebook 05's batch points and host gaps, wherever both runs have them.
    serving = _comparable(comparison.changes, "serving")
    if set(points_of(load_run(request.getfixturevalue(baseline)))):
        points = points_of(newest)
        assert len(points) == 2  # batch 1 and 2, eager
        for batch, mode in points:
            assert f"batch {batch} {mode} {THROUGHPUT.name}" in serving, sorted(serving)
            assert {f"batch {batch} {mode} p99 latency", f"batch {batch} {mode} max latency"} & set(
                serving
            ), sorted(serving)
        assert GAP_NAME in serving
    # A notebook added since the committed run is on one side only there, and named so.
    one_side = {c.name for c in comparison.changes if c.status == ONE_SIDE}
    history = load_run(request.getfixturevalue(baseline))
    assert one_side == set(newest.results) - set(history.results)


def test_every_notebooks_fields_read_back_typed(fresh: Path, history: Path) -> None:
    for folder in (fresh, history):
        run = load_run(folder)
        # Every registered notebook writes into a fresh run; the history predates later ones.
        registered = {q.notebook for q in QUESTIONS}
        assert set(run.results) == registered if folder == fresh else set(run.results) <= registered
        for notebook, data in run.results.items():
            assert data.verdict is not None and data.headline, notebook
        assert coverage_changes(run, run) == [] and numerics_runs(run)
        sides = numerics_runs(run).values()
        assert all(v.passed is not None and v.output_error is not None for v in sides)
        if folder == fresh:  # AWS's gates, judged on every target run written now
            assert all(v.gates for v in sides), [list(v.gates) for v in sides]
        knobs = {c.name: c.new for c in retuning_changes(run, run)}
        assert set(knobs) == {name for name, _ in KNOBS} and None not in knobs.values()
        row = cost_row(run)
        assert row["items_per_second"] and row["instance"] and row["unit"]


def test_the_committed_files_are_of_this_schema() -> None:
    """A bumped SCHEMA_VERSION needs its own committed run: write it with
    `python -m tests.contract.write_samples`."""
    assert SAMPLES.is_dir(), f"no committed run for schema {SCHEMA_VERSION}: {SAMPLES}"
    assert (SAMPLES / "summary.json").is_file()


def _kept(written: object, read: object, where: str) -> list[str]:
    """Where `read` (a record read back, as plain JSON) lacks or changes a value `written` (the
    file as written) holds: a renamed or dropped field of the record shows up here, since
    decode ignores a key no field names and fills a field the file lacks with its default."""
    if isinstance(written, dict) and isinstance(read, dict):
        return [
            lost
            for key, value in written.items()
            for lost in (
                _kept(value, read[key], f"{where}.{key}") if key in read else [f"{where}.{key}"]
            )
        ]
    if isinstance(written, list) and isinstance(read, list) and len(written) == len(read):
        return [
            lost
            for i, pair in enumerate(zip(written, read, strict=True))
            for lost in _kept(*pair, f"{where}[{i}]")
        ]
    return [] if written == read else [f"{where}: {written!r} read as {read!r}"]


@pytest.mark.parametrize("folder", ["fresh", "history"])
def test_summary_json_reads_back_whole_through_the_record_that_writes_it(request, folder) -> None:
    """summary.json is written from summary.RunSummary and read back through it: every field of
    the file, the committed one of this schema included, comes back unchanged. A RunSummary,
    NotebookOutcome or RunVerdict field renamed or removed fails here, naming the field."""
    path = request.getfixturevalue(folder) / "summary.json"
    written = json.loads(path.read_text())
    summary = read_summary(written, str(path))
    assert _kept(written, json.loads(json.dumps(asdict(summary))), "summary") == []
    assert summary.verdict is not None and summary.notebooks
    assert all(entry.verdict is not None for entry in summary.notebooks), summary.notebooks


def test_a_renamed_summary_field_is_caught(fresh: Path) -> None:
    """The check above on a file whose field the record no longer names (exit_code renamed)."""
    written = json.loads((fresh / "summary.json").read_text())
    renamed = {("exit_status" if k == "exit_code" else k): v for k, v in written.items()}
    read = json.loads(json.dumps(asdict(read_summary(renamed, "renamed"))))
    assert _kept(renamed, read, "summary") == ["summary.exit_status"]
