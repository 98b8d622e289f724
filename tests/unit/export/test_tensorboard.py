"""TensorBoard's charts from a record with a sweep and a per-step series: each written along its
own axis, read back with TensorBoard's EventAccumulator."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from tests.fixtures.export_runs import write_export_run
from workbench.export.flatten import flatten
from workbench.export.records import read_run
from workbench.results import ResultLead
from workbench.scorecard import Verdict


@dataclass
class Point:
    mode: str
    batch_size: int
    throughput: float
    latency: list[float] = field(default_factory=list)  # one call after another


@dataclass(kw_only=True)
class Serving(ResultLead):
    points: list[Point]
    warm_calls: int


def test_a_sweep_is_drawn_along_its_axis_and_a_single_number_is_no_chart(tmp_path):
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from workbench.export.to_tensorboard import export_run

    run = read_run(write_export_run(tmp_path / "run"))
    served = Serving(
        headline="served",
        verdict=Verdict("pass", "fine", "rule"),
        points=[Point("eager", 1, 90.0, [0.01, 0.012]), Point("eager", 8, 600.0, [0.02, 0.021])],
        warm_calls=3,
    )
    run.notebooks[0].found = flatten(served)
    written = export_run(run, tmp_path / "tb")
    events = EventAccumulator(str(written.folder / "01_baseline"), size_guidance={"scalars": 0})
    events.Reload()
    sweep = events.Scalars("points/eager/by_batch_size/throughput")
    assert [(s.step, s.value) for s in sweep] == [(1, 90.0), (8, 600.0)]
    assert [s.step for s in events.Scalars("points/eager/batch_size_8/latency")] == [1, 2]
    assert "warm_calls" not in events.Tags()["scalars"]  # one number: in the hparams entry only
