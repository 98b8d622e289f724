"""Op coverage: which ATen ops a training step really runs, which each Neuron flavour lowers,
falls back on or rejects, where the workload's code calls them, and what else will hurt.

`analyze_coverage` puts the pieces together: a dispatch-level capture on the CPU (the
reference, runs anywhere in seconds), the same step at a second batch size and sequence length
(shape stability), Dynamo's view of the compiled forward (graph breaks), PyTorch's op metadata
(risk flags), the support tables in workbench/data, and, where the target measures fallbacks, a
run of the same step on the target, whose readings override the tables.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from fractions import Fraction
from time import perf_counter
from typing import Any

from workbench.coverage_capture import (
    PHASES,
    CallSite,
    Capture,
    OpRecord,
    SiteCount,
    capture_training_step,
)
from workbench.coverage_graphs import CompiledPath, explain_forward
from workbench.coverage_risks import RiskFlag, capture_flags
from workbench.coverage_shapes import (
    ShapeStability,
    compare_captures,
    other_batch_size,
    other_sequence_length,
)
from workbench.errors import BadInput
from workbench.support import (
    FLAVOUR_LABELS,
    FLAVOURS,
    SUPPORTED,
    VERDICTS,
    Measurement,
    SupportTable,
    Verdict,
    load_tables,
    verdict,
)
from workbench.targets.base import Target
from workbench.workload import Workload

SEEN_REFERENCE = "cpu capture"
SEEN_TARGET = "target run"
SEEN_FALLBACK_ONLY = "target fallback readings only"


@dataclass
class OpRow:
    """One op as the report shows it: what ran, where from, and each flavour's verdict."""

    op: str
    namespace: str
    calls: dict[str, int]  # phase -> calls (reference capture, else the target run)
    dtypes: list[str]
    layouts: list[str]
    shapes: list[str]
    distinct_shapes: int
    tags: list[str]
    first_site: CallSite | None
    sites: list[SiteCount]
    seen_in: list[str]
    forward_ops: list[str] = field(default_factory=list)
    flags: list[str] = field(default_factory=list)
    verdicts: dict[str, Verdict] = field(default_factory=dict)

    @property
    def total_calls(self) -> int:
        return sum(self.calls.values())


def _row(record: OpRecord, seen_in: str) -> OpRow:
    return OpRow(
        op=record.op,
        namespace=record.namespace,
        calls=dict(record.calls),
        dtypes=list(record.dtypes),
        layouts=list(record.layouts),
        shapes=list(record.shapes),
        distinct_shapes=record.distinct_shapes,
        tags=list(record.tags),
        first_site=record.first_site,
        sites=list(record.sites),
        seen_in=[seen_in],
        forward_ops=list(record.forward_ops),
    )


@dataclass
class CoverageSummary:
    """One flavour's coverage: distinct ops and calls per verdict, and what it rests on."""

    flavour: str
    label: str
    distinct: dict[str, int]
    calls: dict[str, int]
    basis: str

    def sentence(self) -> str:
        counts = ", ".join(f"{self.distinct[v]} {v}" for v in VERDICTS if self.distinct[v])
        return f"{self.label}: {counts or 'no ops'} ({self.basis})"


@dataclass
class CoverageReport:
    workload: str
    flavours: list[str]
    reference: Capture
    variants: list[Capture]
    shapes: ShapeStability
    compiled: CompiledPath
    flags: list[RiskFlag]
    tables: dict[str, list[SupportTable]]
    measurement: Measurement | None
    measurement_note: str  # what was measured on the target, or why nothing was
    target_capture: Capture | None
    rows: list[OpRow]
    seconds: float

    def summaries(self) -> dict[str, CoverageSummary]:
        result = {}
        for flavour in self.flavours:
            measured = self.measurement is not None and self.measurement.flavour == flavour
            # A measured flavour is judged on what ran on its device; the others on the CPU
            # capture, the only op list they have.
            wanted = (SEEN_TARGET, SEEN_FALLBACK_ONLY) if measured else (SEEN_REFERENCE,)
            rows = [r for r in self.rows if any(s in wanted for s in r.seen_in)]
            distinct = Counter(r.verdicts[flavour].status for r in rows)
            calls: Counter[str] = Counter()
            for r in rows:
                calls[r.verdicts[flavour].status] += r.total_calls
            result[flavour] = CoverageSummary(
                flavour,
                FLAVOUR_LABELS[flavour],
                {v: distinct.get(v, 0) for v in VERDICTS},
                {v: calls.get(v, 0) for v in VERDICTS},
                self._basis(flavour, measured),
            )
        return result

    def _basis(self, flavour: str, measured: bool) -> str:
        if measured and self.measurement is not None:
            return f"measured on {self.measurement.target}, tables for the rest"
        tables = self.tables.get(flavour) or []
        if tables:
            return "tables: " + "; ".join(t.citation() for t in tables)
        return "no table; unknown until measured on the device"

    def blockers(self, flavour: str) -> list[OpRow]:
        """Ops not known to be supported on `flavour`: falls back first, then unknown, most
        calls first."""
        rows = [
            r
            for r in self.rows
            if flavour in r.verdicts and r.verdicts[flavour].status != SUPPORTED
        ]
        return sorted(
            rows, key=lambda r: (VERDICTS.index(r.verdicts[flavour].status), -r.total_calls)
        )

    def flag_counts(self) -> Counter[str]:
        return Counter(f.kind for f in self.flags)

    def headline(self) -> str:
        ops = [r for r in self.rows if SEEN_REFERENCE in r.seen_in]
        calls = sum(r.total_calls for r in ops)
        parts = [
            f"{self.workload}: one training step runs {len(ops)} distinct ATen ops ({calls} calls)"
        ]
        for summary in self.summaries().values():
            counts = ", ".join(
                f"{summary.distinct[v]} {v}" for v in VERDICTS if summary.distinct[v]
            )
            measured = self.measurement is not None and self.measurement.flavour == (
                summary.flavour
            )
            if measured:
                source = f"measured on {self.measurement.target}"
            else:
                source = "tables" if self.tables.get(summary.flavour) else "no table"
            parts.append(f"{summary.label}: {counts} ({source})")
        high = [f for f in self.flags if f.severity == "high"]
        if high:
            parts.append(f"{len(high)} high-severity risk flag(s)")
        parts.append(self.shapes.status())
        if self.compiled.graph_break_count:
            parts.append(f"{self.compiled.graph_break_count} graph break(s)")
        if self.reference.failure:
            parts.append(f"the step failed ({self.reference.failure.phase})")
        return "; ".join(parts) + "."


def _shape_variants(workload: Workload, reference: Capture) -> tuple[list[Capture], ShapeStability]:
    if reference.failure is not None:
        return [], ShapeStability(reference.label, [])
    variants, comparisons = [], []
    batch = other_batch_size(reference.batch_size)
    variant = capture_training_step(workload, batch_size=batch)
    variants.append(variant)
    comparisons.append(
        compare_captures(reference, variant, "batch", Fraction(batch, reference.batch_size))
    )
    if workload.sequence_length:
        length = other_sequence_length(workload.sequence_length)
        if length is not None:
            variant = capture_training_step(workload, sequence_length=length)
            variants.append(variant)
            comparisons.append(
                compare_captures(
                    reference, variant, "sequence", Fraction(length, workload.sequence_length)
                )
            )
    return variants, ShapeStability(reference.label, comparisons)


def measure_on_target(workload: Workload, target: Target) -> tuple[Measurement, Capture] | None:
    """One training step on the target inside the capture, between the target's fallback
    readings; and the target's inference analyzer, where it has one. None where the target's
    readings say nothing about a Neuron flavour (cpu, cuda)."""
    flavour = target.neuron_flavour
    if flavour is None:
        return None
    target.start_fallback_tracking()
    capture = capture_training_step(workload, device=target.device, synchronize=target.synchronize)
    fallbacks = target.fallback_ops() or Counter()
    measurement = Measurement(
        target=target.name,
        flavour=flavour,
        statement=target.validation_statement(),
        executed=Counter({op: r.total_calls for op, r in capture.ops.items()}),
        fallbacks=Counter(fallbacks),
        fallback_source=f"the {target.name} target's fallback readings",
        failure=capture.failure.summary() if capture.failure else None,
    )
    try:
        model = workload.build_model("cpu").eval()
        inputs, _ = workload.batch("cpu")
        measurement.inference = target.analyze_inference(model, inputs)
    except Exception as exc:
        measurement.failure = (
            f"{measurement.failure + '; ' if measurement.failure else ''}inference analysis "
            f"raised {type(exc).__name__}: {' '.join(str(exc).split())[:300]}"
        )
    return measurement, capture


def _rows(
    reference: Capture, target_capture: Capture | None, measurement: Measurement | None
) -> list[OpRow]:
    rows = {op: _row(record, SEEN_REFERENCE) for op, record in reference.ops.items()}
    if target_capture is not None:
        for op, record in target_capture.ops.items():
            if op in rows:
                rows[op].seen_in.append(SEEN_TARGET)
            else:
                rows[op] = _row(record, SEEN_TARGET)
    if measurement is not None:
        seen = {name for row in rows.values() for name in (row.op, row.op.split(".", 1)[0])}
        for name, count in measurement.fallbacks.items():
            if name not in seen:
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


def analyze_coverage(
    workload: Workload,
    target: Target,
    *,
    flavours: list[str] | tuple[str, ...] = FLAVOURS,
    measure: bool = True,
) -> CoverageReport:
    """Everything notebook 02 shows: capture, shapes, graph breaks, flags, verdicts."""
    unknown = [f for f in flavours if f not in FLAVOURS]
    if unknown or not flavours:
        raise BadInput(
            f"Neuron flavours {list(flavours)!r}: choose from {', '.join(FLAVOURS)} "
            "(native: TorchNeuron on Trn2/Trn3; xla: legacy torch-neuronx on Trn1/Inf2)."
        )
    started = perf_counter()
    reference = capture_training_step(workload)
    variants, shapes = _shape_variants(workload, reference)
    compiled = explain_forward(workload)
    flags = capture_flags(reference)
    tables = load_tables()

    measured = measure_on_target(workload, target) if measure else None
    measurement, target_capture = measured if measured else (None, None)
    if measured is not None:
        note = f"measured one training step on {target.name}: {target.validation_statement()}"
    elif not measure:
        note = "measurement on the target was switched off (measure_on_target=False)"
    else:
        note = (
            f"the {target.name} target measures no Neuron fallbacks: verdicts come from tables; "
            "run with target=xla (torch-xla) or target=neuron (Trn2/Trn3) to measure"
        )

    rows = _rows(reference, target_capture, measurement)
    flag_kinds: dict[str, list[str]] = {}
    for f in flags:
        flag_kinds.setdefault(f.op, [])
        if f.kind not in flag_kinds[f.op]:
            flag_kinds[f.op].append(f.kind)
    for row in rows:
        row.flags = flag_kinds.get(row.op, [])
        for flavour in flavours:
            measured_here = measurement is not None and measurement.flavour == flavour
            if SEEN_REFERENCE not in row.seen_in and not measured_here:
                continue  # an op only the target ran says nothing about another flavour
            row.verdicts[flavour] = verdict(
                row.op,
                flavour,
                tables.get(flavour, []),
                measurement,
                tags=row.tags,
                forward_ops=row.forward_ops,
            )
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
        measurement_note=note,
        target_capture=target_capture,
        rows=rows,
        seconds=perf_counter() - started,
    )


def _site_data(site: CallSite | None) -> dict[str, Any] | None:
    if site is None:
        return None
    return {
        "path": site.path,
        "line": site.line,
        "function": site.function,
        "in_user_code": site.in_user_code,
        "module": site.module,
        "via": site.via,
        "text": site.short(),
    }


def _capture_data(capture: Capture) -> dict[str, Any]:
    failure = capture.failure
    return {
        "device": capture.device,
        "batch_size": capture.batch_size,
        "sequence_length": capture.sequence_length,
        "seconds": capture.seconds,
        "phases": capture.phase_totals(),
        "failure": None
        if failure is None
        else {
            "phase": failure.phase,
            "error_type": failure.error_type,
            "message": failure.message,
            "op": failure.op,
            "site": _site_data(failure.site),
            "text": failure.summary(),
        },
    }


def report_data(report: CoverageReport) -> dict[str, Any]:
    """The coverage part of 02_op_coverage.json: plain data, every verdict with its evidence."""
    return {
        "headline": report.headline(),
        "flavours": report.flavours,
        "capture": _capture_data(report.reference),
        "phases": list(PHASES),
        "ops": [
            {
                "op": r.op,
                "namespace": r.namespace,
                "calls": r.calls,
                "total_calls": r.total_calls,
                "dtypes": r.dtypes,
                "layouts": r.layouts,
                "shapes": r.shapes,
                "distinct_shapes": r.distinct_shapes,
                "tags": r.tags,
                "flags": r.flags,
                "seen_in": r.seen_in,
                "forward_ops": r.forward_ops,
                "first_site": _site_data(r.first_site),
                "sites": [{"calls": s.calls, **(_site_data(s.site) or {})} for s in r.sites],
                "verdicts": {
                    f: {"status": v.status, "measured": v.measured, "evidence": v.evidence}
                    for f, v in r.verdicts.items()
                },
            }
            for r in report.rows
        ],
        "coverage": {
            f: {"label": s.label, "distinct": s.distinct, "calls": s.calls, "basis": s.basis}
            for f, s in report.summaries().items()
        },
        "blockers": {
            flavour: [
                {
                    "op": r.op,
                    "verdict": r.verdicts[flavour].status,
                    "calls": r.total_calls,
                    "site": r.first_site.short() if r.first_site else None,
                }
                for r in report.blockers(flavour)
            ]
            for flavour in report.flavours
        },
        "flags": [
            {
                "kind": f.kind,
                "severity": f.severity,
                "op": f.op,
                "detail": f.detail,
                "calls": f.calls,
                "site": _site_data(f.site),
            }
            for f in report.flags
        ],
        "shape_stability": {
            "stable": report.shapes.stable,
            "sentence": report.shapes.sentence(),
            "reference": report.shapes.reference,
            "comparisons": report.shapes.comparisons,
        },
        "compiled": {**vars(report.compiled), "sentence": report.compiled.sentence()},
        "tables": {f: [t.describe() for t in ts] for f, ts in report.tables.items()},
        "measurement": None
        if report.measurement is None
        else {
            "target": report.measurement.target,
            "flavour": report.measurement.flavour,
            "statement": report.measurement.statement,
            "fallbacks": dict(report.measurement.fallbacks),
            "executed_ops": len(report.measurement.executed),
            "inference": report.measurement.inference,
            "failure": report.measurement.failure,
            "capture": _capture_data(report.target_capture) if report.target_capture else None,
        },
        "measurement_note": report.measurement_note,
        "seconds": report.seconds,
    }
