"""Notebook 02's records: one row per op with its verdicts, per-flavour summaries, the report,
and the shape of 02_op_coverage.json."""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Any

from workbench import scorecard
from workbench.checks import Coverage
from workbench.coverage.capture import (
    PHASES,
    CallSite,
    Capture,
    OpRecord,
    SiteCount,
)
from workbench.coverage.graphs import CompiledPath
from workbench.coverage.risks import CUSTOM_OP, HIGH, MEDIUM, RiskFlag
from workbench.coverage.shapes import (
    ShapeStability,
)
from workbench.coverage.support import (
    FALLS_BACK,
    FLAVOUR_LABELS,
    SUPPORTED,
    UNKNOWN,
    VERDICTS,
    OpVerdict,
    SupportTable,
    TargetReading,
)
from workbench.markup import VERDICT_BANNER
from workbench.scan.report import ScanReport
from workbench.scorecard import ATTENTION, BLOCKER, Finding, Status, judge

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
    verdicts: dict[str, OpVerdict] = field(default_factory=dict)
    # Why its output size follows tensor values, from its arguments ("" when they fix it).
    data_dependence: str = ""
    # A composite op: the kernel it ran through, and the ops that kernel dispatched (calls).
    composite_kernel: str = ""
    inside: dict[str, int] = field(default_factory=dict)

    @property
    def total_calls(self) -> int:
        return sum(self.calls.values())


def op_row(record: OpRecord, seen_in: str) -> OpRow:
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
        data_dependence=record.data_dependence,
        composite_kernel=record.composite_kernel,
        inside=dict(record.inside),
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
    measurement: TargetReading | None
    measurement_note: str  # what was measured on the target, or why nothing was
    target_capture: Capture | None
    rows: list[OpRow]
    seconds: float
    # Profiler markers (op -> calls): dispatched like ops, computing nothing; not in `rows`.
    bookkeeping: dict[str, int] = field(default_factory=dict)
    optimizer_note: str | None = None  # the optimizer's own host reads, with the fix

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
        first = (
            f"{self.workload}: one training step runs {len(ops)} distinct ATen ops ({calls} calls"
        )
        if self.bookkeeping:
            first += f", plus {sum(self.bookkeeping.values())} profiler marker call(s)"
        parts = [first + ")"]
        for summary in self.summaries().values():
            counts = ", ".join(
                f"{summary.distinct[v]} {v}" for v in VERDICTS if summary.distinct[v]
            )
            reading = self.measurement
            if reading is not None and reading.flavour == summary.flavour:
                source = f"measured on {reading.target}"
            else:
                source = "tables" if self.tables.get(summary.flavour) else "no table"
            parts.append(f"{summary.label}: {counts} ({source})")
        severe = [
            f"{n} {severity}-severity"
            for severity in (HIGH, MEDIUM)
            if (n := sum(1 for f in self.flags if f.severity == severity))
        ]
        if severe:
            parts.append(" and ".join(severe) + " risk flag(s)")
        parts.append(self.shapes.status())
        if self.compiled.status():
            parts.append(self.compiled.status())
        if self.reference.failure:
            parts.append(f"the step failed ({self.reference.failure.phase})")
        return "; ".join(parts) + "."


def _site_data(site: CallSite | None) -> dict[str, Any] | None:
    return None if site is None else {**asdict(site), "text": site.short()}


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


def _op_data(r: OpRow) -> dict[str, Any]:
    return {
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
        "data_dependence": r.data_dependence,
        "composite_kernel": r.composite_kernel,
        "inside": r.inside,
        "first_site": _site_data(r.first_site),
        "sites": [{"calls": s.calls, **(_site_data(s.site) or {})} for s in r.sites],
        "verdicts": {
            f: {"status": v.status, "measured": v.measured, "evidence": v.evidence}
            for f, v in r.verdicts.items()
        },
    }


def _blocker_data(r: OpRow, flavour: str) -> dict[str, Any]:
    return {
        "op": r.op,
        "verdict": r.verdicts[flavour].status,
        "calls": r.total_calls,
        "site": r.first_site.short() if r.first_site else None,
    }


def _flag_data(f: RiskFlag) -> dict[str, Any]:
    return {**asdict(f), "site": _site_data(f.site)}


def _measurement_data(reading: TargetReading, target_capture: Capture | None) -> dict[str, Any]:
    return {
        "target": reading.target,
        "flavour": reading.flavour,
        "statement": reading.statement,
        "fallbacks": dict(reading.fallbacks),
        "executed_ops": len(reading.executed),
        # Per op, so `workbench tables save-measured` can make a table of this run.
        "executed": dict(reading.executed),
        "tracked_executed": None if reading.tracked is None else dict(reading.tracked),
        "inference": reading.inference,
        "compiles": [asdict(event) for event in reading.compiles],
        "failure": reading.failure,
        "capture": _capture_data(target_capture) if target_capture else None,
    }


def report_data(report: CoverageReport) -> dict[str, Any]:
    """The coverage part of 02_op_coverage.json: plain data, every verdict with its evidence."""
    shapes = report.shapes
    return {
        "headline": report.headline(),
        "flavours": report.flavours,
        "capture": _capture_data(report.reference),
        "phases": list(PHASES),
        "ops": [_op_data(r) for r in report.rows],
        "coverage": {
            f: {"label": s.label, "distinct": s.distinct, "calls": s.calls, "basis": s.basis}
            for f, s in report.summaries().items()
        },
        "blockers": {
            flavour: [_blocker_data(r, flavour) for r in report.blockers(flavour)]
            for flavour in report.flavours
        },
        "flags": [_flag_data(f) for f in report.flags],
        "shape_stability": {
            "stable": shapes.stable,
            "unrolled": shapes.unrolled_status(),
            "recurrent_modules": shapes.recurrent_modules,
            "sentence": shapes.sentence(),
            "reference": shapes.reference,
            "comparisons": shapes.comparisons,
        },
        "compiled": {**vars(report.compiled), "sentence": report.compiled.sentence()},
        "tables": {f: [t.describe() for t in ts] for f, ts in report.tables.items()},
        "measurement": _measurement_data(report.measurement, report.target_capture)
        if report.measurement
        else None,
        "measurement_note": report.measurement_note,
        "profiler_markers": report.bookkeeping,
        "optimizer_note": report.optimizer_note,
        "seconds": report.seconds,
    }


COVERAGE_RULE = (
    "blocker: the step failed mid-capture, an op falls back or fails on a chosen Neuron flavour, "
    "a custom op has no Neuron kernel, or the CUDA scan found blocking code; attention: ops with "
    "unknown support, other high- or medium-severity risk flags, shapes that change beyond "
    "the batch, or a Python loop over a dimension that unrolls the graph; pass otherwise"
)


def _per_flavour(
    report: CoverageReport, verdict: str, status: Status, words: str, check: str
) -> list[Finding]:
    """One finding per flavour with ops of `verdict`: "3 op(s) <words> on <flavour>"."""
    return [
        Finding(status, f"{summary.distinct[verdict]} op(s) {words} on {summary.label}", check)
        for summary in report.summaries().values()
        if summary.distinct[verdict]
    ]


def coverage_verdict(report: CoverageReport, scan: ScanReport | None) -> scorecard.Verdict:
    """Notebook 02's verdict, by COVERAGE_RULE."""
    findings = []
    if report.reference.failure:
        findings.append(
            Finding(
                BLOCKER,
                f"the step failed mid-capture ({report.reference.failure.phase})",
                Coverage.CAPTURE,
            )
        )
    findings += _per_flavour(report, FALLS_BACK, BLOCKER, "fall back or fail", Coverage.FALLBACK)
    custom = {f.op for f in report.flags if f.kind == CUSTOM_OP}
    if custom:
        findings.append(
            Finding(
                BLOCKER,
                f"custom op(s) with no Neuron kernel: {', '.join(sorted(custom))}",
                Coverage.CUSTOM,
            )
        )
    if scan is not None and scan.blocking:
        findings.append(
            Finding(BLOCKER, f"scan: {len(scan.blocking)} blocking finding(s)", Coverage.SCAN)
        )
    serious = [f for f in report.flags if f.severity in (HIGH, MEDIUM) and f.kind != CUSTOM_OP]
    if serious:
        kinds = sorted({f.kind for f in serious})
        findings.append(
            Finding(
                ATTENTION,
                f"{len(serious)} high or medium risk flag(s): {', '.join(kinds)}",
                Coverage.RISK,
            )
        )
    if not report.shapes.stable:
        findings.append(Finding(ATTENTION, report.shapes.status(), Coverage.SHAPES))
    elif report.shapes.unrolls:
        findings.append(Finding(ATTENTION, report.shapes.unrolled_status(), Coverage.SHAPES))
    findings += _per_flavour(report, UNKNOWN, ATTENTION, "with unknown support", Coverage.UNKNOWN)
    return judge(
        findings, COVERAGE_RULE, "every op is supported on the chosen flavours; no blocking finding"
    )


def headline_kind(report: CoverageReport, scan: ScanReport | None) -> str:
    """The headline's colour, from the verdict, so the two always agree."""
    return VERDICT_BANNER[coverage_verdict(report, scan).status]


def headline_text(report: CoverageReport, scan: ScanReport | None) -> str:
    text = report.headline()
    if scan is not None:
        text = f"{text[:-1]}; scan: {scan.sentence()}"
    return text


def result_data(report: CoverageReport, scan: ScanReport | None) -> dict[str, Any]:
    data = report_data(report)
    data["headline"] = headline_text(report, scan)
    data["verdict"] = coverage_verdict(report, scan)
    data["scan"] = (
        None
        if scan is None
        else {
            "roots": scan.roots,
            "flavours": scan.flavours,
            "files": scan.files,
            "sentence": scan.sentence(),
            "blocking": len(scan.blocking),
            "findings": scan.findings,
            "unreadable": scan.unreadable,
            "left_out": scan.left_out,
        }
    )
    return data
