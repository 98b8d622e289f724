"""The compiled path: how many graphs Dynamo makes of the model's forward, and where it breaks.

`torch._dynamo.explain` traces the forward with a recording backend (nothing is compiled for a
device), so its graph count and break reasons are the front end's view, shared by
torch.compile(backend="neuron") and backend="openxla" (reference methods.md c5). Each break
keeps its reason, the Dynamo graph-break id and documentation page when the reason names them,
and the workload line where it happened.

Dynamo also declines whole frames (it will not wrap nn.LSTM, for one): such a frame runs eager
and explain reports no graph for it, and with no graph at all a graph count of 0 and a break
count of -1. Those skips are read from Dynamo's own `unimplemented` counter, so the report says
the forward (or part of it) runs eager, and why, instead of repeating explain's counts.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from time import perf_counter

import torch

from workbench.coverage.capture import CallSite
from workbench.errors import describe_error, pick_user_frame
from workbench.torch_messages import MessageGroup, grouped_torch_messages
from workbench.workload import Workload

_GB_PAGE = re.compile(r"(https://\S+/gb/(gb\d+)\.html)")
_EXPLANATION = re.compile(r"Explanation:\s*(.+)")
_HINT = re.compile(r"Hint:\s*(.+)")


@dataclass(frozen=True)
class GraphBreak:
    reason: str  # the first line of Dynamo's reason
    explanation: str
    hint: str  # Dynamo's first suggestion, e.g. a config flag that enables the traced feature
    graph_break_id: str | None  # e.g. "GB0059" in torch 2.10+
    doc_url: str | None
    site: CallSite | None


@dataclass
class CompiledPath:
    """Dynamo's view of the forward: graphs, breaks, what it skipped, ops per graph; or why
    tracing failed."""

    torch_version: str
    graph_count: int | None = None
    graph_break_count: int | None = None  # None where no graph was captured
    ops_per_graph: list[int] = field(default_factory=list)
    breaks: list[GraphBreak] = field(default_factory=list)
    skipped: list[GraphBreak] = field(default_factory=list)  # frames Dynamo declined: eager
    error: str | None = None
    seconds: float = 0.0
    messages: list[MessageGroup] = field(default_factory=list)  # torch's warnings, grouped

    @property
    def runs_eager(self) -> bool:
        """Traced without error, and Dynamo captured no graph: the whole forward runs eager."""
        return self.error is None and not self.graph_count

    def _skipped_text(self) -> str:
        if not self.skipped:
            return "Dynamo recorded no reason"
        return "; ".join(
            f"{s.reason} ({s.graph_break_id})" if s.graph_break_id else s.reason
            for s in self.skipped
        )

    def status(self) -> str:
        """A few words for a headline; empty when the forward is one graph with nothing skipped."""
        if self.error:
            return "Dynamo could not trace the forward"
        if self.runs_eager:
            return "forward runs eager (Dynamo skipped it)"
        parts = []
        if self.graph_break_count:
            parts.append(f"{self.graph_break_count} graph break(s)")
        if self.skipped:
            parts.append("part of the forward runs eager (Dynamo skipped it)")
        return ", ".join(parts)

    def sentence(self) -> str:
        if self.error:
            return f"Dynamo could not trace the forward: {self.error}"
        if self.runs_eager:
            return (
                "Dynamo did not capture the forward: it runs eager (Dynamo skipped it); skipped: "
                f"{self._skipped_text()}. torch.compile compiles none of it, so on native Neuron "
                "it runs op by op, and fullgraph=True would fail."
            )
        if not self.graph_break_count:
            sentence = (
                f"Dynamo captures the forward as {self.graph_count} graph with no graph break"
            )
            if not self.skipped:
                return f"{sentence}: fullgraph=True (the native Neuron recommendation) should work."
        else:
            sentence = (
                f"Dynamo splits the forward into {self.graph_count} graphs at "
                f"{self.graph_break_count} graph break(s): each piece compiles separately and "
                "runs Python in between; fullgraph=True would fail at the first"
            )
        if self.skipped:
            sentence += (
                f"; part of the forward runs eager (Dynamo skipped it): {self._skipped_text()}"
            )
        return sentence + "."


def _break_site(user_stack: list) -> CallSite | None:
    """The innermost workload frame of a break's user stack (Dynamo lists outermost first)."""
    frame = pick_user_frame(user_stack or [])
    return CallSite.at(frame) if frame else None


def _graph_break(reason: object) -> GraphBreak:
    text = str(getattr(reason, "reason", reason))
    page = _GB_PAGE.search(text)
    explanation = _EXPLANATION.search(text)
    hint = _HINT.search(text)
    return GraphBreak(
        reason=text.strip().splitlines()[0] if text.strip() else "unknown",
        explanation=explanation.group(1).strip() if explanation else "",
        hint=hint.group(1).strip() if hint else "",
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
    declined = torch._dynamo.utils.counters["unimplemented"]
    declined_before = Counter(declined)
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
        result.ops_per_graph = [len(ops) for ops in output.ops_per_graph]
        result.breaks = [_graph_break(reason) for reason in output.break_reasons]
        # explain counts graph_count - 1 breaks: -1 with no graph, and none for a break whose
        # resumed code Dynamo then skipped; the listed reasons are the breaks it hit.
        result.graph_break_count = (
            max(output.graph_break_count, len(result.breaks)) if output.graph_count else None
        )
        # Older torch counts every unsupported construct there, graph breaks included: a reason
        # already listed as a break is not a skipped frame.
        newly_declined = Counter(declined) - declined_before
        break_reasons = {b.reason for b in result.breaks}
        skipped = [_graph_break(reason) for reason in newly_declined]
        result.skipped = [s for s in skipped if s.reason not in break_reasons]
    finally:
        torch._dynamo.reset()
    result.seconds = perf_counter() - started
    return result
