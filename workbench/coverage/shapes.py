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

A dimension that changed is explained when it scaled by the batch (or sequence) ratio, or a
power of it (B*T flattened, T x T attention scores flattened). Along the sequence a size may
also follow the length with a small fixed offset per row: a causal language model's shifted
labels make T - 1 (and B*(T - 1) flattened), a BOS token T + 1. Those sizes are affine in the
length, known for every length, so they compile like the length itself. Anything else means a
shape depends on something else: the data, or Python control flow.
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
# drop one, BOS/EOS add one or two.
MAX_SEQUENCE_OFFSET = 2


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


@dataclass
class ShapeStability:
    reference: str
    comparisons: list[VariantComparison]

    @property
    def stable(self) -> bool:
        return all(
            c.failure is None and not c.unexplained_calls and not c.call_count_changes
            for c in self.comparisons
        )

    def status(self) -> str:
        """A few words for a headline."""
        if not self.comparisons:
            return "shapes not checked"
        if any(c.failure for c in self.comparisons):
            return "shape check incomplete (the step failed at another size)"
        if self.stable:
            return "shapes follow batch/sequence only"
        return "shapes change beyond batch/sequence"

    def sentence(self) -> str:
        if not self.comparisons:
            return "Shape stability was not checked: the reference step failed."
        dims = " and ".join(sorted({c.dimension for c in self.comparisons}))
        plural = "s" if len(self.comparisons) > 1 else ""
        failed = [c for c in self.comparisons if c.failure]
        if failed:
            return "The step failed at " + "; ".join(f"{c.label}: {c.failure}" for c in failed)
        if self.stable:
            return (
                f"Only the {dims} dimension{plural} change{'' if plural else 's'} shapes: every "
                f"{dims} size you run is one more compile on Neuron, so pad or bucket to a few "
                "fixed sizes."
            )
        unexplained = sum(c.unexplained_calls for c in self.comparisons)
        recounted = sum(len(c.call_count_changes) for c in self.comparisons)
        parts = []
        if unexplained:
            parts.append(f"{unexplained} call(s) change shape beyond the {dims} dimension")
        if recounted:
            parts.append(f"{recounted} op(s) run a different number of times")
        return (
            "; ".join(parts) + ": shapes depend on data or control flow, so Neuron recompiles "
            "(or falls back) on steps that differ."
        )


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


# Eager PyTorch's copy for a layout, and the reshape it makes after such a copy (see above).
_LAYOUT_COPIES = frozenset({"aten::clone"})
_RESHAPE_AS_VIEW = {"aten::_unsafe_view": "aten::view", "aten::_reshape_alias": "aten::view"}


def _compared(entry: TraceEntry) -> bool:
    return entry.model_code and entry.op not in _LAYOUT_COPIES


def _model_calls_by_op(trace: list[TraceEntry]) -> dict[str, list[TraceEntry]]:
    """The calls compared (see the module's docstring), per op, in order; a reshape under one
    name whether eager PyTorch viewed or copied."""
    grouped: dict[str, list[TraceEntry]] = defaultdict(list)
    for entry in trace:
        if _compared(entry):
            grouped[_RESHAPE_AS_VIEW.get(entry.op, entry.op)].append(entry)
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
            comparison.call_count_changes.append(
                f"{op}: {len(a)} call(s) at {reference.label}, {len(b)} at {variant.label}"
            )
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
                        )
                    )
    return comparison
