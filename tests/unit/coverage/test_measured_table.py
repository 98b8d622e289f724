"""A notebook 02 run measured on native TorchNeuron, saved as an op table for later runs.

The Trn2/Trn3 is the fake of tests/unit/targets/test_targets_fakes.py, which follows the
op-tracking contract of reference/neuron.md 2.7 (clear_op_tracking, run, synchronize,
get_executed_ops and get_fallback_ops, one name per call). The training step itself runs for
real, on the CPU.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from tests.fixtures.neuron_fakes import FakeTorchNeuron, install_fake_neuron
from workbench.cli import main
from workbench.coverage.analyze import analyze_coverage
from workbench.coverage.records import result_data
from workbench.coverage.support import FALLS_BACK, SUPPORTED, UNKNOWN, load_tables, verdict
from workbench.results import save_result
from workbench.targets.detect import FLAVOUR_NATIVE
from workbench.targets.neuron import NeuronTarget
from workbench.workload import load_workload


class NeuronStepOnCpu(NeuronTarget):
    """NeuronTarget with its op tracking on the fake, its tensors on the CPU: the step's device
    work is what the fake is told it ran."""

    def __init__(
        self, runtime: FakeTorchNeuron, executed: tuple[str, ...], fell_back: tuple[str, ...]
    ):
        self.runtime, self.executed, self.fell_back = runtime, executed, fell_back

    @property
    def device(self) -> torch.device:
        return torch.device("cpu")

    def start_fallback_tracking(self) -> None:
        super().start_fallback_tracking()
        self.runtime.run(executed_ops=self.executed, fallback_ops=self.fell_back)


@pytest.fixture
def measured_result(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """<run>/02_op_coverage.json of seed-mlp measured on the fake Trn2."""
    runtime = FakeTorchNeuron()
    install_fake_neuron(runtime, monkeypatch)
    target = NeuronStepOnCpu(
        runtime, executed=("aten::addmm", "aten::addmm", "aten::relu"), fell_back=("aten::gelu",)
    )
    report = analyze_coverage(load_workload("seed-mlp"), target, flavours=[FLAVOUR_NATIVE])
    assert runtime.calls.count("clear_op_tracking") == 1
    run = tmp_path / "run"
    return save_result(
        run,
        "02_op_coverage",
        result_data(report, None),
        target=target.describe(),
        workload={"name": "seed-mlp"},
        versions={"torch-neuronx": "2.14.3.0"},
    )


def test_the_result_holds_the_measured_executed_and_fallback_ops(measured_result: Path) -> None:
    measurement = json.loads(measured_result.read_text())["data"]["measurement"]
    assert measurement["tracked_executed"] == {"aten::addmm": 2, "aten::relu": 1, "aten::gelu": 1}
    assert measurement["fallbacks"] == {"aten::gelu": 1}
    assert measurement["executed"]["aten::addmm"] >= 1  # the dispatch capture of the same step


def test_save_measured_writes_a_table_a_laptop_run_then_uses(
    measured_result: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    tables = tmp_path / "op-tables"
    monkeypatch.setenv("WORKBENCH_OP_TABLES", str(tables))
    assert main(["tables", "save-measured", str(measured_result.parent)]) == 0
    (path,) = tables.iterdir()
    assert capsys.readouterr().out.strip() == (
        f"wrote {path}: release 2.14.3.0, 2 supported, 1 cpu_fallback, 0 unsupported"
    )
    table = json.loads(path.read_text())
    assert table["source"] == "measured on trn2.3xlarge, target neuron, workload seed-mlp"
    assert table["source_file"] == "02_op_coverage.json"
    assert "torch_neuronx.get_executed_ops()" in table["method"]
    ops = {e["op"]: e["status"] for e in table["ops"]}
    # Executed and not fallen back: supported; fallen back: cpu_fallback (it executed too).
    assert ops == {
        "aten::addmm": "supported",
        "aten::relu": "supported",
        "aten::gelu": "cpu_fallback",
    }

    # A later run with no Neuron device: the verdicts come from the saved table.
    native = load_tables()[FLAVOUR_NATIVE]
    gelu = verdict("aten::gelu", FLAVOUR_NATIVE, native, None)
    assert (gelu.status, gelu.measured) == (FALLS_BACK, False)
    assert gelu.evidence[0].startswith("fell back to the CPU in a measured run (aten::gelu: fell")
    assert "release 2.14.3.0, from measured on trn2.3xlarge" in gelu.evidence[0]
    assert verdict("aten::addmm", FLAVOUR_NATIVE, native, None).status == SUPPORTED
    assert verdict("aten::mse_loss", FLAVOUR_NATIVE, native, None).status == UNKNOWN


def test_release_option_overrides_the_recorded_version(
    measured_result: Path, tmp_path: Path, capsys
) -> None:
    out = tmp_path / "t"
    args = ["tables", "save-measured", str(measured_result), "--out", str(out)]
    assert main([*args, "--release", "2.29.0"]) == 0
    assert "release 2.29.0," in capsys.readouterr().out
    assert json.loads(next(out.iterdir()).read_text())["release"] == "2.29.0"


@pytest.mark.parametrize(
    ("record", "phrase"),
    [
        ({"notebook": "01_baseline", "data": {}}, "is not a result of notebook 02"),
        ({"notebook": "02_op_coverage", "data": {"measurement": None}}, "holds no measurement"),
        (
            {"notebook": "02_op_coverage", "data": {"measurement": {"flavour": "xla"}}},
            "measured on the 'xla' flavour",
        ),
        (
            {"notebook": "02_op_coverage", "data": {"measurement": {"flavour": "native"}}},
            "lists no executed ops per op",
        ),
    ],
    ids=["another notebook", "not measured", "xla", "before executed ops were recorded"],
)
def test_a_result_without_a_native_measurement_is_refused(
    tmp_path: Path, capsys, record: dict, phrase: str
) -> None:
    result = tmp_path / "02_op_coverage.json"
    result.write_text(json.dumps(record))
    code = main(["tables", "save-measured", str(result), "--out", str(tmp_path / "t")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and phrase in err[0]
    assert not (tmp_path / "t").exists()
