"""A TorchNeuron op table from a notebook 02 run measured on a Trn2/Trn3 (target=neuron).

The run's result file holds the ops that executed on the device and the ops that fell back to
the CPU (torch_neuronx.get_executed_ops / get_fallback_ops around one training step). Saved as a
table, that measurement answers later runs on a laptop, for the ops this workload ran.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

from workbench.coverage.native_table import (
    STATUS_CPU_FALLBACK,
    STATUS_SUPPORTED,
    ApiRow,
    NativeTable,
    OpEntry,
    add_entry,
    now_utc,
    sha256_of,
    write_table,
)
from workbench.errors import BadInput
from workbench.safe_load import RESULT_MAX_BYTES, load_json, read_bounded_bytes
from workbench.targets.detect import FLAVOUR_NATIVE

COVERAGE_RESULT = "02_op_coverage.json"
COVERAGE_NOTEBOOK = "02_op_coverage"


def _packet(op: str) -> str:
    return op.split(".", 1)[0]


def _read_result(path: Path) -> tuple[dict[str, Any], bytes, Path]:
    if path.is_dir():
        path = path / COVERAGE_RESULT
    raw = read_bounded_bytes(path, "Result file", RESULT_MAX_BYTES)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise BadInput(f"{path} is not a JSON result file of notebook 02.") from None
    record = load_json(text, f"Result file {path}")
    if not isinstance(record, dict) or record.get("notebook") != COVERAGE_NOTEBOOK:
        raise BadInput(f"{path} is not a result of notebook 02 ({COVERAGE_RESULT}).")
    return record, raw, path


def _measurement(record: dict[str, Any], path: Path) -> dict[str, Any]:
    data = record.get("data")
    measurement = data.get("measurement") if isinstance(data, dict) else None
    if not isinstance(measurement, dict):
        raise BadInput(
            f"{path} holds no measurement on a Neuron target; run notebook 02 with "
            "target=neuron on a Trn2/Trn3, then save its result."
        )
    if measurement.get("flavour") != FLAVOUR_NATIVE:
        raise BadInput(
            f"{path} was measured on the {measurement.get('flavour')!r} flavour, not native "
            "TorchNeuron; only a target=neuron run makes a TorchNeuron table."
        )
    if not isinstance(measurement.get("executed"), dict):
        raise BadInput(
            f"{path} lists no executed ops per op (a result from before they were recorded); "
            "rerun notebook 02 with target=neuron."
        )
    return measurement


def _mapping(record: dict[str, Any], key: str) -> dict[str, Any]:
    value = record.get(key)
    return value if isinstance(value, dict) else {}


def _where(record: dict[str, Any]) -> str:
    """'trn2.3xlarge, target neuron, workload seed-mlp' from the result file's header."""
    target, workload = _mapping(record, "target"), _mapping(record, "workload")
    parts = [
        str(target.get("device_name") or "an unnamed device"),
        f"target {target.get('name', 'neuron')}",
    ]
    if workload.get("name"):
        parts.append(f"workload {workload['name']}")
    return ", ".join(parts)


def _recorded_release(record: dict[str, Any]) -> str | None:
    target, versions = _mapping(record, "target"), _mapping(record, "versions")
    for value in (target.get("torch_neuronx"), versions.get("torch-neuronx")):
        if isinstance(value, str) and value and value != "not installed":
            return value
    return None


def measured_table(
    record: dict[str, Any], raw: bytes, path: Path, release: str | None = None
) -> NativeTable:
    """The table a measured 02 result makes: ops that executed without falling back are
    supported, ops that fell back are cpu_fallback."""
    measurement = _measurement(record, path)
    tracked = measurement.get("tracked_executed")
    # torch_neuronx's own record of what ran, where the run has it; else the dispatch capture
    # of the same step on the device.
    executed = Counter(tracked if isinstance(tracked, dict) else measurement["executed"])
    executed_source = (
        "torch_neuronx.get_executed_ops()"
        if isinstance(tracked, dict)
        else "the dispatch capture of the step on the device"
    )
    fallbacks = Counter(measurement.get("fallbacks") or {})
    release = release or _recorded_release(record)
    if not release:
        raise BadInput(f"{path} records no torch-neuronx version; give the release with --release.")
    where = _where(record)
    ops: dict[str, OpEntry] = {}
    for op, calls in sorted(fallbacks.items()):
        row = ApiRow(op, f"fell back to the CPU in {calls} call(s)", "", where)
        add_entry(ops, OpEntry(op, STATUS_CPU_FALLBACK, [], "", [row]))
    for op, calls in sorted(executed.items()):
        if op in fallbacks or _packet(op) in fallbacks or "::" not in op:
            continue
        row = ApiRow(op, f"ran on the device in {calls} call(s)", "", where)
        add_entry(ops, OpEntry(op, STATUS_SUPPORTED, [], "native", [row]))
    return NativeTable(
        release=release,
        source=f"measured on {where}",
        source_file=path.name,
        source_sha256=sha256_of(raw),
        imported_on=now_utc(),
        method=(
            f"one training step measured with torch_neuronx op tracking: executed ops from "
            f"{executed_source}, fallbacks from torch_neuronx.get_fallback_ops(); names only "
            "the ops this workload ran"
        ),
        ops=ops,
    )


def save_measured(
    path: Path, *, release: str | None = None, out: Path | None = None
) -> NativeTable:
    """Read a measured 02 result and write its versioned TorchNeuron table."""
    path = Path(path)
    record, raw, path = _read_result(path)
    table = measured_table(record, raw, path, release)
    write_table(table, out)
    return table
