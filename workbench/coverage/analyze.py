"""Op coverage: which ATen ops a training step really runs, which each Neuron flavour lowers,
falls back on or rejects, where the workload's code calls them, and what else will hurt.

`analyze_coverage` puts the pieces together: a dispatch-level capture on the CPU (the
reference, runs anywhere in seconds), the same step at a second batch size and sequence length
(shape stability), Dynamo's view of the compiled forward (graph breaks), PyTorch's op metadata
(risk flags), the support tables in workbench/data, and, where the target measures fallbacks, a
run of the same step on the target, whose readings override the tables.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Mapping, Sequence
from time import perf_counter

from workbench.coverage.capture import (
    Capture,
    capture_training_step,
    is_profiler_marker,
)
from workbench.coverage.graphs import explain_forward
from workbench.coverage.records import (
    SEEN_FALLBACK_ONLY,
    SEEN_REFERENCE,
    SEEN_TARGET,
    CoverageReport,
    OpRow,
    op_row,
)
from workbench.coverage.risks import (
    RiskFlag,
    capture_flags,
    composite_note,
    optimizer_sync_note,
    prefetch_builtin_namespaces,
)
from workbench.coverage.shapes import (
    ShapeChange,
    ShapeStability,
    compare_captures,
    other_batch_size,
    other_sequence_length,
)
from workbench.coverage.support import (
    FLAVOURS,
    SupportTable,
    TargetReading,
    load_tables,
    verdict,
)
from workbench.errors import describe_error
from workbench.targets.base import Target
from workbench.targets.detect import check_flavours
from workbench.workload import Workload, as_positional


def _shape_variants(workload: Workload, reference: Capture) -> tuple[list[Capture], ShapeStability]:
    if reference.failure is not None:
        return [], ShapeStability(reference.label, [], list(reference.recurrent_modules))
    variants, comparisons = [], []
    batch = other_batch_size(reference.batch_size)
    variant = capture_training_step(workload, batch_size=batch)
    variants.append(variant)
    comparisons.append(compare_captures(reference, variant, "batch", reference.batch_size, batch))
    if workload.sequence_length:
        length = other_sequence_length(workload.sequence_length)
        if length is not None:
            variant = capture_training_step(workload, sequence_length=length)
            variants.append(variant)
            comparisons.append(
                compare_captures(reference, variant, "sequence", workload.sequence_length, length)
            )
    return variants, ShapeStability(reference.label, comparisons, list(reference.recurrent_modules))


def measure_on_target(workload: Workload, target: Target) -> tuple[TargetReading, Capture] | None:
    """One training step on the target inside the capture, between the target's fallback
    readings; and the target's inference analyzer, where it has one. None where the target's
    readings say nothing about a Neuron flavour (cpu, cuda)."""
    flavour = target.neuron_flavour
    if flavour is None:
        return None
    target.start_fallback_tracking()
    started = time.time()
    capture = capture_training_step(workload, device=target.device, synchronize=target.synchronize)
    fallbacks = target.fallback_ops() or Counter()
    tracked = target.executed_ops()
    measurement = TargetReading(
        target=target.name,
        flavour=flavour,
        statement=target.validation_statement(),
        executed=Counter(
            {op: r.total_calls for op, r in capture.ops.items() if not is_profiler_marker(op)}
        ),
        fallbacks=Counter(fallbacks),
        fallback_source=f"the {target.name} target's fallback readings",
        failure=capture.failure.summary() if capture.failure else None,
        tracked=None
        if tracked is None
        else Counter({op: n for op, n in tracked.items() if not is_profiler_marker(op)}),
        compiles=target.compile_events(started),
    )
    try:
        model = workload.build_model("cpu").eval()
        inputs, _ = workload.batch("cpu")
        measurement.inference = target.analyze_inference(*as_positional(model, inputs))
    except Exception as exc:
        measurement.failure = (
            f"{measurement.failure + '; ' if measurement.failure else ''}inference analysis "
            f"raised {describe_error(exc)}"
        )
    return measurement, capture


def _rows(
    reference: Capture, target_capture: Capture | None, measurement: TargetReading | None
) -> list[OpRow]:
    rows = {
        op: op_row(record, SEEN_REFERENCE)
        for op, record in reference.ops.items()
        if not is_profiler_marker(op)
    }
    if target_capture is not None:
        for op, record in target_capture.ops.items():
            if is_profiler_marker(op):
                continue
            if op in rows:
                rows[op].seen_in.append(SEEN_TARGET)
            else:
                rows[op] = op_row(record, SEEN_TARGET)
    if measurement is not None:
        seen = {name for row in rows.values() for name in (row.op, row.op.split(".", 1)[0])}
        for name, count in measurement.fallbacks.items():
            if name not in seen and not is_profiler_marker(name):
                rows[name] = OpRow(
                    op=name,
                    namespace=name.split("::", 1)[0],
                    calls={"target": count},
                    dtypes=[],
                    layouts=[],
                    shapes=[],
                    distinct_shapes=0,
                    tags=[],
                    first_site=None,
                    sites=[],
                    seen_in=[SEEN_FALLBACK_ONLY],
                )
    return list(rows.values())


def _measurement_note(target: Target, measure: bool, measured: bool) -> str:
    """What was measured on the target, or why nothing was."""
    if measured:
        return f"measured one training step on {target.name}: {target.validation_statement()}"
    if not measure:
        return "measurement on the target was switched off (measure_on_target=False)"
    return (
        f"the {target.name} target measures no Neuron fallbacks: verdicts come from tables; "
        "run with target=xla (torch-xla) or target=neuron (Trn2/Trn3) to measure"
    )


def _judge_rows(
    rows: list[OpRow],
    reference: Capture,
    flags: list[RiskFlag],
    changes: Mapping[str, ShapeChange],
    flavours: Sequence[str],
    tables: Mapping[str, list[SupportTable]],
    measurement: TargetReading | None,
) -> None:
    """Each row's flag kinds, and its verdict on every flavour it says something about."""
    flag_kinds: dict[str, list[str]] = {}
    for f in flags:
        flag_kinds.setdefault(f.op, [])
        if f.kind not in flag_kinds[f.op]:
            flag_kinds[f.op].append(f.kind)
    for row in rows:
        row.flags = flag_kinds.get(row.op, [])
        record = reference.ops.get(row.op)
        inside_note = composite_note(record, changes.get(row.op)) if record else ""
        data_dependent = bool(row.data_dependence) or (
            row.op in changes and "dynamic_output_shape" in row.tags
        )
        for flavour in flavours:
            measured_here = measurement is not None and measurement.flavour == flavour
            if SEEN_REFERENCE not in row.seen_in and not measured_here:
                continue  # an op only the target ran says nothing about another flavour
            row.verdicts[flavour] = verdict(
                row.op,
                flavour,
                tables.get(flavour, []),
                measurement,
                data_dependent=data_dependent,
                forward_ops=row.forward_ops,
                inside_note=inside_note,
            )


def analyze_coverage(
    workload: Workload,
    target: Target,
    *,
    flavours: list[str] | tuple[str, ...] = FLAVOURS,
    measure: bool = True,
) -> CoverageReport:
    """Everything notebook 02 shows: capture, shapes, graph breaks, flags, verdicts."""
    check_flavours(flavours)
    started = perf_counter()
    prefetch_builtin_namespaces()
    reference = capture_training_step(workload)
    variants, shapes = _shape_variants(workload, reference)
    compiled = explain_forward(workload)
    changes = shapes.changed_ops()
    flags = capture_flags(reference, changes)
    tables = load_tables()

    measured = measure_on_target(workload, target) if measure else None
    measurement, target_capture = measured if measured else (None, None)
    rows = _rows(reference, target_capture, measurement)
    _judge_rows(rows, reference, flags, changes, flavours, tables, measurement)
    return CoverageReport(
        workload=workload.name,
        flavours=list(flavours),
        reference=reference,
        variants=variants,
        shapes=shapes,
        compiled=compiled,
        flags=flags,
        tables=tables,
        measurement=measurement,
        measurement_note=_measurement_note(target, measure, measured is not None),
        target_capture=target_capture,
        rows=rows,
        seconds=perf_counter() - started,
        bookkeeping={
            op: record.total_calls for op, record in reference.ops.items() if is_profiler_marker(op)
        },
        optimizer_note=optimizer_sync_note(reference),
    )
