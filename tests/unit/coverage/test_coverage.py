"""Op capture, risk flags, shape stability, graph breaks and the coverage report, on real torch.

Everything here runs for real on the CPU: TorchDispatchMode capture, autograd, optimizers,
torch.library custom ops and torch._dynamo.explain. The only fake is torch_neuronx, in the
measured-verdict test, and it follows the op-tracking contract of reference/neuron.md 2.7
(`clear_op_tracking()`, then `get_fallback_ops()`: one op name per fallen-back call).
"""

from __future__ import annotations

import json
import os
import sys
from collections import Counter
from pathlib import Path
from types import ModuleType

import pytest
import torch
from torch import nn

from tests.fixtures.custom_ops import double_it
from tests.fixtures.user_workloads import LinearHead, classifier_workload
from workbench.coverage import risks
from workbench.coverage.analyze import analyze_coverage
from workbench.coverage.capture import (
    PHASE_BACKWARD,
    PHASE_FORWARD,
    PHASE_OPTIMIZER,
    Capture,
    TraceEntry,
    capture_training_step,
)
from workbench.coverage.graphs import explain_forward
from workbench.coverage.records import SEEN_REFERENCE, headline_kind, report_data
from workbench.coverage.shapes import ShapeStability, compare_captures
from workbench.coverage.support import FALLS_BACK, SUPPORTED, UNKNOWN
from workbench.results import write_json_atomic
from workbench.targets.cpu import CpuTarget
from workbench.targets.detect import FLAVOUR_NATIVE, FLAVOUR_XLA
from workbench.workload import Workload, load_workload

THIS_FILE = str(Path(__file__).resolve())


def _line_of(marker: str) -> int:
    """The line of this file that carries `marker` in a comment."""
    for number, line in enumerate(Path(__file__).read_text().splitlines(), start=1):
        if line.rstrip().endswith(f"# {marker}") and "_line_of" not in line:
            return number
    raise AssertionError(marker)


def _workload(model_factory, *, batch_size: int = 8, features: int = 6) -> Workload:
    return classifier_workload(model_factory, "test", features=features, batch_size=batch_size)


class Head(LinearHead):
    """Linear(6, 3): the features _workload's batches have."""

    features = 6


class Risky(nn.Module):
    """One op per risk a coverage report must raise (methods.md c10)."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(6, 3)
        self.register_buffer("big", torch.tensor([2**40, 7]))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.lin(x)  # MARK-linear
        scale = y.detach().abs().max().item()  # MARK-item
        kept = torch.nonzero(x > 0)  # MARK-nonzero
        wide = x.double().sum()  # MARK-double
        offsets = self.big + 1  # MARK-int64
        sparse = x.detach().to_sparse().to_dense().sum()  # MARK-sparse
        noise = torch.nn.functional.dropout(y, p=0.1)  # MARK-dropout
        custom = double_it(y.detach())  # MARK-custom
        extra = (kept.numel() + wide + offsets[1] + sparse + scale) * 0
        return noise + custom + extra.float()


def test_capture_records_phases_counts_dtypes_and_user_lines() -> None:
    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc1 = nn.Linear(6, 5)
            self.fc2 = nn.Linear(5, 3)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            hidden = torch.tanh(self.fc1(x))  # MARK-tanh
            return self.fc2(hidden)

    capture = capture_training_step(_workload(Net))
    assert capture.failure is None
    ops = capture.ops
    assert ops["aten::addmm"].calls == {PHASE_FORWARD: 2}
    assert ops["aten::tanh"].calls == {PHASE_FORWARD: 1}
    assert PHASE_BACKWARD in ops["aten::tanh_backward"].calls
    assert ops["aten::add_.Tensor"].calls == {PHASE_OPTIMIZER: 4}  # SGD: one per parameter
    assert ops["aten::tanh"].dtypes == ["float32"]
    assert ops["aten::nll_loss_forward"].dtypes == ["float32", "int64"]
    assert ops["aten::addmm"].shapes[0] == "5, 8x6, 6x5"

    tanh_line = _line_of("MARK-tanh")
    forward_site = ops["aten::tanh"].first_site
    assert (forward_site.path, forward_site.line, forward_site.in_user_code) == (
        THIS_FILE,
        tanh_line,
        True,
    )
    # The backward op has no workload frame on its stack: it maps to the forward call.
    backward_site = ops["aten::tanh_backward"].first_site
    assert (backward_site.path, backward_site.line) == (THIS_FILE, tanh_line)
    assert backward_site.via == "backward of TanhBackward0"
    assert ops["aten::tanh_backward"].forward_ops == ["aten::tanh"]
    # Inside nn.Linear the workload line is the caller, and the running module is named.
    assert ops["aten::addmm"].first_site.module == "fc1 (Linear)"
    # The optimizer's ops come from torch itself: the site says which torch code ran them.
    optimizer_site = ops["aten::add_.Tensor"].first_site
    assert not optimizer_site.in_user_code
    assert optimizer_site.path.endswith(os.path.join("torch", "optim", "sgd.py"))


def test_one_line_is_one_site_however_many_instructions_call_the_op() -> None:
    class TwoProducts(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(6, 3)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.fc(x * 2.0 + x * 3.0)  # MARK-two-products

    ops = capture_training_step(_workload(TwoProducts)).ops
    line = _line_of("MARK-two-products")
    forward = [s for s in ops["aten::mul.Tensor"].sites if s.site.line == line and not s.site.via]
    # Two multiplications at two bytecode offsets of one line: one site row that counts both.
    assert len(forward) == 1 and forward[0].calls == 2


def test_sequential_model_sites_name_the_layer() -> None:
    capture = capture_training_step(load_workload("seed-mlp"))
    gelu = capture.ops["aten::gelu"].first_site
    assert gelu.module == "1 (GELU)"
    assert gelu.path.endswith(os.path.join("torch", "nn", "modules", "activation.py"))
    assert "1 (GELU)" in gelu.short()


def test_risk_flags_come_from_torch_metadata_and_real_values() -> None:
    capture = capture_training_step(_workload(Risky))
    assert capture.failure is None
    flags = {(f.kind, f.op): f for f in risks.capture_flags(capture)}

    host = flags[(risks.HOST_SYNC, "aten::_local_scalar_dense")]
    assert host.site.line == _line_of("MARK-item")
    assert flags[(risks.DYNAMIC_SHAPE, "aten::nonzero")].severity == risks.HIGH
    assert flags[(risks.DYNAMIC_SHAPE, "aten::nonzero")].site.line == _line_of("MARK-nonzero")
    random = [f for (kind, _), f in flags.items() if kind == risks.RANDOM]
    assert any(f.site and f.site.line == _line_of("MARK-dropout") for f in random)
    float64 = [f for (kind, _), f in flags.items() if kind == risks.FLOAT64]
    assert any(f.site and f.site.line == _line_of("MARK-double") for f in float64)
    beyond = flags[(risks.INT64_RANGE, "aten::add.Tensor")]
    assert beyond.site.line == _line_of("MARK-int64")
    assert "1,099,511,627,777" in beyond.detail
    sparse = [f for (kind, _), f in flags.items() if kind == risks.SPARSE]
    assert sparse and all("sparse_coo" in f.detail for f in sparse)
    custom = flags[(risks.CUSTOM_OP, "wbtest::double_it")]
    assert "defined in Python" in custom.detail
    assert custom.site.line == _line_of("MARK-custom")
    # Class targets were read and fit int32: the downcast changes nothing, so no flag at all.
    assert (risks.INT64, "aten::nll_loss_forward") not in flags
    assert (risks.INT64_RANGE, "aten::nll_loss_forward") not in flags
    assert not [f for f in flags.values() if f.kind == risks.INT64]
    assert "aten" in risks.builtin_namespaces()
    assert "wbtest" not in risks.builtin_namespaces()


def test_builtin_namespaces_read_in_the_background_are_the_same_set() -> None:
    """analyze_coverage starts the fresh interpreter before the capture; what it reads is what
    a direct read gives, and the process is consumed once."""
    direct = risks.builtin_namespaces()
    risks.builtin_namespaces.cache_clear()
    try:
        risks.prefetch_builtin_namespaces()
        assert risks._pending_namespaces is not None
        assert risks.builtin_namespaces() == direct and "aten" in direct
        assert risks._pending_namespaces is None
        risks.prefetch_builtin_namespaces()  # already known: nothing is started
        assert risks._pending_namespaces is None
    finally:
        risks._pending_namespaces = None


class FailsInSecondLayer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(6, 5)
        self.fc2 = nn.Linear(4, 3)  # wrong input width: fails at run time

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        hidden = torch.relu(self.fc1(x))
        return self.fc2(hidden)  # MARK-fails


def test_failure_mid_capture_keeps_ops_and_says_where() -> None:
    capture = capture_training_step(_workload(FailsInSecondLayer))
    failure = capture.failure
    assert failure is not None
    assert failure.phase == PHASE_FORWARD
    assert failure.error_type == "RuntimeError"
    assert failure.op == "aten::addmm"
    assert (failure.site.path, failure.site.line) == (THIS_FILE, _line_of("MARK-fails"))
    assert "aten::relu" in capture.ops  # captured before the failure, kept
    assert f"test_coverage.py:{_line_of('MARK-fails')}" in failure.summary()


class GrowsByOne(Head):
    """A shape that follows the batch size but not by its ratio: B + 1."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        pad = torch.zeros(x.shape[0] + 1, 3)  # MARK-grows
        return self.lin(x) + pad[1:]


def test_shape_stability_tells_batch_scaling_from_other_changes() -> None:
    stable = load_workload("seed-mlp")
    reference = capture_training_step(stable)
    half = capture_training_step(stable, batch_size=32)
    comparison = compare_captures(reference, half, "batch", 64, 32)
    assert comparison.scaled_calls > 0
    assert comparison.unexplained_calls == 0 and not comparison.call_count_changes
    assert ShapeStability(reference.label, [comparison]).stable

    growing = _workload(GrowsByOne)
    reference = capture_training_step(growing)
    other = capture_training_step(growing, batch_size=4)
    comparison = compare_captures(reference, other, "batch", 8, 4)
    stability = ShapeStability(reference.label, [comparison])
    assert not stability.stable
    zeros = [c for c in comparison.unexplained if c.op == "aten::zeros"]
    assert zeros and zeros[0].reference == "9x3" and zeros[0].variant == "5x3"
    assert zeros[0].site.line == _line_of("MARK-grows")
    assert "beyond the batch dimension" in stability.sentence()


class BreaksGraph(Head):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.lin(x)
        print("logging from forward")  # MARK-print
        return y * 2


def test_graph_breaks_with_reason_and_location(capsys: pytest.CaptureFixture) -> None:
    compiled = explain_forward(_workload(BreaksGraph))
    assert compiled.error is None
    assert compiled.graph_break_count >= 1
    assert compiled.graph_count == compiled.graph_break_count + 1
    first = compiled.breaks[0]
    assert "print" in first.reason + first.explanation
    assert (first.site.path, first.site.line) == (THIS_FILE, _line_of("MARK-print"))
    assert "graph break" in compiled.sentence()

    clean = explain_forward(load_workload("seed-mlp"))
    assert (clean.graph_count, clean.graph_break_count, clean.breaks) == (1, 0, [])


class ReadsItem(Head):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.lin(x)
        if y.sum().item() > 0:
            y = y * 2
        return y * (y.max().item() + 1)


def test_torch_warnings_while_tracing_are_grouped_not_printed(
    capfd: pytest.CaptureFixture, item_warning_again: None
) -> None:
    import logging

    dynamo = logging.getLogger("torch._dynamo")
    handlers = dynamo.handlers[:]
    compiled = explain_forward(_workload(ReadsItem))
    printed = capfd.readouterr().err
    assert "Graph break" not in printed
    item = [g for g in compiled.messages if "Tensor.item()" in g.message]
    assert item and item[0].source.startswith("torch._dynamo") and item[0].count >= 1
    assert len({(g.source, g.message) for g in compiled.messages}) == len(compiled.messages)
    # Torch's own handlers are back afterwards: outside the trace, warnings print as before.
    assert dynamo.handlers == handlers and handlers


def test_report_on_seed_mlp_is_complete_and_json_ready(tmp_path: Path) -> None:
    report = analyze_coverage(load_workload("seed-mlp"), CpuTarget())
    assert report.measurement is None and "measures no Neuron fallbacks" in (
        report.measurement_note
    )
    summaries = report.summaries()
    # AdamW's profiler markers are counted apart from the ATen ops.
    assert set(report.bookkeeping) == {
        op for op in report.reference.ops if op.startswith("profiler::")
    }
    ops = len(report.reference.ops) - len(report.bookkeeping)
    # Native TorchNeuron has no table: nothing may read as supported without a measurement.
    assert summaries[FLAVOUR_NATIVE].distinct == {FALLS_BACK: 0, UNKNOWN: ops, SUPPORTED: 0}
    assert sum(summaries[FLAVOUR_XLA].distinct.values()) == ops
    assert all(SEEN_REFERENCE in row.seen_in for row in report.rows)
    assert report.shapes.stable
    assert report.headline().startswith(f"seed-mlp: one training step runs {ops} distinct")

    path = write_json_atomic(tmp_path / "coverage.json", report_data(report))
    data = json.loads(path.read_text())
    addmm = next(op for op in data["ops"] if op["op"] == "aten::addmm")
    assert addmm["calls"] == {"forward": 2}
    assert addmm["verdicts"]["native"]["status"] == UNKNOWN
    assert addmm["verdicts"]["xla"]["status"] == SUPPORTED
    assert "torch-xla 2.9.0 dispatcher table" in addmm["verdicts"]["xla"]["evidence"][0]
    assert addmm["first_site"]["module"] == "0 (Linear)"
    assert data["compiled"]["graph_count"] == 1
    assert data["tables"]["xla"][0]["version"] == "2.9.0"


def test_tiny_transformer_checks_batch_and_sequence() -> None:
    report = analyze_coverage(load_workload("tiny-transformer"), CpuTarget(), measure=False)
    dimensions = [c.dimension for c in report.shapes.comparisons]
    assert dimensions == ["batch", "sequence"]
    assert [v.label for v in report.variants] == ["batch 4, sequence 32", "batch 8, sequence 16"]
    assert report.shapes.stable
    # The CPU's own SDPA kernel is not what a Neuron device runs: unknown, never "falls back".
    sdpa = next(r for r in report.rows if r.op.startswith("aten::_scaled_dot_product_flash"))
    assert sdpa.verdicts[FLAVOUR_XLA].status == UNKNOWN
    assert risks.CPU_KERNEL in sdpa.flags
    # torch-xla's own gradient formula for layer norm replaces the CPU's backward op.
    backward = next(r for r in report.rows if r.op == "aten::native_layer_norm_backward")
    assert backward.verdicts[FLAVOUR_XLA].status == SUPPORTED
    assert "aten::native_layer_norm" in backward.verdicts[FLAVOUR_XLA].evidence[0]


class FakeTorchNeuronx(ModuleType):
    """torch_neuronx op tracking as neuron.md 2.7 documents it: clear, run, read the names of
    the ops that ran on the CPU fallback, one entry per call."""

    def __init__(self, fallen_back: list[str]) -> None:
        super().__init__("torch_neuronx")
        self.fallen_back = fallen_back
        self.cleared = 0

    def clear_op_tracking(self) -> None:
        self.cleared += 1

    def get_fallback_ops(self) -> list[str]:
        return list(self.fallen_back)


class NativeOnCpu(CpuTarget):
    """The NeuronTarget's fallback reading (torch_neuronx calls) on a CPU device, so the
    measured path of analyze_coverage runs here end to end."""

    neuron_flavour = FLAVOUR_NATIVE

    def start_fallback_tracking(self) -> None:
        import torch_neuronx

        torch_neuronx.clear_op_tracking()

    def fallback_ops(self) -> Counter[str]:
        import torch_neuronx

        return Counter(torch_neuronx.get_fallback_ops())


def test_measured_fallbacks_override_tables(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeTorchNeuronx(["aten::gelu"])
    monkeypatch.setitem(sys.modules, "torch_neuronx", fake)
    report = analyze_coverage(load_workload("seed-mlp"), NativeOnCpu())
    assert fake.cleared == 1
    rows = {r.op: r for r in report.rows}
    gelu = rows["aten::gelu"].verdicts[FLAVOUR_NATIVE]
    assert (gelu.status, gelu.measured) == (FALLS_BACK, True)
    assert gelu.evidence[0].startswith("measured on cpu: fell back to the CPU in 1 call(s)")
    addmm = rows["aten::addmm"].verdicts[FLAVOUR_NATIVE]
    assert (addmm.status, addmm.measured) == (SUPPORTED, True)
    # The other flavour keeps its table verdicts.
    assert not rows["aten::addmm"].verdicts[FLAVOUR_XLA].measured
    summary = report.summaries()[FLAVOUR_NATIVE]
    assert summary.distinct[FALLS_BACK] == 1
    assert summary.basis.startswith("measured on cpu")
    blockers = report.blockers(FLAVOUR_NATIVE)
    assert blockers[0].op == "aten::gelu"


def _trace_capture(batch: int, sequence: int, *shapes: tuple[int, ...]) -> Capture:
    trace = [
        TraceEntry(f"aten::op{n}", PHASE_FORWARD, (shape,), None) for n, shape in enumerate(shapes)
    ]
    return Capture("cpu", batch, sequence, {}, trace, None, 0.0)


def test_sizes_that_follow_the_sequence_with_a_small_offset_are_not_data_dependent() -> None:
    reference = _trace_capture(4, 16, (4, 15), (60,), (4, 17, 8), (4, 16))
    shifted = _trace_capture(4, 8, (4, 7), (28,), (4, 9, 8), (4, 8))
    comparison = compare_captures(reference, shifted, "sequence", 16, 8)
    assert (comparison.offset_calls, comparison.scaled_calls) == (3, 1)
    assert comparison.unexplained_calls == 0
    # A causal convolution's padding (kernel - 1 = 3 for Mamba's conv) follows the length too.
    padded = compare_captures(
        _trace_capture(4, 16, (4, 64, 19)), _trace_capture(4, 8, (4, 64, 11)), "sequence", 16, 8
    )
    assert padded.offset_calls == 1 and padded.unexplained_calls == 0
    # A slope that is not whole, or an offset of more than MAX_SEQUENCE_OFFSET tokens a row, is
    # not the sequence's: flagged.
    reference = _trace_capture(4, 16, (4, 10), (4, 26))
    other = _trace_capture(4, 8, (4, 3), (4, 18))
    assert compare_captures(reference, other, "sequence", 16, 8).unexplained_calls == 2
    # Along the batch, only scaling explains a change: B + 1 rows stays flagged.
    reference = _trace_capture(8, 16, (9, 3))
    other = _trace_capture(4, 16, (5, 3))
    assert compare_captures(reference, other, "batch", 8, 4).unexplained_calls == 1


def _adamw(workload: Workload) -> Workload:
    workload.optimizer_factory = lambda params: torch.optim.AdamW(params, lr=1e-3)
    return workload


def test_the_optimizers_own_host_reads_are_one_note_not_a_model_risk() -> None:
    sgd = capture_training_step(_workload(lambda: nn.Linear(6, 3)))
    assert risks.optimizer_sync_note(sgd) is None
    adamw = capture_training_step(_adamw(_workload(lambda: nn.Linear(6, 3))))
    note = risks.optimizer_sync_note(adamw)
    assert note is not None and "capturable=True" in note and "fused=True" in note
    assert not [f for f in risks.capture_flags(adamw) if f.kind == risks.HOST_SYNC]
    # A host read in the model's own code stays a flag, whatever the optimizer.
    risky = risks.capture_flags(capture_training_step(_adamw(_workload(Risky))))
    host = [f for f in risky if f.kind == risks.HOST_SYNC]
    assert [f.site.line for f in host] == [_line_of("MARK-item")]


class Float64Head(Head):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.lin(x).double().float()


def test_medium_severity_flags_count_in_the_headline_and_profiler_markers_apart() -> None:
    # One flavour with a table, so the headline's kind turns on the flags alone.
    only_xla = {"flavours": [FLAVOUR_XLA], "measure": False}
    report = analyze_coverage(_adamw(_workload(Float64Head)), CpuTarget(), **only_xla)
    assert [f.severity for f in report.flags if f.kind == risks.FLOAT64] == [risks.MEDIUM] * len(
        [f for f in report.flags if f.kind == risks.FLOAT64]
    )
    medium = sum(1 for f in report.flags if f.severity == risks.MEDIUM)
    assert medium >= 1 and f"{medium} medium-severity risk flag(s)" in report.headline()
    assert headline_kind(report, None) == "warn"
    # AdamW's step is wrapped in profiler markers: they are not ATen ops, and are counted apart.
    assert report.bookkeeping and all(op.startswith("profiler::") for op in report.bookkeeping)
    assert not [r for r in report.rows if r.namespace == "profiler"]
    assert "profiler marker call(s)" in report.headline()
    clean = analyze_coverage(_adamw(_workload(lambda: nn.Linear(6, 3))), CpuTarget(), **only_xla)
    assert "severity" not in clean.headline() and headline_kind(clean, None) == "ok"


def test_a_causal_lm_with_shifted_labels_has_stable_shapes_and_no_noise_flags() -> None:
    pytest.importorskip("transformers", reason="transformers is a test-only extra")
    workload = load_workload("tests.fixtures.hf_workloads:gpt2_causal_lm")
    report = analyze_coverage(workload, CpuTarget(), measure=False)
    sequence = next(c for c in report.shapes.comparisons if c.dimension == "sequence")
    assert sequence.offset_calls > 0 and sequence.unexplained_calls == 0
    assert report.shapes.stable and "depend on data" not in report.shapes.sentence()
    kinds = {f.kind for f in report.flags}
    assert risks.HOST_SYNC not in kinds and risks.INT64 not in kinds
    assert report.optimizer_note is not None
    assert risks.DYNAMIC_SHAPE not in kinds


class IntegerRepeats(Head):
    """repeat_interleave with a Python int: every output size follows the input's."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.lin(x.repeat_interleave(2, dim=1)[:, :6])


class TensorRepeats(Head):
    """repeat_interleave with repeats read from the data: the output size is the data's."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        counts = (x[:, 0] > 0).long() + 1
        return self.lin(x.repeat_interleave(counts, dim=0)[: x.shape[0]])


def test_repeat_interleave_is_flagged_only_when_its_repeats_come_from_data() -> None:
    steady = analyze_coverage(_workload(IntegerRepeats), CpuTarget(), measure=False)
    assert steady.shapes.stable and "depend on data" not in steady.shapes.sentence()
    assert risks.DYNAMIC_SHAPE not in {f.kind for f in steady.flags}
    moving = analyze_coverage(_workload(TensorRepeats), CpuTarget(), measure=False)
    assert not moving.shapes.stable and "depend on data" in moving.shapes.sentence()
    assert risks.DYNAMIC_SHAPE in {f.kind for f in moving.flags}
