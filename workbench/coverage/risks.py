"""Risk flags for Neuron, read from PyTorch's own metadata about each captured op.

Rules (reference methods.md c10, neuron.md section 3): custom ops are those whose namespace a
fresh `import torch` does not register; host reads and random ops come from the op's
`torch.Tag`s; a data-dependent output size from the call's arguments (a boolean-mask index,
nonzero: see capture.data_dependent_size) or from sizes observed to change between the shape
check's steps, never from the `dynamic_output_shape` tag alone, which aten::index.Tensor carries
for integer indices too; dtype and layout risks from the tensors each op really saw. A composite
op is flagged for what its kernel dispatched (capture.py): host reads and data-dependent sizes
inside it are met by every target that runs that kernel.
"""

from __future__ import annotations

import functools
import json
import os
import re
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field

import torch

from workbench.coverage.capture import (
    INT32_MAX,
    PHASE_OPTIMIZER,
    UNINITIALIZED_OUTPUTS,
    CallSite,
    Capture,
    OpRecord,
    is_profiler_marker,
)
from workbench.coverage.shapes import ShapeChange
from workbench.coverage.support import is_cpu_kernel_choice

HIGH = "high"  # wrong results, a failure or a CPU round trip on every step
MEDIUM = "medium"  # a recompile, a graph cut, a sync or changed numerics
LOW = "low"  # worth knowing; rarely a blocker
SEVERITIES = (HIGH, MEDIUM, LOW)

CUSTOM_OP = "custom op"
HOST_SYNC = "host sync"
DYNAMIC_SHAPE = "dynamic output shape"
RANDOM = "random op"
FLOAT64 = "float64"
COMPLEX = "complex dtype"
FLOAT8 = "8/4-bit float dtype"
UNUSUAL_INT = "unsigned or sub-byte integer dtype"
INT64 = "int64"
INT64_RANGE = "int64 beyond int32 range"
SPARSE = "sparse or nested layout"
QUANTIZED = "quantized tensor"
SUBCLASS = "tensor subclass"
CPU_KERNEL = "CPU-specific kernel"

_TAG_RULES = (
    # (torch.Tag name, flag, severity, why)
    (
        "data_dependent_output",
        HOST_SYNC,
        MEDIUM,
        "reads a tensor value back to the host inside the step (.item(), float(), .tolist(), "
        "a Python if on a tensor): a device sync on native Neuron, a graph cut on XLA",
    ),
    (
        "nondeterministic_seeded",
        RANDOM,
        LOW,
        "may draw random numbers (tagged nondeterministic_seeded): results differ from the "
        "CPU's, and native RNG ops are reported to run on the CPU",
    ),
)

DYNAMIC_SHAPE_WHY = (
    "output shape depends on tensor values: no static graph; torch-xla runs it on the CPU and "
    "recompiles per shape, native torch.compile cannot capture it"
)
HOST_READ_WHY = "a device sync on native Neuron, a graph cut on XLA, each time the kernel runs"

# Why each dtype is a risk, by flag; _DTYPE_RULES says which dtype names raise which flag.
_DTYPE_WHY = {
    FLOAT64: "NeuronCores have no FP64: computed as float32 (AWS Neuron data types documentation)",
    COMPLEX: "no complex dtype on NeuronCores: native decomposes complex ops, XLA may fall back",
    FLOAT8: "float8 casts only under compile on native Neuron, and aten::_scaled_mm is missing",
    UNUSUAL_INT: "NeuronCores compute UINT8, INT32/UINT32: other integer widths are converted "
    "or rejected",
    INT64: "int64 is downcast to int32 by default (no native INT64 on NeuronCore-v2); the "
    "values were not read here, so check they fit int32",
}
_DTYPE_RULES = (
    # (dtype name pattern, flag, severity): the first that matches a dtype is its flag
    (re.compile(r"float64$"), FLOAT64, MEDIUM),
    (re.compile(r"complex"), COMPLEX, MEDIUM),
    (re.compile(r"float8|float4"), FLOAT8, MEDIUM),
    (re.compile(r"^(uint(16|32|64)|u?int[1-7]|bits\w*)$"), UNUSUAL_INT, MEDIUM),
    (re.compile(r"int64$"), INT64, LOW),
)


@dataclass(frozen=True)
class RiskFlag:
    """One risk on one op: what, how bad, why, and where the workload first hit it."""

    kind: str
    severity: str
    op: str
    detail: str
    site: CallSite | None
    calls: int


_NAMESPACES_SCRIPT = (
    "import json, torch; "
    "print(json.dumps(sorted({n.split('::')[0] for n in torch._C._dispatch_get_all_op_names()})))"
)
_pending_namespaces: subprocess.Popen[str] | None = None


def prefetch_builtin_namespaces() -> None:
    """Start builtin_namespaces' interpreter now, so its `import torch` (seconds) runs while
    this process captures the step, instead of after it."""
    global _pending_namespaces
    if _pending_namespaces is None and builtin_namespaces.cache_info().currsize == 0:
        _pending_namespaces = _start_namespaces_process()


def _start_namespaces_process() -> subprocess.Popen[str]:
    env = {**os.environ, "TORCH_DEVICE_BACKEND_AUTOLOAD": "0"}
    return subprocess.Popen(
        [sys.executable, "-c", _NAMESPACES_SCRIPT],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


@functools.cache
def builtin_namespaces() -> frozenset[str]:
    """Operator namespaces a fresh `import torch` registers (aten, prims, quantized, ...).

    Read from a new interpreter, so extensions this process already loaded do not count, with
    device-backend autoloading off, so torch-neuronx's own ops count as custom too.
    """
    global _pending_namespaces
    process, _pending_namespaces = _pending_namespaces or _start_namespaces_process(), None
    out, err = process.communicate()
    if process.returncode != 0:
        raise subprocess.CalledProcessError(process.returncode, process.args, out, err)
    return frozenset(json.loads(out.strip().splitlines()[-1]))


def custom_op_origin(op: str) -> str:
    """Where a custom op's schema was registered: a Python file (torch.library) or compiled
    code (a C++/CUDA extension), from the dispatcher's own record."""
    found = re.search(r"^debug: registered at (\S+)", torch._C._dispatch_dump(op), re.M)
    if found is None:
        return "registration unknown"
    where = found.group(1)
    path = where.rsplit(":", 1)[0]
    if path.endswith(".py"):
        return f"defined in Python (torch.library, {where})"
    return f"compiled extension (registered at {where})"


def _counts(inside: dict[str, int], names: list[str]) -> str:
    return ", ".join(f"{inside[name]} {name}" for name in names)


def composite_note(record: OpRecord, change: ShapeChange | None = None) -> str:
    """What a composite op's kernel dispatched that a target running that kernel meets: host
    reads and sizes that follow the data, with the dispatch observed under it; "" when it
    dispatched nothing of the kind."""
    if not record.composite_kernel or not (
        record.inside_host_reads or record.inside_data_dependent or change is not None
    ):
        return ""
    ranked = sorted(record.inside, key=lambda name: -record.inside[name])
    parts = [
        f"its {record.composite_kernel} kernel (what a backend without a kernel of its own "
        f"runs) dispatched {_counts(record.inside, ranked[:6])} in this step"
    ]
    if record.inside_host_reads:
        parts.append(f"{record.inside_host_reads} of those read a value back to the host")
    if record.inside_data_dependent:
        parts.append(f"{record.inside_data_dependent} made a data-dependent size")
    if change is not None:
        parts.append(
            f"sizes inside it follow the data ({change.op}: {change.reference} at the "
            f"reference, {change.variant} at {change.variant_label})"
        )
    return "; ".join(parts)


@dataclass
class _OpFlags:
    """The flags of one op as its rules find them; a flag's site and calls default to the op's
    first site and all its calls."""

    record: OpRecord
    flags: list[RiskFlag] = field(default_factory=list)

    def add(
        self, kind: str, severity: str, detail: str, site: CallSite | None = None, count: int = 0
    ) -> None:
        record = self.record
        where = site or record.first_site
        self.flags.append(
            RiskFlag(kind, severity, record.op, detail, where, count or record.total_calls)
        )


def op_flags(
    record: OpRecord, builtin: frozenset[str], change: ShapeChange | None = None
) -> list[RiskFlag]:
    """Every risk one captured op carries; `change`: the first change of its sizes (or, for a
    composite, of sizes inside it) the shape check could not explain by batch or sequence."""
    found = _OpFlags(record)
    _origin_flags(found, builtin)
    _shape_flags(found, change)
    _dtype_flags(found)
    _tensor_flags(found)
    return found.flags


def _origin_flags(found: _OpFlags, builtin: frozenset[str]) -> None:
    """Where the op comes from and what its tags say: a custom namespace, host reads, RNG."""
    record = found.record
    if record.namespace not in builtin:
        found.add(
            CUSTOM_OP,
            HIGH,
            f"namespace {record.namespace!r} is not PyTorch's, {custom_op_origin(record.op)}: "
            "no Neuron kernel exists unless you write one (NKI)",
        )
    for tag, kind, severity, why in _TAG_RULES:
        if record.has_tag(tag):
            # The optimizer's own reads are its note (optimizer_sync_note), not the model's.
            model = record.total_calls - optimizer_reads(record)
            found.add(kind, severity, why, count=model if kind == HOST_SYNC else 0)


def _shape_flags(found: _OpFlags, change: ShapeChange | None) -> None:
    """Sizes that follow the data, in the op itself or, for a composite, inside its kernel."""
    record = found.record
    if record.data_dependent_calls:
        found.add(
            DYNAMIC_SHAPE,
            HIGH,
            f"{record.data_dependence}: {DYNAMIC_SHAPE_WHY}",
            count=record.data_dependent_calls,
        )
    elif change is not None and record.has_tag("dynamic_output_shape"):
        found.add(
            DYNAMIC_SHAPE,
            HIGH,
            f"its output size changed between steps otherwise than the {change.variant_label} "
            f"explains ({change.reference} -> {change.variant}): {DYNAMIC_SHAPE_WHY}",
        )
    note = composite_note(record, change)
    if record.inside_host_reads:
        found.add(
            HOST_SYNC,
            MEDIUM,
            f"{note}: {HOST_READ_WHY} on a target without its own kernel for {record.op}",
            count=record.inside_host_reads,
        )
    if record.inside_data_dependent or (change is not None and record.composite_kernel):
        found.add(
            DYNAMIC_SHAPE,
            HIGH,
            f"{note}: on a target without its own kernel for {record.op}, "
            "each new size is a new graph to compile",
            count=record.inside_data_dependent or record.total_calls,
        )


def _dtype_flags(found: _OpFlags) -> None:
    """The dtypes the op really saw, and int64 values beyond int32's range."""
    record = found.record
    for dtype in record.dtypes:
        for pattern, kind, severity in _DTYPE_RULES:
            if pattern.search(dtype):
                # int64 values read and found within int32 (class targets, token and index
                # tensors) survive the downcast unchanged: nothing to act on. An allocation
                # holds no values yet: the ops that fill and use it are read instead.
                fits = kind == INT64 and (
                    record.int64_max_abs is not None or record.op in UNINITIALIZED_OUTPUTS
                )
                if not fits:
                    why = _DTYPE_WHY[kind]
                    found.add(kind, severity, f"{dtype}: {why}", record.dtype_sites.get(dtype))
                break
    if record.int64_max_abs is not None and record.int64_max_abs > INT32_MAX:
        found.add(
            INT64_RANGE,
            HIGH,
            f"int64 values up to {record.int64_max_abs:,} do not fit int32: wrong results after "
            "the default int64 -> int32 downcast",
            record.int64_beyond_int32_site,
        )


def _tensor_flags(found: _OpFlags) -> None:
    """What kind of tensors the op saw (layout, quantized, subclass) and CPU-only kernel names."""
    record = found.record
    odd_layouts = [layout for layout in record.layouts if layout != "strided"]
    if odd_layouts:
        found.add(
            SPARSE,
            HIGH,
            f"{', '.join(odd_layouts)} layout: torch-xla raises for sparse tensors (no "
            "SparseXLA kernels); no Neuron statement found, assume unsupported",
        )
    if record.quantized:
        found.add(QUANTIZED, HIGH, "quantized tensors: TorchNeuron lists quantized variants as N")
    if record.tensor_types:
        found.add(
            SUBCLASS,
            MEDIUM,
            f"tensor subclass {', '.join(record.tensor_types)}: its own dispatch runs on top of "
            "the device's; check it supports the Neuron device",
        )
    if is_cpu_kernel_choice(record.op):
        found.add(
            CPU_KERNEL,
            LOW,
            "the CPU's own kernel choice for a composite op (e.g. scaled_dot_product_attention): "
            "on a Neuron device the composite picks its own kernel, so this name does not run",
        )


def _optimizer_site(site: CallSite) -> bool:
    return not site.in_user_code and "optim" in site.path


def optimizer_reads(record: OpRecord) -> int:
    """Host reads torch's optimizer code made in the optimizer step, counted at their call
    sites: e.g. Adam(W)'s `_get_value` reading its step counter when capturable=False. Every
    model trained with that optimizer shows them, so they are the optimizer's note, not the
    model's risk; the same op's reads in the model's code stay the model's."""
    if not record.has_tag("data_dependent_output") or PHASE_OPTIMIZER not in record.calls:
        return 0
    return sum(count.calls for count in record.sites if _optimizer_site(count.site))


def is_optimizer_internal_sync(record: OpRecord) -> bool:
    """Every call of this host read is the optimizer's own (see `optimizer_reads`)."""
    reads = optimizer_reads(record)
    return reads > 0 and reads == record.total_calls


def optimizer_sync_note(capture: Capture) -> str | None:
    """One note, with the fix, for the optimizer's own host reads; None when it makes none."""
    counted = [(r, reads) for r in capture.ops.values() if (reads := optimizer_reads(r))]
    if not counted:
        return None
    calls = sum(reads for _, reads in counted)
    sites = [c.site for r, _ in counted for c in r.sites if _optimizer_site(c.site)]
    where = sites[0].short() if sites else "torch.optim"
    return (
        f"The optimizer reads {calls} value(s) back to the host in each step ({where}): with "
        "capturable=False its step counters are read on the host. Pass capturable=True to keep "
        "them on the device, or foreach=True / fused=True where the target supports them. This "
        "comes from torch.optim, not from the model, and is not counted as a risk flag."
    )


def capture_flags(
    capture: Capture, changes: Mapping[str, ShapeChange] | None = None
) -> list[RiskFlag]:
    """All flags of a capture, most severe first, then by calls; profiler bookkeeping and the
    optimizer's own host reads (see `optimizer_sync_note`) are left out. `changes`: per op (a
    composite for the ops inside it), the first size the shape check could not explain."""
    builtin = builtin_namespaces()
    changes = changes or {}
    flags = [
        f
        for record in capture.ops.values()
        if not is_profiler_marker(record.op)
        for f in op_flags(record, builtin, changes.get(record.op))
        if not (f.kind == HOST_SYNC and is_optimizer_internal_sync(record))
    ]
    flags.sort(key=lambda f: (SEVERITIES.index(f.severity), -f.calls, f.op))
    return flags
