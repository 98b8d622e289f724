"""Support verdicts per op and Neuron flavour: supported / falls back or fails / unknown.

Every verdict carries its evidence. Precedence, strongest first:
1. a measurement on that flavour's target (its fallback readings around a real training step,
   and, for XLA inference, torch_neuronx.analyze): overrides every table, and says so;
2. the flavour's support tables: for XLA those in workbench/data, in the order TABLE_FILES
   lists them; for native TorchNeuron the newest table the user imported into the op-tables
   folder (`workbench tables import-native` / `save-measured`, see native_table.py);
3. nothing names the op: "unknown", never "supported".

No TorchNeuron table ships with the package (its per-API table lives in the torch-neuronx
repository, docs/torch_api_compatibility.md, regenerated each release): until one is imported,
native verdicts are "unknown" unless measured with target=neuron on a Trn2/Trn3.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from importlib import resources
from typing import Any, Final, Literal

from workbench.coverage.native_table import (
    STATUS_CPU_FALLBACK,
    STATUS_SUPPORTED,
    STATUS_UNSUPPORTED,
    NativeTable,
    newest_native_table,
    op_tables_dir,
)
from workbench.targets.compiling import CompileEvent
from workbench.targets.detect import FLAVOUR_NATIVE, FLAVOUR_XLA, FLAVOURS
from workbench.targets.op_coverage import InferenceAnalysis

# One op's support on one flavour, one definition.
OpStatus = Literal["supported", "falls back or fails", "unknown"]
SUPPORTED: Final = "supported"
FALLS_BACK: Final = "falls back or fails"
UNKNOWN: Final = "unknown"
# Worst first: the order blockers rank in.
VERDICTS: tuple[OpStatus, ...] = (FALLS_BACK, UNKNOWN, SUPPORTED)

FLAVOUR_LABELS = {
    FLAVOUR_NATIVE: "native TorchNeuron (Trn2/Trn3)",
    FLAVOUR_XLA: "legacy XLA torch-neuronx (Trn1/Inf2)",
}

# Table files per flavour, strongest first (glob patterns: the generated table carries the
# torch-xla version in its name; the newest one found wins).
TABLE_FILES: dict[str, tuple[str, ...]] = {
    FLAVOUR_NATIVE: (),
    FLAVOUR_XLA: ("xla_support_torch_xla_*.json", "neuron_legacy_xla_supported_ops.json"),
}
NO_NATIVE_TABLE = "no TorchNeuron op table to check against: unknown until measured on a Trn2/Trn3"
# Why there is none, for the report's sources section.
NO_NATIVE_TABLE_WHY = (
    "TorchNeuron's per-API support table lives in the torch-neuronx repository "
    "(docs/torch_api_compatibility.md) and is not published in a form this workbook can read; "
    "unregistered ops fall back to the CPU silently, so coverage has to be measured: run with "
    "target=neuron on a Trn2/Trn3"
)
# How to get one, for the same place.
HOW_TO_IMPORT_NATIVE = (
    "to use TorchNeuron's table, download docs/torch_api_compatibility.md of your release from "
    "github.com/aws-neuron/torch-neuronx and run `workbench tables import-native FILE`; or, after "
    "a run with target=neuron, `workbench tables save-measured <run>/02_op_coverage.json` "
    "(tables are read from {folder})"
)

# Table statuses -> verdicts. A torch-xla kernel is a static fact; "decomposes" re-dispatches
# the op as other ops, each of which gets its own entry on the device.
_TABLE_VERDICTS: dict[str, OpStatus] = {
    "lowered": SUPPORTED,
    "decomposes": SUPPORTED,
    "supported": SUPPORTED,
    "cpu_fallback": FALLS_BACK,
    # TorchNeuron's N: a quantized variant or a backend it does not provide. Whether the op then
    # reaches the CPU fallback or raises, it does not run on the NeuronCore.
    "unsupported": FALLS_BACK,
}
_TABLE_WORDS = {
    "lowered": "torch-xla has a kernel for it",
    "decomposes": "no kernel of its own; decomposes into other ops (not checked one by one)",
    "supported": "on the official list",
    "cpu_fallback": "no torch-xla kernel: torch-xla's CPU fallback runs it",
    "unsupported": "not supported",
}


# The CPU picks a kernel of its own for some composite ops; another device picks its own.
_CPU_KERNEL_CHOICE = re.compile(r"for_cpu|mkldnn|onednn")


def is_cpu_kernel_choice(op: str) -> bool:
    """True for ops the CPU dispatches to as its own implementation of a composite op."""
    return bool(_CPU_KERNEL_CHOICE.search(op))


def packet_name(op: str) -> str:
    """aten::add.Tensor -> aten::add: the name every overload shares."""
    return op.split(".", 1)[0]


@dataclass(frozen=True)
class SupportTable:
    """One support table file: what it says per op, and where that comes from."""

    name: str
    flavour: str
    version: str
    source: str
    date: str
    method: str
    file: str
    statuses: dict[str, str] = field(repr=False)  # op (or packet name) -> status
    # Per-table wording of a status (TorchNeuron's tables speak of the NeuronCore, not
    # torch-xla), and per op what the table's own row says.
    words: dict[str, str] = field(default_factory=dict, repr=False)
    details: dict[str, str] = field(default_factory=dict, repr=False)
    # Ops whose gradient formula is the backend's own: the backward ops a CPU run shows for
    # them never reach that device.
    autograd_overrides: frozenset[str] = frozenset()

    def status(self, op: str) -> str | None:
        return self.statuses.get(op) or self.statuses.get(packet_name(op))

    def detail(self, op: str) -> str:
        return self.details.get(op) or self.details.get(packet_name(op)) or ""

    def wording(self, status: str) -> str:
        return self.words.get(status) or _TABLE_WORDS[status]

    def citation(self) -> str:
        return f"{self.name}, {self.date}"

    def describe(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "flavour": self.flavour,
            "version": self.version,
            "source": self.source,
            "date": self.date,
            "method": self.method,
            "file": self.file,
            "ops": len(self.statuses),
        }


def _table_from_json(file: str, data: dict[str, Any]) -> SupportTable:
    statuses = {op: status for status, ops in data["ops"].items() for op in ops}
    version = data.get("torch_xla_version") or data.get("version", "")
    return SupportTable(
        name=data["name"],
        flavour=data["flavour"],
        version=version,
        source=data.get("source_file") or data["source"],
        date=data.get("generated_on") or data.get("published_on", ""),
        method=data["method"],
        file=file,
        statuses=statuses,
        autograd_overrides=frozenset(data.get("autograd_overrides", ())),
    )


def _version_key(file: str) -> tuple[int, ...]:
    digits = [part for part in file.removesuffix(".json").split("_")[-1].split(".")]
    return tuple(int(d) for d in digits if d.isdigit())


_NATIVE_WORDS = {
    STATUS_SUPPORTED: "TorchNeuron runs it on the NeuronCore",
    STATUS_CPU_FALLBACK: "TorchNeuron runs it through its CPU fallback",
    STATUS_UNSUPPORTED: "TorchNeuron does not support it",
}
_MEASURED_WORDS = {
    STATUS_SUPPORTED: "ran on the NeuronCore with no fallback in a measured run",
    STATUS_CPU_FALLBACK: "fell back to the CPU in a measured run",
}


def native_support_table(table: NativeTable) -> SupportTable:
    """An imported or measured TorchNeuron table in the form every verdict reads."""
    details = {}
    for op, entry in table.ops.items():
        rows = "; ".join(f"{row.api}: {row.support}" for row in entry.rows[:3])
        dtypes = f"for {', '.join(entry.dtypes)}; " if entry.dtypes else ""
        details[op] = f"{dtypes}{rows}"
    measured = table.source.startswith("measured on")
    return SupportTable(
        name=f"TorchNeuron op table, release {table.release}, from {table.source}",
        flavour=FLAVOUR_NATIVE,
        version=table.release,
        source=table.source,
        date=f"imported {table.imported_on[:10]}",
        method=table.method,
        file=table.file,
        statuses={op: entry.status for op, entry in table.ops.items()},
        words=_MEASURED_WORDS if measured else _NATIVE_WORDS,
        details=details,
    )


def native_table_note(tables: list[SupportTable]) -> str:
    """For the report's sources: the TorchNeuron table the verdicts used, or why there is none
    and how to import one."""
    if tables:
        table = tables[0]
        return (
            f"TorchNeuron table release {table.version} from {table.source}, {table.date} "
            f"({table.file})"
        )
    return f"{NO_NATIVE_TABLE_WHY}; {HOW_TO_IMPORT_NATIVE.format(folder=op_tables_dir())}"


def load_tables() -> dict[str, list[SupportTable]]:
    """The support tables per flavour, strongest first: those shipped in workbench/data, and
    for native TorchNeuron the newest one imported into the op-tables folder."""
    data_dir = resources.files("workbench") / "data"
    files = sorted(entry.name for entry in data_dir.iterdir())
    tables: dict[str, list[SupportTable]] = {flavour: [] for flavour in FLAVOURS}
    for flavour, patterns in TABLE_FILES.items():
        for pattern in patterns:
            prefix, _, suffix = pattern.partition("*")
            matches = [f for f in files if f.startswith(prefix) and f.endswith(suffix)]
            if not matches:
                continue
            newest = max(matches, key=_version_key)
            data = json.loads((data_dir / newest).read_text(encoding="utf-8"))
            tables[flavour].append(_table_from_json(newest, data))
    native = newest_native_table()
    if native is not None:
        tables[FLAVOUR_NATIVE].append(native_support_table(native))
    return tables


@dataclass
class TargetReading:
    """What running the workload on one target measured: the ops it ran there and which of
    them fell back to the host; plus the target's inference analyzer, where it has one."""

    target: str
    flavour: str
    statement: str  # the target's validation statement: what the run does and does not show
    executed: Counter[str]  # op -> calls on the target (dispatch capture on its device)
    fallbacks: Counter[str]  # target.fallback_ops(), as reported
    fallback_source: str
    inference: InferenceAnalysis | None = None
    failure: str | None = None
    # target.executed_ops(): the target's own record of what ran (torch_neuronx's
    # get_executed_ops on TorchNeuron); None where the target keeps none.
    tracked: Counter[str] | None = None
    # What the target compiled during the measured step (Target.compile_events): on the lazy
    # XLA path, each graph with its hash and the user line that cut it, where one did.
    compiles: list[CompileEvent] = field(default_factory=list)

    def fallback_calls(self, op: str) -> int:
        return self.fallbacks.get(op, 0) or (
            self.fallbacks.get(packet_name(op), 0) if "." in op else 0
        )


@dataclass(frozen=True)
class OpVerdict:
    """One op's support on one Neuron flavour, with the evidence for it."""

    status: OpStatus
    evidence: list[str]  # strongest first
    measured: bool

    def summary(self) -> str:
        return self.evidence[0] if self.evidence else self.status


def _table_verdict(
    op: str,
    data_dependent: bool,
    forward_ops: list[str],
    tables: list[SupportTable],
    inside_note: str = "",
) -> tuple[OpStatus, list[str]] | None:
    for table in tables:
        replaced_by = [f for f in forward_ops if f in table.autograd_overrides]
        if replaced_by:
            return SUPPORTED, [
                f"not reached on this device: the backend's own gradient formula for "
                f"{', '.join(replaced_by)} replaces it ({table.citation()})"
            ]
    if is_cpu_kernel_choice(op):
        return UNKNOWN, [
            "the CPU's own kernel for a composite op (e.g. scaled_dot_product_attention): on "
            "the device the composite takes its own path, so this name's table entry does not "
            "apply; measure on the target"
        ]
    named = [(t, status) for t in tables if (status := t.status(op))]
    if not named:
        return None
    table, status = named[0]
    verdict = _TABLE_VERDICTS[status]
    detail = table.detail(op)
    words = f"{table.wording(status)} ({detail})" if detail else table.wording(status)
    evidence = [f"{words} ({table.citation()})"]
    if verdict == SUPPORTED and data_dependent and status == "lowered":
        # torch-xla's kernels for data-dependent shapes send the op to the CPU unless its
        # dynamic-shape experiments are on (measured for nonzero and masked_select on XLA:CPU).
        verdict = UNKNOWN
        evidence.insert(
            0,
            "the output shape depends on data: torch-xla has a kernel but runs such ops on the "
            "CPU unless dynamic shapes are enabled",
        )
    if verdict == SUPPORTED and inside_note and status == "decomposes":
        # No kernel of its own: the target runs the composite kernel whose dispatch the capture
        # saw, host reads and data-dependent sizes included. It runs, but not as one graph.
        verdict = UNKNOWN
        evidence.insert(
            0,
            f"runs as its decomposition here, which is not plainly supported: {inside_note}",
        )
    evidence += [f"also: {t.wording(s)} ({t.citation()})" for t, s in named[1:]]
    return verdict, evidence


def _inference_verdict(op: str, analysis: InferenceAnalysis) -> tuple[OpStatus, str] | None:
    packet = packet_name(op)
    for item in analysis.unsupported:
        if item.op in (op, packet):
            return FALLS_BACK, f"measured: {analysis.source} rejects it at {item.failure_at}"
    for name, count in analysis.supported.items():
        if name in (op, packet):
            return SUPPORTED, f"measured: {analysis.source} supports it ({count} occurrence(s))"
    return None


def _measured_verdict(op: str, measurement: TargetReading) -> tuple[OpStatus, str] | None:
    fell_back = measurement.fallback_calls(op)
    if fell_back:
        return FALLS_BACK, (
            f"measured on {measurement.target}: fell back to the CPU in {fell_back} call(s), "
            f"per {measurement.fallback_source}"
        )
    ran = measurement.executed.get(op, 0)
    if ran:
        return SUPPORTED, f"measured on {measurement.target}: ran {ran} call(s) with no fallback"
    if measurement.inference is not None:
        return _inference_verdict(op, measurement.inference)
    return None


def verdict(
    op: str,
    flavour: str,
    tables: list[SupportTable],
    measurement: TargetReading | None,
    *,
    data_dependent: bool = False,
    forward_ops: Sequence[str] = (),
    inside_note: str = "",
) -> OpVerdict:
    """The verdict for one op on one flavour, with its evidence, strongest first.
    `data_dependent`: its output size was found to follow tensor values (by its arguments or
    observed); `forward_ops`, for a backward op, the ops whose nodes ran it; `inside_note`, for
    a composite op, the host reads and data-dependent sizes its kernel was seen to dispatch
    (risks.composite_note)."""
    table = (
        _table_verdict(op, data_dependent, list(forward_ops), tables, inside_note)
        if tables
        else None
    )
    evidence = table[1] if table else []
    if not tables and flavour == FLAVOUR_NATIVE:
        evidence = [NO_NATIVE_TABLE]
        if inside_note:
            evidence.append(f"a target without its own kernel for it meets this: {inside_note}")
    if measurement is not None and measurement.flavour == flavour:
        measured = _measured_verdict(op, measurement)
        if measured is not None:
            status, text = measured
            if table is not None and table[0] != status:
                text += f"; this overrides the table's verdict ({table[0]})"
            return OpVerdict(status, [text, *evidence], True)
        evidence = [
            *evidence,
            f"not run as such on {measurement.target}: the device path replaced it "
            "(functionalization, or a device-specific kernel choice)",
        ]
    if table is None:
        return OpVerdict(UNKNOWN, evidence or ["no table names this op"], False)
    return OpVerdict(table[0], evidence, False)
