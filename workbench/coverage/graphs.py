"""The compiled path: how many graphs Dynamo makes of the model's forward, and where it breaks.

`torch._dynamo.explain` traces the forward with a recording backend (nothing is compiled for a
device), so its graph count and break reasons are the front end's view, shared by
torch.compile(backend="neuron") and backend="openxla" (reference methods.md c5). Each break
keeps its reason, the Dynamo graph-break id and documentation page when the reason names them,
and the workload line where it happened.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from time import perf_counter

import torch

from workbench.coverage.capture import CallSite
from workbench.errors import describe_error, pick_user_frame
from workbench.torch_messages import MessageGroup, grouped_torch_messages
from workbench.workload import Workload

_GB_PAGE = re.compile(r"(https://\S+/gb/(gb\d+)\.html)")
_EXPLANATION = re.compile(r"Explanation:\s*(.+)")


@dataclass(frozen=True)
class GraphBreak:
    reason: str  # the first line of Dynamo's reason
    explanation: str
    graph_break_id: str | None  # e.g. "GB0059" in torch 2.10+
    doc_url: str | None
    site: CallSite | None


@dataclass
class CompiledPath:
    """Dynamo's view of the forward: graphs, breaks, ops per graph; or why tracing failed."""

    torch_version: str
    graph_count: int | None = None
    graph_break_count: int | None = None
    ops_per_graph: list[int] = field(default_factory=list)
    breaks: list[GraphBreak] = field(default_factory=list)
    error: str | None = None
    seconds: float = 0.0
    messages: list[MessageGroup] = field(default_factory=list)  # torch's warnings, grouped

    def sentence(self) -> str:
        if self.error:
            return f"Dynamo could not trace the forward: {self.error}"
        if not self.graph_break_count:
            return (
                f"Dynamo captures the forward as {self.graph_count} graph with no graph break: "
                "fullgraph=True (the native Neuron recommendation) should work."
            )
        return (
            f"Dynamo splits the forward into {self.graph_count} graphs at "
            f"{self.graph_break_count} graph break(s): each piece compiles separately and runs "
            "Python in between; fullgraph=True would fail at the first."
        )


def _break_site(user_stack: list) -> CallSite | None:
    """The innermost workload frame of a break's user stack (Dynamo lists outermost first)."""
    frame = pick_user_frame(user_stack or [])
    return CallSite.at(frame) if frame else None


def _graph_break(reason: object) -> GraphBreak:
    text = str(getattr(reason, "reason", reason))
    page = _GB_PAGE.search(text)
    explanation = _EXPLANATION.search(text)
    return GraphBreak(
        reason=text.strip().splitlines()[0] if text.strip() else "unknown",
        explanation=explanation.group(1).strip() if explanation else "",
        graph_break_id=page.group(2).upper() if page else None,
        doc_url=page.group(1) if page else None,
        site=_break_site(getattr(reason, "user_stack", [])),
    )


def explain_forward(workload: Workload) -> CompiledPath:
    """Trace the workload's forward (train mode, CPU, its own batch) with torch._dynamo.explain.

    explain resets Dynamo's caches first; each notebook runs in its own kernel, so nothing
    compiled earlier in this process is lost.
    """
    result = CompiledPath(torch_version=torch.__version__)
    started = perf_counter()
    try:
        model = workload.build_model("cpu")
        model.train()
        inputs, _ = workload.batch("cpu")
        with grouped_torch_messages() as result.messages:
            output = workload.forward(torch._dynamo.explain(model), inputs)
    except Exception as exc:
        result.error = str(describe_error(exc))
    else:
        result.graph_count = output.graph_count
        result.graph_break_count = output.graph_break_count
        result.ops_per_graph = [len(ops) for ops in output.ops_per_graph]
        result.breaks = [_graph_break(reason) for reason in output.break_reasons]
    finally:
        torch._dynamo.reset()
    result.seconds = perf_counter() - started
    return result
