"""The walk from a typed result record to a tracker's metrics, series and verdicts."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Literal

from workbench.export.flatten import KEY_MAX, flatten, safe_key
from workbench.results import ResultLead
from workbench.scorecard import Finding, Verdict


@dataclass
class Phase:
    phase: str
    first_step: int
    times: list[float] = field(default_factory=list)
    indices: list[int] = field(default_factory=list)

    @property
    def slowest(self) -> float:
        return max(self.times)


@dataclass
class Config:
    kind: str
    mode: str
    status: Literal["ok", "failed"]
    phases: list[Phase]
    loaded: bool = False
    note: str = ""


@dataclass
class Window:
    calls: int
    median: float


@dataclass
class Point:
    mode: str
    batch_size: int
    status: Literal["ok", "failed"]
    throughput: float
    windows: list[Window] = field(default_factory=list)
    discarded: list[int] = field(default_factory=list)


@dataclass
class Run:
    run: dict[str, Any]  # a spec as the record describes it, with its label
    role: str
    deviation: float


@dataclass(kw_only=True)
class Data(ResultLead):
    configs: list[Config]
    per_flavour: dict[str, float]
    points: list[Point] = field(default_factory=list)
    runs: list[Run] = field(default_factory=list)


def _data() -> Data:
    warm = Phase("warmup", 2, [0.5, 0.25])
    steady = Phase("steady", 4, [0.1, 0.2, 0.3], indices=[2])
    return Data(
        headline="fine",
        verdict=Verdict("attention", "one slow step", "rule", [Finding("attention", "slow")]),
        configs=[
            Config("train", "eager", "ok", [warm, steady]),
            Config("train", "compiled", "failed", [Phase("steady", 2, [0.05])]),
        ],
        per_flavour={"xla": 3, "native": 1.5},
        points=[
            Point("eager", 1, "ok", 100.0, [Window(20, 0.5), Window(20, 0.4)], [3, 7]),
            Point("eager", 8, "ok", 600.0, [Window(20, 0.9), Window(20, 1.0)]),
            Point("compiled", 8, "failed", 0.0),
        ],
        runs=[Run({"label": "cpu bf16-autocast eager", "precision": "bf16"}, "target", 0.01)],
    )


def test_numbers_are_metrics_keyed_by_each_records_leading_names():
    found = flatten(_data())
    assert found.metrics["configs/train_eager/phases/steady/first_step"] == 4.0
    assert found.metrics["configs/train_compiled/phases/steady/first_step"] == 2.0
    assert found.metrics["per_flavour/xla"] == 3.0
    # a derived number (a property) is a metric; a bool, a string and a list of ints are not
    assert found.metrics["configs/train_eager/phases/steady/slowest"] == 0.3
    assert not any(key.endswith(("loaded", "note", "indices", "kind")) for key in found.metrics)


def test_a_list_of_floats_is_a_per_step_series():
    found = flatten(_data())
    assert found.series["configs/train_eager/phases/steady/times"] == [0.1, 0.2, 0.3]
    assert found.series["configs/train_compiled/phases/steady/times"] == [0.05]
    assert not any("indices" in key for key in found.series)


def test_literal_statuses_inside_lists_are_counted():
    found = flatten(_data())
    assert found.metrics["configs/status/ok"] == 1.0
    assert found.metrics["configs/status/failed"] == 1.0


def test_the_notebooks_verdict_is_found_with_its_findings():
    found = flatten(_data())
    assert list(found.verdicts) == ["verdict"]
    assert found.verdicts["verdict"].findings == [Finding("attention", "slow")]


def test_items_with_the_same_label_keep_apart_by_a_count():
    data = _data()
    data.configs[1].mode = "eager"
    found = flatten(data)
    assert "configs/train_eager/phases/steady/first_step" in found.metrics
    assert "configs/train_eager_2/phases/steady/first_step" in found.metrics


def test_records_on_an_axis_are_keyed_by_it_and_make_a_sweep_along_it():
    found = flatten(_data())
    assert found.metrics["points/eager/batch_size_8/throughput"] == 600.0
    assert found.metrics["points/compiled/batch_size_8/throughput"] == 0.0
    sweep = found.sweeps["points/eager/by_batch_size/throughput"]
    assert (sweep.axis, sweep.points) == ("batch_size", {1: 100.0, 8: 600.0})
    assert "points/compiled/by_batch_size/throughput" not in found.sweeps  # one point: no curve
    assert found.metrics["points/status/ok"] == 2.0


def test_records_that_name_nothing_are_series_in_order_and_int_lists_stay_out():
    found = flatten(_data())
    assert found.series["points/eager/batch_size_1/windows/median"] == [0.5, 0.4]
    assert found.series["points/eager/batch_size_8/windows/calls"] == [20.0, 20.0]
    assert not any("discarded" in key for key in [*found.metrics, *found.series])


def test_a_record_opening_with_a_labelled_spec_is_keyed_by_the_label():
    found = flatten(_data())
    assert found.metrics["runs/cpu bf16-autocast eager/deviation"] == 0.01


def test_no_key_holds_a_list_position():
    """The keys a chart keeps across runs: no path part is a bare index (`runs/0/...`); the one
    place a count appears is a second record under the same label (`train_eager_2`)."""
    found = flatten(_data())
    keys = [*found.metrics, *found.series, *found.sweeps]
    assert not [k for k in keys if re.search(r"(^|/)\d+(/|$)", k)]


def test_a_lead_alone_exports_its_verdict_and_nothing_else():
    found = flatten(ResultLead(headline="h", verdict=Verdict("pass", "ok", "rule")))
    assert (found.metrics, found.series, list(found.verdicts)) == ({}, {}, ["verdict"])


def test_keys_are_what_mlflow_accepts():
    assert safe_key("aten::addmm [64, 128] (float)") == "aten::addmm _64_ 128_ _float_"
    assert len(safe_key("x" * 400)) == KEY_MAX
