"""Support tables and verdicts: the shipped tables are well formed and say where they come from;
an op no table names is unknown; a measurement beats a table and says so.

The XLA inference analyzer is torch_neuronx.analyze, which needs the XLA-based torch-neuronx and
neuronx-cc: its test uses a fake that returns the dict neuron.md section 2.2 documents.
"""

from __future__ import annotations

import json
import re
import sys
from collections import Counter
from datetime import date
from importlib import resources
from types import ModuleType

import pytest
import torch

from workbench.coverage.support import (
    FALLS_BACK,
    NO_NATIVE_TABLE,
    SUPPORTED,
    UNKNOWN,
    TargetReading,
    load_tables,
    verdict,
)
from workbench.targets import detect
from workbench.targets.detect import FLAVOUR_NATIVE, FLAVOUR_XLA
from workbench.targets.xla import XlaTarget

DATA = resources.files("workbench") / "data"
OP_NAME = re.compile(r"^[A-Za-z_][\w]*::[\w]+(\.[\w]+)?$")


def _json(name: str) -> dict:
    return json.loads((DATA / name).read_text(encoding="utf-8"))


def test_generated_xla_table_names_its_version_method_and_date() -> None:
    table = _json("xla_support_torch_xla_2.9.0.json")
    assert table["torch_xla_version"] == "2.9.0"
    assert table["torch_version"].startswith("2.9.0")
    assert table["flavour"] == FLAVOUR_XLA
    assert table["generated_by"] == "tools/xla_support_table.py"
    date.fromisoformat(table["generated_on"])
    assert "_dispatch_dump_table" in table["method"]
    assert set(table["ops"]) == {"lowered", "decomposes", "cpu_fallback"}
    assert table["counts"] == {status: len(ops) for status, ops in table["ops"].items()}
    names = [op for ops in table["ops"].values() for op in ops]
    assert len(names) == len(set(names)), "an op listed under two statuses"
    assert all(OP_NAME.match(op) for op in names)
    assert set(table["autograd_overrides"]) <= set(table["ops"]["lowered"])
    # Spot checks against what torch-xla 2.9 did on XLA:CPU (reference/xla_cpu.md 2.3).
    assert "aten::addmm" in table["ops"]["lowered"]
    for fell_back in ("aten::histc", "aten::_unique2", "aten::linalg_eig", "aten::bincount"):
        assert fell_back in table["ops"]["cpu_fallback"]


def test_legacy_list_is_the_official_41_ops_with_its_source() -> None:
    table = _json("neuron_legacy_xla_supported_ops.json")
    ops = table["ops"]["supported"]
    assert len(ops) == len(set(ops)) == 41
    assert table["source"].startswith("https://awsdocs-neuron.readthedocs-hosted.com/")
    assert table["flavour"] == FLAVOUR_XLA
    date.fromisoformat(table["published_on"])
    assert {"aten::addmm", "aten::embedding", "aten::native_batch_norm"} <= set(ops)


def test_tables_load_per_flavour_strongest_first() -> None:
    tables = load_tables()
    assert tables[FLAVOUR_NATIVE] == []
    generated, official = tables[FLAVOUR_XLA]
    assert (generated.version, generated.file) == ("2.9.0", "xla_support_torch_xla_2.9.0.json")
    assert official.file == "neuron_legacy_xla_supported_ops.json"
    # The official list names ops without overloads: it covers each overload.
    assert official.status("aten::add.Tensor") == "supported"


def test_an_op_no_table_names_is_unknown() -> None:
    tables = load_tables()
    custom = verdict("mylib::fused_thing", FLAVOUR_XLA, tables[FLAVOUR_XLA], None)
    assert (custom.status, custom.measured) == (UNKNOWN, False)
    assert custom.evidence == ["no table names this op"]
    native = verdict("aten::addmm", FLAVOUR_NATIVE, tables[FLAVOUR_NATIVE], None)
    assert (native.status, native.evidence) == (UNKNOWN, [NO_NATIVE_TABLE])


def test_table_verdicts_and_their_evidence() -> None:
    xla = load_tables()[FLAVOUR_XLA]
    addmm = verdict("aten::addmm", FLAVOUR_XLA, xla, None)
    assert addmm.status == SUPPORTED
    assert addmm.evidence[0] == "torch-xla has a kernel for it (torch-xla 2.9.0 dispatcher " + (
        f"table, {xla[0].date})"
    )
    assert addmm.evidence[1].startswith("also: on the official list (Neuron legacy XLA")
    assert verdict("aten::histc", FLAVOUR_XLA, xla, None).status == FALLS_BACK
    # A kernel for a data-dependent shape still runs on the CPU unless dynamic shapes are on;
    # an integer index, whose size its index tensors fix, is the kernel's to run.
    nonzero = verdict("aten::nonzero", FLAVOUR_XLA, xla, None, data_dependent=True)
    assert nonzero.status == UNKNOWN
    assert verdict("aten::index.Tensor", FLAVOUR_XLA, xla, None).status == SUPPORTED
    # A composite with no kernel of its own whose decomposition reads the host is not plainly
    # supported, and says what it dispatched; one lowered by torch-xla keeps its kernel.
    note = "its CompositeExplicitAutograd kernel dispatched 48 aten::item"
    grouped = verdict("aten::_grouped_mm", FLAVOUR_XLA, xla, None, inside_note=note)
    assert grouped.status == UNKNOWN and note in grouped.evidence[0]
    assert verdict("aten::_grouped_mm", FLAVOUR_XLA, xla, None).status == SUPPORTED
    assert verdict("aten::addmm", FLAVOUR_XLA, xla, None, inside_note=note).status == SUPPORTED
    # torch-xla's own layer-norm gradient replaces the CPU's backward op.
    backward = verdict(
        "aten::native_layer_norm_backward",
        FLAVOUR_XLA,
        xla,
        None,
        forward_ops=["aten::native_layer_norm"],
    )
    assert backward.status == SUPPORTED
    assert verdict("aten::native_layer_norm_backward", FLAVOUR_XLA, xla, None).status == (
        FALLS_BACK
    )


def _measurement(flavour: str, **kwargs) -> TargetReading:
    return TargetReading(
        target="xla" if flavour == FLAVOUR_XLA else "neuron",
        flavour=flavour,
        statement="measured here",
        executed=kwargs.pop("executed", Counter()),
        fallbacks=kwargs.pop("fallbacks", Counter()),
        fallback_source="the target's fallback readings",
        **kwargs,
    )


def test_measured_beats_table_and_says_so() -> None:
    xla = load_tables()[FLAVOUR_XLA]
    measured = _measurement(
        FLAVOUR_XLA,
        executed=Counter({"aten::addmm": 3, "aten::histc": 1, "aten::mm": 2}),
        fallbacks=Counter({"aten::addmm": 3}),
    )
    addmm = verdict("aten::addmm", FLAVOUR_XLA, xla, measured)
    assert (addmm.status, addmm.measured) == (FALLS_BACK, True)
    assert "fell back to the CPU in 3 call(s)" in addmm.evidence[0]
    assert "overrides the table's verdict (supported)" in addmm.evidence[0]
    assert any("torch-xla has a kernel" in e for e in addmm.evidence[1:])
    histc = verdict("aten::histc", FLAVOUR_XLA, xla, measured)
    assert (histc.status, histc.measured) == (SUPPORTED, True)
    assert "overrides the table's verdict (falls back or fails)" in histc.evidence[0]
    agreeing = verdict("aten::mm", FLAVOUR_XLA, xla, measured)
    assert agreeing.status == SUPPORTED and "overrides" not in agreeing.evidence[0]
    # An op the target did not run keeps its table verdict, and says the run did not see it.
    absent = verdict("aten::gelu", FLAVOUR_XLA, xla, measured)
    assert (absent.status, absent.measured) == (SUPPORTED, False)
    assert absent.evidence[-1].startswith("not run as such on xla")
    # A measurement on one flavour says nothing about the other.
    native = verdict("aten::addmm", FLAVOUR_NATIVE, [], measured)
    assert (native.status, native.measured) == (UNKNOWN, False)


def test_native_fallback_names_match_every_overload() -> None:
    """get_fallback_ops may name an op without its overload (neuron.md 2.7 example)."""
    measured = _measurement(
        FLAVOUR_NATIVE,
        executed=Counter({"aten::add.Tensor": 2}),
        fallbacks=Counter({"aten::add": 2}),
    )
    result = verdict("aten::add.Tensor", FLAVOUR_NATIVE, [], measured)
    assert (result.status, result.measured) == (FALLS_BACK, True)


class FakeTorchNeuronxAnalyze(ModuleType):
    """torch_neuronx.analyze returning the dict neuron.md 2.2 shows."""

    def __init__(self) -> None:
        super().__init__("torch_neuronx")
        self.calls: list[tuple] = []

    def analyze(self, func, example_inputs):
        self.calls.append((func, example_inputs))
        return {
            "torch_neuronx_version": "2.9.0.2.15.0",
            "neuronx_cc_version": "2.21.0",
            "support_percentage": "66.67%",
            "supported_operators": {"aten::linear": 2, "aten::relu": 1},
            "unsupported_operators": [
                {
                    "kind": "aten::fft_fft",
                    "failureAt": "neuronx-cc",
                    "call": "model.py(12): forward",
                    "opGraph": "graph(...)",
                }
            ],
        }


def test_xla_inference_analysis_through_the_target(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeTorchNeuronxAnalyze()
    monkeypatch.setitem(sys.modules, "torch_neuronx", fake)
    monkeypatch.setattr(
        detect,
        "detect_neuron_stack",
        lambda: detect.NeuronStack(
            flavour=FLAVOUR_XLA,
            torch_neuronx="2.9.0.2.15.0",
            torch_xla="2.9.0",
            libneuronxla="2.2.0",
            neuronx_cc="2.21.0",
            nki=None,
            libtorch_neuronx_lite=None,
        ),
    )
    target = XlaTarget.__new__(XlaTarget)  # no torch_xla here: analyze needs none
    model, inputs = torch.nn.Linear(4, 2), (torch.randn(3, 4),)
    analysis = target.analyze_inference(model, inputs)
    assert fake.calls == [(model, inputs)]
    assert analysis.supported == {"aten::linear": 2, "aten::relu": 1}
    assert [(u.op, u.failure_at) for u in analysis.unsupported] == [("aten::fft_fft", "neuronx-cc")]
    assert "torch-neuronx 2.9.0.2.15.0" in analysis.source

    measured = _measurement(FLAVOUR_XLA, inference=analysis)
    fft = verdict("aten::fft_fft", FLAVOUR_XLA, [], measured)
    assert (fft.status, fft.measured) == (FALLS_BACK, True)
    assert "rejects it at neuronx-cc" in fft.evidence[0]
    relu = verdict("aten::relu", FLAVOUR_XLA, load_tables()[FLAVOUR_XLA], measured)
    assert (relu.status, relu.measured) == (SUPPORTED, True)


def test_no_analyzer_without_the_xla_flavour(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(detect, "detect_neuron_stack", lambda: detect.NeuronStack(*[None] * 7))
    target = XlaTarget.__new__(XlaTarget)
    assert target.analyze_inference(torch.nn.Linear(2, 2), (torch.randn(1, 2),)) is None
