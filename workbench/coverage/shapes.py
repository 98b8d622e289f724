"""Shape stability: does anything but the batch (and sequence) dimension change between steps?

Every new shape is a new graph to compile on Neuron (XLA retraces and recompiles, native
torch.compile builds one NEFF per shape signature: neuron.md section 3). The same step is
captured at two batch sizes, and for sequence workloads at two sequence lengths; eager calls run
in the same order every step, so the n-th call of each op is compared with its n-th call in the
other capture.

Only shapes the model's own code sees are compared: the ops its code (the workload's, or a model
library such as transformers) calls directly, and every module's tensor inputs and outputs.
What torch's library code runs inside a module or a function is not: nn.LSTM's oneDNN kernel
and its workspace, the autograd engine's backward ops, the optimizer's step. Their shapes follow
from the module's and the call's inputs, which are compared, while their sizes and counts are
the CPU kernel's own choices that a Neuron device does not make. Nor are layout copies: eager
`reshape` and `contiguous` copy (aten::clone, then aten::_unsafe_view) only when a tensor's
strides ask for it, which a compiler decides for itself; a copy has its input's shape, and a
reshape is compared as aten::view whichever way eager PyTorch ran it.

The ops a composite kernel dispatches (aten::_grouped_mm's per-group slices and matmuls, see
capture.py) are compared too, under the composite's name: its decomposition is what a backend
without a kernel of its own runs, so the sizes it makes are sizes that target compiles.

A dimension that changed is explained when it scaled by the batch (or sequence) ratio, or a
power of it (B*T flattened, T x T attention scores flattened). Along the sequence a size may
also follow the length with a small fixed offset per row: a causal language model's shifted
labels make T - 1 (and B*(T - 1) flattened), a BOS token T + 1, a causal convolution's padding
T + kernel - 1. Those sizes are affine in the length, known for every length, so they compile
like the length itself.

A Python loop over the sequence (a recurrence stepped token by token, as Mamba's scan without
its CUDA kernels is) runs its ops once per position: their call counts grow by a whole number
per position, and the list its steps are gathered into (aten::stack of T tensors) grows the same
way. Every shape still follows the length, but a graph target traces the loop unrolled: one
graph per length, whose size and compile time grow with it. That is reported as what it is, not
as a shape that depends on data. A recurrent module (nn.LSTM, nn.GRU, nn.RNN) is the same loop
out of sight: on the CPU one oneDNN kernel runs it, which is why its internals are not compared,
but a backend without a fused RNN kernel runs ATen's decomposition, which steps the sequence one
cell at a time (torch-xla has none: its table lists aten::lstm.input and aten::gru.input as
decomposing; with oneDNN off, a two-layer nn.LSTM dispatches 455 ops at 12 steps and 239 at 6).
Anything else means a shape depends on something else: the data, or Python control flow.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from fractions import Fraction

from workbench.coverage.capture import (
    CallSite,
    Capture,
    TraceEntry,
    is_profiler_marker,
    shape_text,
)

MAX_CHANGES_KEPT = 25
MAX_POWER = 3  # a dimension may flatten up to three scaled dimensions together
# Tokens a row may gain or lose against the sequence length and still follow it: shifted labels
# drop one, BOS/EOS add one or two, a causal convolution pads kernel - 1 (Mamba's 4-wide conv
# makes T + 3; kernels up to 9 wide are covered).
MAX_SEQUENCE_OFFSET = 8
# Positions two sizes must differ by before call counts that differ by a whole multiple of it
# are read as a loop over the dimension: with 4 and 2 any even change would qualify, with 32
# and 16 a count that merely moves with the data rarely lands on a multiple of 16.
MIN_LOOP_EVIDENCE = 8


def other_batch_size(batch_size: int) -> int:
    """Half the batch, or double a batch too small to halve (BatchNorm needs two samples)."""
    return batch_size // 2 if batch_size >= 4 else batch_size * 2


def other_sequence_length(sequence_length: int) -> int | None:
    """Half the sequence: shorter always fits the model's positions; None if there is none."""
    return sequence_length // 2 if sequence_length >= 2 else None


@dataclass(frozen=True)
class ShapeChange:
    """One call whose shapes changed by more than the batch or sequence ratio."""

    op: str
    phase: str
    call: int  # n-th call of this op in the step, from 1
    reference: str
    variant: str
    variant_label: str
    site: CallSite | None
    inside: str = ""  # the composite op whose kernel made this call, "" for the step's own


@dataclass
class VariantComparison:
    label: str  # e.g. "batch 32"
    dimension: str  # "batch" or "sequence"
    ratio: str  # variant size / reference size
    compared_calls: int = 0
    # Op calls not compared: torch's library code ran them inside a module or function, or
    # they are layout copies (profiler markers are no ops, and not counted).
    uncompared_calls: int = 0
    unchanged_calls: int = 0
    scaled_calls: int = 0
    offset_calls: int = 0  # follow the sequence length with a fixed offset (T - 1, B*(T - 1))
    unexplained: list[ShapeChange] = field(default_factory=list)
    unexplained_calls: int = 0
    call_count_changes: list[str] = field(default_factory=list)
    failure: str | None = None
    # A Python loop over this dimension: ops whose call count grows by a whole number per
    # position ("op: calls at one size, calls at the other"), and calls whose tensor list
    # (the loop's steps gathered) grows the same way.
    per_position_ops: list[str] = field(default_factory=list)
    gathered_calls: int = 0


@dataclass
class ShapeStability:
    reference: str
    comparisons: list[VariantComparison]
    # Recurrent modules that ran (Capture.recurrent_modules): a loop over the sequence too.
    recurrent_modules: list[str] = field(default_factory=list)

    def changed_ops(self) -> dict[str, ShapeChange]:
        """The first unexplained change per op, an op a composite dispatched under the
        composite's name: the sizes observed to move with something but the batch/sequence."""
        found: dict[str, ShapeChange] = {}
        for comparison in self.comparisons:
            for change in comparison.unexplained:
                found.setdefault(change.inside or change.op, change)
        return found

    @property
    def stable(self) -> bool:
        """No shape depends on anything but the batch and sequence sizes (a loop over the
        sequence, unrolled, keeps that; `unrolled` says so apart)."""
        return all(
            c.failure is None and not c.unexplained_calls and not c.call_count_changes
            for c in self.comparisons
        )

    @property
    def unrolled(self) -> list[VariantComparison]:
        """The comparisons that found a Python loop over their dimension."""
        return [c for c in self.comparisons if c.per_position_ops]

    @property
    def unrolls(self) -> bool:
        """A loop over a dimension that a graph target unrolls: in Python, or in a recurrent
        module."""
        return bool(self.unrolled or self.recurrent_modules)

    def unrolled_status(self) -> str:
        parts = []
        if self.unrolled:
            dims = " and ".join(sorted({c.dimension for c in self.unrolled}))
            parts.append(f"a Python loop over the {dims} unrolls the graph per position")
        if self.recurrent_modules:
            parts.append(
                f"{', '.join(self.recurrent_modules)} unroll(s) per position without a fused "
                "RNN kernel"
            )
        return "; ".join(parts)

    def status(self) -> str:
        """A few words for a headline."""
        if not self.comparisons:
            return "shapes not checked"
        if any(c.failure for c in self.comparisons):
            return "shape check incomplete (the step failed at another size)"
        loop = f"; {self.unrolled_status()}" if self.unrolls else ""
        if self.stable:
            return f"shapes follow batch/sequence only{loop}"
        return f"shapes change beyond batch/sequence{loop}"

    def unrolled_sentence(self) -> str:
        """What a loop over a dimension means on a graph target; "" when there is none."""
        recurrent = (
            f"{', '.join(self.recurrent_modules)} run(s) the recurrence inside one CPU kernel "
            "here (oneDNN); a target without a fused RNN kernel runs ATen's decomposition, which "
            "steps the sequence one cell per position (torch-xla has none: its table lists "
            "aten::lstm.input and aten::gru.input as decomposing), so that graph is unrolled "
            "per position too: one graph per length, growing with it."
            if self.recurrent_modules
            else ""
        )
        if not self.unrolled:
            return recurrent
        parts = []
        for c in self.unrolled:
            shown = "; ".join(c.per_position_ops[:3])
            more = len(c.per_position_ops) - 3
            tail = f"; and {more} more" if more > 0 else ""
            parts.append(
                f"along the {c.dimension}, {len(c.per_position_ops)} op(s) run a whole number of "
                f"times per position ({shown}{tail})"
            )
        dims = " and ".join(sorted({c.dimension for c in self.unrolled}))
        return (
            f"The model's code loops over the {dims} in Python: {'; '.join(parts)}. A graph "
            f"target traces the loop unrolled: one graph per {dims} size, whose op count and "
            "compile time grow with it (XLA retraces, native torch.compile builds one NEFF per "
            "size). A scan the compiler sees as one op, or a loop over fixed-size chunks, keeps "
            f"the graph the same size. {recurrent}"
        ).rstrip()

    def sentence(self) -> str:
        if not self.comparisons:
            return "Shape stability was not checked: the reference step failed."
        dims = " and ".join(sorted({c.dimension for c in self.comparisons}))
        plural = "s" if len(self.comparisons) > 1 else ""
        failed = [c for c in self.comparisons if c.failure]
        if failed:
            return "The step failed at " + "; ".join(f"{c.label}: {c.failure}" for c in failed)
        if self.stable:
            sentence = (
                f"Only the {dims} dimension{plural} change{'' if plural else 's'} shapes: every "
                f"{dims} size you run is one more compile on Neuron, so pad or bucket to a few "
                "fixed sizes."
            )
            return f"{sentence} {self.unrolled_sentence()}".rstrip()
        unexplained = sum(c.unexplained_calls for c in self.comparisons)
        recounted = sum(len(c.call_count_changes) for c in self.comparisons)
        parts = []
        if unexplained:
            parts.append(f"{unexplained} call(s) change shape beyond the {dims} dimension")
        if recounted:
            parts.append(f"{recounted} op(s) run a different number of times")
        sentence = (
            "; ".join(parts) + ": shapes depend on data or control flow, so Neuron recompiles "
            "(or falls back) on steps that differ."
        )
        return f"{sentence} {self.unrolled_sentence()}".rstrip()


def _scaled(a: tuple[int, ...], b: tuple[int, ...], ratios: set[Fraction]) -> bool:
    if len(a) != len(b):
        return False
    return all(x == y or (x and Fraction(y, x) in ratios) for x, y in zip(a, b, strict=True))


def _follows_with_offset(x: int, y: int, sizes: tuple[int, int]) -> bool:
    """x at the reference length and y at the other are a * length + c with a whole a >= 1 (the
    rows flattened in) and |c| at most MAX_SEQUENCE_OFFSET tokens per row."""
    first, second = sizes
    slope = Fraction(y - x, second - first)
    if slope.denominator != 1 or slope < 1:
        return False
    offset = x - slope * first
    return abs(offset) <= slope * MAX_SEQUENCE_OFFSET


def _offset(a: tuple[int, ...], b: tuple[int, ...], sizes: tuple[int, int]) -> bool:
    if len(a) != len(b):
        return False
    return all(x == y or _follows_with_offset(x, y, sizes) for x, y in zip(a, b, strict=True))


def follows_per_position(count: int, other: int, sizes: tuple[int, int]) -> bool:
    """`count` calls (or list entries) at the reference size and `other` at the variant's are
    k * size + c with a whole k >= 1 and c >= 0: k of them per position, c outside the loop."""
    first, second = sizes
    if abs(second - first) < MIN_LOOP_EVIDENCE:
        return False
    slope = Fraction(other - count, second - first)
    return slope.denominator == 1 and slope >= 1 and count - slope * first >= 0


def _runs(shapes: tuple[tuple[int, ...], ...]) -> list[tuple[tuple[int, ...], int]]:
    """Consecutive equal shapes as (shape, how many)."""
    runs: list[tuple[tuple[int, ...], int]] = []
    for shape in shapes:
        if runs and runs[-1][0] == shape:
            runs[-1] = (shape, runs[-1][1] + 1)
        else:
            runs.append((shape, 1))
    return runs


def _gathered(
    a: tuple[tuple[int, ...], ...],
    b: tuple[tuple[int, ...], ...],
    sizes: tuple[int, int],
    ratios: set[Fraction],
) -> bool:
    """A call that gathers a loop's steps (aten::stack of one tensor per position): the same
    shapes in the same order, each following the dimension, with runs of equal tensors whose
    lengths grow per position."""
    ours, theirs = _runs(a), _runs(b)
    if len(ours) != len(theirs) or len(a) == len(b):
        return False
    return all(
        (n == m or follows_per_position(n, m, sizes))
        and (p == q or _scaled(p, q, ratios) or _offset(p, q, sizes))
        for (p, n), (q, m) in zip(ours, theirs, strict=True)
    )


# Eager PyTorch's copy for a layout, and the reshape it makes after such a copy (see above).
_LAYOUT_COPIES = frozenset({"aten::clone"})
_RESHAPE_AS_VIEW = {"aten::_unsafe_view": "aten::view", "aten::_reshape_alias": "aten::view"}


def _compared(entry: TraceEntry) -> bool:
    # What a layout copy dispatches inside is as much eager's choice as the copy itself.
    return (
        entry.model_code
        and entry.op not in _LAYOUT_COPIES
        and entry.inside not in _LAYOUT_COPIES
        and entry.inside not in _RESHAPE_AS_VIEW
    )


def _model_calls_by_op(trace: list[TraceEntry]) -> dict[str, list[TraceEntry]]:
    """The calls compared (see the module's docstring), per op, in order; a reshape under one
    name whether eager PyTorch viewed or copied; an op a composite dispatched under the
    composite's name."""
    grouped: dict[str, list[TraceEntry]] = defaultdict(list)
    for entry in trace:
        if _compared(entry):
            op = _RESHAPE_AS_VIEW.get(entry.op, entry.op)
            grouped[f"{op} inside {entry.inside}" if entry.inside else op].append(entry)
    return grouped


def compare_captures(
    reference: Capture, variant: Capture, dimension: str, reference_size: int, variant_size: int
) -> VariantComparison:
    """Call-by-call comparison of two captures that differ in one dimension (batch or
    sequence), `reference_size` against `variant_size`."""
    ratio = Fraction(variant_size, reference_size)
    sizes = (reference_size, variant_size)
    comparison = VariantComparison(variant.label, dimension, str(ratio))
    if variant.failure is not None:
        comparison.failure = variant.failure.summary()
    ratios = {ratio**k for k in range(1, MAX_POWER + 1)}
    ours, theirs = _model_calls_by_op(reference.trace), _model_calls_by_op(variant.trace)
    comparison.uncompared_calls = sum(
        1 for entry in reference.trace if not _compared(entry) and not is_profiler_marker(entry.op)
    )
    for op in sorted(ours.keys() | theirs.keys()):
        a, b = ours.get(op, []), theirs.get(op, [])
        if len(a) != len(b) and variant.failure is None:
            counts = f"{op}: {len(a)} call(s) at {reference.label}, {len(b)} at {variant.label}"
            if follows_per_position(len(a), len(b), sizes):
                comparison.per_position_ops.append(counts)
            else:
                comparison.call_count_changes.append(counts)
            continue
        # After a failure the variant stops early: compare the calls both captures have.
        for n, (x, y) in enumerate(zip(a, b, strict=False), start=1):
            comparison.compared_calls += 1
            if x.shapes == y.shapes:
                comparison.unchanged_calls += 1
            elif len(x.shapes) == len(y.shapes) and all(
                _scaled(p, q, ratios) for p, q in zip(x.shapes, y.shapes, strict=True)
            ):
                comparison.scaled_calls += 1
            elif (
                dimension == "sequence"
                and len(x.shapes) == len(y.shapes)
                and all(_offset(p, q, sizes) for p, q in zip(x.shapes, y.shapes, strict=True))
            ):
                comparison.offset_calls += 1
            elif _gathered(x.shapes, y.shapes, sizes, ratios):
                comparison.gathered_calls += 1
            else:
                comparison.unexplained_calls += 1
                if len(comparison.unexplained) < MAX_CHANGES_KEPT:
                    comparison.unexplained.append(
                        ShapeChange(
                            op,
                            x.phase,
                            n,
                            shape_text(x.shapes),
                            shape_text(y.shapes),
                            variant.label,
                            x.site,
                            x.inside,
                        )
                    )
    return comparison
