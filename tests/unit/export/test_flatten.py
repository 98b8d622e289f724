"""The walk from a typed result record to a tracker's metrics, series and verdicts."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

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


@dataclass(kw_only=True)
class Data(ResultLead):
    configs: list[Config]
    per_flavour: dict[str, float]


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


def test_items_with_the_same_label_keep_apart_by_position():
    data = _data()
    data.configs[1].mode = "eager"
    found = flatten(data)
    assert "configs/train_eager_0/phases/steady/first_step" in found.metrics
    assert "configs/train_eager_1/phases/steady/first_step" in found.metrics


def test_a_lead_alone_exports_its_verdict_and_nothing_else():
    found = flatten(ResultLead(headline="h", verdict=Verdict("pass", "ok", "rule")))
    assert (found.metrics, found.series, list(found.verdicts)) == ({}, {}, ["verdict"])


def test_keys_are_what_mlflow_accepts():
    assert safe_key("aten::addmm [64, 128] (float)") == "aten::addmm _64_ 128_ _float_"
    assert len(safe_key("x" * 400)) == KEY_MAX
