"""Figures of a plan: matplotlib Figures built without pyplot (no global state, nothing shown),
like the question packages' plots modules."""

from __future__ import annotations

from matplotlib.figure import Figure

from workbench.planning.instances import GiB, human_bytes
from workbench.planning.layouts import RankMemory
from workbench.planning.planner import Plan
from workbench.planning.recommend import Candidate, ranked

SHOWN = 8  # layouts drawn: the ones the rule reads first
# Bars past this many times a rank's memory are cut at the axis' edge and labelled with their
# size, so one whole-model bar (146 GiB against 16) does not flatten the layouts that fit.
CLIP = 2.5


def stack(memory: RankMemory) -> list[tuple[str, float, str]]:
    """(label, bytes, colour) of each kind of memory a rank holds, bottom to top; their sum is
    the rank's peak. The last segment is the phase that peaks above what the rank holds: the
    forward and backward (activations, FSDP's gathered layers) or the optimizer step's
    temporaries, whichever is larger."""
    return [
        ("parameters", memory.parameters, "tab:blue"),
        ("gradients", memory.gradients, "tab:orange"),
        ("optimizer state", memory.optimizer, "tab:green"),
        ("KV cache", memory.kv_cache, "tab:purple"),
        ("activations (peak phase)", memory.peak - memory.held, "tab:red"),
    ]


def memory_by_layout(plan: Plan, shown: int = SHOWN) -> Figure:
    """Per-rank memory at micro-batch 1 (one sequence, served) of the first `shown` layouts the
    rule reads and of a single rank, stacked by kind, against the memory of a rank and the
    rule's limit (the rank's memory less the runtime's reserve); the chosen layout is marked."""
    candidates: list[Candidate] = ranked(plan.candidates, plan.chosen)[:shown]
    if plan.single_rank not in candidates:
        candidates.append(plan.single_rank)
    capacity = plan.instance.hbm_per_rank_bytes / GiB
    limit = max(min(max(c.memory.peak / GiB for c in candidates), CLIP * capacity), capacity)
    figure = Figure(figsize=(9.0, 0.45 * len(candidates) + 1.9), layout="constrained")
    ax = figure.subplots()
    names = []
    drawn = {label for c in candidates for label, size, _ in stack(c.memory) if size > 0}
    for row, candidate in enumerate(candidates):
        left = 0.0
        for label, size, colour in stack(candidate.memory):
            if label not in drawn:
                continue
            width = min(size / GiB, max(limit * 1.05 - left, 0.0))
            ax.barh(row, width, left=left, color=colour, label=label if row == 0 else None)
            left += size / GiB
        peak = candidate.memory.peak / GiB
        ax.annotate(
            human_bytes(candidate.memory.peak) + ("" if peak <= limit * 1.05 else " (cut)"),
            (min(peak, limit * 1.05), row),
            xytext=(4, 0),
            textcoords="offset points",
            va="center",
            fontsize=8,
            bbox={"facecolor": "white", "edgecolor": "none", "alpha": 0.8, "pad": 1},
        )
        name = candidate.layout.name
        if candidate == plan.single_rank:
            name = "one rank alone"
        if candidate == plan.chosen:
            name = f"{name} (chosen)"
        names.append(name if candidate.available else f"{name} (not offered)")
    ax.axvline(capacity, color="black", lw=1.2, label=f"memory per rank ({capacity:.3g} GiB)")
    reserve = plan.single_rank.reserve / GiB
    ax.axvline(
        capacity - reserve,
        color="black",
        lw=1,
        ls="--",
        label=f"rule's limit ({reserve:.3g} GiB kept for the runtime)",
    )
    ax.set_yticks(range(len(candidates)), names, fontsize=8)
    ax.invert_yaxis()
    ax.set_xlim(0, limit * 1.3)
    at = "one sequence" if plan.mode == "inference" else "micro-batch 1"
    ax.set_xlabel(f"GiB per rank at {at} (predicted)")
    ax.set_title(
        f"Per-rank memory by layout on {plan.instance.name} ({plan.precision.name})", fontsize=10
    )
    figure.legend(loc="outside lower center", ncols=4, fontsize=7)
    return figure
