"""Notebook 02's rules for what a target meets beyond the ops a step dispatches: the ops inside a
composite op's kernel (a mixture of experts' aten::_grouped_mm), an output size read from the
call's arguments rather than the op's tag (an integer index against a boolean mask), and a
Python loop over the sequence that a graph target unrolls. Each rule has a model that must be
flagged beside one that must not; everything runs for real on the CPU.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

from tests.fixtures.user_workloads import classifier_workload
from workbench.coverage import risks
from workbench.coverage.capture import (
    PHASE_FORWARD,
    Capture,
    TraceEntry,
    capture_training_step,
    composite_kernel,
    data_dependent_size,
)
from workbench.coverage.risks import composite_note, op_flags
from workbench.coverage.shapes import ShapeStability, compare_captures, follows_per_position
from workbench.coverage.support import SUPPORTED, UNKNOWN, load_tables, verdict
from workbench.targets.detect import FLAVOUR_XLA
from workbench.workload import TASK_LANGUAGE_MODEL, Workload

BUILTIN = frozenset({"aten", "prims", "profiler"})
EXPERTS = 4
WIDTH = 8


class RoutedExperts(nn.Module):
    """Top-1 routing to four experts through torch._grouped_mm: tokens sorted by expert, the
    experts' rows delimited by offsets, as transformers' grouped_mm experts run."""

    def __init__(self) -> None:
        super().__init__()
        self.router = nn.Linear(WIDTH, EXPERTS)
        # Four outputs: _grouped_mm wants rows of a multiple of 16 bytes.
        self.experts = nn.Parameter(torch.randn(EXPERTS, WIDTH, 4) * 0.1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        expert = self.router(x).argmax(dim=-1)
        order = torch.argsort(expert)
        counts = torch.bincount(expert, minlength=EXPERTS)
        offsets = torch.cumsum(counts, dim=0).to(torch.int32)
        rows = torch._grouped_mm(x[order], self.experts, offs=offsets)  # MARK-grouped
        return rows[torch.argsort(order)]


class DenseMlp(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(WIDTH, 16), nn.GELU(), nn.Linear(16, 3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


def _classifier(factory, batch_size: int = 32) -> Workload:
    return classifier_workload(factory, features=WIDTH, batch_size=batch_size)


def _stability(workload: Workload, reference: Capture) -> ShapeStability:
    half = capture_training_step(workload, batch_size=reference.batch_size // 2)
    comparison = compare_captures(reference, half, "batch", reference.batch_size, half.batch_size)
    return ShapeStability(reference.label, [comparison])


def test_a_composite_kernels_host_reads_and_routed_sizes_are_counted_and_flagged() -> None:
    workload = _classifier(RoutedExperts)
    capture = capture_training_step(workload)
    assert capture.failure is None
    grouped = capture.ops["aten::_grouped_mm"]
    # CPU has no kernel of its own: the composite one ran, and every op it dispatched was seen:
    # one host read per expert in the forward call and in the backward's (the experts' weight
    # gradient; the batch needs none).
    assert grouped.composite_kernel == "CompositeExplicitAutograd"
    assert grouped.total_calls == 2 and grouped.inside_host_reads == 2 * EXPERTS
    assert grouped.inside["aten::item"] == 2 * EXPERTS
    # Kept apart from the ops the step dispatched: the model never called aten::item itself.
    assert "aten::item" not in capture.ops
    inside = [e for e in capture.trace if e.inside == "aten::_grouped_mm"]
    assert inside and all(e.model_code == (e.phase == PHASE_FORWARD) for e in inside)

    # The expert matmuls' row counts follow the routing, not the batch.
    stability = _stability(workload, capture)
    changed = stability.changed_ops()
    assert "aten::_grouped_mm" in changed and not stability.stable
    assert changed["aten::_grouped_mm"].op.endswith("inside aten::_grouped_mm")

    flags = op_flags(grouped, BUILTIN, changed["aten::_grouped_mm"])
    host = next(f for f in flags if f.kind == risks.HOST_SYNC)
    assert host.calls == 2 * EXPERTS and f"{2 * EXPERTS} aten::item" in host.detail
    assert host.site is not None and host.site.path == __file__
    assert any(f.kind == risks.DYNAMIC_SHAPE for f in flags)

    # torch-xla has no kernel for it: its decomposition is what runs, and it is not plainly
    # supported; the evidence names what was dispatched under it.
    note = composite_note(grouped, changed["aten::_grouped_mm"])
    xla = verdict(
        "aten::_grouped_mm", FLAVOUR_XLA, load_tables()[FLAVOUR_XLA], None, inside_note=note
    )
    assert xla.status == UNKNOWN
    assert "aten::item" in xla.evidence[0] and "follow the data" in xla.evidence[0]


def test_a_dense_mlp_has_no_composite_finding() -> None:
    workload = _classifier(DenseMlp)
    capture = capture_training_step(workload)
    assert capture.failure is None
    assert not any(r.inside_host_reads or r.inside_data_dependent for r in capture.ops.values())
    stability = _stability(workload, capture)
    assert stability.stable and not stability.changed_ops()
    flags = [f for r in capture.ops.values() for f in op_flags(r, BUILTIN)]
    assert not [f for f in flags if f.kind in (risks.HOST_SYNC, risks.DYNAMIC_SHAPE)]
    assert all(composite_note(r) == "" for r in capture.ops.values())


def test_composite_kernels_are_read_from_the_dispatcher() -> None:
    # CompositeExplicitAutograd only: every backend without its own kernel runs it.
    assert composite_kernel("aten::_grouped_mm", "cpu") is not None
    assert composite_kernel("aten::_grouped_mm", "xla") is not None
    # The CPU's own kernel, and a device this cannot tell: nothing to look inside.
    assert composite_kernel("aten::mm", "cpu") is None
    assert composite_kernel("aten::_grouped_mm", "a-device-nobody-registered") is None


class IntegerGather(nn.Module):
    """Rows picked by integer indices: the index tensors fix the output size."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(WIDTH, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        picked = x[torch.arange(x.shape[0] - 1, -1, -1)]
        return self.lin(picked)


class MaskedKeep(nn.Module):
    """Values kept by a boolean mask: as many as the mask has True entries."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(WIDTH, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        kept = x[x > 0]  # MARK-mask
        return self.lin(x) + kept.sum() * 0


def test_an_integer_index_is_no_dynamic_shape_and_a_boolean_mask_is() -> None:
    xla = load_tables()[FLAVOUR_XLA]

    gather = capture_training_step(_classifier(IntegerGather)).ops["aten::index.Tensor"]
    assert gather.has_tag("dynamic_output_shape") and gather.data_dependent_calls == 0
    assert not [f for f in op_flags(gather, BUILTIN) if f.kind == risks.DYNAMIC_SHAPE]
    assert verdict("aten::index.Tensor", FLAVOUR_XLA, xla, None).status == SUPPORTED

    masked = capture_training_step(_classifier(MaskedKeep)).ops["aten::index.Tensor"]
    assert masked.data_dependent_calls == 1
    flag = next(f for f in op_flags(masked, BUILTIN) if f.kind == risks.DYNAMIC_SHAPE)
    assert flag.severity == risks.HIGH and flag.detail.startswith("boolean-mask index")
    assert flag.site is not None and flag.site.path == __file__
    status = verdict("aten::index.Tensor", FLAVOUR_XLA, xla, None, data_dependent=True).status
    assert status == UNKNOWN


@pytest.mark.parametrize(
    ("name", "args", "kwargs", "dependent"),
    [
        ("aten::index.Tensor", (torch.ones(3), [torch.tensor([0, 2])]), {}, False),
        ("aten::index.Tensor", (torch.ones(3), [None, torch.tensor([True])]), {}, True),
        ("aten::nonzero", (torch.ones(3),), {}, True),
        ("aten::_unique2", (torch.ones(3),), {}, True),
        ("aten::repeat_interleave.Tensor", (torch.tensor([1, 2]),), {"output_size": 3}, False),
        ("aten::repeat_interleave.Tensor", (torch.tensor([1, 2]),), {}, True),
        ("aten::one_hot", (torch.tensor([1, 2]), 4), {}, False),
        ("aten::one_hot", (torch.tensor([1, 2]),), {}, True),
        ("aten::add.Tensor", (torch.ones(3), torch.ones(3)), {}, False),
    ],
)
def test_what_makes_an_output_size_data_dependent(name, args, kwargs, dependent: bool) -> None:
    assert (data_dependent_size(name, args, kwargs) is not None) is dependent


def test_an_uninitialized_int64_buffer_is_no_int32_range_finding() -> None:
    class InversePermutation(nn.Module):
        """transformers' MoE inverts its sort into torch.empty_like(perm): whatever the memory
        held is overwritten before any use."""

        def __init__(self) -> None:
            super().__init__()
            self.lin = nn.Linear(WIDTH, 3)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            perm = torch.argsort(x[:, 0])
            inverse = torch.empty_like(perm)
            inverse[perm] = torch.arange(perm.numel())
            return self.lin(x)[inverse]

    capture = capture_training_step(_classifier(InversePermutation))
    assert capture.failure is None
    empty = capture.ops["aten::empty_like"]
    assert empty.int64_max_abs is None
    assert not [f for f in op_flags(empty, BUILTIN) if f.kind in (risks.INT64_RANGE, risks.INT64)]
    # The values written into it are read where they are used, and fit int32.
    assert capture.ops["aten::index_put_"].int64_max_abs == 31


class ReadsOneValue(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(WIDTH, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        scale = float(x.abs().max())  # one host read in the model's own code
        return self.lin(x) / scale


def test_a_host_read_shared_by_model_and_optimizer_is_counted_apart() -> None:
    workload = _classifier(ReadsOneValue)
    workload.optimizer_factory = lambda params: torch.optim.AdamW(params, lr=1e-3)
    capture = capture_training_step(workload)
    reads = capture.ops["aten::_local_scalar_dense"]
    # AdamW reads its two step counters too: the same op, at torch.optim's site.
    assert reads.total_calls == 3 and risks.optimizer_reads(reads) == 2
    host = [f for f in risks.capture_flags(capture) if f.kind == risks.HOST_SYNC]
    assert [f.calls for f in host] == [1]
    note = risks.optimizer_sync_note(capture)
    assert note is not None and note.startswith("The optimizer reads 2 value(s)")


SEQUENCE = 16


class SteppedRecurrence(nn.Module):
    """A recurrence stepped token by token in Python, as Mamba's scan runs without its CUDA
    kernels: one state update per position, the outputs stacked."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(20, WIDTH)
        self.decay = nn.Parameter(torch.full((WIDTH,), 0.9))
        self.head = nn.Linear(WIDTH, 20)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        inputs = self.embed(tokens)
        state = torch.zeros_like(inputs[:, 0])
        outputs = []
        for position in range(inputs.shape[1]):
            state = self.decay * state + inputs[:, position]
            outputs.append(state)
        return self.head(torch.stack(outputs, dim=1))


class ScannedRecurrence(SteppedRecurrence):
    """The same decaying sum computed at once: one graph whatever the length."""

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        inputs = self.embed(tokens)
        steps = torch.arange(inputs.shape[1], dtype=inputs.dtype)
        weights = self.decay[None, None, :] ** (steps[:, None, None] - steps[None, :, None])
        weights = weights * (steps[:, None, None] >= steps[None, :, None])
        return self.head(torch.einsum("tsw,bsw->btw", weights, inputs))


def _token_model(factory) -> Workload:
    def tokens(n: int, g: torch.Generator):
        ids = torch.randint(20, (n, SEQUENCE), generator=g)
        return (ids,), ids

    return Workload(
        name="recurrence",
        model_factory=factory,
        batch_maker=tokens,
        loss_fn=lambda out, ids: nn.functional.cross_entropy(out.reshape(-1, 20), ids.reshape(-1)),
        optimizer_factory=lambda params: torch.optim.SGD(params, lr=0.1),
        batch_size=2,
        task=TASK_LANGUAGE_MODEL,
        sequence_length=SEQUENCE,
        task_metric=None,
    )


def _sequence_stability(factory) -> ShapeStability:
    workload = _token_model(factory)
    reference = capture_training_step(workload)
    shorter = capture_training_step(workload, sequence_length=SEQUENCE // 2)
    comparison = compare_captures(reference, shorter, "sequence", SEQUENCE, SEQUENCE // 2)
    return ShapeStability(reference.label, [comparison])


def test_a_python_loop_over_the_sequence_is_reported_as_unrolled_not_data_dependent() -> None:
    stepped = _sequence_stability(SteppedRecurrence)
    comparison = stepped.comparisons[0]
    assert stepped.stable and not comparison.call_count_changes
    # The stack of the steps' outputs, and the cat its composite kernel makes of them.
    assert comparison.per_position_ops and comparison.gathered_calls == 2
    assert any(
        text.startswith("aten::mul.Tensor: 16 call(s)") for text in comparison.per_position_ops
    )
    assert "unrolls the graph per position" in stepped.status()
    assert "one graph per sequence size" in stepped.sentence()
    assert "depend on data" not in stepped.sentence()

    scanned = _sequence_stability(ScannedRecurrence)
    assert scanned.stable and not scanned.unrolled
    assert scanned.status() == "shapes follow batch/sequence only"
    assert "unrolled" not in scanned.sentence()


def _counted(op: str, calls: int, batch: int) -> Capture:
    trace = [TraceEntry(op, PHASE_FORWARD, ((batch, 4),), None) for _ in range(calls)]
    return Capture("cpu", batch, None, {}, trace, None, 0.0)


def test_a_call_count_that_moves_otherwise_stays_a_control_flow_finding() -> None:
    # 16 and 8 positions: 3 calls per position plus 2 outside the loop.
    assert follows_per_position(50, 26, (16, 8))
    # Not a whole number per position, or fewer calls at the longer length: not a loop.
    assert not follows_per_position(50, 31, (16, 8))
    assert not follows_per_position(26, 50, (16, 8))
    # Sizes 4 and 2 would let any even change pass: too little to tell a loop by.
    assert not follows_per_position(6, 4, (4, 2))
    comparison = compare_captures(
        _counted("aten::mm", 6, 4), _counted("aten::mm", 4, 2), "batch", 4, 2
    )
    assert comparison.call_count_changes and not comparison.per_position_ops


# The same rules on transformers' own models, built from tiny configs
# (tests/fixtures/model_families.py), checked by hand with torch.profiler as well.


def test_tiny_mixtral_expert_matmuls_follow_the_routing_and_read_the_host() -> None:
    pytest.importorskip("transformers", reason="transformers is a test-only extra")
    from tests.fixtures.model_families import mixtral_causal_lm

    workload = mixtral_causal_lm()
    capture = capture_training_step(workload)
    grouped = capture.ops["aten::_grouped_mm"]
    # 2 layers x (2 forward + 4 backward) calls, one host read per expert in each: the profiler
    # shows the same 48 aten::item under aten::_grouped_mm.
    assert grouped.total_calls == 12 and grouped.inside_host_reads == 48
    # The token gather is an integer index: no data-dependent size of its own.
    assert capture.ops["aten::index.Tensor"].data_dependent_calls == 0
    stability = _stability(workload, capture)
    assert "aten::_grouped_mm" in stability.changed_ops() and not stability.stable


def test_tiny_gemma2_padding_mask_index_is_no_dynamic_shape() -> None:
    pytest.importorskip("transformers", reason="transformers is a test-only extra")
    from tests.fixtures.model_families import gemma2_causal_lm

    index = capture_training_step(gemma2_causal_lm()).ops["aten::index.Tensor"]
    assert index.first_site is not None and index.first_site.path.endswith("masking_utils.py")
    assert index.has_tag("dynamic_output_shape") and index.data_dependent_calls == 0
    assert not [f for f in op_flags(index, BUILTIN) if f.kind == risks.DYNAMIC_SHAPE]


def test_tiny_mamba_scan_is_a_loop_over_the_sequence() -> None:
    pytest.importorskip("transformers", reason="transformers is a test-only extra")
    from tests.fixtures.model_families import SEQUENCE as LENGTH
    from tests.fixtures.model_families import mamba_causal_lm

    # Half and a quarter of the fixture's length: 8 positions apart, half the capture time.
    workload, half, quarter = mamba_causal_lm(), LENGTH // 2, LENGTH // 4
    reference = capture_training_step(workload, sequence_length=half)
    shorter = capture_training_step(workload, sequence_length=quarter)
    comparison = compare_captures(reference, shorter, "sequence", half, quarter)
    stability = ShapeStability(reference.label, [comparison])
    assert stability.stable and stability.unrolled
    assert not comparison.call_count_changes and comparison.gathered_calls
    # 2 layers x 4 selects per token in the forward (dA, dB*u and C at the position, the
    # output column).
    assert any(t.startswith("aten::select.int: 128 call(s)") for t in comparison.per_position_ops)
