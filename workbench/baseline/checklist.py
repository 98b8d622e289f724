"""What an engineer records about a model before migrating it, read from the model itself.

Versions, input shapes and dtypes, whether the captured graph changes with the input shape
(a sign of shape-dependent Python control flow), graph breaks, and operator namespaces other than
PyTorch's own seen at dispatch level (custom ops and compiled extensions registered with torch).
Both captures run on the CPU: they describe the model's code, not the device.
"""

from __future__ import annotations

import platform
from dataclasses import asdict, dataclass, field
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

import workbench
from workbench.errors import describe_error
from workbench.targets.base import Target
from workbench.targets.detect import detect_neuron_stack
from workbench.torch_messages import MessageGroup, grouped_torch_messages
from workbench.workload import Workload

# Namespaces PyTorch itself registers in the dispatcher (torch 2.9-2.13, read from
# torch._C._dispatch_get_all_op_names() after importing torch, torch._dynamo and torch._inductor).
# Anything else that executes comes from a user library, a compiled extension or a vendor plugin.
BUILTIN_OP_NAMESPACES = frozenset(
    {
        "aten", "prim", "prims", "higher_order", "debugprims", "rngprims", "inductor",
        "inductor_prims", "_inductor_test", "quantized", "_quantized", "quantization",
        "quantized_decomposed", "c10d", "c10d_functional", "_c10d_functional",
        "_c10d_functional_autograd", "_dtensor", "symm_mem", "fsdp", "streams", "mkl",
        "mkldnn", "mkldnn_prepacked", "onednn", "sparse", "profiler", "static_runtime",
        "export", "onnx", "onnx_symbolic", "flex_lib", "debug_mode_ops", "_native", "_test",
    }
)  # fmt: skip


@dataclass
class GraphCapture:
    """What torch._dynamo.explain captured from the forward at one batch size."""

    batch_size: int
    graph_count: int
    graph_breaks: int
    break_reasons: list[str]
    ops: list[list[str]]  # call_function targets per graph, in graph order
    torch_messages: list[MessageGroup] = field(default_factory=list)  # torch's warnings, grouped


@dataclass
class Checklist:
    versions: dict[str, Any]
    inputs: list[dict[str, Any]]
    targets: dict[str, Any]
    graphs: list[GraphCapture] = field(default_factory=list)
    graph_changes_with_shape: bool | None = None  # None: could not be captured
    graph_note: str = ""
    custom_ops: dict[str, list[str]] = field(default_factory=dict)  # namespace -> ops
    custom_ops_note: str = ""


def _versions(target: Target) -> dict[str, Any]:
    stack = {k: v for k, v in asdict(detect_neuron_stack()).items() if v is not None}
    return {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "workbench": workbench.__version__,
        "target": target.name,
        **{f"neuron_{k}" if k == "flavour" else k: v for k, v in stack.items()},
    }


def _capture_graph(workload: Workload, batch_size: int) -> GraphCapture:
    model = workload.build_model("cpu")
    inputs, _ = workload.batch("cpu", batch_size)
    with grouped_torch_messages() as messages:
        explained = workload.forward(torch._dynamo.explain(model), inputs)
    reasons = [str(getattr(r, "reason", r)) for r in explained.break_reasons]
    return GraphCapture(
        batch_size=batch_size,
        graph_count=explained.graph_count,
        # explain's graph_break_count is graph_count - 1, which misses a break after the last
        # graph with ops (a data-dependent return); every break has a reason.
        graph_breaks=len(reasons),
        break_reasons=reasons,
        ops=[[getattr(op, "__name__", str(op)) for op in ops] for ops in explained.ops_per_graph],
        torch_messages=messages,
    )


def _second_batch_size(batch_size: int) -> int:
    # Halve rather than double (memory), but never to 1: Dynamo specializes sizes 0 and 1, which
    # would report a shape dependence that real batches never hit.
    return batch_size // 2 if batch_size // 2 >= 2 else batch_size * 2


class _NamespaceRecorder(TorchDispatchMode):
    """Every op that reaches the dispatcher, grouped by namespace."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: dict[str, set[str]] = {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # signature set by torch
        self.seen.setdefault(func.namespace, set()).add(str(func))
        return func(*args, **(kwargs or {}))


def _custom_ops(workload: Workload) -> dict[str, list[str]]:
    model = workload.build_model("cpu")
    inputs, targets = workload.batch("cpu")
    recorder = _NamespaceRecorder()
    with recorder:
        workload.compute_loss(workload.forward(model, inputs), targets).backward()
    return {
        namespace: sorted(ops)
        for namespace, ops in sorted(recorder.seen.items())
        if namespace not in BUILTIN_OP_NAMESPACES
    }


def collect_checklist(workload: Workload, target: Target) -> Checklist:
    """Run the captures; a capture that raises is reported in its note, never raised.

    torch._dynamo.explain resets Dynamo's caches, so call this after compiled models are done.
    """
    described = workload.describe()
    checklist = Checklist(_versions(target), described["inputs"], described["targets"])
    sizes = (workload.batch_size, _second_batch_size(workload.batch_size))
    try:
        checklist.graphs = [_capture_graph(workload, size) for size in sizes]
    except Exception as exc:  # the model cannot be traced: that is the finding
        checklist.graph_note = f"graph capture failed: {describe_error(exc)}"
    else:
        first, second = checklist.graphs
        checklist.graph_changes_with_shape = (first.graph_count, first.ops) != (
            second.graph_count,
            second.ops,
        )
        checklist.graph_note = (
            f"torch._dynamo.explain of the forward on cpu at batch {sizes[0]} and {sizes[1]}"
        )
    try:
        checklist.custom_ops = _custom_ops(workload)
        checklist.custom_ops_note = (
            "TorchDispatchMode over one forward and backward on cpu; compiled extensions that "
            "bypass the dispatcher (plain pybind functions) are not visible here"
        )
    except Exception as exc:
        checklist.custom_ops_note = f"op capture on cpu failed: {describe_error(exc)}"
    return checklist
