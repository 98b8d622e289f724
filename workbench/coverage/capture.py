"""Dispatch-level capture of every ATen op one training step really runs.

A TorchDispatchMode sees each op below autograd, after CompositeImplicitAutograd decomposition,
for real executions: the forward (model and loss), the backward that `loss.backward()` runs, and
the optimizer step (reference methods.md c1). Per op it keeps the calls per phase, dtypes, shapes,
layouts, devices, PyTorch's own tags, and where the workload's code made the first call.

Where an op came from is the first frame on the Python stack outside torch and outside the
workbench machinery. Backward ops run from the autograd engine, with no workload frame on the
stack, so they get the site of the forward call that created their autograd node: every forward
op notes the sequence number the autograd engine gives the next node, and a backward op looks up
the sequence number of the node it runs in (`torch._C._current_autograd_node()`).

A composite op (one whose only kernel is CompositeExplicitAutograd, e.g. aten::_grouped_mm) runs
the same C++ decomposition on every backend without a kernel of its own, and that decomposition
dispatches ops of its own: host reads, slices, per-group matmuls. The mode sees them by running
the composite kernel with itself active again; they are kept apart from the op list (the model
dispatched the composite, not them), on the composite's record (`inside`) and in the trace
marked with the composite, so that host reads and shapes are counted where a target without the
kernel meets them.

Whether an op's output size depends on tensor values is read from the call's arguments, not from
the op's `dynamic_output_shape` tag: aten::index.Tensor with integer indices gathers a size its
index tensors fix, with a boolean mask it keeps as many values as the mask has True entries.
"""

from __future__ import annotations

import os
import sys
import sysconfig
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from time import perf_counter
from types import CodeType, FrameType
from typing import Any, NamedTuple

import torch
from torch._C import DispatchKey
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves, tree_map

import workbench
from workbench.errors import FrameRef, describe_error, is_user_code, short_path
from workbench.workload import CONTRACT_CODE, Batch, Workload

PHASE_SETUP = "setup"  # building the model, the optimizer and the batch (failures only)
PHASE_FORWARD = "forward"  # model forward and loss
PHASE_BACKWARD = "backward"
PHASE_OPTIMIZER = "optimizer"
PHASES = (PHASE_FORWARD, PHASE_BACKWARD, PHASE_OPTIMIZER)

# The profiler's record_function markers (the optimizer's step wraps itself in one): they
# dispatch like ops but compute nothing, so they are counted apart from the ATen ops.
BOOKKEEPING_NAMESPACES = frozenset({"profiler"})
# Profiler ranges by the names profiler tables give them ("Optimizer.step#AdamW.step",
# "ProfilerStep#3"): labels of a stretch of time, never an operator.
_MARKER_LABEL_PREFIXES = ("ProfilerStep", "Optimizer.")


def is_profiler_marker(name: str) -> bool:
    """True for a profiler marker, false for an operator: a `profiler::` op, or a range's label
    (no operator namespace, a `#` or a profiler prefix)."""
    if "::" in name:
        return name.split("::", 1)[0] in BOOKKEEPING_NAMESPACES
    return "#" in name or name.startswith(_MARKER_LABEL_PREFIXES)


MAX_SHAPES_KEPT = 6  # distinct input-shape signatures listed per op (all are counted)
MAX_SITES_KEPT = 5  # distinct call sites listed per op (all calls are counted)
INT32_MAX = 2**31 - 1

_TORCH_DIR = str(Path(torch.__file__).resolve().parent) + os.sep
_WORKBENCH_DIR = str(Path(workbench.__file__).resolve().parent) + os.sep
_STDLIB_DIR = str(Path(sysconfig.get_paths()["stdlib"]).resolve()) + os.sep

# Torch's own dispatch plumbing between an API call and the mode: never the site of a call.
_TORCH_PLUMBING = tuple(
    _TORCH_DIR + part
    for part in (
        "_ops.py",
        "_compile.py",
        "overrides.py",
        "utils/_python_dispatch.py",
        "utils/_contextlib.py",
        "_dynamo" + os.sep,
    )
)

# Frame kinds, decided once per code object.
_USER, _TORCH, _PLUMBING, _MACHINERY, _PASS_THROUGH = (
    "user",
    "torch",
    "plumbing",
    "machinery",
    "pass-through",
)


def _frame_kind(filename: str) -> str:
    if is_user_code(filename):
        return _USER
    if filename.startswith("<"):
        return _PASS_THROUGH  # <frozen ...>, <string>: generated, not anyone's source
    path = os.path.realpath(filename)
    if path.startswith(_TORCH_PLUMBING):
        return _PLUMBING
    if path.startswith(_WORKBENCH_DIR):
        return _MACHINERY
    if path.startswith(_STDLIB_DIR) and "site-packages" not in path:
        return _PASS_THROUGH  # contextlib, functools: between the op and its caller
    return _TORCH  # torch, or a torch* sibling package such as torch_xla


_KIND_BY_CODE: dict[CodeType, str] = dict.fromkeys(CONTRACT_CODE, _PASS_THROUGH)


def _code_kind(code: CodeType) -> str:
    kind = _KIND_BY_CODE.get(code)
    if kind is None:
        kind = _KIND_BY_CODE[code] = _frame_kind(code.co_filename)
    return kind


@dataclass(frozen=True)
class CallSite:
    """Where an op was called: the first workload frame, else the torch code that ran it (an
    nn.Sequential's layers, the loss function, the optimizer), plus the innermost nn.Module."""

    path: str
    line: int
    function: str
    in_user_code: bool  # False: no workload frame on the stack; path is torch's
    module: str = ""  # innermost running module, e.g. "blocks.0.attn.qkv (Linear)"
    via: str = ""  # how a backward op maps to its forward call, e.g. "backward of AddmmBackward0"

    @classmethod
    def at(cls, frame: FrameRef) -> CallSite:
        return cls(frame.path, frame.line, frame.function, frame.in_user_code)

    def short(self) -> str:
        where = f"{short_path(self.path)}:{self.line} in {self.function}"
        if self.module:
            where = f"{where} [{self.module}]" if self.in_user_code else f"{self.module}: {where}"
        return f"{where} ({self.via})" if self.via else where


# (code, instruction offset, module) -> its site; and each site -> itself, so that two
# instructions on one line share one object (sites are then told apart by identity).
SiteCache = dict[object, CallSite]


def locate_call(
    frame: FrameType | None, module: str = "", cache: SiteCache | None = None
) -> tuple[CallSite | None, bool]:
    """Where an op was called from `frame` outward, and whether the model's own code called it
    directly: no torch library frame (an nn.Module's forward, torch.optim) stands between the
    op and the first workload frame.

    The site is the first workload frame; without one (the workbench machinery called torch
    directly), the innermost torch frame that is not dispatch plumbing, e.g.
    torch/optim/adam.py in _single_tensor_adam for the optimizer step. With `cache`, one
    CallSite is made per instruction and module, and reused."""
    innermost_torch: FrameType | None = None
    found: FrameType | None = None
    known = _KIND_BY_CODE.get  # looked up inline: this loop runs for every frame of every op
    while frame is not None:
        kind = known(frame.f_code) or _code_kind(frame.f_code)
        if kind is _USER:
            found = frame
            break
        if kind is _MACHINERY:
            break
        if kind is _TORCH and innermost_torch is None:
            innermost_torch = frame
        frame = frame.f_back
    direct = found is not None and innermost_torch is None
    found = found or innermost_torch
    if found is None:
        return None, False
    code = found.f_code
    # Keyed by the instruction offset, not the line: f_lineno decodes the code object's line
    # table from its start on every read, which costs microseconds in a long function.
    key = (code, found.f_lasti, module)
    site = cache.get(key) if cache is not None else None
    if site is None:
        in_user_code = found is not innermost_torch
        site = CallSite(code.co_filename, found.f_lineno, code.co_name, in_user_code, module)
        if cache is not None:
            site = cache[key] = cache.setdefault(site, site)
    return site, direct


@dataclass
class SiteCount:
    site: CallSite
    calls: int


@dataclass
class OpRecord:
    """Everything captured about one op overload, e.g. aten::addmm or aten::add.Tensor."""

    op: str
    namespace: str
    tags: list[str]  # torch.Tag names PyTorch attaches to the overload
    calls: dict[str, int] = field(default_factory=dict)  # phase -> calls
    dtypes: list[str] = field(default_factory=list)  # of tensor inputs and outputs
    layouts: list[str] = field(default_factory=list)
    devices: list[str] = field(default_factory=list)
    tensor_types: list[str] = field(default_factory=list)  # subclasses other than Tensor
    quantized: bool = False
    shapes: list[str] = field(default_factory=list)  # first MAX_SHAPES_KEPT input signatures
    distinct_shapes: int = 0
    first_site: CallSite | None = None
    sites: list[SiteCount] = field(default_factory=list)
    forward_ops: list[str] = field(default_factory=list)  # backward ops: whose node ran them
    dtype_sites: dict[str, CallSite | None] = field(default_factory=dict)  # first call per dtype
    int64_max_abs: int | None = None  # largest |value| in int64 tensors (checked on CPU only)
    int64_beyond_int32_site: CallSite | None = None
    # Calls whose output size follows tensor values, by their arguments (a boolean-mask index,
    # nonzero), and the first reason why; the op's tag alone says only that it may.
    data_dependent_calls: int = 0
    data_dependence: str = ""
    # A composite op: the kernel it ran through (CompositeExplicitAutograd: no kernel of its own
    # for this device), the ops that kernel dispatched (any depth) with their calls, and how
    # many of those read a value back to the host or made a data-dependent size.
    composite_kernel: str = ""
    inside: dict[str, int] = field(default_factory=dict)
    inside_host_reads: int = 0
    inside_data_dependent: int = 0

    @property
    def total_calls(self) -> int:
        return sum(self.calls.values())

    def has_tag(self, name: str) -> bool:
        return name in self.tags


class TraceEntry(NamedTuple):
    """One call, in order: what shape stability compares between batch sizes. A named tuple,
    not a dataclass: one is made for every op the step runs."""

    op: str  # an operator, or "module NAME (Class)" for a module's boundary
    phase: str
    shapes: tuple[tuple[int, ...], ...]  # tensor inputs, then tensor outputs (torch.Size)
    site: CallSite | None
    # The model's own code made this call: an op its code called directly, or a module's
    # inputs and outputs. False for what torch's library code ran inside a module or function
    # (a kernel's workspace, the autograd engine's backward ops, the optimizer's step).
    model_code: bool = True
    # The composite op whose kernel dispatched this call ("" for the ops the step dispatched):
    # its decomposition is the same on every backend without a kernel of its own, so its calls
    # count as the composite's call does.
    inside: str = ""


@dataclass
class CaptureFailure:
    """The step raised: where, in which phase, and in which op if it was inside one."""

    phase: str
    error_type: str
    message: str
    site: CallSite | None
    op: str | None

    def summary(self) -> str:
        where = f" at {self.site.short()}" if self.site else ""
        inside = f" inside {self.op}" if self.op else ""
        return f"{self.phase} raised {self.error_type}{inside}{where}: {self.message}"


@dataclass
class Capture:
    """The ops of one training step at one batch size (and sequence length)."""

    device: str
    batch_size: int
    sequence_length: int | None
    ops: dict[str, OpRecord]
    trace: list[TraceEntry] = field(repr=False)
    failure: CaptureFailure | None
    seconds: float
    # Recurrent modules (nn.RNNBase: LSTM, GRU, RNN) that ran, as "name (Class)": their
    # recurrence runs inside one kernel here, and is stepped per position without one.
    recurrent_modules: list[str] = field(default_factory=list)

    @property
    def label(self) -> str:
        seq = f", sequence {self.sequence_length}" if self.sequence_length else ""
        return f"batch {self.batch_size}{seq}"

    def phase_totals(self) -> dict[str, dict[str, int]]:
        """Distinct ops and calls per phase; profiler markers are not ops and not counted."""
        totals = {}
        for phase in PHASES:
            calls = [
                r.calls[phase]
                for r in self.ops.values()
                if phase in r.calls and not is_profiler_marker(r.op)
            ]
            totals[phase] = {"ops": len(calls), "calls": sum(calls)}
        return totals


def op_name(func: Any) -> str:
    """The dispatcher's name for an overload: aten::addmm, aten::add.Tensor (as torch-xla's
    counters and the dispatcher's op list spell it)."""
    schema = getattr(func, "_schema", None)
    if schema is None:
        return str(func)
    return f"{schema.name}.{schema.overload_name}" if schema.overload_name else schema.name


def _tensors(values: Any) -> list[torch.Tensor]:
    """Tensors among op arguments or results: direct, or one level inside lists and tuples
    (aten::cat, the _foreach_ ops). A loop, not a generator: it runs on every op the capture
    sees."""
    found: list[torch.Tensor] = []
    for value in values:
        if isinstance(value, torch.Tensor):
            found.append(value)
        elif isinstance(value, (list, tuple)):
            found.extend([v for v in value if isinstance(v, torch.Tensor)])
    return found


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def shape_text(shapes: tuple[tuple[int, ...], ...]) -> str:
    return ", ".join("x".join(map(str, s)) if s else "scalar" for s in shapes) or "no tensors"


# Ops whose output size is a count over the data's values, whatever their arguments (the
# packet names of the overloads torch tags dynamic_output_shape).
_COUNTS_OF_VALUES = {
    "aten::nonzero": "as many rows as nonzero entries",
    "aten::argwhere": "as many rows as nonzero entries",
    "aten::masked_select": "as many values as the mask has True entries",
    "aten::_unique": "as many values as distinct ones",
    "aten::_unique2": "as many values as distinct ones",
    "aten::unique_dim": "as many slices as distinct ones",
    "aten::unique_consecutive": "as many values as runs of equal ones",
    "aten::unique_dim_consecutive": "as many slices as runs of equal ones",
    "aten::bincount": "as many bins as the largest value plus one",
    "aten::_ctc_loss": "a size read from the target lengths' values",
    "aten::linalg_lstsq": "sizes that follow the solver's rank",
}
_MASK_DTYPES = (torch.bool, torch.uint8)


def data_dependent_size(name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> str | None:
    """Why this call's output size follows tensor values, read from its arguments; None when
    they fix it (an integer index, repeat_interleave given its output_size, one_hot given its
    class count)."""
    packet = name.split(".", 1)[0]
    reason = _COUNTS_OF_VALUES.get(packet)
    if reason is not None:
        return f"{packet}: {reason}"
    if packet == "aten::index":
        indices = args[1] if len(args) > 1 else kwargs.get("indices", ())
        if any(isinstance(i, torch.Tensor) and i.dtype in _MASK_DTYPES for i in indices):
            return "boolean-mask index: keeps as many values as the mask has True entries"
        return None
    if packet == "aten::repeat_interleave":
        if kwargs.get("output_size") is None:
            return "repeat_interleave with repeats in a tensor: the output size is their sum"
        return None
    if packet == "aten::one_hot":
        classes = args[1] if len(args) > 1 else kwargs.get("num_classes", -1)
        if classes == -1:
            return "one_hot without num_classes: as many classes as the largest value plus one"
        return None
    return None


_BACKEND_KEYS = {"cpu": "CPU", "cuda": "CUDA", "xla": "XLA", "meta": "Meta"}
_COMPOSITE_KEYS = (
    DispatchKey.CompositeExplicitAutograd,
    DispatchKey.CompositeExplicitAutogradNonFunctional,
)


def composite_kernel(name: str, device_type: str) -> DispatchKey | None:
    """The composite kernel `name` runs through on this device type: where the device has no
    kernel of its own for it, the CompositeExplicitAutograd one (the same for every such
    backend); None where it has its own, or for a device this cannot tell."""
    key = _BACKEND_KEYS.get(device_type)
    if key is None and device_type == torch._C._get_privateuse1_backend_name():
        key = "PrivateUse1"
    if key is None or torch._C._dispatch_has_kernel_for_dispatch_key(name, key):
        return None
    for composite in _COMPOSITE_KEYS:
        if torch._C._dispatch_has_kernel_for_dispatch_key(name, composite.name):
            return composite
    return None


# Ops that allocate without writing: their int64 outputs hold whatever the memory held, which
# says nothing about the values the step computes (those are read where they are used).
UNINITIALIZED_OUTPUTS = frozenset(
    {
        "aten::empty.memory_format",
        "aten::empty_like",
        "aten::empty_strided",
        "aten::new_empty",
        "aten::new_empty_strided",
    }
)


def _int64_max_abs(tensor: torch.Tensor) -> int | None:
    if tensor.dtype != torch.int64 or tensor.device.type != "cpu" or tensor.numel() == 0:
        return None
    if tensor.layout != torch.strided:
        return None
    low, high = torch.aminmax(tensor)
    return max(abs(int(low)), abs(int(high)))


class OpCaptureMode(TorchDispatchMode):
    """Records every op dispatched while active; `phase` is set by the step driver."""

    def __init__(self, *, check_values: bool) -> None:
        super().__init__()
        # Reading int64 values needs the data on the host; on a lazy or remote device it would
        # force execution, so values are checked only for CPU tensors.
        self.check_values = check_values
        self.phase = PHASE_FORWARD
        self.ops: dict[str, OpRecord] = {}
        self.trace: list[TraceEntry] = []
        self.current_op: str | None = None  # the op whose kernel is running, for failures
        self.module_stack: list[str] = []  # running nn.Modules, innermost last
        self.recurrent_modules: list[str] = []  # nn.RNNBase modules that ran
        self._names: dict[Any, str] = {}
        # Keyed by id: every site comes from _locate, which makes one object per site (the
        # dataclass's own hash and == cost more than the rest of an op's bookkeeping).
        self._sites: dict[str, dict[int, SiteCount]] = {}
        self._shape_sets: dict[str, set[tuple[tuple[int, ...], ...]]] = {}
        self._tensor_kinds: dict[str, set[tuple[Any, ...]]] = {}
        self._node_origins: dict[int, tuple[CallSite, str]] = {}
        self._site_cache: SiteCache = {}
        self._via_sites: dict[tuple[int, str], CallSite] = {}  # (id(site), via) -> site with via
        self._get_sequence_nr: Callable[[], int] | None = getattr(
            torch._C._autograd, "_get_sequence_nr", None
        )
        # Composite kernels running, outermost first: (op, its site). Ops dispatched while one
        # runs belong to the outermost.
        self._composites: list[tuple[str, CallSite | None]] = []
        self._composite_keys: dict[tuple[Any, str], DispatchKey | None] = {}
        self._dynamic_tagged: dict[Any, bool] = {}

    def _composite_for(
        self, func: Any, name: str, inputs: list[torch.Tensor]
    ) -> DispatchKey | None:
        # A view's composite kernel only makes another view (as_strided): nothing a device
        # meets. A composite already running is not entered again: its kernel may call itself
        # (aten::detach does).
        if not inputs or func.is_view or any(name == c[0] for c in self._composites):
            return None
        device_type = inputs[0].device.type
        key = (func, device_type)
        if key not in self._composite_keys:
            self._composite_keys[key] = composite_kernel(name, device_type)
        return self._composite_keys[key]

    def _run(self, func: Any, composite: DispatchKey | None, args: Any, kwargs: Any) -> Any:
        """The op's kernel; a composite one with this mode active again, so that the ops its
        decomposition dispatches are seen."""
        if composite is None:
            return func(*args, **kwargs)
        with self:
            return func._op_dk(composite, *args, **kwargs)

    def _data_dependence(self, func: Any, name: str, args: Any, kwargs: Any) -> str | None:
        tagged = self._dynamic_tagged.get(func)
        if tagged is None:
            tags = getattr(func, "tags", ())
            tagged = self._dynamic_tagged[func] = torch.Tag.dynamic_output_shape in tags
        return data_dependent_size(name, args, kwargs) if tagged else None

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN204
        kwargs = kwargs or {}
        name = self._names.get(func)
        if name is None:
            name = self._names[func] = op_name(func)
        inputs = _tensors(args)
        if kwargs:
            inputs += _tensors(kwargs.values())
        if self._composites:
            return self._dispatch_inside(func, name, inputs, args, kwargs)
        # f_back is None when the op comes straight from C++ on a thread with no Python
        # caller: the autograd engine runs a non-CPU device's backward on a worker thread.
        site, forward_op, direct = self._locate(sys._getframe().f_back, name)
        record = self._record_for(func, name, site)
        composite = self._composite_for(func, name, inputs)
        self.current_op = name
        if composite is None:
            result = func(*args, **kwargs)
        else:
            record.composite_kernel = composite.name
            self._composites.append((name, site))
            try:
                result = self._run(func, composite, args, kwargs)
            finally:
                self._composites.pop()
        self.current_op = None
        reason = self._data_dependence(func, name, args, kwargs)
        if reason is not None:
            record.data_dependent_calls += 1
            record.data_dependence = record.data_dependence or reason
        outputs = _tensors(result if isinstance(result, (list, tuple)) else (result,))
        self._record(record, name, site, inputs, outputs, direct)
        if forward_op is not None and forward_op not in record.forward_ops:
            record.forward_ops.append(forward_op)
        return result

    def _dispatch_inside(
        self, func: Any, name: str, inputs: list[torch.Tensor], args: Any, kwargs: Any
    ) -> Any:
        """An op a composite kernel dispatched: counted on the outermost composite's record and
        traced under its name, at its site."""
        outer, site = self._composites[0]
        record = self.ops[outer]
        record.inside[name] = record.inside.get(name, 0) + 1
        if torch.Tag.data_dependent_output in getattr(func, "tags", ()):
            record.inside_host_reads += 1
        if self._data_dependence(func, name, args, kwargs) is not None:
            record.inside_data_dependent += 1
        composite = self._composite_for(func, name, inputs)
        if composite is not None:
            self._composites.append((name, site))
        try:
            result = self._run(func, composite, args, kwargs)
        finally:
            if composite is not None:
                self._composites.pop()
        outputs = _tensors(result if isinstance(result, (list, tuple)) else (result,))
        shapes = tuple([t.shape for t in inputs]) + tuple([t.shape for t in outputs])
        # Compared in the forward, whoever called the composite (a torch wrapper such as
        # F.grouped_mm too): its decomposition is no kernel's private choice. The backward's
        # follow from the forward's, as the autograd engine's own ops do.
        compared = self.phase == PHASE_FORWARD
        self.trace.append(TraceEntry(name, self.phase, shapes, site, compared, outer))
        return result

    def _locate(
        self, caller: FrameType | None, name: str
    ) -> tuple[CallSite | None, str | None, bool]:
        """The op's call site, for a backward op the forward op whose node it runs in, and
        whether the model's own code called the op directly (see `locate_call`)."""
        module = self.module_stack[-1] if self.module_stack else ""
        site, direct = locate_call(caller, module, self._site_cache)
        if self.phase == PHASE_BACKWARD and (site is None or not site.in_user_code):
            # A custom autograd.Function's backward in workload code keeps its own frame;
            # everything else runs from the engine and maps to its forward call.
            node = torch._C._current_autograd_node()
            if node is not None:
                origin = self._node_origins.get(node._sequence_nr())
                node_name = type(node).__name__
                if origin is not None:
                    return self._via(origin[0], f"backward of {node_name}"), origin[1], False
                if site is not None:
                    return self._via(site, node_name), None, False
        if self.phase == PHASE_FORWARD and site is not None and self._get_sequence_nr:
            # The autograd node of this op (if it needs one) was created just before its
            # kernel ran and took the sequence number just below the current one.
            self._node_origins.setdefault(self._get_sequence_nr() - 1, (site, name))
        return site, None, direct

    def _via(self, site: CallSite, via: str) -> CallSite:
        """`site` with how a backward op reached it: made once per site and node type."""
        key = (id(site), via)
        found = self._via_sites.get(key)
        if found is None:
            found = self._via_sites[key] = replace(site, via=via)
        return found

    def _record_for(self, func: Any, name: str, site: CallSite | None) -> OpRecord:
        record = self.ops.get(name)
        if record is None:
            record = self.ops[name] = OpRecord(
                op=name,
                namespace=name.split("::", 1)[0],
                tags=sorted(tag.name for tag in getattr(func, "tags", ())),
                first_site=site,
            )
            self._sites[name] = {}
            self._shape_sets[name] = set()
            self._tensor_kinds[name] = set()
        return record

    def _record(
        self,
        record: OpRecord,
        name: str,
        site: CallSite | None,
        inputs: list[torch.Tensor],
        outputs: list[torch.Tensor],
        direct: bool,
    ) -> None:
        record.calls[self.phase] = record.calls.get(self.phase, 0) + 1

        # torch.Size is a tuple: kept as it is, it hashes and compares like one.
        input_shapes = tuple([t.shape for t in inputs])
        shapes = input_shapes + tuple([t.shape for t in outputs]) if outputs else input_shapes
        self.trace.append(TraceEntry(name, self.phase, shapes, site, direct))
        seen = self._shape_sets[name]
        if input_shapes not in seen:
            seen.add(input_shapes)
            record.distinct_shapes += 1
            if len(record.shapes) < MAX_SHAPES_KEPT:
                record.shapes.append(shape_text(input_shapes))

        if site is not None:
            sites = self._sites[name]
            count = sites.get(id(site))
            if count is not None:
                count.calls += 1
            elif len(sites) < MAX_SITES_KEPT:
                sites[id(site)] = count = SiteCount(site, 1)
                record.sites.append(count)

        kinds = self._tensor_kinds[name]
        read_values = self.check_values and name not in UNINITIALIZED_OUTPUTS
        for tensor in (*inputs, *outputs):
            # Most calls repeat the tensor kinds already seen; only a new kind is described.
            dtype = tensor.dtype
            kind = (dtype, tensor.layout, tensor.device, type(tensor))
            if kind not in kinds:
                kinds.add(kind)
                self._note_tensor(record, tensor, site)
            if dtype is torch.int64 and read_values:
                self._note_int64(record, tensor, site)

    def _note_tensor(self, record: OpRecord, tensor: torch.Tensor, site: CallSite | None) -> None:
        dtype = _dtype_name(tensor.dtype)
        if dtype not in record.dtype_sites:
            record.dtype_sites[dtype] = site
            record.dtypes.append(dtype)
        layout = str(tensor.layout).removeprefix("torch.")
        if tensor.is_nested:
            layout = "nested"
        if layout not in record.layouts:
            record.layouts.append(layout)
        device = tensor.device.type
        if device not in record.devices:
            record.devices.append(device)
        if tensor.is_quantized:
            record.quantized = True
        kind = type(tensor)
        if kind is not torch.Tensor and kind is not torch.nn.Parameter:
            if kind.__name__ not in record.tensor_types:
                record.tensor_types.append(kind.__name__)

    def record_module_boundary(
        self, label: str, args: Any, output: Any, caller: FrameType | None
    ) -> None:
        """Trace a module's tensor inputs and outputs as it returns: shapes the model's code
        sees, whatever the module's own kernels do inside."""
        tensors = [t for t in tree_leaves((args, output)) if isinstance(t, torch.Tensor)]
        parent = self.module_stack[-1] if self.module_stack else ""
        site, _ = locate_call(caller, parent, self._site_cache)
        shapes = tuple([t.shape for t in tensors])
        self.trace.append(TraceEntry(f"module {label}", self.phase, shapes, site))

    @staticmethod
    def _note_int64(record: OpRecord, tensor: torch.Tensor, site: CallSite | None) -> None:
        value = _int64_max_abs(tensor)
        if value is None:
            return
        if record.int64_max_abs is None or value > record.int64_max_abs:
            record.int64_max_abs = value
        if value > INT32_MAX and record.int64_beyond_int32_site is None:
            record.int64_beyond_int32_site = site


@contextmanager
def _tracking_modules(model: torch.nn.Module, mode: OpCaptureMode) -> Iterator[None]:
    """Keep the mode's module stack equal to the running modules (qualified name and class),
    and trace each module's boundary when it returns, via global hooks that exist only while
    the capture runs."""
    names = {id(m): name for name, m in model.named_modules()}
    stack = mode.module_stack

    def push(module: torch.nn.Module, args: Any) -> None:
        name = names.get(id(module))
        kind = type(module).__name__
        label = f"{name} ({kind})" if name else kind
        stack.append(label)
        if isinstance(module, torch.nn.RNNBase) and label not in mode.recurrent_modules:
            mode.recurrent_modules.append(label)

    def pop(module: torch.nn.Module, args: Any, output: Any) -> None:
        label = stack.pop()
        # The caller of this hook is torch's module call; the site is the code that called it.
        mode.record_module_boundary(label, args, output, sys._getframe(1))

    hooks = torch.nn.modules.module
    pre = hooks.register_module_forward_pre_hook(push)
    post = hooks.register_module_forward_hook(pop, always_call=True)
    try:
        yield
    finally:
        pre.remove()
        post.remove()
        stack.clear()


def shorten_sequence(batch: Batch, sequence_length: int, new_length: int) -> Batch:
    """The batch cut to `new_length` along its sequence dimension: the first non-batch dimension
    of each tensor whose size is the workload's sequence length (tokens and their targets)."""

    def cut(tensor: torch.Tensor) -> torch.Tensor:
        for dim in range(1, tensor.dim()):
            if tensor.shape[dim] == sequence_length:
                # A narrowed (batch, sequence) tensor is not contiguous: a model that calls
                # .view on it (BERT's labels.view(-1)) would raise, and every .reshape of it
                # would copy where the workload's own batch does not. A fresh contiguous tensor
                # is what a data loader hands over at this length.
                return tensor.narrow(dim, 0, new_length).contiguous()
        return tensor

    inputs, targets = batch
    return tree_map(lambda t: cut(t) if isinstance(t, torch.Tensor) else t, inputs), cut(targets)


def capture_training_step(
    workload: Workload,
    *,
    device: torch.device | str = "cpu",
    batch_size: int | None = None,
    sequence_length: int | None = None,
    synchronize: Callable[[], None] | None = None,
) -> Capture:
    """Run one training step (fresh seeded model, optimizer and batch) inside the capture mode.

    A failure ends the step but not the capture: the ops recorded so far are kept and the
    failure says where it happened. `synchronize` (the target's) runs after the step, inside the
    capture, so a lazy device executes what the step traced.
    """
    batch_size = batch_size or workload.batch_size
    device = torch.device(device)
    mode = OpCaptureMode(check_values=device.type == "cpu")
    failure: CaptureFailure | None = None
    started = perf_counter()
    phase = PHASE_SETUP
    try:
        model = workload.build_model(device)
        model.train()
        optimizer = workload.make_optimizer(model)
        batch = workload.batch(device, batch_size)
        full = workload.sequence_length
        if sequence_length and full and sequence_length != full:
            batch = shorten_sequence(batch, full, sequence_length)
        inputs, targets = batch
        optimizer.zero_grad(set_to_none=True)
        with _tracking_modules(model, mode), mode:
            phase = mode.phase = PHASE_FORWARD
            loss = workload.compute_loss(workload.forward(model, inputs), targets)
            phase = mode.phase = PHASE_BACKWARD
            loss.backward()
            phase = mode.phase = PHASE_OPTIMIZER
            optimizer.step()
            if synchronize is not None:
                synchronize()
    except Exception as exc:
        error = describe_error(exc)
        failure = CaptureFailure(
            phase=phase,
            error_type=error.error_type,
            message=error.message,
            site=CallSite.at(error.frame) if error.frame else None,
            op=mode.current_op,
        )
    return Capture(
        device=str(device),
        batch_size=batch_size,
        sequence_length=sequence_length or workload.sequence_length,
        ops=mode.ops,
        trace=mode.trace,
        failure=failure,
        seconds=perf_counter() - started,
        recurrent_modules=mode.recurrent_modules,
    )
