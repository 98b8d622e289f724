"""What notebook 02 shows of a coverage report and a scan, and the data its result file keeps.

Every shown string goes through workbench.markup, which escapes it.
"""

from __future__ import annotations

from typing import Any

from IPython.display import display

from workbench import markup as show
from workbench.coverage.capture import PHASES, CallSite
from workbench.coverage.graphs import CompiledPath
from workbench.coverage.records import (
    SEEN_REFERENCE,
    CoverageReport,
    OpRow,
    headline_kind,
    headline_text,
)
from workbench.coverage.shapes import ShapeStability, VariantComparison
from workbench.coverage.support import (
    FALLS_BACK,
    FLAVOUR_LABELS,
    SUPPORTED,
    UNKNOWN,
    TargetReading,
    native_table_note,
)
from workbench.errors import WorkbenchError
from workbench.scan.report import ScanReport
from workbench.targets.detect import FLAVOUR_NATIVE
from workbench.timing import format_seconds

MAX_BLOCKERS_SHOWN = 30


MAX_FLAGS_SHOWN = 40


_SHORT = {FLAVOUR_NATIVE: "native", "xla": "XLA"}


def _site(site: CallSite | None) -> str:
    return site.short() if site else "unknown"


def _verdict_cell(row: OpRow, flavour: str) -> str:
    verdict = row.verdicts.get(flavour)
    if verdict is None:
        return "n/a"
    return f"{verdict.status} (measured)" if verdict.measured else verdict.status


def _evidence_cell(row: OpRow, flavour: str) -> str:
    verdict = row.verdicts.get(flavour)
    return verdict.summary() if verdict else ""


def _verdict_columns(rows: list[OpRow], flavours: list[str]) -> tuple[list[dict[str, str]], str]:
    """Per row, a verdict column per flavour and an evidence column, except where every row
    has the same evidence: that is said once, in the caption."""
    shared = {}
    for flavour in flavours:
        evidence = {_evidence_cell(row, flavour) for row in rows}
        if len(evidence) == 1:
            shared[flavour] = evidence.pop()
    columns = []
    for row in rows:
        cells = {}
        for flavour in flavours:
            cells[_SHORT[flavour]] = _verdict_cell(row, flavour)
            if flavour not in shared:
                cells[f"{_SHORT[flavour]} evidence"] = _evidence_cell(row, flavour)
        columns.append(cells)
    note = "".join(f"; {_SHORT[f]} evidence for every row: {text}" for f, text in shared.items())
    return columns, note


def headline(report: CoverageReport, scan: ScanReport | None = None) -> None:
    """The one-sentence answer, coloured by the worst thing in it, then the step at a glance."""
    # The report opens with this headline, read from the result file: here for the live view.
    banner = show.banner(headline_text(report, scan), headline_kind(report, scan))
    display(banner, metadata=show.LIVE_ONLY)
    totals = report.reference.phase_totals()
    facts = {
        phase: f"{totals[phase]['ops']} distinct ops, {totals[phase]['calls']} calls"
        for phase in PHASES
    }
    facts["captured on"] = f"{report.reference.device}, {report.reference.label}"
    facts["measured on the target"] = report.measurement_note
    facts["analysis time"] = f"{report.seconds:.1f} s"
    display(show.key_values(facts, caption="One training step, captured at dispatch level"))


def failure(report: CoverageReport) -> None:
    """A step that failed mid-capture: what and where; the ops captured before it stay shown."""
    problem = report.reference.failure
    if problem is None:
        display(show.banner("The training step ran to the end under capture.", "ok"))
        return
    display(
        show.banner(
            f"The training step failed; the {len(report.reference.ops)} ops captured before the "
            f"failure are shown below. {problem.summary()}",
            "fail",
        )
    )


def _ops_and_calls(ops: int, calls: int) -> str:
    return f"{ops} ops ({calls} calls)"


def coverage_table(report: CoverageReport) -> None:
    rows = []
    for summary in report.summaries().values():
        rows.append(
            {
                "Neuron flavour": summary.label,
                "supported": _ops_and_calls(summary.distinct[SUPPORTED], summary.calls[SUPPORTED]),
                "unknown": _ops_and_calls(summary.distinct[UNKNOWN], summary.calls[UNKNOWN]),
                "falls back or fails": _ops_and_calls(
                    summary.distinct[FALLS_BACK], summary.calls[FALLS_BACK]
                ),
                "evidence": summary.basis,
            }
        )
    caption = (
        "Coverage per Neuron flavour: distinct ATen ops with each verdict, and in brackets how "
        "many times one training step calls them"
    )
    display(show.table(rows, caption=caption))


def blockers(report: CoverageReport) -> None:
    """Per flavour, the ops not known to be supported there: falls back or fails first, then
    unknown, most calls first, each with where the workload calls it."""
    for flavour in report.flavours:
        ranked = report.blockers(flavour)
        label = FLAVOUR_LABELS[flavour]
        if not ranked:
            display(show.banner(f"{label}: every op is supported.", "ok"))
            continue
        falls = sum(1 for r in ranked if r.verdicts[flavour].status == FALLS_BACK)
        display(
            show.banner(
                f"{label}: {falls} op(s) fall back or fail, {len(ranked) - falls} unknown.",
                "fail" if falls else "warn",
            )
        )
        shown = ranked[:MAX_BLOCKERS_SHOWN]
        verdicts, note = _verdict_columns(shown, [flavour])
        rows = [
            {
                "#": rank,
                "op": row.op,
                "calls": row.total_calls,
                "phases": ", ".join(row.calls),
                "called from (first call)": _site(row.first_site),
                "other call sites": max(len(row.sites) - 1, 0),
                **cells,
            }
            for rank, (row, cells) in enumerate(zip(shown, verdicts, strict=True), start=1)
        ]
        more = f" (first {MAX_BLOCKERS_SHOWN} shown)" if len(ranked) > MAX_BLOCKERS_SHOWN else ""
        display(show.table(rows, caption=f"{label}: blockers, worst first{more}{note}"))


def ops_by_verdict(report: CoverageReport) -> None:
    """Per flavour and verdict, the ops that share it, with their evidence said once."""
    captured = [r for r in report.rows if SEEN_REFERENCE in r.seen_in]
    rows = []
    for flavour in report.flavours:
        groups: dict[str, list[OpRow]] = {}
        for row in captured:
            verdict = row.verdicts.get(flavour)
            if verdict is not None:
                groups.setdefault(verdict.status, []).append(row)
        for status, members in groups.items():
            members.sort(key=lambda r: -r.total_calls)
            evidence = sorted({_evidence_cell(r, flavour) for r in members})
            rows.append(
                {
                    "Neuron flavour": _SHORT[flavour],
                    "verdict": status,
                    "ops": len(members),
                    "calls": sum(r.total_calls for r in members),
                    "which (most calls first)": ", ".join(r.op for r in members),
                    "evidence": " | ".join(evidence),
                }
            )
    display(show.table(rows, caption="Ops grouped by verdict, evidence once per group"))


MAX_INSIDE_SHOWN = 4


def _inside(row: OpRow) -> str:
    """What a composite op's kernel dispatched in the step, most calls first."""
    ranked = sorted(row.inside.items(), key=lambda item: -item[1])
    shown = ", ".join(f"{calls} {op}" for op, calls in ranked[:MAX_INSIDE_SHOWN])
    more = len(ranked) - MAX_INSIDE_SHOWN
    return f"{shown}, and {more} more" if more > 0 else shown


def ops_by_phase(report: CoverageReport) -> None:
    """Every op per phase (calls, dtypes, shapes, site, verdicts), folded under one line."""
    tables = []
    for phase in PHASES:
        phase_rows = sorted(
            (r for r in report.rows if SEEN_REFERENCE in r.seen_in and phase in r.calls),
            key=lambda r: -r.calls[phase],
        )
        verdicts, note = _verdict_columns(phase_rows, report.flavours)
        rows = [
            {
                "op": row.op,
                "calls": row.calls[phase],
                "dtypes": ", ".join(row.dtypes),
                "input shapes (first)": row.shapes[0] if row.shapes else "",
                "distinct shapes (all phases)": row.distinct_shapes,
                "called from": _site(row.first_site),
                "flags": ", ".join(row.flags),
                "its composite kernel dispatched": _inside(row),
                **cells,
            }
            for row, cells in zip(phase_rows, verdicts, strict=True)
        ]
        tables.append(show.table(rows, caption=f"{phase}: {len(rows)} distinct ops{note}"))
    display(show.collapsed("Every op, phase by phase (click to open)", tables))
    target_only = [r for r in report.rows if SEEN_REFERENCE not in r.seen_in]
    if target_only:
        rows = [
            {
                "op": r.op,
                "calls": r.total_calls,
                "seen in": ", ".join(r.seen_in),
                "called from": _site(r.first_site),
                "verdict": _verdict_cell(r, report.measurement.flavour)
                if report.measurement
                else "",
                "evidence": _evidence_cell(r, report.measurement.flavour)
                if report.measurement
                else "",
            }
            for r in sorted(target_only, key=lambda r: -r.total_calls)
        ]
        caption = (
            "Ops that ran only on the target (its own decompositions and functionalization "
            "replace some CPU ops)"
        )
        display(show.table(rows, caption=caption))


def risk_flags(report: CoverageReport) -> None:
    if report.optimizer_note:
        display(show.banner(report.optimizer_note, "info"))
    if report.bookkeeping:
        markers = ", ".join(f"{op} ({n})" for op, n in sorted(report.bookkeeping.items()))
        display(
            show.banner(
                f"Profiler markers, not counted as ATen ops (they compute nothing): {markers}.",
                "info",
            )
        )
    if not report.flags:
        display(show.banner("No dtype, layout, shape, sync, random or custom-op risk.", "ok"))
        return
    counts = report.flag_counts()
    display(
        show.key_values(
            {kind: f"{n} op(s)" for kind, n in counts.most_common()},
            caption="Risk flags by kind",
        )
    )
    rows = [
        {
            "severity": f.severity,
            "flag": f.kind,
            "op": f.op,
            "calls": f.calls,
            "where": _site(f.site),
            "why": f.detail,
        }
        for f in report.flags[:MAX_FLAGS_SHOWN]
    ]
    caption = "Risk flags, most severe first" + (
        f" (first {MAX_FLAGS_SHOWN} of {len(report.flags)})"
        if len(report.flags) > MAX_FLAGS_SHOWN
        else ""
    )
    display(show.table(rows, caption=caption))


def _comparison_row(c: VariantComparison, reference: str) -> dict[str, Any]:
    return {
        "compared with": c.label,
        "against": reference,
        "ratio": c.ratio,
        "calls compared": c.compared_calls,
        "not compared (inside torch, layout copies)": c.uncompared_calls,
        "unchanged": c.unchanged_calls,
        f"scaled with {c.dimension}": c.scaled_calls,
        f"{c.dimension} plus or minus a few": c.offset_calls,
        "changed otherwise": c.unexplained_calls,
        "ops run a different number of times": len(c.call_count_changes),
        f"ops run per {c.dimension} position": len(c.per_position_ops),
        f"lists gathered per {c.dimension} position": c.gathered_calls,
        "failure": c.failure or "",
    }


COMPARISON_CAPTION = (
    "Shape stability: each call the model's own code makes (ops it calls directly, every "
    "module's inputs and outputs, and in the forward what a composite op's kernel dispatches) "
    "against the same call at another size; what torch runs inside a module or function (a "
    "kernel's workspace, the autograd engine's backward, the optimizer) follows from those, and "
    "eager layout copies depend on strides only: neither is compared"
)
PER_POSITION_CAPTION = (
    "Ops a Python loop runs a whole number of times per position: the graph a static-shape "
    "target traces is unrolled and grows with the size"
)


def _ops_by_comparison(stability: ShapeStability, caption: str, texts: str) -> None:
    """One table of the ops each comparison lists under `texts` (an attribute of its own)."""
    rows = [
        {"compared with": c.label, "op": text}
        for c in stability.comparisons
        for text in getattr(c, texts)
    ]
    if rows:
        display(show.table(rows, caption=caption))


def shape_stability(report: CoverageReport) -> None:
    stability = report.shapes
    calm = stability.stable and not stability.unrolls
    display(show.banner(stability.sentence(), "ok" if calm else "warn"))
    if not stability.comparisons:
        return
    rows = [_comparison_row(c, stability.reference) for c in stability.comparisons]
    display(show.table(rows, caption=COMPARISON_CAPTION))
    changes = [
        {
            "op": change.op,
            "phase": change.phase,
            "call": change.call,
            stability.reference: change.reference,
            "other size": f"{change.variant_label}: {change.variant}",
            "called from": _site(change.site),
        }
        for c in stability.comparisons
        for change in c.unexplained
    ]
    if changes:
        display(show.table(changes, caption="Shapes that change beyond batch and sequence"))
    _ops_by_comparison(stability, "Ops run a different number of times", "call_count_changes")
    _ops_by_comparison(stability, PER_POSITION_CAPTION, "per_position_ops")


def _dynamo_tables(compiled: CompiledPath) -> None:
    """What Dynamo declined to trace and where it broke the graph."""
    if compiled.skipped:
        skipped = [
            {
                "reason": s.reason,
                "explanation": s.explanation,
                "Dynamo's hint": s.hint,
                "graph-break id": s.graph_break_id or "",
                "documentation": s.doc_url or "",
            }
            for s in compiled.skipped
        ]
        caption = (
            "What Dynamo declined to trace: that code runs eager "
            f"(torch._dynamo counters, torch {compiled.torch_version})"
        )
        display(show.table(skipped, caption=caption))
    if compiled.breaks:
        breaks = [
            {
                "#": n,
                "reason": b.reason,
                "explanation": b.explanation,
                "where": _site(b.site),
                "graph-break id": b.graph_break_id or "",
                "documentation": b.doc_url or "",
            }
            for n, b in enumerate(compiled.breaks, start=1)
        ]
        caption = f"Graph breaks (torch._dynamo.explain, torch {compiled.torch_version})"
        display(show.table(breaks, caption=caption))


def _target_compiles(measured: TargetReading) -> None:
    """What the target compiled during its measured step, one row per graph."""
    rows = [
        {
            "#": n,
            "graph": event.graph_id,
            "compile time": format_seconds(event.seconds) if event.seconds is not None else "n/a",
            "cause": event.cause,
            "detail": event.detail,
            "user code": event.location,
        }
        for n, event in enumerate(measured.compiles, start=1)
    ]
    caption = (
        f"What {measured.target} compiled during the measured training step (a user line means "
        "that line cut the graph mid-step)"
    )
    display(show.table(rows, caption=caption))


def graph_breaks(report: CoverageReport) -> None:
    compiled = report.compiled
    kind = "fail" if compiled.error else ("warn" if compiled.status() else "ok")
    display(show.banner(compiled.sentence(), kind))
    _dynamo_tables(compiled)
    if compiled.ops_per_graph:
        display(
            show.key_values(
                {f"graph {n}": f"{ops} ops" for n, ops in enumerate(compiled.ops_per_graph, 1)},
                caption="Ops per graph",
            )
        )
    if compiled.messages:
        display(
            show.table(
                [[g.count, g.source, g.message] for g in compiled.messages],
                headers=["times", "from", "message (first line)"],
                caption="Torch's warnings while tracing, grouped (the breaks above explain them)",
            )
        )
    if report.measurement is not None and report.measurement.compiles:
        _target_compiles(report.measurement)


def evidence_sources(report: CoverageReport) -> None:
    """Which tables and which measurement the verdicts rest on."""
    rows = [
        {
            "flavour": FLAVOUR_LABELS[table.flavour],
            "table": table.name,
            "version": table.version,
            "date": table.date,
            "source": table.source,
            "ops named": table.describe()["ops"],
            "method": table.method,
        }
        for flavour in report.flavours
        for table in report.tables.get(flavour, [])
    ]
    if rows:
        display(
            show.table(
                rows,
                caption="Support tables (workbench/data, and TorchNeuron's as imported), "
                "strongest first",
            )
        )
    measurement = report.measurement
    facts: dict[str, Any] = {"measurement": report.measurement_note}
    if measurement is not None:
        facts["fell back to the CPU"] = (
            ", ".join(f"{op} x{n}" for op, n in measurement.fallbacks.most_common()) or "nothing"
        )
        facts["ops run on the target"] = len(measurement.executed)
        if measurement.inference is not None:
            facts["inference analysis"] = measurement.inference.source
        if measurement.failure:
            facts["problem"] = measurement.failure
    if FLAVOUR_NATIVE in report.flavours:
        facts["native TorchNeuron table"] = native_table_note(report.tables.get(FLAVOUR_NATIVE, []))
    display(show.key_values(facts, caption="Measured evidence"))


def scan_findings(scan: ScanReport) -> None:
    kind = "fail" if scan.blocking else ("warn" if scan.findings else "ok")
    files = ", ".join(scan.roots)
    display(show.banner(f"{scan.sentence()} Scanned: {files}.", kind))
    if scan.findings:
        display(
            show.table(
                [
                    {
                        "where": f.location(),
                        "severity": f.severity,
                        "pattern": f.pattern,
                        "code": f.code,
                        "native replacement": f.native,
                        "XLA replacement": f.xla,
                    }
                    for f in scan.findings
                ],
                caption="CUDA-specific code and its Neuron replacement (AWS Neuron guides)",
            )
        )
    for problem in scan.unreadable:
        display(show.banner(f"not scanned: {problem}", "warn"))
    for definitions in scan.left_out:
        display(show.banner(f"left out, as the workload never uses them: {definitions}", "info"))


def reading(report: CoverageReport, scan: ScanReport | None = None) -> None:
    """One paragraph: what the numbers mean for the migration."""
    sentences = [s.sentence() + "." for s in report.summaries().values()]
    falls = [
        row
        for flavour in report.flavours
        for row in report.blockers(flavour)
        if row.verdicts[flavour].status == FALLS_BACK
    ]
    if falls:
        top = "; ".join(f"{r.op} ({r.total_calls} calls, {_site(r.first_site)})" for r in falls[:3])
        sentences.append(f"Fix or replace first: {top}.")
    if report.flags:
        counts = ", ".join(f"{kind} ({n} op(s))" for kind, n in report.flag_counts().most_common())
        sentences.append(f"Risk flags: {counts}.")
    sentences.append(report.shapes.sentence())
    sentences.append(report.compiled.sentence())
    if scan is not None:
        sentences.append(f"Static scan: {scan.sentence()}")
    if report.measurement is None:
        sentences.append(
            "Nothing was measured on a Neuron path here: table verdicts say what a library "
            "registers (torch-xla's lowering, not what neuronx-cc accepts), not what a "
            "NeuronCore runs."
        )
    display(show.banner(" ".join(sentences), "info"))


def raise_on_failure(report: CoverageReport) -> None:
    """Fail the notebook (after its report and result file are written) when the step did not
    run to the end: the coverage shown is then partial."""
    problem = report.reference.failure
    if problem is not None:
        raise WorkbenchError(f"Op capture incomplete: {problem.summary()}")
